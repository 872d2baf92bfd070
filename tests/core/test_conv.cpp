// Hand tests for conv2d: what the op table cannot say (layouts of outputs and gradients, a
// hand-computed convolution, bitwise determinism across thread counts, pooling's included, the
// channels-last row columns against NCHW and against their formulas, the planar columns against
// theirs). Pooling's own are in test_pool.cpp. Then conv_transpose2d and conv_transpose1d, beyond
// the op table's float64 scatter reference and gradchecks: a hand-computed transposed convolution
// and its gradients, the adjoint identity with conv2d, the sizes output_padding picks, layouts of
// outputs and gradients, and empty operands.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/kiln.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/im2col.h"
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

// <a, b> summed in float64 on the host.
double dot_value(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector_double(), vb = b.to_vector_double();
  REQUIRE(va.size() == vb.size());
  double s = 0;
  for (size_t i = 0; i < va.size(); ++i) s += va[i] * vb[i];
  return s;
}

double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector_double(), vb = b.to_vector_double();
  REQUIRE(va.size() == vb.size());
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::fabs(va[i] - vb[i]));
  return m;
}

double max_abs(const Tensor& a) { return max_diff(a, zeros_like(a)); }

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

namespace {

// Largest |a - b| / (1 + |b|) over the elements (infinity on a size mismatch).
double worst_rel(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector_double(), vb = b.to_vector_double();
  if (va.size() != vb.size()) return INFINITY;
  double worst = 0.0;
  for (size_t i = 0; i < va.size(); ++i) {
    const double r = std::fabs(va[i] - vb[i]) / (1.0 + std::fabs(vb[i]));
    worst = std::isnan(r) ? INFINITY : std::max(worst, r);
  }
  return worst;
}

struct ConvCase {
  const char* name;
  Shape x, w;  // [N, C, H, W], [C_out, C/groups, KH, KW]
  Pair stride, padding, dilation;
  int64_t groups;
};

// The shapes the channels-last row columns treat apart (kernels/cpu/im2col.cpp): whole window rows
// (one group, no dilation along W) or one run of channels per tap, windows over the edges, kernels
// wider than a common width, 1x1 kernels that need columns (stride 2) and pointwise ones that do
// not, channel counts that are multiples of nothing, and a batch of several weight-gradient runs.
const std::vector<ConvCase>& row_column_cases() {
  static const std::vector<ConvCase> cases = {
      {"3x3, stride 2, padding 1, C 5", {2, 5, 9, 7}, {4, 5, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
      {"3x2, groups 3, dilation 2x1, stride 1x2, padding 2x1", {2, 6, 8, 7}, {6, 2, 3, 2}, {1, 2}, {2, 1}, {2, 1}, 3},
      {"2x4, dilation 1x2, padding 0x3", {1, 7, 5, 9}, {3, 7, 2, 4}, {1, 1}, {0, 3}, {1, 2}, 1},
      {"5x5 over a 3x4 image, padding 2", {2, 3, 3, 4}, {2, 3, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},
      {"1x1, stride 2", {2, 7, 5, 6}, {5, 7, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1},
      {"1x1, padding 1", {2, 3, 4, 3}, {2, 3, 1, 1}, {1, 1}, {1, 1}, {1, 1}, 1},
      {"1x1 pointwise, groups 2", {3, 4, 5, 3}, {6, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 2},
      {"3x3 depthwise, stride 2x1, padding 1", {2, 5, 6, 7}, {5, 1, 3, 3}, {2, 1}, {1, 1}, {1, 1}, 5},
      {"batch 37, 3x3, padding 1", {37, 3, 5, 4}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {"one channel, 3x3, padding 1", {2, 1, 6, 5}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
  };
  return cases;
}

}  // namespace

TEST_CASE("conv2d: channels-last row columns give NCHW's output and gradients in float64", "[conv]") {
  for (const ConvCase& cs : row_column_cases()) {
    INFO(cs.name);
    manual_seed(17);
    Tensor x0 = randn(cs.x).to(DType::Float64), w0 = randn(cs.w).to(DType::Float64);
    Tensor b0 = randn({cs.w[0]}).to(DType::Float64);
    auto run = [&](bool channels_last, bool bias) {
      const MemoryFormat f = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
      Tensor xf = x0.contiguous(f);
      // One channel: NCHW's bytes, but the strides must say channels-last for the row columns.
      if (channels_last && cs.x[1] == 1) xf = xf.as_strided(cs.x, channels_last_strides(cs.x), 0);
      Tensor x = xf.detach().set_requires_grad(true);
      Tensor w = w0.contiguous(f).detach().set_requires_grad(true);
      Tensor b = bias ? b0.detach().set_requires_grad(true) : Tensor();
      Tensor y = conv2d(x, w, b, cs.stride, cs.padding, cs.dilation, cs.groups);
      manual_seed(23);
      y.backward(randn(y.sizes()).to(DType::Float64));
      return TensorList{y, x.grad(), w.grad()};
    };
    for (bool bias : {false, true}) {
      INFO("bias " << bias);
      const TensorList nchw = run(false, bias), cl = run(true, bias);
      // The same products summed in other orders: float64 rounding apart.
      const char* names[3] = {"output", "input gradient", "weight gradient"};
      for (size_t i = 0; i < nchw.size(); ++i) {
        INFO(names[i]);
        CHECK(nchw[i].sizes() == cl[i].sizes());
        CHECK(worst_rel(cl[i], nchw[i]) < 1e-12);
      }
      // Channels-last in, channels-last out (the weight gradient where the weight has channels to
      // order).
      CHECK(cl[0].strides() == channels_last_strides(cl[0].sizes()));
      CHECK(cl[1].strides() == channels_last_strides(cl[1].sizes()));
      if (cs.w[1] > 1) CHECK(cl[2].strides() == channels_last_strides(cl[2].sizes()));
    }
  }
}

TEST_CASE("conv2d: channels-last float16 and bfloat16 are float32's results rounded once", "[conv]") {
  // Half images widen into float32 columns, half filters and output gradients into float32
  // matrices; the GEMMs and col2im's sums stay float32 and round once to half at the end, so each
  // result is bitwise float32's on the widened values, rounded. Groups and padding take the
  // per-tap copies and col2im's buffered store.
  manual_seed(5);
  Tensor x = randn({2, 6, 7, 5}), w = randn({4, 3, 3, 3}) * 0.2, gy = randn({2, 4, 4, 5});
  for (DType t : {DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(t));
    auto run = [&](DType d) {
      Tensor xc = x.to(t).to(d).contiguous(MemoryFormat::ChannelsLast).detach().set_requires_grad(true);
      Tensor wc = w.to(t).to(d).contiguous(MemoryFormat::ChannelsLast).detach().set_requires_grad(true);
      Tensor y = conv2d(xc, wc, Tensor(), {2, 1}, {1, 1}, {1, 1}, 2);
      y.backward(gy.to(t).to(d).contiguous(MemoryFormat::ChannelsLast));
      return TensorList{y, xc.grad(), wc.grad()};
    };
    const TensorList half = run(t), single = run(DType::Float32);
    for (size_t i = 0; i < half.size(); ++i) {
      INFO("tensor " << i);
      CHECK(half[i].dtype() == t);
      CHECK(same_bits(half[i].to(DType::Float32), single[i].to(t).to(DType::Float32)));
    }
  }
}

TEST_CASE("conv2d: channels-last results are bitwise the same with 1 and 2 threads at any batch", "[conv]") {
  ThreadCountGuard guard;
  cpu::GemmBackendScope gemm(test::thread_independent_gemm());
  // Batch 1: fewer images than threads, so the image's im2col, GEMMs and col2im use the pool; batch
  // 3: a run of images per thread; batch 19: several weight-gradient runs.
  for (int64_t batch : {1, 3, 19}) {
    INFO("batch " << batch);
    manual_seed(29);
    Tensor x0 = randn({batch, 12, 17, 15}).contiguous(MemoryFormat::ChannelsLast);
    Tensor w0 = randn({8, 12, 3, 3}).contiguous(MemoryFormat::ChannelsLast);
    Tensor gy = randn({batch, 8, 9, 15}).contiguous(MemoryFormat::ChannelsLast);
    auto run = [&](int threads) {
      cpu::set_num_threads(threads);
      Tensor x = x0.detach().set_requires_grad(true), w = w0.detach().set_requires_grad(true);
      Tensor y = conv2d(x, w, Tensor(), {2, 1}, {1, 1});
      y.backward(gy);
      return TensorList{y, x.grad(), w.grad()};
    };
    const TensorList one = run(1), two = run(2);
    for (size_t i = 0; i < one.size(); ++i) {
      INFO("tensor " << i);
      CHECK(same_bits(one[i], two[i]));
    }
  }
}

TEST_CASE("im2col_rows and col2im_rows follow their formulas for any image strides", "[conv]") {
  // Integer values: every sum is exact in any order, so col2im can be compared exactly with a
  // scatter in another order. Strides: dense channels-last (whole window rows), channels-last
  // pixels with a gap after each pixel's channels (a run per tap), and NCHW planes (channels
  // apart).
  const int64_t n = 2, c = 6, h = 5, w = 7, groups = 2;
  Conv2dGeometry g;
  g.batch = n;
  g.channels = c;
  g.in_h = h;
  g.in_w = w;
  g.window = Window2d{3, 3, 2, 1, 1, 2, 1, 1};  // 3x3, stride 2x1, padding 1x2
  g.out_h = (h + 2 * 1 - 3) / 2 + 1;
  g.out_w = (w + 2 * 2 - 3) / 1 + 1;
  const int64_t kh = 3, kw = 3, ld = c * kh * kw + 2;
  const int64_t rows = n * g.out_h * g.out_w;
  struct Layout {
    const char* name;
    ImageStrides s;
    int64_t size;
  };
  const int64_t pix = c + 3;  // channels-last with 3 unused slots after each pixel
  const std::vector<Layout> layouts = {
      {"dense channels-last", {h * w * c, 1, w * c, c}, n * h * w * c},
      {"channels-last with gaps", {h * w * pix + 5, 1, w * pix, pix}, n * (h * w * pix + 5)},
      {"NCHW", {c * h * w, h * w, w, 1}, n * c * h * w},
  };
  for (int64_t use_groups : {int64_t{1}, groups}) {
    const int64_t ucg = c / use_groups, uk = kh * kw * ucg;
    for (const Layout& L : layouts) {
      INFO(L.name << ", groups " << use_groups);
      std::vector<double> img(static_cast<size_t>(L.size), -99.0);
      auto at = [&](int64_t b, int64_t ch, int64_t y, int64_t x) {
        return static_cast<size_t>(b * L.s.n + ch * L.s.c + y * L.s.h + x * L.s.w);
      };
      for (int64_t b = 0; b < n; ++b)
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t y = 0; y < h; ++y)
            for (int64_t x = 0; x < w; ++x) {
              img[at(b, ch, y, x)] = static_cast<double>((b * 7 + ch * 5 + y * 3 + x) % 11);
            }
      std::vector<double> col(static_cast<size_t>(rows * ld), -1.0);
      cpu::im2col_rows(col.data(), DType::Float64, ld, img.data(), DType::Float64, L.s, g, use_groups);
      // The header's formula, and the padding past C*KH*KW left alone.
      int64_t bad = 0;
      std::vector<double> scatter(img.size(), 0.0);
      std::vector<double> grad_col(col.size());
      for (size_t e = 0; e < grad_col.size(); ++e) grad_col[e] = static_cast<double>((e * 13) % 17) - 8.0;
      for (int64_t b = 0; b < n; ++b)
        for (int64_t oh = 0; oh < g.out_h; ++oh)
          for (int64_t ow = 0; ow < g.out_w; ++ow) {
            const int64_t r = (b * g.out_h + oh) * g.out_w + ow;
            for (int64_t gi = 0; gi < use_groups; ++gi)
              for (int64_t i = 0; i < kh; ++i)
                for (int64_t j = 0; j < kw; ++j)
                  for (int64_t cc = 0; cc < ucg; ++cc) {
                    const int64_t ih = oh * 2 - 1 + i, iw = ow - 2 + j;
                    const size_t e = static_cast<size_t>(r * ld + gi * uk + (i * kw + j) * ucg + cc);
                    const bool inside = ih >= 0 && ih < h && iw >= 0 && iw < w;
                    const double want = inside ? img[at(b, gi * ucg + cc, ih, iw)] : 0.0;
                    bad += col[e] == want ? 0 : 1;
                    if (inside) scatter[at(b, gi * ucg + cc, ih, iw)] += grad_col[e];
                  }
            for (int64_t e = c * kh * kw; e < ld; ++e) bad += col[static_cast<size_t>(r * ld + e)] == -1.0 ? 0 : 1;
          }
      CHECK(bad == 0);
      // col2im: every image element overwritten with its scatter sum; the gaps untouched.
      std::vector<double> grad(img.size(), -7.0);
      cpu::col2im_rows(grad.data(), DType::Float64, L.s, grad_col.data(), DType::Float64, ld, g, use_groups);
      std::vector<double> want(img.size(), -7.0);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t y = 0; y < h; ++y)
            for (int64_t x = 0; x < w; ++x) want[at(b, ch, y, x)] = scatter[at(b, ch, y, x)];
      CHECK(grad == want);
    }
  }
  std::vector<double> col(static_cast<size_t>(rows * ld)), img(static_cast<size_t>(n * c * h * w));
  CHECK_THROWS_AS(cpu::im2col_rows(col.data(), DType::Float64, ld, img.data(), DType::Float64,
                                   ImageStrides{h * w * c, 1, w * c, c}, g, 4),
                  ShapeError);
}

TEST_CASE("im2col_planes and col2im_planes follow their formulas, shifted planes and row gaps included", "[conv]") {
  // Integer values, so col2im can be compared exactly with a scatter in another order. "Same"
  // convolutions at stride 1 whose image rows are out_w apart copy each tap's plane whole and then
  // zero its edges (im2col.cpp's im2col_shifted_plane); the rest copy a row at a time. The gap
  // after each image row holds -99, which a shifted copy reads and must zero. col2im adds each tap
  // whole where in_w == out_w at stride 1 (col2im_shifted_tap), whatever the image's strides.
  struct Case {
    const char* name;
    int64_t c, h, w, row;  // row: the image's row stride (>= w)
    Window2d win;
  };
  const std::vector<Case> cases = {
      {"3x3, padding 1 (shifted)", 3, 5, 6, 6, Window2d{3, 3, 1, 1, 1, 1, 1, 1}},
      {"3x3, dilation 2, padding 2 (shifted)", 2, 6, 5, 5, Window2d{3, 3, 1, 1, 2, 2, 2, 2}},
      {"5x3, padding 2x1 (shifted)", 2, 4, 7, 7, Window2d{5, 3, 1, 1, 2, 1, 1, 1}},
      {"1x3, padding 0x2, rows 2 apart more than their width (shifted, reads the gap)", 2, 3, 4, 6,
       Window2d{1, 3, 1, 1, 0, 2, 1, 1}},
      {"3x3, padding 3 (rows wholly outside, shifted)", 1, 2, 3, 7, Window2d{3, 3, 1, 1, 3, 3, 1, 1}},
      {"5x5, padding 2, width 3 (shifted)", 1, 4, 3, 3, Window2d{5, 5, 1, 1, 2, 2, 1, 1}},
      {"3x3, padding 1, width 1 (shifted, no column inside for two taps)", 2, 3, 1, 1,
       Window2d{3, 3, 1, 1, 1, 1, 1, 1}},
      {"3x1, padding 3x0 (rows wholly outside, shifted)", 1, 2, 4, 4, Window2d{3, 1, 1, 1, 3, 0, 1, 1}},
      {"3x3, padding 1, rows with a gap (im2col a row at a time, col2im shifted)", 2, 4, 5, 8,
       Window2d{3, 3, 1, 1, 1, 1, 1, 1}},
      {"3x3, stride 2x1, padding 1x2 (a row at a time)", 2, 5, 7, 7, Window2d{3, 3, 2, 1, 1, 2, 1, 1}},
      {"2x2, stride 2 (a row at a time)", 2, 4, 6, 6, Window2d{2, 2, 2, 2, 0, 0, 1, 1}},
  };
  const int64_t n = 2;
  for (const Case& cs : cases) {
    INFO(cs.name);
    Conv2dGeometry g;
    g.batch = n;
    g.channels = cs.c;
    g.in_h = cs.h;
    g.in_w = cs.w;
    g.window = cs.win;
    const Window2d& w = cs.win;
    g.out_h = (cs.h + 2 * w.pad_h - w.dilation_h * (w.kernel_h - 1) - 1) / w.stride_h + 1;
    g.out_w = (cs.w + 2 * w.pad_w - w.dilation_w * (w.kernel_w - 1) - 1) / w.stride_w + 1;
    const int64_t taps = w.kernel_h * w.kernel_w, pixels = g.out_h * g.out_w, ld = n * pixels + 3;
    const ImageStrides s{cs.c * cs.h * cs.row + 2, cs.h * cs.row, cs.row, 1};
    std::vector<double> img(static_cast<size_t>(n * s.n), -99.0);
    auto at = [&](int64_t b, int64_t ch, int64_t y, int64_t x) {
      return static_cast<size_t>(b * s.n + ch * s.c + y * s.h + x);
    };
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < cs.c; ++ch)
        for (int64_t y = 0; y < cs.h; ++y)
          for (int64_t x = 0; x < cs.w; ++x) {
            img[at(b, ch, y, x)] = static_cast<double>((b * 7 + ch * 5 + y * 3 + x) % 11);
          }
    const int64_t col_rows = cs.c * taps;
    std::vector<double> col(static_cast<size_t>(col_rows * ld), -1.0);
    cpu::im2col_planes(col.data(), DType::Float64, ld, img.data(), DType::Float64, s, g);
    // The same columns from a bfloat16 image (exact for these values), widened to float32.
    std::vector<BFloat16> img16(img.size());
    for (size_t e = 0; e < img.size(); ++e) img16[e] = BFloat16(static_cast<float>(img[e]));
    std::vector<float> col32(col.size(), -1.0f);
    cpu::im2col_planes(col32.data(), DType::Float32, ld, img16.data(), DType::BFloat16, s, g);
    std::vector<double> grad_col(col.size());
    for (size_t e = 0; e < grad_col.size(); ++e) grad_col[e] = static_cast<double>((e * 13) % 17) - 8.0;
    std::vector<double> scatter(img.size(), 0.0);
    int64_t bad = 0, bad32 = 0;
    for (int64_t ch = 0; ch < cs.c; ++ch)
      for (int64_t i = 0; i < w.kernel_h; ++i)
        for (int64_t j = 0; j < w.kernel_w; ++j) {
          const int64_t r = (ch * w.kernel_h + i) * w.kernel_w + j;
          for (int64_t b = 0; b < n; ++b)
            for (int64_t oh = 0; oh < g.out_h; ++oh)
              for (int64_t ow = 0; ow < g.out_w; ++ow) {
                const int64_t ih = oh * w.stride_h - w.pad_h + i * w.dilation_h;
                const int64_t iw = ow * w.stride_w - w.pad_w + j * w.dilation_w;
                const size_t e = static_cast<size_t>(r * ld + b * pixels + oh * g.out_w + ow);
                const bool inside = ih >= 0 && ih < cs.h && iw >= 0 && iw < cs.w;
                const double want = inside ? img[at(b, ch, ih, iw)] : 0.0;
                bad += col[e] == want ? 0 : 1;
                bad32 += static_cast<double>(col32[e]) == want ? 0 : 1;
                if (inside) scatter[at(b, ch, ih, iw)] += grad_col[e];
              }
          for (int64_t e = n * pixels; e < ld; ++e) {  // the padding past the batch's columns: untouched
            bad += col[static_cast<size_t>(r * ld + e)] == -1.0 ? 0 : 1;
            bad32 += col32[static_cast<size_t>(r * ld + e)] == -1.0f ? 0 : 1;
          }
        }
    CHECK(bad == 0);
    CHECK(bad32 == 0);
    // col2im: every image element overwritten with its scatter sum; the gaps untouched.
    std::vector<double> grad(img.size(), -7.0), want(img.size(), -7.0);
    cpu::col2im_planes(grad.data(), DType::Float64, s, grad_col.data(), DType::Float64, ld, g);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < cs.c; ++ch)
        for (int64_t y = 0; y < cs.h; ++y)
          for (int64_t x = 0; x < cs.w; ++x) want[at(b, ch, y, x)] = scatter[at(b, ch, y, x)];
    CHECK(grad == want);
  }
}

// --- conv_transpose2d, conv_transpose1d ----------------------------------------------------------

TEST_CASE("conv_transpose2d: a hand-computed 2x2 * 2x2 transposed convolution and its gradients", "[conv]") {
  Tensor x = tensor({1.0f, 2.0f, 3.0f, 4.0f}, {1, 1, 2, 2}).set_requires_grad(true);
  Tensor w = tensor({1.0f, 2.0f, 3.0f, 4.0f}, {1, 1, 2, 2}).set_requires_grad(true);
  Tensor b = tensor({0.5f}, {1}).set_requires_grad(true);

  Tensor y = conv_transpose2d(x, w, b);
  REQUIRE(y.sizes() == Shape{1, 1, 3, 3});
  // y[i + a, j + b] += x[i, j] * w[a, b], then + 0.5: each input pixel stamps the filter, scaled.
  CHECK(y.to_vector<float>() == std::vector<float>{1.5f, 4.5f, 4.5f, 6.5f, 20.5f, 16.5f, 9.5f, 24.5f, 16.5f});

  y.backward(tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f}, {1, 1, 3, 3}));
  // The input gradient is conv2d of the output gradient with the same filter (conv2d's own hand
  // test has these numbers), and the filter gradient correlates the input with the output gradient.
  CHECK(x.grad().to_vector<float>() == std::vector<float>{37, 47, 67, 77});
  CHECK(w.grad().to_vector<float>() == std::vector<float>{37, 47, 67, 77});
  CHECK(b.grad().to_vector<float>() == std::vector<float>{45});

  // Stride 2, 2x2 kernel: the stamps tile the output without overlap (4x4); padding 1 crops one
  // row and column on each side (2x2), output_padding 1 gives back a row and a column at the
  // bottom and right (3x3).
  const Tensor xd = x.detach(), wd = w.detach();
  CHECK(conv_transpose2d(xd, wd, Tensor(), {2, 2}).to_vector<float>() ==
        std::vector<float>{1, 2, 2, 4, 3, 4, 6, 8, 3, 6, 4, 8, 9, 12, 12, 16});
  CHECK(conv_transpose2d(xd, wd, Tensor(), {2, 2}, {1, 1}).to_vector<float>() == std::vector<float>{4, 6, 6, 4});
  CHECK(conv_transpose2d(xd, wd, Tensor(), {2, 2}, {1, 1}, {1, 1}).to_vector<float>() ==
        std::vector<float>{4, 6, 8, 6, 4, 8, 12, 12, 16});
}

TEST_CASE("conv_transpose2d is the adjoint of conv2d: <conv2d(y, w), x> = <y, conv_transpose2d(x, w)>", "[conv]") {
  manual_seed(5);
  struct Case {
    Shape x, w;  // x [N, C_in, H, W], w [C_in, C_out / groups, kH, kW]
    Pair stride, padding, output_padding, dilation;
    int64_t groups;
    bool channels_last;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4, 5}, {3, 2, 3, 3}, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 1, false},
      {{2, 4, 3, 4}, {4, 3, 4, 4}, {2, 2}, {1, 1}, {1, 0}, {1, 1}, 2, false},
      {{1, 2, 3, 3}, {2, 2, 2, 3}, {3, 2}, {0, 1}, {2, 1}, {2, 1}, 1, true},
      {{2, 3, 4, 3}, {3, 1, 3, 2}, {2, 1}, {1, 0}, {1, 0}, {1, 2}, 3, true},
  };
  for (const Case& c : cases) {
    const TensorOptions f64(DType::Float64);
    Tensor x = randn(c.x, f64), w = randn(c.w, f64);
    if (c.channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
    const Tensor t = conv_transpose2d(x, w, Tensor(), c.stride, c.padding, c.output_padding, c.groups, c.dilation);
    CHECK(is_channels_last_layout(t) == c.channels_last);
    const Tensor y = randn(t.sizes(), f64);
    // conv2d of the transposed output's size gives back the input's size, whatever output_padding
    // (below the stride) added.
    const Tensor cy = conv2d(y, w, Tensor(), c.stride, c.padding, c.dilation, c.groups);
    REQUIRE(cy.sizes() == c.x);
    const double lhs = dot_value(cy, x), rhs = dot_value(y, t);
    CHECK(std::fabs(lhs - rhs) <= 1e-12 * (1.0 + std::fabs(lhs)));
  }
}

