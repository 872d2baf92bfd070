// The nn ops beyond the op table: batch_norm's running statistics (PyTorch's momentum rule with
// the unbiased variance) and their use in eval, its epilogue against the ops it replaces, bit for
// bit, dropout's mask statistics and reproducibility,
// cross_entropy against log_softmax + NLL by hand, softmax stability, and gradients that do not
// depend on the thread count.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kiln.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/parallel.h"
#include "tests/bitwise.h"
#include "tests/hardware_half.h"
#include "tests/threads.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using kiln::test::bitwise_equal;
using kiln::test::ThreadCountGuard;

namespace {

// Mean and biased/unbiased variance of channel c of an [N, C, ...] tensor, by plain loops.
struct ChannelStats {
  double mean, var_biased, var_unbiased;
};
ChannelStats channel_stats(const Tensor& x, int64_t c) {
  std::vector<double> v = x.to_vector_double();
  const int64_t channels = x.size(1), inner = x.numel() / (x.size(0) * channels);
  std::vector<double> vals;
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i)
    if ((i / inner) % channels == c) vals.push_back(v[static_cast<size_t>(i)]);
  double m = 0, ss = 0;
  for (double e : vals) m += e;
  m /= static_cast<double>(vals.size());
  for (double e : vals) ss += (e - m) * (e - m);
  const double n = static_cast<double>(vals.size());
  return {m, ss / n, ss / (n - 1)};
}

}  // namespace

