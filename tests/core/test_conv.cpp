// Hand tests for conv2d and pooling: what the op table cannot say (layouts of outputs and
// gradients, a hand-computed convolution, bitwise determinism across thread counts, where the
// max-pool gradient lands).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/kiln.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/parallel.h"
#include "tests/threads.h"

using namespace kiln;
using kiln::test::ThreadCountGuard;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  return std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0;
}

bool is_channels_last_layout(const Tensor& t) { return t.strides() == channels_last_strides(t.sizes()); }

}  // namespace

TEST_CASE("conv2d: channels-last input gives a channels-last output with NCHW's values", "[conv]") {
  manual_seed(7);
  Tensor x = randn({2, 4, 7, 6});
  Tensor w = randn({6, 2, 3, 3});
  Tensor b = randn({6});
  Tensor xcl = x.contiguous(MemoryFormat::ChannelsLast).detach().set_requires_grad(true);
  Tensor xn = x.detach().set_requires_grad(true);
  Tensor wn = w.detach().set_requires_grad(true), wcl = w.detach().set_requires_grad(true);

  Tensor yn = conv2d(xn, wn, b, {2, 1}, {1, 1}, {1, 1}, 2);
  Tensor ycl = conv2d(xcl, wcl, b, {2, 1}, {1, 1}, {1, 1}, 2);
  CHECK(yn.is_contiguous());
  CHECK(is_channels_last_layout(ycl));
  CHECK_FALSE(ycl.is_contiguous());
  // NCHW runs on planar columns, channels-last on row columns (kernels/cpu/im2col.h): the same
  // products summed in other orders, so the values agree to float rounding.
  auto near = [](const Tensor& a, const Tensor& b) {
    std::vector<double> va = a.to_vector_double(), vb = b.to_vector_double();
    if (va.size() != vb.size()) return false;
    for (size_t i = 0; i < va.size(); ++i) {
      if (!(std::fabs(va[i] - vb[i]) <= 1e-5 * (1.0 + std::fabs(va[i])))) return false;
    }
    return true;
  };
  CHECK(near(yn, ycl));

  Tensor gy = randn(yn.sizes());
  yn.backward(gy);
  ycl.backward(gy);
  CHECK(is_channels_last_layout(xcl.grad()));
  CHECK(near(xn.grad(), xcl.grad()));
  CHECK(near(wn.grad(), wcl.grad()));

  // Pooling keeps the layout too.
  Tensor p = max_pool2d(xcl.detach(), {2, 2});
  CHECK(is_channels_last_layout(p));
  CHECK(same_bits(p, max_pool2d(x, {2, 2})));
  Tensor a = avg_pool2d(xcl.detach(), {3, 3}, {2, 2}, {1, 1});
  CHECK(is_channels_last_layout(a));
  CHECK(same_bits(a, avg_pool2d(x, {3, 3}, {2, 2}, {1, 1})));
}

TEST_CASE("conv2d: a hand-computed 3x3 * 2x2 convolution and its gradients", "[conv]") {
  Tensor x = tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f}, {1, 1, 3, 3}).set_requires_grad(true);
  Tensor w = tensor({1.0f, 2.0f, 3.0f, 4.0f}, {1, 1, 2, 2}).set_requires_grad(true);
  Tensor b = tensor({0.5f}, {1}).set_requires_grad(true);

  Tensor y = conv2d(x, w, b);
  REQUIRE(y.sizes() == Shape{1, 1, 2, 2});
  // y[i, j] = sum_{a, b} x[i + a, j + b] * w[a, b] + 0.5
  CHECK(y.to_vector<float>() == std::vector<float>{37.5f, 47.5f, 67.5f, 77.5f});

  y.sum().backward();
  // Each input pixel collects the taps of the windows that cover it.
  CHECK(x.grad().to_vector<float>() == std::vector<float>{1, 3, 2, 4, 10, 6, 3, 7, 4});
  // Each tap collects the input pixels it meets.
  CHECK(w.grad().to_vector<float>() == std::vector<float>{12, 16, 24, 28});
  CHECK(b.grad().to_vector<float>() == std::vector<float>{4});

  // Stride 2, padding 1: windows at rows/cols {-1, 0} and {1, 2}.
  Tensor y2 = conv2d(x.detach(), w.detach(), Tensor(), {2, 2}, {1, 1});
  CHECK(y2.to_vector<float>() == std::vector<float>{4, 18, 36, 77});
}

