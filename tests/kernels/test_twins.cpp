// Kernel twin tests (label cuda): each kernel pair's CPU and CUDA twins on one problem through the
// raw-pointer API, the way a kernel benchmark or a new backend would call them. The op table's parity
// runner covers every op through tensors; these cover what tensors hide: the problem descriptions
// themselves (strided batch layouts, filter orders, GEMM batches), draws whose seed and offset are
// read from memory at run time (a captured graph's), and integer results that must match exactly.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/attention.h"
#include "kernels/conv.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/embedding.h"
#include "kernels/layer_norm.h"
#include "kernels/matmul.h"
#include "kernels/random.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"
#include "tests/bitwise.h"
#include "tests/kernels/twin.h"
#include "tests/worst_ratio.h"

namespace kiln::test {
namespace {

// float32 results that are sums or transcendental functions: the GPU adds in another order and its
// expf/logf differ from glibc's by an ulp or so (the parity runner's rule for float32).
constexpr double kSumAtol = 1e-5, kSumRtol = 1e-4;

// `k` token ids drawn from a geometric law over [0, num): small ids repeat often, large ones rarely
// (p = 1 makes every id 0).
std::vector<int64_t> skewed_ids(int64_t k, int64_t num, double p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::geometric_distribution<int64_t> law(p);
  std::vector<int64_t> ids(static_cast<size_t>(k));
  for (auto& v : ids) v = std::min<int64_t>(law(rng), num - 1);
  return ids;
}

TEST_CASE("twins: integer draws are bit-identical and float draws agree to rounding", "[cuda][twins]") {
  const int64_t n = 100003;
  Twin ints = twin_poisoned({n}, DType::Int64);
  run_twins(kernels::random, [&](Device d) {
    return std::tuple(flat_arg(ints, d), RandomDist::RandInt, RandomParams{0, 0, -50, 1050}, PhiloxState{1234, 7});
  });
  CHECK(compare_twin(ints) == "");
  for (RandomDist dist : {RandomDist::Uniform, RandomDist::Normal}) {
    Twin f = twin_poisoned({n}, DType::Float32);
    run_twins(kernels::random, [&](Device d) {
      return std::tuple(flat_arg(f, d), dist, RandomParams{0.0, 1.0}, PhiloxState{1234, 7});
    });
    CHECK(compare_twin(f, 0, 1e-5) == "");
  }
}

TEST_CASE("twins: a dropout draw read from memory (a captured graph's) matches the eager draw", "[cuda][twins]") {
  // philox_base_store writes {seed, offset} where a captured draw reads them; the kernel adds the
  // draw's own offset when it runs.
  Twin base = twin_poisoned({2}, DType::Int64);
  run_twins(kernels::philox_base_store,
            [&](Device d) { return std::tuple(base.ptr<uint64_t>(d), uint64_t{77}, uint64_t{5}); });
  CHECK(compare_twin(base) == "");
  Twin x = twin_randn({3, 1001}, DType::Float32, 1);
  Twin captured = twin_poisoned({3, 1001}, DType::Float32), eager = twin_poisoned({3, 1001}, DType::Float32);
  run_twins(kernels::dropout, [&](Device d) {
    return std::tuple(flat_arg(captured, d), flat_arg(x, d), 0.3, PhiloxState{0, 3, base.ptr<uint64_t>(d)});
  });
  run_twins(kernels::dropout,
            [&](Device d) { return std::tuple(flat_arg(eager, d), flat_arg(x, d), 0.3, PhiloxState{77, 8}); });
  CHECK(compare_twin(captured) == "");  // bit for bit: the keep test is an integer comparison
  CHECK(compare_twin(eager) == "");
  CHECK(captured.cpu.to_vector<float>() == eager.cpu.to_vector<float>());
}

TEST_CASE("twins: softmax forward and backward along the last and an inner dim", "[cuda][twins]") {
  for (auto [outer, n, inner] : {std::tuple<int64_t, int64_t, int64_t>{37, 129, 1}, {5, 33, 7}, {3, 2049, 1}}) {
    INFO("outer " << outer << " n " << n << " inner " << inner);
    const Shape shape{outer, n, inner};
    Twin x = twin_randn(shape, DType::Float32, 2), y = twin_poisoned(shape, DType::Float32);
    run_twins(kernels::softmax_forward, [&](Device d) {
      return std::tuple(y.ptr(d), x.ptr(d), DType::Float32, outer, n, inner, false);
    });
    CHECK(compare_twin(y, kSumAtol, kSumRtol) == "");
    Twin dy = twin_randn(shape, DType::Float32, 3), dx = twin_poisoned(shape, DType::Float32);
    // The backward reads the forward output: give both twins the CPU's.
    y.cuda.copy_(y.cpu.to(kTwinCuda));
    run_twins(kernels::softmax_backward, [&](Device d) {
      return std::tuple(dx.ptr(d), dy.ptr(d), y.ptr(d), DType::Float32, outer, n, inner, false);
    });
    CHECK(compare_twin(dx, kSumAtol, kSumRtol) == "");
  }
}

TEST_CASE("twins: layer_norm forward and backward with bfloat16 activations and float32 parameters",
          "[cuda][twins]") {
  const int64_t rows = 65, n = 300;
  Twin x = twin_randn({rows, n}, DType::BFloat16, 4), w = twin_randn({n}, DType::Float32, 5);
  Twin b = twin_randn({n}, DType::Float32, 6);
  Twin y = twin_poisoned({rows, n}, DType::BFloat16), mean = twin_poisoned({rows}, DType::Float32);
  Twin rstd = twin_poisoned({rows}, DType::Float32);
  run_twins(kernels::layer_norm_forward, [&](Device d) {
    return std::tuple(y.ptr(d), mean.ptr(d), rstd.ptr(d), x.ptr(d), DType::BFloat16, w.ptr(d), b.ptr(d),
                      DType::Float32, rows, n, 1e-5);
  });
  CHECK(compare_twin(mean, kSumAtol, kSumRtol) == "");
  CHECK(compare_twin(rstd, kSumAtol, kSumRtol) == "");
  CHECK(compare_twin(y, 1e-2, 1e-2) == "");  // bfloat16's tolerance: one rounding of the output
  Twin dy = twin_randn({rows, n}, DType::BFloat16, 7), dx = twin_poisoned({rows, n}, DType::BFloat16);
  Twin dw = twin_poisoned({n}, DType::Float32), db = twin_poisoned({n}, DType::Float32);
  mean.cuda.copy_(mean.cpu.to(kTwinCuda));
  rstd.cuda.copy_(rstd.cpu.to(kTwinCuda));
  run_twins(kernels::layer_norm_backward, [&](Device d) {
    return std::tuple(dx.ptr(d), dw.ptr(d), db.ptr(d), dy.ptr(d), x.ptr(d), DType::BFloat16, mean.ptr(d),
                      rstd.ptr(d), w.ptr(d), DType::Float32, rows, n);
  });
  CHECK(compare_twin(dx, 2e-2, 2e-2) == "");
  CHECK(compare_twin(dw, 1e-4, 1e-4) == "");  // 65-term float sums of bfloat16 products
  CHECK(compare_twin(db, 1e-4, 1e-4) == "");
}

TEST_CASE("twins: cross_entropy forward (mean, label smoothing, an ignored row)", "[cuda][twins]") {
  CrossEntropyShape cs;
  cs.n = 9;
  cs.c = 17;
  cs.s = 1;
  cs.ignore_index = -100;
  cs.label_smoothing = 0.1;
  Twin logits = twin_randn({cs.n, cs.c}, DType::Float32, 8);
  Twin target = twin_of(tensor(std::vector<int64_t>{3, 0, 16, -100, 5, 5, 1, 9, 12}));
  Twin out = twin_poisoned({}, DType::Float32), stats = twin_poisoned({cs.n, 2}, DType::Float32);
  Twin count = twin_poisoned({1}, DType::Int64);
  run_twins(kernels::cross_entropy_forward, [&](Device d) {
    return std::tuple(out.ptr(d), DType::Float32, stats.ptr(d), count.ptr<int64_t>(d), logits.ptr(d), DType::Float32,
                      target.ptr<int64_t>(d), cs, LossReduce::Mean);
  });
  cuda::raise_device_errors();  // every target is valid: nothing recorded
  CHECK(compare_twin(count) == "");
  CHECK(count.cpu.to_vector<int64_t>()[0] == 8);
  CHECK(compare_twin(stats, kSumAtol, kSumRtol) == "");
  CHECK(compare_twin(out, kSumAtol, kSumRtol) == "");
}

// The backward of long rows (a vocabulary's worth of classes, S == 1) runs a kernel of its own, one
// block per row; with S > 1 the element kernel runs. The same logits laid out both ways, with the
// same row statistics and output gradient, must give the same bits: the row kernel does the element
// kernel's arithmetic. The CPU twin agrees to the rounding of exp.
TEST_CASE("twins: cross_entropy backward over long rows matches the element kernel's bits", "[cuda][twins]") {
  require_cuda();
  const int64_t n = 3, c = 1500, s = 2, rows = n * s;
  for (DType t : {DType::Float32, DType::BFloat16}) {
    for (LossReduce red : {LossReduce::Mean, LossReduce::None}) {
      INFO(dtype_name(t) << (red == LossReduce::Mean ? " mean" : " none"));
      CrossEntropyShape by_cols;  // [n, c, s]: the element kernel
      by_cols.n = n;
      by_cols.c = c;
      by_cols.s = s;
      by_cols.label_smoothing = 0.1;
      CrossEntropyShape by_rows = by_cols;  // [n * s, c]: the row kernel
      by_rows.n = rows;
      by_rows.s = 1;
      Generator gen(60);
      const Tensor rows_logits = (randn({rows, c}, TensorOptions(DType::Float32), gen) * 3.0).to(t);
      // Row r = (i, j) of [n * s, c] is (i, :, j) of [n, c, s].
      const Tensor cols_logits = rows_logits.reshape({n, s, c}).transpose(1, 2).contiguous();
      const Tensor target = tensor(std::vector<int64_t>{7, 1499, -100, 0, 512, 3});
      // The rows' max and log-sum (the log-sum-exp in two parts), in float64 from the stored logits.
      std::vector<float> stat_rows;
      const std::vector<double> xv = rows_logits.to_vector_double();
      for (int64_t r = 0; r < rows; ++r) {
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < c; ++j) m = std::max(m, xv[static_cast<size_t>(r * c + j)]);
        for (int64_t j = 0; j < c; ++j) sum += std::exp(xv[static_cast<size_t>(r * c + j)] - m);
        stat_rows.push_back(static_cast<float>(m));
        stat_rows.push_back(static_cast<float>(std::log(sum)));
      }
      const Tensor stats = tensor(stat_rows, {rows, 2});
      const Tensor count = tensor(std::vector<int64_t>{5});
      const Tensor dout = red == LossReduce::None ? randn({rows}, TensorOptions(DType::Float32), gen) : full({}, 0.7);
      auto backward = [&](Device d, const Tensor& logits, const CrossEntropyShape& shape) {
        const Tensor x = logits.to(d), l = stats.to(d), cnt = count.to(d), tg = target.to(d), g = dout.to(d);
        Tensor dx = full(logits.sizes(), std::nan(""), TensorOptions(t, d));
        ops::KernelScope scope("twin test", d);
        scope.run(kernels::cross_entropy_backward, dx.data_ptr(), static_cast<const void*>(g.data_ptr()),
                  DType::Float32, static_cast<const void*>(x.data_ptr()), t, static_cast<const void*>(l.data_ptr()),
                  static_cast<const int64_t*>(cnt.data_ptr<int64_t>()), static_cast<const int64_t*>(tg.data_ptr<int64_t>()),
                  shape, red);
        return dx.to(Device::cpu());
      };
      const Tensor rows_dx = backward(kTwinCuda, rows_logits, by_rows);
      const Tensor cols_dx = backward(kTwinCuda, cols_logits, by_cols).transpose(1, 2).reshape({rows, c});
      CHECK(bitwise_equal(rows_dx, cols_dx));
      // expf and the CPU's exp differ by an ulp or so, which may move a bfloat16 result by one step.
      const Twin dx{backward(Device::cpu(), rows_logits, by_rows), rows_dx};
      CHECK(compare_twin(dx, 1e-6, t == DType::Float32 ? 1e-5 : 0.008) == "");
    }
  }
}

TEST_CASE("twins: a batched GEMM with repeated (broadcast) offsets and transposes", "[cuda][twins]") {
  const int64_t m = 33, n = 20, k = 47, count = 4;
  Twin a = twin_randn({2, k, m}, DType::Float32, 9), b = twin_randn({n, k}, DType::Float32, 10);
  Twin c = twin_poisoned({count, m, n}, DType::Float32);
  const std::vector<int64_t> ao{0, m * k, 0, m * k}, bo(4, 0), co{0, m * n, 2 * m * n, 3 * m * n};
  run_twins(kernels::gemm, [&](Device d) {
    return std::tuple(gemm_args(DType::Float32, true, true, m, n, k, 1.0, a.ptr(d), m, b.ptr(d), k, 0.0, c.ptr(d), n,
                                GemmBatch{count, ao.data(), bo.data(), co.data()}));
  });
  CHECK(compare_twin(c, kSumAtol, kSumRtol) == "");
}

// An empty sum (k = 0) never reaches cuBLASLt: matmul.cu's own kernel scales each C of the batch by
// beta, which must give the CPU twin's bits, +0 over NaN for beta 0 and -0 included, and nothing
// outside the m x n blocks (ldc > n) may change.
TEST_CASE("twins: a GEMM with k = 0 scales each C by beta in the CPU's bits", "[cuda][twins]") {
  const int64_t m = 5, n = 7, ldc = 9, count = 3, storage = 150;
  const std::vector<int64_t> co{100, 0, 50};
  for (const DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const double beta : {0.0, -0.0, 1.0, -2.5, 0.1}) {
      INFO(dtype_name(dtype) << ", beta " << beta);
      manual_seed(12);
      Tensor start = randn({storage}, TensorOptions(DType::Float64)) * 4.0;
      auto* v = start.data_ptr<double>();
      v[1] = std::numeric_limits<double>::infinity();
      v[2] = -0.0;
      // A GPU's NaN results carry no payload, so NaN goes where beta 0 replaces it (and in the gap).
      v[0] = v[60] = beta == 0.0 ? std::numeric_limits<double>::quiet_NaN() : 3.0;
      v[95] = std::numeric_limits<double>::quiet_NaN();
      Twin c = twin_of(start.to(dtype));
      const Tensor before = c.cpu.clone();
      run_twins(kernels::gemm, [&](Device d) {
        return std::tuple(gemm_args(dtype, false, false, m, n, 0, 1.5, c.ptr(d), 1, c.ptr(d), n, beta, c.ptr(d), ldc,
                                    GemmBatch{count, nullptr, nullptr, co.data()}));
      });
      CHECK(bitwise_equal(c.cpu, c.cuda.to(Device::cpu())));
      if (beta != 1.0) CHECK_FALSE(bitwise_equal(c.cpu, before));  // it did scale
    }
  }
}