TEST_CASE("batch_norm: one training step updates the running stats by PyTorch's rule", "[nn]") {
  manual_seed(11);
  Tensor x = randn({4, 3, 2, 5}) * 2.0 + 1.0;
  Tensor rm = tensor<float>({0.5f, -1.0f, 2.0f});
  Tensor rv = tensor<float>({1.0f, 0.25f, 3.0f});
  const std::vector<float> rm0 = rm.to_vector<float>(), rv0 = rv.to_vector<float>();
  const uint64_t version = rm.version();
  const double momentum = 0.2;
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, momentum);
  CHECK(rm.version() > version);  // an in-place update, visible to autograd's version checks
  std::vector<float> rm1 = rm.to_vector<float>(), rv1 = rv.to_vector<float>();
  for (int64_t c = 0; c < 3; ++c) {
    ChannelStats s = channel_stats(x, c);
    const size_t cu = static_cast<size_t>(c);
    CHECK(rm1[cu] == Approx((1 - momentum) * rm0[cu] + momentum * s.mean).epsilon(1e-6));
    // The running variance takes the unbiased batch variance, the normalization the biased one.
    CHECK(rv1[cu] == Approx((1 - momentum) * rv0[cu] + momentum * s.var_unbiased).epsilon(1e-6));
    CHECK(rv1[cu] != Approx((1 - momentum) * rv0[cu] + momentum * s.var_biased).epsilon(1e-6));
  }
  // The training output is normalized with the batch statistics: per channel mean 0, biased variance 1.
  for (int64_t c = 0; c < 3; ++c) {
    ChannelStats s = channel_stats(y, c);
    CHECK(s.mean == Approx(0).margin(1e-5));
    CHECK(s.var_biased == Approx(1).epsilon(1e-4));
  }

  // Eval uses the running stats (and leaves them alone).
  Tensor w = tensor<float>({1.5f, -0.5f, 2.0f}), b = tensor<float>({0.1f, 0.2f, -0.3f});
  Tensor x2 = randn({2, 3, 4});
  Tensor y2 = batch_norm(x2, rm, rv, w, b, false);
  CHECK(rm.to_vector<float>() == rm1);
  CHECK(rv.to_vector<float>() == rv1);
  std::vector<double> xv = x2.to_vector_double(), yv = y2.to_vector_double();
  std::vector<double> wv = w.to_vector_double(), bv = b.to_vector_double();
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = (i / 4) % 3;
    const double expect = (xv[i] - rm1[c]) / std::sqrt(static_cast<double>(rv1[c]) + 1e-5) * wv[c] + bv[c];
    CHECK(yv[i] == Approx(expect).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("batch_norm: channels-last input and strided running stats give the same update", "[nn]") {
  manual_seed(12);
  Tensor x = randn({3, 4, 3, 2});
  Tensor rm_a = zeros({4}), rv_a = ones({4});
  Tensor y_a = batch_norm(x, rm_a, rv_a, Tensor(), Tensor(), true);
  // Same values in channels-last memory; running stats as every other element of a buffer.
  Tensor x_cl = x.contiguous(MemoryFormat::ChannelsLast);
  Tensor buf_m = zeros({8}), buf_v = ones({8});
  Tensor rm_b = buf_m.slice(0, 0, 8, 2), rv_b = buf_v.slice(0, 0, 8, 2);
  Tensor y_b = batch_norm(x_cl, rm_b, rv_b, Tensor(), Tensor(), true);
  CHECK(y_b.is_contiguous(MemoryFormat::ChannelsLast));  // the output keeps the input's layout
  std::vector<float> ya = y_a.to_vector<float>(), yb = y_b.to_vector<float>();
  for (size_t i = 0; i < ya.size(); ++i) CHECK(yb[i] == Approx(ya[i]).margin(1e-6));
  std::vector<float> ma = rm_a.to_vector<float>(), mb = rm_b.to_vector<float>();
  std::vector<float> va = rv_a.to_vector<float>(), vb = rv_b.to_vector<float>();
  for (size_t c = 0; c < 4; ++c) {
    CHECK(mb[c] == Approx(ma[c]).margin(1e-7));
    CHECK(vb[c] == Approx(va[c]).epsilon(1e-6));
  }
  CHECK(buf_m.to_vector<float>()[1] == 0.0f);  // the elements between the strided stats are untouched
}

// Channels-last batch norm sums its rows of C channels in blocks of 16 rows and groups of 8 channels
// (kernels/cpu/batch_norm.cpp): shapes with several blocks, a partial last block, and channel counts
// with and without a tail, against the NCHW planes in float64 (the sums differ only in order).
TEST_CASE("batch_norm: channels-last rows give NCHW's results over row blocks and channel groups", "[nn]") {
  const std::vector<Shape> shapes = {{3, 37, 7, 5}, {2, 16, 9, 9}, {1, 8, 4, 4}, {5, 3, 2, 3}};
  ThreadCountGuard guard;
  for (int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    for (const Shape& shape : shapes) {
      for (bool training : {true, false}) {
        for (bool relu : {false, true}) {
          INFO("shape " << shape[0] << "x" << shape[1] << "x" << shape[2] << "x" << shape[3] << ", training "
                        << training << ", relu " << relu << ", " << threads << " threads");
          manual_seed(21);
          const int64_t c = shape[1];
          const Tensor x0 = (randn(shape) * 2.0 + 0.5).to(DType::Float64), gy = randn(shape).to(DType::Float64);
          const Tensor w0 = (rand({c}) + 0.5).to(DType::Float64), b0 = randn({c}).to(DType::Float64);
          const Tensor rm0 = randn({c}).to(DType::Float64), rv0 = (rand({c}) + 0.5).to(DType::Float64);
          auto run = [&](bool channels_last) {
            const MemoryFormat f = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
            Tensor x = x0.contiguous(f).detach().set_requires_grad(true);
            Tensor w = w0.detach().set_requires_grad(true), b = b0.detach().set_requires_grad(true);
            Tensor rm = rm0.clone(), rv = rv0.clone();
            BatchNormEpilogue e;
            e.relu = relu;
            Tensor y = batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5, e);
            y.backward(gy.contiguous(f));
            return TensorList{y, x.grad(), w.grad(), b.grad(), rm, rv};
          };
          const TensorList planes = run(false), rows = run(true);
          for (size_t i = 0; i < planes.size(); ++i) {
            INFO("result " << i << " (y, dx, dw, db, running mean, running var)");
            const std::vector<double> a = planes[i].contiguous().to_vector_double();
            const std::vector<double> r = rows[i].contiguous().to_vector_double();
            REQUIRE(a.size() == r.size());
            double worst = 0.0;
            for (size_t k = 0; k < a.size(); ++k) {
              worst = test::worse(worst, std::fabs(a[k] - r[k]) / (1.0 + std::fabs(a[k])));
            }
            CHECK(worst < 1e-12);
          }
        }
      }
    }
  }
}

