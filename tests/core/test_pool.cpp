// Hand tests for pooling: what the op table cannot say (where the max-pool gradient lands, ties and
// NaNs on every CPU path, gradients written through any strides, the channels-last loops against
// the per-plane ones bit for bit).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "kernels/cpu/parallel.h"
#include "kernels/pool.h"
#include "tests/threads.h"

using namespace kiln;

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

TEST_CASE("pooling an empty batch gives an empty batch and an empty gradient, an empty channel dim an Error",
          "[conv]") {
  for (const bool channels_last : {false, true}) {
    INFO("channels_last " << channels_last);
    Tensor x = zeros({0, 3, 6, 5});
    if (channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
    x.set_requires_grad(true);
    const std::vector<Tensor> outs = {max_pool2d(x, {2, 2}), avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}),
                                      adaptive_avg_pool2d(x, {2, 2})};
    CHECK(outs[0].sizes() == std::vector<int64_t>{0, 3, 3, 2});
    CHECK(outs[1].sizes() == std::vector<int64_t>{0, 3, 3, 3});
    CHECK(outs[2].sizes() == std::vector<int64_t>{0, 3, 2, 2});
    (outs[0].sum() + outs[1].sum() + outs[2].sum()).backward();
    CHECK(x.grad().sizes() == x.sizes());
  }
  // PyTorch's pooling ops refuse an input empty anywhere but the batch (kiln returned an empty
  // result for no channels).
  CHECK_THROWS_WITH(max_pool2d(zeros({2, 0, 6, 5}), {2, 2}), Catch::Contains("only the batch dim may be empty"));
  CHECK_THROWS_WITH(avg_pool2d(zeros({0, 6, 5}), {2, 2}), Catch::Contains("[0, 6, 5]"));
  CHECK_THROWS_WITH(adaptive_avg_pool2d(zeros({2, 3, 6, 0}), {1, 1}), Catch::Contains("[2, 3, 6, 0]"));
}

// A window with several NaNs gives its last one the gradient, as PyTorch does (every NaN takes
// over); kiln kept the first NaN, so the gradient of the same model went to another input.
TEST_CASE("max_pool2d: ties keep the first tap and the last NaN takes its window, on every CPU path", "[conv]") {
  // Values from {0, 1, 2} (ties in most windows) with NaNs here and there, two in some windows.
  // Fixed-window paths: 2x2/2, 3x3/2 and 3x3/1 without padding; the general path: padding,
  // dilation, a channels-last input. float16 and bfloat16 dense planes with a fixed window pick from
  // planes widened to float32; a gapped input (rows further apart than their width) takes the 16-bit
  // kernel itself, and a transposed gradient the backward's strided loads instead of its widened rows.
  struct Case {
    int64_t k, s, pad, dil;
    bool channels_last, gapped = false, transposed_grad = false;
  };
  const std::vector<Case> cases = {{2, 2, 0, 1, false}, {3, 2, 0, 1, false},       {3, 1, 0, 1, false},
                                   {2, 2, 0, 1, true},  {3, 2, 1, 1, false},       {2, 1, 0, 2, false},
                                   {2, 2, 0, 1, false, true}, {3, 1, 0, 1, false, true, true}};
  // Width 21: rows of 10 to 19 outputs, so the fixed windows' blocks of 8 and their overlapping
  // last block run as well as rows shorter than 8 (height 9 at stride 2: 4 rows).
  const int64_t n = 2, c = 3, h = 9, w = 21;
  std::vector<double> values(static_cast<size_t>(n * c * h * w));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = i % 37 == 5 || i % 11 == 3 ? NAN : static_cast<double>((i * 7 + i / 5) % 3);
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const Case& cs : cases) {
      INFO(dtype_name(t) << " kernel " << cs.k << " stride " << cs.s << " padding " << cs.pad << " dilation " << cs.dil
                         << (cs.channels_last ? " channels-last" : "") << (cs.gapped ? " gapped rows" : "")
                         << (cs.transposed_grad ? " transposed gradient" : ""));
      Tensor x0 = tensor(values, {n, c, h, w}).to(t);
      if (cs.channels_last) x0 = x0.contiguous(MemoryFormat::ChannelsLast);
      if (cs.gapped) x0 = cat({x0, zeros({n, c, h, 5}).to(t)}, 3).narrow(3, 0, w);
      Tensor x = x0.detach().set_requires_grad(true);
      Tensor y = max_pool2d(x, {cs.k, cs.k}, {cs.s, cs.s}, {cs.pad, cs.pad}, {cs.dil, cs.dil});
      const int64_t oh = y.size(2), ow = y.size(3);
      // Output o's gradient is o + 1, so the input gradient says which tap each window picked.
      std::vector<double> gy(static_cast<size_t>(n * c * oh * ow));
      for (size_t i = 0; i < gy.size(); ++i) gy[i] = static_cast<double>(i + 1);
      Tensor grad = tensor(gy, y.sizes()).to(t);
      gy = grad.to_vector_double();  // as t holds them (bfloat16 rounds past 256)
      if (cs.transposed_grad) grad = grad.transpose(2, 3).contiguous().transpose(2, 3);
      y.backward(grad);
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
                if (std::isnan(v) || v > bv) best = at;  // first of ties; last NaN
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
      // Each input's gradient is summed in float (double) and rounded to t once.
      CHECK(x.grad().contiguous().to_vector_double() == tensor(want_g, x.sizes()).to(t).to_vector_double());
    }
  }
}