// linear's two bias epilogues on cuBLASLt (CUBLASLT_EPILOGUE_BIAS, and BGRADB for kiln's BiasGradA,
// since cuBLASLt's B is kiln's A) against the CPU twin: the forward y = x W^T + b, and the weight
// gradient dW = dY^T X with db = dY's column sums (A transposed, as linear runs it) and with A as
// stored. A mix-up of cuBLASLt's A and B would sum the wrong operand: X's columns have n values.
TEST_CASE("twins: the bias and bias-gradient GEMM epilogues", "[cuda][twins]") {
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16);
  INFO(dtype_name(dtype));
  const int64_t rows = 67, in = 40, out = 24;
  // bfloat16 products are rounded once to 8 bits; float32 runs without TF32 here.
  const double atol = dtype == DType::BFloat16 ? 5e-2 : kSumAtol, rtol = dtype == DType::BFloat16 ? 1e-2 : kSumRtol;
  Twin x = twin_randn({rows, in}, dtype, 30), w = twin_randn({out, in}, dtype, 31), b = twin_randn({out}, dtype, 32);
  Twin y = twin_poisoned({rows, out}, dtype);
  run_twins(kernels::gemm, [&](Device d) {
    GemmArgs g = gemm_args(dtype, false, true, rows, out, in, 1.0, x.ptr(d), in, w.ptr(d), in, 0.0, y.ptr(d), out);
    g.epilogue = GemmEpilogue::Bias;
    g.bias = b.ptr(d);
    return std::tuple(g);
  });
  CHECK(compare_twin(y, atol, rtol) == "");
  for (bool trans_a : {true, false}) {
    INFO((trans_a ? "dY^T X" : "A as stored"));
    Twin dy = twin_randn(trans_a ? Shape{rows, out} : Shape{out, rows}, dtype, 33);
    Twin dw = twin_poisoned({out, in}, dtype), db = twin_poisoned({out}, dtype);
    run_twins(kernels::gemm, [&](Device d) {
      GemmArgs g = gemm_args(dtype, trans_a, false, out, in, rows, 1.0, dy.ptr(d), trans_a ? out : rows, x.ptr(d), in,
                             0.0, dw.ptr(d), in);
      g.epilogue = GemmEpilogue::BiasGradA;
      g.bias_grad = db.ptr(d);
      return std::tuple(g);
    });
    CHECK(compare_twin(dw, atol, rtol) == "");
    CHECK(compare_twin(db, atol, rtol) == "");
  }
}