// The epilogue replaces add and relu after batch_norm, so it must give their bits: the output, the
// running statistics and every gradient (input, weight, bias, residual). In each float dtype (the
// half types with float32 parameters, as autocast leaves a model's), in the layouts the kernels
// walk differently (NCHW planes, channels-last rows, [N, C] rows, and a strided view, which
// batch_norm copies), in training and eval, and with the residual stored in another layout than
// the input (batch_norm copies it into the input's).
TEST_CASE("batch_norm's epilogue has the bits of batch_norm, add and relu one after another", "[nn]") {
  enum class Layout { NCHW, ChannelsLast, Rows, Strided };
  const DType dtype = GENERATE(DType::Float32, DType::Float64, DType::Float16, DType::BFloat16);
  const Layout layout = GENERATE(Layout::NCHW, Layout::ChannelsLast, Layout::Rows, Layout::Strided);
  const bool training = GENERATE(true, false);
  const DType pdt = dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  const Shape shape = layout == Layout::Rows ? Shape{40, 7} : Shape{4, 5, 3, 6};
  const int64_t c = shape[1];
  // x with channel means away from zero, so that the batch statistics are not trivial.
  const auto arrange = [&](const Tensor& t) {
    if (layout == Layout::ChannelsLast) return t.contiguous(MemoryFormat::ChannelsLast);
    if (layout == Layout::Strided) return t.transpose(2, 3).contiguous().transpose(2, 3);  // H and W swapped in memory
    return t;
  };
  struct Mode {
    const char* name;
    bool residual, relu, residual_channels_last;
  };
  const Mode modes[] = {{"relu", false, true, false},
                        {"residual", true, false, false},
                        {"residual and relu", true, true, false},
                        {"residual in another layout, and relu", true, true, true},
                        {"neither", false, false, false}};
  for (const Mode& mode : modes) {
    INFO(dtype_name(dtype) << ", layout " << static_cast<int>(layout) << (training ? ", training, " : ", eval, ")
                           << mode.name);
    manual_seed(31);
    const Tensor x = arrange((randn(shape) * 1.5 + randn({1, c}).view(layout == Layout::Rows ? Shape{1, c}
                                                                                               : Shape{1, c, 1, 1}))
                                 .to(dtype));
    Tensor z = randn(shape).to(dtype);
    if (mode.residual_channels_last && z.dim() == 4) z = z.contiguous(MemoryFormat::ChannelsLast);
    if (!mode.residual_channels_last) z = arrange(z);
    const Tensor w = (randn({c}) * 0.5 + 1.0).to(pdt), b = randn({c}).to(pdt);
    const Tensor rm0 = randn({c}).to(pdt), rv0 = (rand({c}) + 0.5).to(pdt);
    const Tensor dy = randn(shape).to(dtype);

    struct Run {
      Tensor x, z, w, b, rm, rv, y;
    };
    const auto leaves = [&] {
      Run r;
      r.x = x.detach().clone().set_requires_grad(true);
      r.z = z.detach().clone().set_requires_grad(true);
      r.w = w.clone().set_requires_grad(true);
      r.b = b.clone().set_requires_grad(true);
      r.rm = rm0.clone();
      r.rv = rv0.clone();
      return r;
    };
    Run fused = leaves(), ops = leaves();
    BatchNormEpilogue epilogue;
    if (mode.residual) epilogue.residual = fused.z;
    epilogue.relu = mode.relu;
    fused.y = batch_norm(fused.x, fused.rm, fused.rv, fused.w, fused.b, training, 0.1, 1e-5, epilogue);
    ops.y = batch_norm(ops.x, ops.rm, ops.rv, ops.w, ops.b, training, 0.1, 1e-5);
    if (mode.residual) ops.y = ops.y + ops.z;
    if (mode.relu) ops.y = relu(ops.y);
    REQUIRE(fused.y.dtype() == dtype);
    CHECK(bitwise_equal(fused.y, ops.y));
    CHECK(bitwise_equal(fused.rm, ops.rm));
    CHECK(bitwise_equal(fused.rv, ops.rv));
    CHECK(same_layout(fused.y, batch_norm(x, rm0.clone(), rv0.clone(), w, b, training)));  // x's layout, as before
    fused.y.backward(dy);
    ops.y.backward(dy);
    CHECK(bitwise_equal(fused.x.grad(), ops.x.grad()));
    CHECK(bitwise_equal(fused.w.grad(), ops.w.grad()));
    CHECK(bitwise_equal(fused.b.grad(), ops.b.grad()));
    if (mode.residual) {
      CHECK(bitwise_equal(fused.z.grad(), ops.z.grad()));
    } else {
      CHECK_FALSE(fused.z.grad().defined());
    }
  }
}