TEST_CASE("conv2d: backward is bitwise the same with 1 and 2 threads", "[conv]") {
  ThreadCountGuard guard;
  // A GEMM whose bits do not depend on the thread count: OpenBLAS's path where it qualifies.
  cpu::GemmBackendScope gemm(test::thread_independent_gemm());
  manual_seed(11);
  // Big enough that im2col, col2im and the pooling kernels cut their work into several chunks.
  Tensor x0 = randn({8, 16, 20, 20});
  Tensor w0 = randn({16, 8, 3, 3});
  Tensor b0 = randn({16});
  Tensor gy = randn({8, 16, 10, 20});
  auto run = [&](int threads, bool channels_last) {
    cpu::set_num_threads(threads);
    Tensor x = (channels_last ? x0.contiguous(MemoryFormat::ChannelsLast) : x0).detach().set_requires_grad(true);
    Tensor w = w0.detach().set_requires_grad(true), b = b0.detach().set_requires_grad(true);
    Tensor y = conv2d(x, w, b, {2, 1}, {1, 1}, {1, 1}, 2);
    y.backward(gy);
    return TensorList{y, x.grad(), w.grad(), b.grad()};
  };
  for (bool cl : {false, true}) {
    INFO("channels_last " << cl);
    TensorList one = run(1, cl), two = run(2, cl);
    for (size_t i = 0; i < one.size(); ++i) {
      INFO("tensor " << i);
      CHECK(same_bits(one[i], two[i]));
    }
  }
  // Pooling gradients too.
  Tensor first;
  for (int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    Tensor x = x0.detach().set_requires_grad(true);
    (avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}) * 3.0 + max_pool2d(x, {3, 3}, {2, 2}, {1, 1})).sum().backward();
    if (threads == 1) {
      first = x.grad();
    } else {
      CHECK(same_bits(first, x.grad()));
    }
  }
}

TEST_CASE("max_pool2d: the gradient goes to each window's maximum", "[conv]") {
  // One 4x4 plane; the maxima of the 2x2 windows are 9 (1, 1), 8 (0, 3), 7 (3, 0), 6 (2, 2).
  Tensor x = tensor({1.0f, 0.0f, 2.0f, 8.0f,  //
                     3.0f, 9.0f, 1.0f, 4.0f,  //
                     0.0f, 2.0f, 6.0f, 5.0f,  //
                     7.0f, 1.0f, 3.0f, 2.0f},
                    {1, 1, 4, 4})
                 .set_requires_grad(true);
  Tensor y = max_pool2d(x, {2, 2});
  CHECK(y.to_vector<float>() == std::vector<float>{9, 8, 7, 6});
  y.backward(tensor({10.0f, 20.0f, 30.0f, 40.0f}, {1, 1, 2, 2}));
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0, 0, 0, 20, 0, 10, 0, 0, 0, 0, 40, 0, 30, 0, 0, 0});

  // Overlapping windows: the global maximum wins all four 3x3 windows and collects all four.
  Tensor x2 = x.detach().set_requires_grad(true);
  Tensor y2 = max_pool2d(x2, {3, 3}, {1, 1});
  CHECK(y2.to_vector<float>() == std::vector<float>{9, 9, 9, 9});
  y2.sum().backward();
  std::vector<float> expect(16, 0.0f);
  expect[5] = 4;
  CHECK(x2.grad().to_vector<float>() == expect);
}