TEST_CASE("conv_transpose2d: every output_padding below the stride is a size conv2d maps back", "[conv]") {
  // A stride-3 conv2d maps inputs of 10, 11 and 12 to 4 (kernel 3, padding 1); the transposed
  // convolution of a 4 gives 10, 11 or 12 by output_padding 0, 1, 2, and refuses 3.
  const Tensor x = ones({1, 1, 4, 4}), w = ones({1, 1, 3, 3});
  for (int64_t op = 0; op < 3; ++op) {
    const Tensor y = conv_transpose2d(x, w, Tensor(), {3, 3}, {1, 1}, {op, 0});
    CHECK(y.sizes() == Shape{1, 1, 10 + op, 10});
    CHECK(conv2d(y, w, Tensor(), {3, 3}, {1, 1}).sizes() == x.sizes());
  }
  CHECK_THROWS_WITH(conv_transpose2d(x, w, Tensor(), {3, 3}, {1, 1}, {3, 0}),
                    Catch::Contains("output_padding 3x0") && Catch::Contains("stride 3x3"));
}

TEST_CASE(
    "conv_transpose2d: channels-last gives NCHW's values, its layout, and gradients laid out like their "
    "tensors",
    "[conv]") {
  manual_seed(9);
  const Tensor x = randn({2, 4, 5, 4}), w = randn({4, 3, 3, 3}), b = randn({6});
  Tensor xn = x.detach().set_requires_grad(true), wn = w.detach().set_requires_grad(true);
  Tensor xcl = x.contiguous(MemoryFormat::ChannelsLast).detach().set_requires_grad(true);
  Tensor wcl = w.detach().set_requires_grad(true);
  const Tensor yn = conv_transpose2d(xn, wn, b, {2, 2}, {1, 1}, {1, 0}, 2);
  const Tensor ycl = conv_transpose2d(xcl, wcl, b, {2, 2}, {1, 1}, {1, 0}, 2);
  CHECK(yn.is_contiguous());
  CHECK(is_channels_last_layout(ycl));
  CHECK(max_diff(yn, ycl) <= 1e-5);
  const Tensor gy = randn(yn.sizes());
  yn.backward(gy);
  ycl.backward(gy);
  CHECK(is_channels_last_layout(xcl.grad()));
  CHECK(xn.grad().is_contiguous());
  CHECK(wcl.grad().is_contiguous());  // an NCHW weight's gradient comes back NCHW
  CHECK(max_diff(xn.grad(), xcl.grad()) <= 1e-5);
  CHECK(max_diff(wn.grad(), wcl.grad()) <= 1e-4);

  // A channels-last weight makes the convolution channels-last too, and keeps its gradient so.
  Tensor w2 = w.contiguous(MemoryFormat::ChannelsLast).detach().set_requires_grad(true);
  const Tensor y2 = conv_transpose2d(x, w2, b, {2, 2}, {1, 1}, {1, 0}, 2);
  CHECK(is_channels_last_layout(y2));
  y2.backward(gy);
  CHECK(is_channels_last_layout(w2.grad()));
  CHECK(max_diff(wn.grad(), w2.grad()) <= 1e-4);
}

