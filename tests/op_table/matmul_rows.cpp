// Op table rows of the matmul family: matmul (PyTorch's rules: 1-d promotion, broadcast batch dims)
// and linear, and bilinear (one product with the weight, one summed with x2). The float64
// references are plain triple loops over the row-major values; the samples cover both ways an
// operand reaches the GEMM without a copy (row-major and transposed), the copy path (noncontig),
// and a k past the float64 GEMM's k block so gradcheck accumulates across blocks. linear has two
// rows because a row's differentiable inputs hold for all its samples.
#include <algorithm>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// Row-major index of the batch element that a broadcast batch index `idx` (of the full batch
// shape) reads from an operand whose batch dims are `sub` (right-aligned, size-1 dims broadcast).
int64_t sub_batch(const Shape& idx, const Shape& sub) {
  Shape s(sub.size());
  for (size_t d = 0; d < sub.size(); ++d) s[d] = sub[d] == 1 ? 0 : idx[idx.size() - sub.size() + d];
  return ravel(s, sub);
}

Tensor ref_matmul(const Tensor& a, const Tensor& b) {
  Shape as = a.sizes(), bs = b.sizes();
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const Shape ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t nd = std::max(ba.size(), bb.size());
  Shape batch(nd);
  for (size_t d = 0; d < nd; ++d) {
    const int64_t da = d < nd - ba.size() ? 1 : ba[d - (nd - ba.size())];
    const int64_t db = d < nd - bb.size() ? 1 : bb[d - (nd - bb.size())];
    batch[d] = da == 1 ? db : da;
  }
  const std::vector<double> av = values(a), bv = values(b);
  std::vector<double> out;
  for (int64_t q = 0; q < shape_numel(batch); ++q) {
    const Shape idx = unravel(q, batch);
    const int64_t qa = sub_batch(idx, ba), qb = sub_batch(idx, bb);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += av[at((qa * m + i) * k + p)] * bv[at((qb * k + p) * n + j)];
        out.push_back(s);
      }
    }
  }
  Shape out_shape = batch;
  if (!a1) out_shape.push_back(m);
  if (!b1) out_shape.push_back(n);
  return from_values(out, out_shape);
}

// y[..., o] = sum_i x[..., i] * w[o, i] (+ bias[o]).
Tensor ref_linear(const Tensor& x, const Tensor& w, const Tensor* bias) {
  const int64_t in = w.size(1), out_f = w.size(0), rows = x.numel() / in;
  const std::vector<double> xv = values(x), wv = values(w);
  const std::vector<double> bv = bias ? values(*bias) : std::vector<double>(at(out_f), 0.0);
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out_f; ++o) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += xv[at(r * in + i)] * wv[at(o * in + i)];
      out.push_back(s + bv[at(o)]);
    }
  }
  Shape shape = x.sizes();
  shape.back() = out_f;
  return from_values(out, shape);
}

Tensor ref_gelu_tanh(const Tensor& h) {
  std::vector<double> v = values(h);
  for (double& e : v) e = gelu_tanh_ref(e);
  return from_values(v, h.sizes());
}

Sample pair(const std::string& name, Shape sa, Shape sb, uint64_t seed) {
  return {name, [sa, sb, seed](DType t, Device d) {
            return TensorList{rnd(sa, t, d, seed), rnd(sb, t, d, seed + 1)};
          }};
}

// The compute-bound bench of a square matmul [n, n] x [n, n] (shape reported as [m, k, n]): in
// bfloat16 (float accumulation), or in float32 with TF32. Each precision's 8192^3 is its ceiling,
// the compute ceiling of the card that every compute-bound case of that precision is measured against.
BenchCase matmul_bench(int64_t n, bool tf32) {
  BenchCase b;
  b.name = tf32 ? "matmul_tf32" : "matmul";
  b.dtypes = {tf32 ? DType::Float32 : DType::BFloat16};
  b.op = "matmul";
  b.setup = [n, tf32](DType t, int64_t) {
    const double nd = static_cast<double>(n);
    BenchSetup s;
    s.shape = {n, n, n};
    s.inputs = {{{n, n}, t}, {{n, n}, t}};
    s.bytes = 3 * static_cast<double>(element_size(t)) * nd * nd;
    s.flops = 2 * nd * nd * nd;
    s.precision = tf32 ? "tf32" : "bf16";
    s.tf32 = tf32;
    s.ceiling = n == 8192;
    return s;
  };
  return b;
}