TEST_CASE("max_pool2d: ties keep the first tap and a NaN takes its window, on every CPU path", "[conv]") {
  // Values from {0, 1, 2} (ties in most windows) with NaNs here and there. Fixed-window paths: 2x2/2,
  // 3x3/2 and 3x3/1 without padding; the general path: padding, dilation, a channels-last input.
  struct Case {
    int64_t k, s, pad, dil;
    bool channels_last;
  };
  const std::vector<Case> cases = {{2, 2, 0, 1, false}, {3, 2, 0, 1, false}, {3, 1, 0, 1, false},
                                   {2, 2, 0, 1, true},  {3, 2, 1, 1, false}, {2, 1, 0, 2, false}};
  const int64_t n = 2, c = 3, h = 9, w = 8;
  std::vector<double> values(static_cast<size_t>(n * c * h * w));
  for (size_t i = 0; i < values.size(); ++i) values[i] = i % 37 == 5 ? NAN : static_cast<double>((i * 7 + i / 5) % 3);
  for (DType t : {DType::Float32, DType::Float64}) {
    for (const Case& cs : cases) {
      INFO(dtype_name(t) << " kernel " << cs.k << " stride " << cs.s << " padding " << cs.pad << " dilation " << cs.dil
                         << (cs.channels_last ? " channels-last" : ""));
      Tensor x0 = tensor(values, {n, c, h, w}).to(t);
      if (cs.channels_last) x0 = x0.contiguous(MemoryFormat::ChannelsLast);
      Tensor x = x0.detach().set_requires_grad(true);
      Tensor y = max_pool2d(x, {cs.k, cs.k}, {cs.s, cs.s}, {cs.pad, cs.pad}, {cs.dil, cs.dil});
      const int64_t oh = y.size(2), ow = y.size(3);
      // Output o's gradient is o + 1, so the input gradient says which tap each window picked.
      std::vector<double> gy(static_cast<size_t>(n * c * oh * ow));
      for (size_t i = 0; i < gy.size(); ++i) gy[i] = static_cast<double>(i + 1);
      y.backward(tensor(gy, y.sizes()).to(t));
      std::vector<double> want_y(gy.size()), want_g(values.size(), 0.0);
      for (int64_t p = 0; p < n * c; ++p) {
        for (int64_t i = 0; i < oh; ++i) {
          for (int64_t j = 0; j < ow; ++j) {
            int64_t best = -1;
            for (int64_t a = 0; a < cs.k; ++a) {
              for (int64_t b = 0; b < cs.k; ++b) {
                const int64_t ih = i * cs.s - cs.pad + a * cs.dil, iw = j * cs.s - cs.pad + b * cs.dil;
                if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                const int64_t at = p * h * w + ih * w + iw;
                const double v = values[static_cast<size_t>(at)];
                if (best < 0) {
                  best = at;
                  continue;
                }
                const double bv = values[static_cast<size_t>(best)];
                if (!std::isnan(bv) && (std::isnan(v) || v > bv)) best = at;  // first of ties; NaN stays
              }
            }
            const size_t o = static_cast<size_t>((p * oh + i) * ow + j);
            want_y[o] = values[static_cast<size_t>(best)];
            want_g[static_cast<size_t>(best)] += gy[o];
          }
        }
      }
      const std::vector<double> got_y = y.contiguous().to_vector_double();
      int64_t bad = 0;
      for (size_t o = 0; o < want_y.size(); ++o) {
        const bool same = std::isnan(want_y[o]) ? std::isnan(got_y[o]) : got_y[o] == want_y[o];
        bad += same ? 0 : 1;
      }
      CHECK(bad == 0);
      CHECK(x.grad().contiguous().to_vector_double() == want_g);
    }
  }
}

TEST_CASE("conv2d: float16 and bfloat16 round once, like float32 rounded to half", "[conv]") {
  manual_seed(3);
  // 64 input channels x 3x3: 576 terms per output, where rounding inside the sum would show.
  Tensor x = randn({1, 64, 5, 5});
  Tensor w = randn({4, 64, 3, 3}) * 0.05;
  for (DType t : {DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(t));
    Tensor xh = x.to(t), wh = w.to(t);
    Tensor ref = conv2d(xh.to(DType::Float32), wh.to(DType::Float32), Tensor(), {1, 1}, {1, 1}).to(t);
    CHECK(same_bits(conv2d(xh, wh, Tensor(), {1, 1}, {1, 1}), ref));
  }
}