TEST_CASE("max_pool2d in float16 and bfloat16 on long rows: the float32 results, rounded", "[conv]") {
  // Rows of 1100 inputs (550 outputs: the backward widens a gradient row in chunks of 256) of
  // values exact in both types; 2x2 windows at stride 2 do not overlap, so each input's gradient is
  // one output's, exact too.
  std::vector<float> values(2 * 3 * 4 * 1100);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 37) % 251) - 125.0f;
  const Tensor x32 = tensor(values, {2, 3, 4, 1100}).set_requires_grad(true);
  const Tensor y32 = max_pool2d(x32, {2, 2});
  std::vector<float> grads(static_cast<size_t>(y32.numel()));
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 97) - 48.0f;
  const Tensor gy = tensor(grads, y32.sizes());
  y32.backward(gy);
  for (DType t : {DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(t));
    const Tensor x = x32.detach().to(t).set_requires_grad(true);
    const Tensor y = max_pool2d(x, {2, 2});
    y.backward(gy.to(t));
    CHECK(y.to_vector_double() == y32.detach().to(t).to_vector_double());
    CHECK(x.grad().to_vector_double() == x32.grad().to(t).to_vector_double());
  }
}

TEST_CASE("pooling backward kernels write any grad_in strides: dense planes in place, others through a buffer",
          "[conv]") {
  // The same gradients into a dense NCHW grad_in (float and double sum in place; float16 and bfloat16
  // round a dense plane in bulk) and into one whose rows have a gap of 3 after them (summed in a
  // buffer, then stored a row at a time): equal values, gaps untouched. The values are small
  // integers, exact in every type.
  const int64_t n = 2, c = 3, h = 6, w = 5;
  // 3x3, stride 1, padding 1: overlapping windows.
  const Conv2dGeometry g{n, c, h, w, h, w, Window2d{3, 3, 1, 1, 1, 1, 1, 1}};
  const ImageStrides out_s{c * h * w, h * w, w, 1}, dense{c * h * w, h * w, w, 1};
  const int64_t row = w + 3;
  const ImageStrides gapped{c * h * row, h * row, row, 1};
  const auto check = [&]<typename T>(DType t) {
    INFO(dtype_name(t));
    const auto value = [](T v) { return static_cast<double>(static_cast<float>(v)); };
    std::vector<T> x(static_cast<size_t>(n * c * h * w)), gy(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = T(static_cast<float>((i * 7) % 13));
      gy[i] = T(static_cast<float>(i % 5) - 2.0f);
    }
    std::vector<T> y(x.size());
    std::vector<int64_t> idx(x.size());
    max_pool2d_forward_cpu(y.data(), idx.data(), out_s, x.data(), dense, t, g, KernelContext{});
    for (int pass = 0; pass < 2; ++pass) {
      INFO((pass == 0 ? "max_pool2d_backward_cpu" : "avg_pool2d_backward_cpu"));
      std::vector<T> a(x.size(), T(-5.0f)), b(static_cast<size_t>(n * c * h * row), T(-5.0f));
      for (auto [out, s] : {std::pair{a.data(), dense}, std::pair{b.data(), gapped}}) {
        if (pass == 0) {
          max_pool2d_backward_cpu(out, s, gy.data(), out_s, idx.data(), out_s, t, g, KernelContext{});
        } else {
          avg_pool2d_backward_cpu(out, s, gy.data(), out_s, t, g, true, KernelContext{});
        }
      }
      int64_t bad = 0, nonzero = 0;
      for (int64_t p = 0; p < n * c; ++p)
        for (int64_t i = 0; i < h; ++i) {
          for (int64_t j = 0; j < w; ++j) {
            const double va = value(a[static_cast<size_t>(p * h * w + i * w + j)]);
            bad += va == value(b[static_cast<size_t>(p * h * row + i * row + j)]) ? 0 : 1;
            nonzero += va != 0.0 ? 1 : 0;
          }
          for (int64_t j = w; j < row; ++j) {
            bad += value(b[static_cast<size_t>(p * h * row + i * row + j)]) == -5.0 ? 0 : 1;
          }
        }
      CHECK(bad == 0);
      CHECK(nonzero > 0);
    }
  };
  check.template operator()<double>(DType::Float64);
  check.template operator()<Half>(DType::Float16);
  check.template operator()<BFloat16>(DType::BFloat16);
}