TEST_CASE("batch_norm's epilogue: a ReLU masks the gradient where the output is zero, and guards its output",
          "[nn]") {
  // Channel 0 has every output positive (a large bias), channel 1 every output zero (a large
  // negative bias): the ReLU passes all of the first channel's gradient and none of the second's.
  manual_seed(5);
  const Tensor x = randn({6, 2, 4}).set_requires_grad(true);
  const Tensor b = tensor(std::vector<float>{100.f, -100.f}).set_requires_grad(true);
  const Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), b, true, 0.1, 1e-5, {.residual = {}, .relu = true});
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "batch_norm");  // one node: the ReLU ran inside
  CHECK(bitwise_equal(y.select(1, 1), zeros({6, 4})));
  y.backward(ones({6, 2, 4}));
  CHECK(bitwise_equal(x.grad().select(1, 1), zeros({6, 4})));
  CHECK(b.grad().to_vector<float>() == std::vector<float>{24.f, 0.f});  // 6 x 4 ones, then none
  // The saved output must not change before the backward: an in-place edit is refused.
  const Tensor x2 = randn({6, 2, 4}).set_requires_grad(true);
  Tensor y2 = batch_norm(x2, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, {.residual = {}, .relu = true});
  y2.mul_(2.0);
  CHECK_THROWS_AS(y2.sum().backward(), AutogradError);
}

// float16 batch norm over NCHW planes goes through float blocks where the CPU converts float16 in
// hardware, and reads the planes in place otherwise (kernels/cpu/batch_norm.cpp): both must give the
// same bits, with planes of a block and a tail (37 x 37 = 1024 + 345) and shorter than a lane group
// (5), with neither epilogue, the ReLU alone (whose mask the backward applies) and the residual and
// the ReLU, in training and eval.
TEST_CASE("batch_norm in float16: the float blocks give the bits of the loops over the planes in place", "[nn]") {
  const kiln::test::HardwareHalfGuard restore;
  if (!kiln::test::use_hardware_half("float16 batch norm")) return;
  for (const Shape& shape : {Shape{2, 3, 37, 37}, Shape{3, 2, 1, 5}}) {
    for (bool training : {true, false}) {
      for (int mode = 0; mode < 3; ++mode) {
        const bool relu = mode > 0, residual = mode == 2;
        INFO("shape [" << shape[0] << ", " << shape[1] << ", " << shape[2] << ", " << shape[3] << "], "
                       << (training ? "training" : "eval") << (relu ? ", relu" : "") << (residual ? ", residual" : ""));
        const int64_t c = shape[1];
        manual_seed(12);
        const Tensor x0 = ((randn(shape) * 1.5 + randn({1, c, 1, 1})).to(DType::Float16));
        const Tensor z0 = randn(shape).to(DType::Float16), dy = randn(shape).to(DType::Float16);
        const Tensor w0 = randn({c}) * 0.5 + 1.0, b0 = randn({c}), rm0 = randn({c}), rv0 = rand({c}) + 0.5;
        const auto run = [&](bool hardware) {
          cpu::set_hardware_half(hardware);
          const Tensor x = x0.clone().set_requires_grad(true), z = z0.clone().set_requires_grad(true);
          const Tensor w = w0.clone().set_requires_grad(true), b = b0.clone().set_requires_grad(true);
          const Tensor rm = rm0.clone(), rv = rv0.clone();
          BatchNormEpilogue epilogue;
          if (residual) epilogue.residual = z;
          epilogue.relu = relu;
          const Tensor y = batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5, epilogue);
          y.backward(dy);
          return std::vector<Tensor>{y, rm, rv, x.grad(), w.grad(), b.grad(), residual ? z.grad() : zeros({1})};
        };
        const std::vector<Tensor> blocks = run(true), in_place = run(false);
        const char* names[] = {"y", "running mean", "running var", "x grad", "weight grad", "bias grad", "z grad"};
        for (size_t i = 0; i < blocks.size(); ++i) {
          INFO(names[i]);
          CHECK(bitwise_equal(blocks[i], in_place[i]));
        }
      }
    }
  }
}