// One convolution problem in one layout, its three passes on both twins.
void check_conv(bool channels_last, DType dtype, int64_t groups, bool with_bias, double atol, double rtol) {
  INFO((channels_last ? "channels-last " : "NCHW ") << dtype_name(dtype) << " groups " << groups
                                                    << (with_bias ? " with bias" : ""));
  const int64_t N = 3, C = 4, H = 9, W = 7, K = 6, R = 3;
  const MemoryFormat fmt = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  Conv2dArgs p;
  p.dtype = dtype;
  p.geo = {N, C, H, W, 5, 4, Window2d{R, R, 2, 2, 1, 1, 1, 1}};
  p.out_channels = K;
  p.groups = groups;
  p.channels_last = channels_last;
  p.allow_tf32 = false;  // float32 to float32 accuracy
  auto dense = [&](const Twin& t) { return Twin{t.cpu.contiguous(fmt), t.cuda.contiguous(fmt)}; };
  Twin x = dense(twin_randn({N, C, H, W}, dtype, 11)), w = dense(twin_randn({K, C / groups, R, R}, dtype, 12));
  Twin bias = twin_randn({K}, dtype, 13);
  Twin y = dense(twin_poisoned({N, K, 5, 4}, dtype));
  const ImageStrides xs{x.cpu.stride(0), x.cpu.stride(1), x.cpu.stride(2), x.cpu.stride(3)};
  const ImageStrides ys{y.cpu.stride(0), y.cpu.stride(1), y.cpu.stride(2), y.cpu.stride(3)};
  p.x_strides = xs;
  p.y_strides = ys;
  run_twins(kernels::conv2d_forward, [&](Device d) {
    return std::tuple(p, y.ptr(d), static_cast<const void*>(x.ptr(d)), static_cast<const void*>(w.ptr(d)),
                      static_cast<const void*>(with_bias ? bias.ptr(d) : nullptr));
  });
  CHECK(compare_twin(y, atol, rtol) == "");
  Twin dy = dense(twin_randn({N, K, 5, 4}, dtype, 14)), dx = dense(twin_poisoned({N, C, H, W}, dtype));
  Twin dw = dense(twin_poisoned({K, C / groups, R, R}, dtype));
  run_twins(kernels::conv2d_backward_data, [&](Device d) {
    return std::tuple(p, dx.ptr(d), static_cast<const void*>(dy.ptr(d)), static_cast<const void*>(w.ptr(d)));
  });
  CHECK(compare_twin(dx, atol, rtol) == "");
  run_twins(kernels::conv2d_backward_filter, [&](Device d) {
    return std::tuple(p, dw.ptr(d), static_cast<const void*>(x.ptr(d)), static_cast<const void*>(dy.ptr(d)));
  });
  CHECK(compare_twin(dw, atol, rtol) == "");
}