namespace {

// A batch of images of element type T in one of three layouts over the same logical [N, C, H, W]:
// dense NCHW planes, dense channels-last, or channels-last with a gap of 3 elements after every
// pixel's channels (which the channels-last backward passes sum through a buffer). -5 fills the gaps.
enum class Layout { Planes, ChannelsLast, GappedChannelsLast };

template <typename T> struct Images {
  int64_t n, c, h, w;
  Layout layout;
  ImageStrides s;
  std::vector<T> data;

  Images(int64_t n_, int64_t c_, int64_t h_, int64_t w_, Layout l) : n(n_), c(c_), h(h_), w(w_), layout(l) {
    const int64_t pixel = l == Layout::GappedChannelsLast ? c + 3 : c;
    s = l == Layout::Planes ? ImageStrides{c * h * w, h * w, w, 1} : ImageStrides{h * w * pixel, 1, w * pixel, pixel};
    data.assign(static_cast<size_t>(l == Layout::Planes ? n * c * h * w : n * h * w * pixel), T(-5.0f));
  }
  T& at(int64_t b, int64_t ch, int64_t y, int64_t x) {
    return data[static_cast<size_t>(b * s.n + ch * s.c + y * s.h + x * s.w)];
  }
  // Calls f(b, ch, y, x) for every element, in NCHW order.
  template <typename F> void for_each(F&& f) const {
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) f(b, ch, y, x);
  }
  // Sets the element of NCHW index k to value(k).
  template <typename F> void fill(F&& value) {
    int64_t k = 0;
    for_each([&](int64_t b, int64_t ch, int64_t y, int64_t x) { at(b, ch, y, x) = value(k++); });
  }
  // The gap elements, which no kernel may write.
  int64_t gaps_touched() const {
    if (layout != Layout::GappedChannelsLast) return 0;
    int64_t bad = 0;
    for (size_t i = 0; i < data.size(); ++i) {
      if (static_cast<int64_t>(i) % s.w >= c) bad += static_cast<float>(data[i]) == -5.0f ? 0 : 1;
    }
    return bad;
  }
};

// Elements whose bits differ between two same-shaped batches, read through their own layouts.
template <typename T> int64_t bit_differences(Images<T>& a, Images<T>& b) {
  int64_t bad = 0;
  a.for_each([&](int64_t i, int64_t ch, int64_t y, int64_t x) {
    bad += std::memcmp(&a.at(i, ch, y, x), &b.at(i, ch, y, x), sizeof(T)) != 0;
  });
  return bad;
}

struct PoolCase {
  const char* name;
  int64_t in_h, in_w, out_h, out_w;
  Window2d window;  // kernel, stride, padding, dilation (h, w each)
};