TEST_CASE("dropout: about p of 100k elements are dropped, the rest scaled by 1/(1-p)", "[nn]") {
  const double p = 0.3;
  manual_seed(21);
  Tensor x = ones({100000});
  Tensor y = dropout(x, p);
  std::vector<float> v = y.to_vector<float>();
  int64_t dropped = 0;
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (float e : v) {
    if (e == 0.0f) {
      ++dropped;
    } else {
      CHECK(e == scale);
    }
  }
  // The standard deviation of the fraction is sqrt(p (1 - p) / n) ~ 0.0015; 0.01 is ~7 of them.
  CHECK(static_cast<double>(dropped) / 100000.0 == Approx(p).margin(0.01));
}

TEST_CASE("dropout: the mask is a function of the seed, and the gradient is zero where dropped", "[nn]") {
  Tensor x = randn({64, 33});
  manual_seed(5);
  std::vector<float> a = dropout(x, 0.5).to_vector<float>();
  std::vector<float> a_next = dropout(x, 0.5).to_vector<float>();
  manual_seed(5);
  std::vector<float> b = dropout(x, 0.5).to_vector<float>();
  CHECK(a == b);
  CHECK(a != a_next);  // each call draws with a fresh Philox offset

  Tensor leaf = x.detach().set_requires_grad(true);
  Tensor w = randn({64, 33});
  manual_seed(5);
  Tensor y = dropout(leaf, 0.5);
  sum(y * w).backward();
  std::vector<float> yv = y.to_vector<float>(), g = leaf.grad().to_vector<float>(), wv = w.to_vector<float>();
  for (size_t i = 0; i < yv.size(); ++i) {
    if (yv[i] == 0.0f) {
      CHECK(g[i] == 0.0f);
    } else {
      CHECK(g[i] == Approx(wv[i] * 2.0f).epsilon(1e-6));
    }
  }
}

TEST_CASE("dropout: p = 0 and eval return the input, p = 1 gives zeros", "[nn]") {
  Tensor x = randn({5, 6}).set_requires_grad(true);
  CHECK(dropout(x, 0.0).is_same(x));
  CHECK(dropout(x, 0.7, false).is_same(x));
  Tensor y = dropout(x, 1.0);
  CHECK(y.to_vector<float>() == std::vector<float>(30, 0.0f));
  sum(y).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>(30, 0.0f));
  CHECK_THROWS_AS(dropout(x, 1.5), Error);
}

TEST_CASE("cross_entropy's gradient keeps its precision at large logits, as its loss does", "[nn]") {
  // Logits [b, b, b - 1], target 0, in float32 (the float64 twin alone would hide it): the softmax is
  // the same at every b, but a log-sum-exp rounded to the spacing of b (1 near 1e7) would lose it.
  const double e = std::exp(-1.0), sum = 2.0 + e;
  const std::vector<double> want = {1.0 / sum - 1.0, 1.0 / sum, e / sum};
  for (const double b : {10.0, 1e3, 1e5, 1e7}) {
    INFO("b = " << b);
    Tensor logits = tensor(std::vector<double>{b, b, b - 1.0}, {1, 3}).to(DType::Float32).set_requires_grad(true);
    Tensor loss = cross_entropy(logits, tensor(std::vector<int64_t>{0}));
    CHECK(loss.item<double>() == Approx(std::log(sum)).epsilon(1e-6));
    loss.backward();
    const std::vector<double> g = logits.grad().to_vector_double();
    for (size_t c = 0; c < 3; ++c) CHECK(g[c] == Approx(want[c]).epsilon(1e-6));
  }
}