TEST_CASE("twins: conv2d's three passes in NCHW and channels-last, grouped, with and without bias", "[cuda][twins]") {
  check_conv(false, DType::Float32, 1, true, kSumAtol, kSumRtol);
  check_conv(true, DType::Float32, 2, false, kSumAtol, kSumRtol);
  check_conv(true, DType::BFloat16, 1, true, 2e-2, 2e-2);  // bfloat16 output rounding, twice for gradients
}

TEST_CASE("twins: attention forward over a broadcast batch layout", "[cuda][twins]") {
  const int64_t B0 = 2, B1 = 3, L = 19, S = 23, E = 16;
  Twin q = twin_randn({B0, B1, L, E}, DType::Float32, 15);
  Twin k = twin_randn({B0, 1, S, E}, DType::Float32, 16), v = twin_randn({B0, 1, S, E}, DType::Float32, 17);
  Twin out = twin_poisoned({B0 * B1, L, E}, DType::Float32), lse = twin_poisoned({B0 * B1, L}, DType::Float32);
  AttentionArgs a;
  a.dtype = DType::Float32;
  a.batch = B0 * B1;
  a.L = L;
  a.S = S;
  a.E = E;
  a.Ev = E;
  a.layout.ndim = 2;
  a.layout.sizes[0] = B0;
  a.layout.sizes[1] = B1;
  a.layout.q[0] = B1 * L * E;
  a.layout.q[1] = L * E;
  a.layout.k[0] = a.layout.v[0] = S * E;  // k and v broadcast over the second batch dim
  a.q_row_stride = a.k_row_stride = a.v_row_stride = E;
  attention_dense_outputs(a);
  a.causal = true;
  a.scale = 0.25;
  run_twins(kernels::attention_forward, [&](Device d) {
    return std::tuple(out.ptr(d), lse.ptr(d), static_cast<const void*>(q.ptr(d)), static_cast<const void*>(k.ptr(d)),
                      static_cast<const void*>(v.ptr(d)), a);
  });
  CHECK(compare_twin(out, kSumAtol, kSumRtol) == "");
  CHECK(compare_twin(lse, kSumAtol, kSumRtol) == "");
}