// GPT-2 small's MLP up-projection at B16 T1024 in bfloat16: [16384, 768] @ [768, 3072] + bias, GELU.
// `fused`: linear_gelu (one cuBLASLt call with the bias-GELU epilogue); else linear then gelu, the
// three kernels it replaces (GEMM, bias add, GELU). PyTorch's peer times F.gelu(F.linear(...)).
BenchCase linear_gelu_bench(bool fused) {
  BenchCase b;
  b.name = fused ? "linear_gelu" : "linear_then_gelu";
  b.dtypes = {DType::BFloat16};
  b.op = "linear_gelu";
  b.setup = [](DType t, int64_t) {
    const int64_t rows = 16384, in = 768, out = 3072;
    BenchSetup s;
    s.shape = {rows, in, out};
    s.inputs = {{{rows, in}, t}, {{out, in}, t}, {{out}, t}};
    // x, w and b read once; y written once (the fused call also writes H, the unfused its intermediates).
    s.bytes = static_cast<double>(element_size(t)) * static_cast<double>(rows * in + out * in + out + rows * out);
    s.flops = 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
    s.precision = "bf16";
    return s;
  };
  if (!fused) {
    b.run = [](const TensorList& x) { return TensorList{gelu(linear(x[0], x[1], x[2]), GeluApprox::Tanh)}; };
  }
  return b;
}

}  // namespace