TEST_CASE("cross_entropy equals log_softmax + NLL by hand, and ignored rows contribute nothing", "[nn]") {
  const std::vector<double> lv{1.0, 2.0, 0.5, -1.0, 0.0, 3.0, 1.0, 1.0, -2.0, 0.5, 0.25, 4.0};
  Tensor logits = tensor(lv, {3, 4}).set_requires_grad(true);
  Tensor target = tensor<int64_t>({1, -100, 3});
  Tensor loss = cross_entropy(logits, target);

  // By hand: loss = -(log p[0][1] + log p[2][3]) / 2 (row 1 is ignored and not counted).
  auto log_p = [&](size_t row, size_t cls) {
    double s = 0;
    for (size_t c = 0; c < 4; ++c) s += std::exp(lv[row * 4 + c]);
    return lv[row * 4 + cls] - std::log(s);
  };
  const double expect = -(log_p(0, 1) + log_p(2, 3)) / 2.0;
  CHECK(loss.item<double>() == Approx(expect).epsilon(1e-12));
  // The same through kiln's log_softmax.
  std::vector<double> ls = log_softmax(logits.detach(), 1).to_vector_double();
  CHECK(loss.item<double>() == Approx(-(ls[1] + ls[11]) / 2.0).epsilon(1e-12));

  // Per-row losses: the ignored row is 0.
  std::vector<double> none = cross_entropy(logits.detach(), target, Reduction::None).to_vector_double();
  CHECK(none[0] == Approx(-log_p(0, 1)).epsilon(1e-12));
  CHECK(none[1] == 0.0);
  CHECK(none[2] == Approx(-log_p(2, 3)).epsilon(1e-12));

  // Gradient: (softmax - onehot) / 2 on counted rows, exactly zero on the ignored one.
  loss.backward();
  std::vector<double> g = logits.grad().to_vector_double();
  for (size_t c = 0; c < 4; ++c) {
    CHECK(g[4 + c] == 0.0);
    CHECK(g[c] == Approx((std::exp(log_p(0, c)) - (c == 1 ? 1.0 : 0.0)) / 2.0).epsilon(1e-12));
  }

  // Changing an ignored row's logits changes nothing.
  Tensor other = logits.detach().clone();
  other.select(0, 1).fill_(100.0);
  CHECK(cross_entropy(other, target).item<double>() == loss.item<double>());

  // Label smoothing: (1 - eps) * nll + eps * mean over classes of -log p.
  const double eps = 0.1;
  double smooth = 0;
  for (size_t row : {size_t{0}, size_t{2}}) {
    double mean_nlp = 0;
    for (size_t c = 0; c < 4; ++c) mean_nlp -= log_p(row, c) / 4.0;
    smooth += (1 - eps) * -log_p(row, row == 0 ? 1 : 3) + eps * mean_nlp;
  }
  CHECK(cross_entropy(logits.detach(), target, Reduction::Mean, -100, eps).item<double>() ==
        Approx(smooth / 2.0).epsilon(1e-12));
  // Every target ignored: the mean is 0/0, as in PyTorch.
  CHECK(std::isnan(cross_entropy(logits.detach(), tensor<int64_t>({-100, -100, -100})).item<double>()));
}

TEST_CASE("softmax rows sum to 1 and stay finite for logits of +-1000", "[nn]") {
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float64}) {
    INFO(dtype_name(t));
    // Values exact in bfloat16 (spacing 4 around 1000).
    Tensor x = tensor<double>({1000, -1000, 996, 0, -1000, -996, -1000, -1000}, {2, 4}).to(t);
    std::vector<double> s = softmax(x, -1).to_vector_double();
    for (double e : s) CHECK(std::isfinite(e));
    // bfloat16 rounds each output to ~3 digits; float32's log(sum) near 1 loses a few ulps to conditioning.
    const double tol = t == DType::BFloat16 ? 1e-2 : (t == DType::Float32 ? 1e-5 : 1e-12);
    CHECK(s[0] + s[1] + s[2] + s[3] == Approx(1.0).margin(tol));
    CHECK(s[4] + s[5] + s[6] + s[7] == Approx(1.0).margin(tol));
    CHECK(s[0] == Approx(1.0 / (1.0 + std::exp(-4.0))).margin(tol));
    CHECK(s[1] == 0.0);
    std::vector<double> l = log_softmax(x, -1).to_vector_double();
    for (double e : l) CHECK(std::isfinite(e));
    CHECK(l[5] == Approx(-std::log(1.0 + 3.0 * std::exp(-4.0))).epsilon(tol));
  }
  manual_seed(3);
  Tensor r = softmax(randn({17, 33}) * 5.0, 1);
  std::vector<double> sums = sum(r, {1}).to_vector_double();
  for (double e : sums) CHECK(e == Approx(1.0).margin(1e-6));
}