// The tensor-core forward (kernels/cuda/attention_tc.cu) against the CPU kernel on the same rounded
// inputs: the output, and the log-sum-exp directly (the backward reads it). Scale 1 at head dim 64
// makes scores of spread 8, so the running maximum moves and the rescaling is exercised; the
// query and key counts leave tails in both tiles.
TEST_CASE("twins: the tensor-core attention forward writes the CPU's output and log-sum-exp", "[cuda][twins]") {
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const bool causal = GENERATE(false, true);
  const double scale = GENERATE(1.0, 0.125);
  INFO(dtype_name(dtype) << " E " << E << (causal ? " causal" : "") << " scale " << scale);
  const int64_t B = 3, L = 77, S = 130;
  Twin q = twin_randn({B, L, E}, dtype, 21), k = twin_randn({B, S, E}, dtype, 22), v = twin_randn({B, S, E}, dtype, 23);
  Twin out = twin_poisoned({B, L, E}, dtype), lse = twin_poisoned({B, L}, DType::Float32);
  const AttentionArgs a = tensor_core_args(dtype, B, L, S, E, causal, scale);
  const int64_t before = attention_tc_launches();
  run_twins(kernels::attention_forward, [&](Device d) {
    return std::tuple(out.ptr(d), lse.ptr(d), static_cast<const void*>(q.ptr(d)), static_cast<const void*>(k.ptr(d)),
                      static_cast<const void*>(v.ptr(d)), a);
  });
  CHECK(attention_tc_launches() == before + 1);
  // The probabilities enter P V rounded to the dtype and the output is rounded once more; the
  // log-sum-exp is float32 math on both sides.
  const double tol = dtype == DType::BFloat16 ? 2e-2 : 3e-3;
  CHECK(compare_twin(out, tol, tol) == "");
  CHECK(compare_twin(lse, 1e-4, 1e-4) == "");
}