void add_matmul_rows(std::vector<OpRow>& rows) {
  {
    OpRow r;
    r.name = "matmul";
    r.dtypes = kFloatTypes;
    r.samples = {
        pair("2-d odd sizes 7x13 @ 13x5", {7, 13}, {13, 5}, 5101),
        pair("2-d long k 2x150 @ 150x3", {2, 150}, {150, 3}, 5103),
        pair("batched [3,4,5] @ [3,5,2]", {3, 4, 5}, {3, 5, 2}, 5105),
        pair("broadcast batch [2,1,3,4] @ [5,4,2]", {2, 1, 3, 4}, {5, 4, 2}, 5107),
        pair("3-d @ 2-d [3,4,5] @ [5,2] (folded into one product)", {3, 4, 5}, {5, 2}, 5109),
        pair("4-d @ 2-d [2,3,4,5] @ [5,2] (folded)", {2, 3, 4, 5}, {5, 2}, 5133),
        {"3-d with transposed rows @ 2-d [2,5,4]^T @ [5,3] (not foldable without a copy)",
         [](DType t, Device d) {
           return TensorList{rnd({2, 5, 4}, t, d, 5135).transpose(1, 2), rnd({5, 3}, t, d, 5136)};
         }},
        pair("2-d @ 3-d [4,5] @ [3,5,2]", {4, 5}, {3, 5, 2}, 5111),
        pair("1-d @ 2-d [4] @ [4,3]", {4}, {4, 3}, 5113),
        pair("2-d @ 1-d [3,4] @ [4]", {3, 4}, {4}, 5115),
        pair("1-d @ 1-d [6] @ [6]", {6}, {6}, 5117),
        pair("1-d @ 3-d [4] @ [2,4,3]", {4}, {2, 4, 3}, 5119),
        pair("3-d @ 1-d [2,3,4] @ [4]", {2, 3, 4}, {4}, 5121),
        pair("1x1 @ 1x1", {1, 1}, {1, 1}, 5123),
        {"transposed operands [5,3]^T @ [4,5]^T",
         [](DType t, Device d) {
           return TensorList{rnd({5, 3}, t, d, 5125).transpose(0, 1), rnd({4, 5}, t, d, 5126).transpose(0, 1)};
         }},
        {"batched, transposed last dims [2,6,3]^T @ [2,4,6]^T",
         [](DType t, Device d) {
           return TensorList{rnd({2, 6, 3}, t, d, 5127).transpose(1, 2), rnd({2, 4, 6}, t, d, 5128).transpose(1, 2)};
         }},
        {"non-contiguous [4,6] @ [6,3]",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({4, 6}, t, d, 5129)), noncontig(rnd({6, 3}, t, d, 5130))};
         }},
        {"non-contiguous batched [2,3,5] @ transposed [5,4]",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({2, 3, 5}, t, d, 5131)), rnd({4, 5}, t, d, 5132).transpose(0, 1)};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{matmul(x[0], x[1])}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_matmul(x[0], x[1])}; };
    r.differentiable = {0, 1};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"inner dims differ", [] { matmul(zeros({2, 3}), zeros({4, 5})); }, {"matmul", "[2, 3]", "[4, 5]"}},
        {"inner dims differ, 1-d", [] { matmul(zeros({3}), zeros({4})); }, {"matmul", "[3]", "[4]"}},
        {"batch dims do not broadcast",
         [] { matmul(zeros({2, 3, 4}), zeros({3, 4, 5})); },
         {"matmul", "[2, 3, 4]", "[3, 4, 5]"}},
        {"dtype mismatch",
         [] { matmul(zeros({2, 3}), zeros({3, 2}, DType::Float64)); },
         {"matmul", "float32", "float64"}},
        {"0-d operand", [] { matmul(scalar_tensor(2.0), zeros({3})); }, {"matmul", "[3]"}},
        {"integer operands",
         [] { matmul(zeros({2, 2}, DType::Int64), zeros({2, 2}, DType::Int64)); },
         {"matmul", "int64"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    r.bench = {matmul_bench(8192, false), matmul_bench(4096, false), matmul_bench(8192, true),
               matmul_bench(4096, true)};
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "linear";
    r.dtypes = kFloatTypes;
    auto sample = [](const std::string& name, Shape sx, int64_t out_f, uint64_t seed, bool nc_x, bool t_w) {
      return Sample{name, [=](DType t, Device d) {
                      const int64_t in = sx.back();
                      Tensor x = rnd(sx, t, d, seed);
                      Tensor w = t_w ? rnd({in, out_f}, t, d, seed + 1).t() : rnd({out_f, in}, t, d, seed + 1);
                      return TensorList{nc_x ? noncontig(x) : x, w, rnd({out_f}, t, d, seed + 2)};
                    }};
    };
    r.samples = {
        sample("[5,3] -> 4", {5, 3}, 4, 5201, false, false),
        sample("3-d [2,3,5] -> 4", {2, 3, 5}, 4, 5204, false, false),
        sample("odd [7,13] -> 5, non-contiguous input", {7, 13}, 5, 5207, true, false),
        sample("1-d [6] -> 3, transposed weight", {6}, 3, 5210, false, true),
    };
    r.op = [](const TensorList& x) { return TensorList{linear(x[0], x[1], x[2])}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_linear(x[0], x[1], &x[2])}; };
    r.differentiable = {0, 1, 2};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"wrong feature count",
         [] { linear(zeros({64, 300}), zeros({128, 784})); },
         {"linear", "features", "[64, 300]", "[128, 784]"}},
        {"bias size", [] { linear(zeros({2, 3}), zeros({4, 3}), zeros({5})); }, {"linear", "bias", "[5]"}},
        {"weight not 2-d", [] { linear(zeros({2, 3}), zeros({3})); }, {"linear", "weight", "[3]"}},
        {"dtype mismatch",
         [] { linear(zeros({2, 3}), zeros({4, 3}, DType::Float64)); },
         {"linear", "float32", "float64"}},
        {"0-d input", [] { linear(scalar_tensor(1.0), zeros({4, 3})); }, {"linear", "[]", "[4, 3]"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    // The GPT MLP's up-projection as one GEMM with a bias-GELU epilogue; output widths that are and
    // are not multiples of 8 (on CUDA the second runs as linear then gelu).
    OpRow r;
    r.name = "linear_gelu";
    r.dtypes = kFloatTypes;
    auto sample = [](const std::string& name, Shape sx, int64_t out_f, uint64_t seed, bool nc_x) {
      return Sample{name, [=](DType t, Device d) {
                      Tensor x = rnd(sx, t, d, seed);
                      return TensorList{nc_x ? noncontig(x) : x, rnd({out_f, sx.back()}, t, d, seed + 1),
                                        rnd({out_f}, t, d, seed + 2)};
                    }};
    };
    r.samples = {
        sample("[6,5] -> 16", {6, 5}, 16, 5251, false),
        sample("3-d [2,3,8] -> 32", {2, 3, 8}, 32, 5254, false),
        sample("odd [7,13] -> 5, non-contiguous input", {7, 13}, 5, 5257, true),
    };
    r.op = [](const TensorList& x) { return TensorList{linear_gelu(x[0], x[1], x[2])}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_gelu_tanh(ref_linear(x[0], x[1], &x[2]))}; };
    r.differentiable = {0, 1, 2};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"wrong feature count",
         [] { linear_gelu(zeros({4, 3}), zeros({8, 5}), zeros({8})); },
         {"linear_gelu", "features", "[4, 3]", "[8, 5]"}},
        {"no bias", [] { linear_gelu(zeros({2, 3}), zeros({8, 3}), Tensor()); }, {"linear_gelu", "bias", "[8, 3]"}},
        {"bias size", [] { linear_gelu(zeros({2, 3}), zeros({8, 3}), zeros({5})); }, {"linear_gelu", "bias", "[5]"}},
        {"dtype mismatch",
         [] { linear_gelu(zeros({2, 3}), zeros({8, 3}, DType::Float64), zeros({8})); },
         {"linear_gelu", "float32", "float64"}},
        {"integer operands",
         [] { linear_gelu(zeros({2, 3}, DType::Int64), zeros({8, 3}, DType::Int64), zeros({8}, DType::Int64)); },
         {"linear_gelu", "int64"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    r.bench = {linear_gelu_bench(true), linear_gelu_bench(false)};
    rows.push_back(std::move(r));
  }
  {
    // The whole GPT-2 MLP (without dropout): forward through linear_gelu's epilogue, backward through
    // the dGELU/bias-gradient epilogue. Hidden widths that are and are not multiples of 8.
    OpRow r;
    r.name = "gelu_mlp";
    r.dtypes = kFloatTypes;
    auto sample = [](const std::string& name, Shape sx, int64_t hidden, uint64_t seed, bool nc_x) {
      return Sample{name, [=](DType t, Device d) {
                      const int64_t c = sx.back();
                      Tensor x = rnd(sx, t, d, seed);
                      return TensorList{nc_x ? noncontig(x) : x, rnd({hidden, c}, t, d, seed + 1),
                                        rnd({hidden}, t, d, seed + 2), rnd({c, hidden}, t, d, seed + 3),
                                        rnd({c}, t, d, seed + 4)};
                    }};
    };
    r.samples = {
        sample("[5,4] -> 16 -> 4", {5, 4}, 16, 5271, false),
        sample("3-d [2,3,6] -> 24 -> 6", {2, 3, 6}, 24, 5276, false),
        sample("odd [7,5] -> 9 -> 5, non-contiguous input", {7, 5}, 9, 5281, true),
    };
    r.op = [](const TensorList& x) { return TensorList{gelu_mlp(x[0], x[1], x[2], x[3], x[4])}; };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_linear(ref_gelu_tanh(ref_linear(x[0], x[1], &x[2])), x[3], &x[4])};
    };
    r.differentiable = {0, 1, 2, 3, 4};
    r.out_dtype = [](DType t) { return t; };
    // Low precision: two products, and the hidden activation is rounded to the dtype between them
    // (as it is unfused), so the second sum carries `hidden` rounded terms: a few output ulps more
    // than one product.
    r.tolerance[DType::Float16] = {3e-3, 3e-3};
    r.tolerance[DType::BFloat16] = {3e-2, 3e-2};
    r.errors = {
        {"second weight does not take the hidden width",
         [] { gelu_mlp(zeros({2, 4}), zeros({16, 4}), zeros({16}), zeros({4, 8}), zeros({4})); },
         {"gelu_mlp", "second weight", "[4, 8]", "16"}},
        {"second bias size",
         [] { gelu_mlp(zeros({2, 4}), zeros({16, 4}), zeros({16}), zeros({4, 16}), zeros({5})); },
         {"gelu_mlp", "second bias", "[5]"}},
        {"no first bias",
         [] { gelu_mlp(zeros({2, 4}), zeros({16, 4}), Tensor(), zeros({4, 16}), zeros({4})); },
         {"gelu_mlp", "bias", "[16, 4]"}},
        {"dtype mismatch",
         [] { gelu_mlp(zeros({2, 4}), zeros({16, 4}), zeros({16}), zeros({4, 16}, DType::Float64), zeros({4})); },
         {"gelu_mlp", "float64", "float32"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "linear without bias";
    r.dtypes = kFloatTypes;
    r.samples = {
        pair("[5,3] -> 4", {5, 3}, {4, 3}, 5301),
        pair("3-d [2,3,5] -> 4", {2, 3, 5}, {4, 5}, 5303),
        pair("odd [7,13] -> 5", {7, 13}, {5, 13}, 5305),
        {"transposed input [3,7]^T -> 2",
         [](DType t, Device d) {
           return TensorList{rnd({3, 7}, t, d, 5307).t(), rnd({2, 3}, t, d, 5308)};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{linear(x[0], x[1])}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_linear(x[0], x[1], nullptr)}; };
    r.differentiable = {0, 1};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {{"wrong feature count",
                 [] { linear(zeros({3, 2, 5}), zeros({4, 6})); },
                 {"linear", "features", "[3, 2, 5]", "[4, 6]"}}};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  for (bool with_bias : {true, false}) {
    OpRow r;
    r.name = with_bias ? "bilinear" : "bilinear without bias";
    r.dtypes = kFloatTypes;
    r.samples = {{"x1 [2, 3, 4], x2 [2, 3, 5] -> 6",
                  [=](DType t, Device d) {
                    TensorList in{rnd({2, 3, 4}, t, d, 5401), rnd({2, 3, 5}, t, d, 5402), rnd({6, 4, 5}, t, d, 5403)};
                    if (with_bias) in.push_back(rnd({6}, t, d, 5404));
                    return in;
                  }},
                 {"1-d x1 [3], x2 [2] -> 4", [=](DType t, Device d) {
                    TensorList in{rnd({3}, t, d, 5405), rnd({2}, t, d, 5406), rnd({4, 3, 2}, t, d, 5407)};
                    if (with_bias) in.push_back(rnd({4}, t, d, 5408));
                    return in;
                  }}};
    r.op = [=](const TensorList& x) { return TensorList{bilinear(x[0], x[1], x[2], with_bias ? x[3] : Tensor())}; };
    r.reference = [=](const TensorList& x) {
      const Values a = values(x[0]), b = values(x[1]), w = values(x[2]);
      const Values bias = with_bias ? values(x[3]) : Values(at(x[2].size(0)), 0.0);
      const int64_t out = x[2].size(0), in1 = x[2].size(1), in2 = x[2].size(2), rows = x[0].numel() / in1;
      Values y;
      for (int64_t r0 = 0; r0 < rows; ++r0) {
        for (int64_t o = 0; o < out; ++o) {
          double s = bias[at(o)];
          for (int64_t i = 0; i < in1; ++i)
            for (int64_t j = 0; j < in2; ++j) {
              s += a[at(r0 * in1 + i)] * w[at((o * in1 + i) * in2 + j)] * b[at(r0 * in2 + j)];
            }
          y.push_back(s);
        }
      }
      Shape shape = x[0].sizes();
      shape.back() = out;
      return TensorList{from_values(y, shape)};
    };
    r.differentiable = with_bias ? std::vector<size_t>{0, 1, 2, 3} : std::vector<size_t>{0, 1, 2};
    r.out_dtype = [](DType t) { return t; };
    // Low precision: the product with the weight is rounded to the dtype before the second product
    // and its sum (as PyTorch's bilinear rounds it), so an output carries in2 rounded terms.
    r.tolerance[DType::Float16] = {3e-3, 3e-3};
    r.tolerance[DType::BFloat16] = {3e-2, 3e-2};
    if (with_bias) {
      r.errors = {
          {"leading dims that differ",
           [] {
             bilinear(zeros({2, 3}), zeros({3, 3}), zeros({4, 3, 3}));
           },
           {"bilinear", "leading dims", "[2, 3]", "[3, 3]"}},
          {"a weight of other features",
           [] {
             bilinear(zeros({2, 3}), zeros({2, 5}), zeros({4, 3, 4}));
           },
           {"bilinear", "[out, 3, 5]", "[4, 3, 4]"}},
          {"a bias of another length",
           [] {
             bilinear(zeros({2, 3}), zeros({2, 5}), zeros({4, 3, 5}), zeros({3}));
           },
           {"bilinear", "bias", "[3]", "4 outputs"}},
          {"float64 beside float32",
           [] {
             bilinear(zeros({2, 3}), zeros({2, 5}, DType::Float64), zeros({4, 3, 5}));
           },
           {"bilinear", "float64", "float32"}},
      };
    }
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