TEST_CASE("log1p and expm1 keep a small argument's digits, and elu, selu and celu through them", "[nn]") {
  // At 1e-7, log(1 + x) and exp(x) - 1 in float32 keep none of x's digits right (1 + 1e-7 rounds to
  // 1 + 1.19e-7); in float64 at 1e-13 the same. The C library's log1p and expm1 are within an ulp
  // or two.
  for (const auto& [dtype, tiny] : {std::pair{DType::Float32, 1e-7}, std::pair{DType::Float64, 1e-13}}) {
    INFO(dtype_name(dtype));
    const Tensor x = tensor(std::vector<double>{tiny, -tiny, 3 * tiny}).to(dtype);
    const std::vector<double> xs = x.to_vector_double();  // the values as the dtype holds them
    const std::vector<double> l = log1p(x).to_vector_double(), e = expm1(x).to_vector_double();
    const Tensor negative = -abs(x);  // the exponential side of elu, selu and celu
    const std::vector<double> ns = negative.to_vector_double();
    const std::vector<double> elu_neg = elu(negative).to_vector_double();
    const std::vector<double> celu_neg = celu(negative, 0.5).to_vector_double();
    const std::vector<double> selu_neg = selu(negative).to_vector_double();
    const double rel = dtype == DType::Float32 ? 1e-6 : 1e-15;
    for (size_t i = 0; i < xs.size(); ++i) {
      INFO("x = " << xs[i]);
      CHECK(l[i] == Approx(std::log1p(xs[i])).epsilon(rel));
      CHECK(e[i] == Approx(std::expm1(xs[i])).epsilon(rel));
      CHECK(elu_neg[i] == Approx(std::expm1(ns[i])).epsilon(rel));
      CHECK(celu_neg[i] == Approx(0.5 * std::expm1(ns[i] / 0.5)).epsilon(rel));
      CHECK(selu_neg[i] == Approx(1.0507009873554804934 * 1.6732632423543772848 * std::expm1(ns[i])).epsilon(rel));
    }
  }
  // The gradients: 1 / (1 + x) and exp(x), and sin's and cos's cos and -sin.
  Tensor v = tensor(std::vector<double>{-0.5, 0.0, 2.0}).set_requires_grad(true);
  (log1p(v) + expm1(v) + sin(v) + cos(v) * 2.0).sum().backward();
  const std::vector<double> g = v.grad().to_vector_double();
  for (size_t i = 0; i < 3; ++i) {
    const double a = std::vector<double>{-0.5, 0.0, 2.0}[i];
    CHECK(g[i] == Approx(1 / (1 + a) + std::exp(a) + std::cos(a) - 2 * std::sin(a)).epsilon(1e-14));
  }
  // Integer inputs give float32, as PyTorch's.
  CHECK(sin(tensor(std::vector<int64_t>{0, 1})).dtype() == DType::Float32);
  CHECK(log1p(tensor(std::vector<int64_t>{0, 1})).to_vector_double()[1] == Approx(std::log(2.0)).epsilon(1e-7));
}

TEST_CASE("nan_to_num's defaults are the dtype's extremes, and integers are finite", "[nn]") {
  const std::vector<double> special = {std::nan(""), INFINITY, -INFINITY, 2.5};
  for (const auto& [dtype, top] :
       {std::pair{DType::Float16, 65504.0}, std::pair{DType::BFloat16, 3.3895313892515355e38},
        std::pair{DType::Float32, 3.4028234663852886e38}, std::pair{DType::Float64, 1.7976931348623157e308}}) {
    INFO(dtype_name(dtype));
    const Tensor x = tensor(special).to(dtype);
    CHECK(nan_to_num(x).to_vector_double() == std::vector<double>{0.0, top, -top, 2.5});
    CHECK(nan_to_num(x, -1.0, 7.0).to_vector_double() == std::vector<double>{-1.0, 7.0, -top, 2.5});
  }
  const Tensor ints = tensor(std::vector<int64_t>{1, -2});
  CHECK(isfinite(ints).to_vector_double() == std::vector<double>{1, 1});
  CHECK(isinf(ints).to_vector_double() == std::vector<double>{0, 0});
  CHECK(bitwise_equal(nan_to_num(ints), ints));
}

TEST_CASE("layer_norm of a constant row is zero, with finite gradients", "[nn]") {
  Tensor x = full({3, 8}, 0.1).set_requires_grad(true);
  Tensor w = ones({8}).set_requires_grad(true), b = zeros({8}).set_requires_grad(true);
  Tensor y = layer_norm(x, {8}, w, b);
  for (float e : y.to_vector<float>()) {
    CHECK(std::isfinite(e));
    CHECK(e == Approx(0.0f).margin(1e-4));
  }
  sum(y * y + y).backward();
  for (const Tensor* t : {&x, &w, &b})
    for (float g : t->grad().to_vector<float>()) CHECK(std::isfinite(g));
  // A float32 row whose sum passes float32's largest value: the mean is still the row's value, not
  // inf (which made every output NaN).
  const Tensor huge = layer_norm(full({2, 4}, 3e38), {4});
  CHECK(huge.to_vector<float>() == std::vector<float>(8, 0.0f));
}