template <typename T>
void check_channels_last_pooling(const PoolCase& pc, int64_t batch, int64_t channels, bool adaptive) {
  const Conv2dGeometry g{batch, channels, pc.in_h, pc.in_w, pc.out_h, pc.out_w, pc.window};
  const KernelContext ctx{};
  // Max pooling's inputs from {0, 1, 2} (ties in most windows) with a NaN now and then; mean
  // pooling's of many values, whose sums round differently in another order. Output gradients of
  // many values.
  auto input = [&](Layout l, bool ties) {
    Images<T> x(batch, channels, pc.in_h, pc.in_w, l);
    x.fill([&](int64_t k) {
      return T(!ties ? std::sin(static_cast<float>(k)) * 3.3f
                     : (k % 41 == 7 ? NAN : static_cast<float>((k * 7 + k / 5) % 3)));
    });
    return x;
  };
  auto grad_out = [&](Layout l) {
    Images<T> gy(batch, channels, pc.out_h, pc.out_w, l);
    gy.fill([](int64_t k) { return T(static_cast<float>(k % 23) * 0.37f - 3.1f); });
    return gy;
  };
  std::vector<std::string> ops = {"max_pool2d", "avg_pool2d", "avg_pool2d exclude pad"};
  if (adaptive) ops = {"adaptive_avg_pool2d"};
  for (const std::string& name : ops) {
    INFO(name);
    std::vector<Images<T>> ys, gxs;
    std::vector<Images<int64_t>> indices;
    for (Layout l : {Layout::Planes, Layout::ChannelsLast, Layout::GappedChannelsLast}) {
      Images<T> x = input(l, name == "max_pool2d"), gy = grad_out(l);
      Images<T> y(batch, channels, pc.out_h, pc.out_w, l), gx(batch, channels, pc.in_h, pc.in_w, l);
      if (name == "max_pool2d") {
        Images<int64_t> idx(batch, channels, pc.out_h, pc.out_w, l);
        REQUIRE(y.s.c == idx.s.c);  // indices share the output's strides
        max_pool2d_forward_cpu(y.data.data(), idx.data.data(), y.s, x.data.data(), x.s, dtype_of<T>(), g, ctx);
        max_pool2d_backward_cpu(gx.data.data(), gx.s, gy.data.data(), gy.s, idx.data.data(), idx.s, dtype_of<T>(), g,
                                ctx);
        if (!indices.empty()) CHECK(bit_differences(indices[0], idx) == 0);
        indices.push_back(std::move(idx));
      } else if (name == "adaptive_avg_pool2d") {
        adaptive_avg_pool2d_forward_cpu(y.data.data(), y.s, x.data.data(), x.s, dtype_of<T>(), g, ctx);
        adaptive_avg_pool2d_backward_cpu(gx.data.data(), gx.s, gy.data.data(), gy.s, dtype_of<T>(), g, ctx);
      } else {
        const bool include_pad = name == "avg_pool2d";
        avg_pool2d_forward_cpu(y.data.data(), y.s, x.data.data(), x.s, dtype_of<T>(), g, include_pad, ctx);
        avg_pool2d_backward_cpu(gx.data.data(), gx.s, gy.data.data(), gy.s, dtype_of<T>(), g, include_pad, ctx);
      }
      CHECK(y.gaps_touched() == 0);
      CHECK(gx.gaps_touched() == 0);
      ys.push_back(std::move(y));
      gxs.push_back(std::move(gx));
    }
    for (size_t l = 1; l < ys.size(); ++l) {
      INFO("channels-last layout " << l);
      CHECK(bit_differences(ys[0], ys[l]) == 0);
      CHECK(bit_differences(gxs[0], gxs[l]) == 0);
    }
  }
}

}  // namespace

TEST_CASE("pooling over channels-last images gives the per-plane loops' bits", "[conv]") {
  // The channels-last loops (a pixel's channels at a time) against the per-plane ones (the fixed
  // max-pool windows among them): outputs, max-pool indices and input gradients bit for bit, with
  // ties and NaNs, windows over the edges, dilation, and for adaptive pooling windows that overlap
  // or repeat. 37 channels: a batch of 1 on 2 threads is cut into two slices of channels.
  const std::vector<PoolCase> cases = {
      {"2x2 stride 2", 8, 9, 4, 4, Window2d{2, 2, 2, 2, 0, 0, 1, 1}},
      {"3x3 stride 2", 9, 11, 4, 5, Window2d{3, 3, 2, 2, 0, 0, 1, 1}},
      {"3x3 stride 1", 7, 9, 5, 7, Window2d{3, 3, 1, 1, 0, 0, 1, 1}},
      {"3x3 stride 2 padding 1", 7, 9, 4, 5, Window2d{3, 3, 2, 2, 1, 1, 1, 1}},
      {"3x3 stride 2 padding 1, ceil mode's last window", 8, 8, 5, 5, Window2d{3, 3, 2, 2, 1, 1, 1, 1}},
      {"2x3 stride 1x2 padding 1x1 dilation 2x1", 7, 9, 7, 5, Window2d{2, 3, 1, 2, 1, 1, 2, 1}},
      {"adaptive 5x6 from 7x9", 7, 9, 5, 6, Window2d{1, 1, 1, 1, 0, 0, 1, 1}},
      {"adaptive 9x11 from 7x9", 7, 9, 9, 11, Window2d{1, 1, 1, 1, 0, 0, 1, 1}},
  };
  test::ThreadCountGuard guard;
  for (const PoolCase& pc : cases) {
    const bool adaptive = std::string(pc.name).rfind("adaptive", 0) == 0;
    for (int threads : {1, 2})
      for (int64_t batch : {1, 3})
        for (int64_t channels : {2, 5, 37}) {
          INFO(pc.name << ", " << threads << " threads, batch " << batch << ", " << channels << " channels");
          cpu::set_num_threads(threads);
          check_channels_last_pooling<float>(pc, batch, channels, adaptive);
          check_channels_last_pooling<double>(pc, batch, channels, adaptive);
          check_channels_last_pooling<BFloat16>(pc, batch, channels, adaptive);
        }
  }
}