TEST_CASE("conv_transpose2d: empty batches, images and channels give the bias and zero gradients", "[conv]") {
  const Tensor b = tensor({0.25f, -1.0f}, {2});
  SECTION("an empty batch") {
    Tensor x = zeros({0, 3, 4, 4}).set_requires_grad(true);
    Tensor w = ones({3, 2, 3, 3}).set_requires_grad(true);
    const Tensor y = conv_transpose2d(x, w, b, {2, 2}, {1, 1}, {1, 1});
    CHECK(y.sizes() == Shape{0, 2, 8, 8});
    y.sum().backward();
    CHECK(x.grad().sizes() == x.sizes());
    CHECK(max_abs(w.grad()) == 0.0);
  }
  SECTION("an input of height 0: the kernel alone reaches 2 rows, which hold the bias") {
    Tensor x = zeros({1, 3, 0, 3}).set_requires_grad(true);
    Tensor w = ones({3, 2, 3, 3}).set_requires_grad(true);
    Tensor bb = b.detach().set_requires_grad(true);
    const Tensor y = conv_transpose2d(x, w, bb);
    REQUIRE(y.sizes() == Shape{1, 2, 2, 5});  // (0 - 1) + (3 - 1) + 1 rows, (3 - 1) + (3 - 1) + 1 columns
    CHECK(max_diff(y.select(1, 0), full_like(y.select(1, 0), 0.25)) == 0.0);
    CHECK(max_diff(y.select(1, 1), full_like(y.select(1, 1), -1.0)) == 0.0);
    y.sum().backward();
    CHECK(max_abs(w.grad()) == 0.0);
    CHECK(bb.grad().to_vector<float>() == std::vector<float>{10, 10});
  }
  SECTION("no input channels") {
    Tensor w = ones({0, 2, 3, 3}).set_requires_grad(true);
    const Tensor y = conv_transpose2d(ones({2, 0, 3, 3}), w, b);
    REQUIRE(y.sizes() == Shape{2, 2, 5, 5});
    CHECK(max_diff(y.select(1, 0), full_like(y.select(1, 0), 0.25)) == 0.0);
    CHECK(max_diff(y.select(1, 1), full_like(y.select(1, 1), -1.0)) == 0.0);
    y.sum().backward();
    CHECK(w.grad().sizes() == w.sizes());
  }
}

TEST_CASE("conv_transpose1d is conv_transpose2d at height 1, batched and not", "[conv]") {
  manual_seed(13);
  const Tensor x = randn({2, 4, 6}), w = randn({4, 3, 3}), b = randn({6});
  const Tensor y = conv_transpose1d(x, w, b, 2, 1, 1, 2, 2);
  const Tensor y2 = conv_transpose2d(x.unsqueeze(2), w.unsqueeze(2), b, {1, 2}, {0, 1}, {0, 1}, 2, {1, 2});
  REQUIRE(y.sizes() == Shape{2, 6, 14});  // (6 - 1) 2 - 2 + 2 (3 - 1) + 1 + 1
  CHECK(max_diff(y, y2.squeeze(2)) == 0.0);
  CHECK(max_diff(conv_transpose1d(x.select(0, 1), w, b, 2, 1, 1, 2, 2), y.select(0, 1)) == 0.0);
  CHECK_THROWS_WITH(conv_transpose1d(x, w, b, 2, 1, 1, 0),
                    Catch::Contains("conv_transpose1d") && Catch::Contains("groups 0"));
}