TEST_CASE("nn backward passes give the same bits for any thread count", "[nn]") {
  ThreadCountGuard guard;
  auto run = [](int threads) {
    cpu::set_num_threads(threads);
    manual_seed(8);
    Tensor x = randn({700, 48}).set_requires_grad(true);
    Tensor w = randn({48}).set_requires_grad(true), b = randn({48}).set_requires_grad(true);
    Tensor bx = randn({64, 6, 5, 5}).set_requires_grad(true);
    Tensor logits = randn({3000, 10}).set_requires_grad(true);
    Tensor target = randint(0, 10, {3000});
    // Channels innermost (channels-last images, [N, C]): rows of channels summed in chunks of rows,
    // three chunks here and two below.
    Tensor cl = randn({64, 16, 9, 9}).contiguous(MemoryFormat::ChannelsLast).set_requires_grad(true);
    Tensor cw = randn({16}).set_requires_grad(true), cb = randn({16}).set_requires_grad(true);
    Tensor rows = randn({5000, 12}).set_requires_grad(true);
    Tensor loss = sum(layer_norm(x, {48}, w, b) * 0.5) +
                  sum(batch_norm(bx, Tensor(), Tensor(), Tensor(), Tensor(), true) * 0.25) +
                  cross_entropy(logits, target, Reduction::Sum) +
                  sum(batch_norm(cl, Tensor(), Tensor(), cw, cb, true) * cl) +
                  sum(batch_norm(rows, Tensor(), Tensor(), Tensor(), Tensor(), true) * rows);
    loss.backward();
    std::vector<float> all{loss.item<float>()};
    for (const Tensor* t : {&x, &w, &b, &bx, &logits, &cl, &cw, &cb, &rows}) {
      std::vector<float> g = t->grad().to_vector<float>();
      all.insert(all.end(), g.begin(), g.end());
    }
    return all;
  };
  std::vector<float> one = run(1), two = run(2), four = run(4);
  CHECK(one == two);
  CHECK(one == four);
}

TEST_CASE("embedding: repeated indices accumulate their gradients", "[nn]") {
  Tensor w = randn({4, 3}).set_requires_grad(true);
  Tensor idx = tensor<int64_t>({2, 0, 2, 2}, {2, 2});
  Tensor y = embedding(w, idx);
  CHECK(y.sizes() == Shape{2, 2, 3});
  CHECK(y.grad_fn()->name() == "embedding");
  sum(y).backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1, 1, 1, 0, 0, 0, 3, 3, 3, 0, 0, 0});
  CHECK_THROWS_WITH(embedding(w, tensor<int64_t>({4})), Catch::Contains("embedding") && Catch::Contains("index 4"));
}

TEST_CASE("nn ops accept empty inputs", "[nn]") {
  Tensor e = zeros({0, 5}).set_requires_grad(true);
  CHECK(softmax(e, 1).sizes() == Shape{0, 5});
  CHECK(log_softmax(e, 0).sizes() == Shape{0, 5});
  Tensor w = ones({5}).set_requires_grad(true);
  Tensor y = layer_norm(e, {5}, w, Tensor());
  sum(y).backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>(5, 0.0f));
  CHECK(batch_norm(zeros({0, 5}), zeros({5}), ones({5}), Tensor(), Tensor(), false).sizes() == Shape{0, 5});
  CHECK(cross_entropy(e, zeros({0}, DType::Int64), Reduction::None).sizes() == Shape{0});
  CHECK(cross_entropy(e, zeros({0}, DType::Int64), Reduction::Sum).item<float>() == 0.0f);
  CHECK(std::isnan(cross_entropy(e, zeros({0}, DType::Int64)).item<float>()));  // mean of nothing
  CHECK(embedding(ones({3, 2}), zeros({0, 4}, DType::Int64)).sizes() == Shape{0, 4, 2});
  CHECK(dropout(e, 0.5).sizes() == Shape{0, 5});
}