// The tensor-core backward (kernels/cuda/attention_tc_backward.cu) against the CPU kernel, both
// given the CPU forward's output and log-sum-exp, so only the backward is compared: dq, dk, dv.
// The query and key counts leave tails in every tile of both backward kernels.
TEST_CASE("twins: the tensor-core attention backward writes the CPU's dq, dk and dv", "[cuda][twins]") {
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const bool causal = GENERATE(false, true);
  const double scale = GENERATE(1.0, 0.125);
  INFO(dtype_name(dtype) << " E " << E << (causal ? " causal" : "") << " scale " << scale);
  const int64_t B = 3, L = 77, S = 130;
  Twin q = twin_randn({B, L, E}, dtype, 24), k = twin_randn({B, S, E}, dtype, 25), v = twin_randn({B, S, E}, dtype, 26);
  Twin dout = twin_randn({B, L, E}, dtype, 27);
  Twin out = twin_poisoned({B, L, E}, dtype), lse = twin_poisoned({B, L}, DType::Float32);
  const AttentionArgs a = tensor_core_args(dtype, B, L, S, E, causal, scale);
  run_on(Device::cpu(), kernels::attention_forward, [&](Device d) {
    return std::tuple(out.ptr(d), lse.ptr(d), static_cast<const void*>(q.ptr(d)), static_cast<const void*>(k.ptr(d)),
                      static_cast<const void*>(v.ptr(d)), a);
  });
  out = twin_of(out.cpu);
  lse = twin_of(lse.cpu);
  Twin dq = twin_poisoned({B, L, E}, dtype), dk = twin_poisoned({B, S, E}, dtype), dv = twin_poisoned({B, S, E}, dtype);
  const int64_t before = attention_tc_backward_launches();
  run_twins(kernels::attention_backward, [&](Device d) {
    return std::tuple(dq.ptr(d), dk.ptr(d), dv.ptr(d), static_cast<const void*>(dout.ptr(d)),
                      static_cast<const void*>(out.ptr(d)), static_cast<const void*>(lse.ptr(d)),
                      static_cast<const void*>(q.ptr(d)), static_cast<const void*>(k.ptr(d)),
                      static_cast<const void*>(v.ptr(d)), a);
  });
  CHECK(attention_tc_backward_launches() == before + 1);
  // P and dS enter their products rounded to the dtype and each gradient sums L or S such terms: the
  // absolute allowance scales with the gradient's largest element.
  const double tol = dtype == DType::BFloat16 ? 2e-2 : 3e-3;
  CHECK(compare_twin(dq, tol * max_abs(dq.cpu), tol) == "");
  CHECK(compare_twin(dk, tol * max_abs(dk.cpu), tol) == "");
  CHECK(compare_twin(dv, tol * max_abs(dv.cpu), tol) == "");
}

TEST_CASE("twins: topk, embedding and a long sum", "[cuda][twins]") {
  const int64_t rows = 7, n = 3000, k = 5;
  Twin in = twin_randn({rows, n}, DType::Float32, 18), values = twin_poisoned({rows, k}, DType::Float32);
  Twin indices = twin_poisoned({rows, k}, DType::Int64);
  run_twins(kernels::topk, [&](Device d) {
    return std::tuple(values.ptr(d), DType::Float32, indices.ptr<int64_t>(d), static_cast<const void*>(in.ptr(d)),
                      DType::Float32, rows, n, k, true);
  });
  CHECK(compare_twin(values) == "");  // picked, not computed: exact
  CHECK(compare_twin(indices) == "");

  Twin weight = twin_randn({10, 6}, DType::BFloat16, 19), out = twin_poisoned({4, 6}, DType::BFloat16);
  Twin idx = twin_of(tensor(std::vector<int64_t>{9, 0, 3, 3}));
  run_twins(kernels::embedding_forward, [&](Device d) {
    StridedArg w;
    w.data = weight.ptr(d);
    w.dtype = DType::BFloat16;
    w.ndim = 2;
    w.sizes[0] = 10;
    w.sizes[1] = 6;
    w.strides[0] = 6;
    w.strides[1] = 1;
    return std::tuple(out.ptr(d), w, static_cast<const int64_t*>(idx.ptr<int64_t>(d)), int64_t{4});
  });
  CHECK(compare_twin(out) == "");

  Twin x = twin_randn({1 << 20}, DType::Float32, 20), total = twin_poisoned({}, DType::Float32);
  run_twins(kernels::reduce, [&](Device d) {
    ReduceArgs r;
    r.out.data = total.ptr(d);
    r.out.dtype = DType::Float32;
    r.out.ndim = 0;
    r.in = x.ptr(d);
    r.in_dtype = DType::Float32;
    r.red_ndim = 1;
    r.red_sizes[0] = 1 << 20;
    r.red_strides[0] = 1;
    return std::tuple(ReduceOp::Sum, r);
  });
  // 2^20 normal values: the float tree's rounding is about sqrt(log2 n) * eps * ||x||_2 absolute.
  CHECK(compare_twin(total, 1e-3, 1e-4) == "");
}

// Both twins sort positions by value and add in the chunked order of kernels/embedding_plan.h: the
// same float additions in the same order, so the results are equal bit for bit; and the CUDA twin
// uses no atomics, so a second run gives the same bytes.
TEST_CASE("twins: embedding backward is bit-identical and deterministic", "[cuda][twins]") {
  struct Case {
    const char* what;
    int64_t num, dim, k;
    double p;
    DType dtype;
  };
  const Case cases[] = {
      // GPT-2's vocabulary at a third of its width (the sanitizer runs time every case).
      {"GPT-2's vocabulary, 16384 positions", 50257, 256, 16384, 0.002, DType::Float32},
      {"a character vocabulary, 16384 positions", 65, 384, 16384, 0.05, DType::Float32},
      {"one value at every position, float16", 3, 130, 5000, 1.0, DType::Float16},
      {"bfloat16, positions not a multiple of the chunk", 40, 64, 1001, 0.1, DType::BFloat16},
  };
  uint64_t seed = 30;
  for (const Case& c : cases) {
    INFO(c.what);
    const std::vector<int64_t> ids = skewed_ids(c.k, c.num, c.p, static_cast<uint32_t>(seed));
    const Twin idx = twin_of(tensor(ids));
    const Twin grad = twin_randn({c.k, c.dim}, c.dtype, ++seed);
    const Twin start = twin_randn({c.num, c.dim}, c.dtype, ++seed);  // the kernel adds to what is there
    auto args = [&](const Twin& gw) {
      return [&](Device d) {
        return std::tuple(gw.ptr(d), static_cast<const void*>(grad.ptr(d)), c.dtype,
                          static_cast<const int64_t*>(idx.ptr<int64_t>(d)), c.k, c.num, c.dim);
      };
    };
    const Twin gw{start.cpu.clone(), start.cuda.clone()};
    run_twins(kernels::embedding_backward, args(gw));
    CHECK(compare_twin(gw) == "");
    CHECK(bitwise_equal(gw.cpu, gw.cuda.to(Device::cpu())));  // also the signs of zeros
    CHECK_FALSE(bitwise_equal(gw.cpu, start.cpu));  // it did add
    const Twin again{start.cpu.clone(), start.cuda.clone()};
    run_on(kTwinCuda, kernels::embedding_backward, args(again));
    CHECK(bitwise_equal(again.cuda.to(Device::cpu()), gw.cuda.to(Device::cpu())));
  }
}

TEST_CASE("twins: embedding backward on CUDA skips a bad index's row and raises it at the sync",
          "[cuda][twins]") {
  require_cuda();
  const int64_t num = 5, dim = 40;
  std::vector<int64_t> ids = skewed_ids(100, num, 0.3, 41);
  ids[57] = 9;
  const Twin idx = twin_of(tensor(ids));
  const Twin grad = twin_randn({100, dim}, DType::Float32, 42);
  const Twin gw = twin_of(zeros({num, dim}));
  std::string message;
  try {
    run_on(kTwinCuda, kernels::embedding_backward, [&](Device d) {
      return std::tuple(gw.ptr(d), static_cast<const void*>(grad.ptr(d)), DType::Float32,
                        static_cast<const int64_t*>(idx.ptr<int64_t>(d)), int64_t{100}, num, dim);
    });
  } catch (const IndexError& e) {
    message = e.what();
  }
  INFO("IndexError message: " << message);
  CHECK(message.find("embedding") != std::string::npos);
  CHECK(message.find("9") != std::string::npos);
  // The other 99 rows were summed: the CPU twin without position 57 (its row zeroed) agrees.
  std::vector<int64_t> good = ids;
  good[57] = 0;
  Tensor g = grad.cpu.clone();
  g.select(0, 57).fill_(0.0);
  Tensor want = zeros({num, dim});
  ops::launch("test", Device::cpu(), kernels::embedding_backward, want.data_ptr(), static_cast<const void*>(g.data_ptr()),
              DType::Float32, static_cast<const int64_t*>(good.data()), int64_t{100}, num, dim);
  const std::vector<double> got = gw.cuda.to(Device::cpu()).to_vector_double(), w = want.to_vector_double();
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i) worst = test::worse(worst, std::fabs(got[i] - w[i]));
  CHECK(worst <= 1e-4);  // the extra position shifts the chunks, so the sums may round differently
}

}  // namespace
}  // namespace kiln::test
