// Op table rows of the pool family: max_pool2d (with its indices), max_unpool2d, avg_pool2d,
// adaptive_avg_pool2d, adaptive_max_pool2d (with its indices), fractional_max_pool2d (with its
// indices) and lp_pool2d on 3-d and 4-d inputs, and their 1-d twins on 2-d and 3-d inputs.
// Hyper-parameters travel with each sample as a trailing int64 tensor, so one row covers many
// configurations. References are direct loops in float64 over each plane's windows.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

int64_t floor_div(int64_t a, int64_t b) { return static_cast<int64_t>(std::floor(static_cast<double>(a) / b)); }

int64_t ref_pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t out = ceil_mode ? -floor_div(-span, s) + 1 : floor_div(span, s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// Runs fn(plane values, h, w) -> values of one output plane, over all planes of a 3-d or 4-d x.
Tensor ref_per_plane(const Tensor& x, int64_t oh, int64_t ow,
                     const std::function<std::vector<double>(const double*, int64_t, int64_t)>& fn) {
  const int64_t h = x.size(-2), w = x.size(-1);
  const int64_t planes = x.numel() / (h * w);
  std::vector<double> xv = values(x), out;
  for (int64_t p = 0; p < planes; ++p) {
    std::vector<double> o = fn(xv.data() + p * h * w, h, w);
    out.insert(out.end(), o.begin(), o.end());
  }
  Shape s = x.sizes();
  s[s.size() - 2] = oh;
  s[s.size() - 1] = ow;
  return from_values(out, s);
}

// Max-pool params: kernel h, w, stride h, w (0: the kernel's), padding h, w, dilation h, w,
// ceil_mode. The values and the indices (y * w + z in the input plane) of the window maxima.
TensorList ref_max_pool_with_indices(const Tensor& x, std::vector<int64_t> q) {
  if (q[2] == 0) q[2] = q[0];
  if (q[3] == 0) q[3] = q[1];
  const int64_t oh = ref_pool_out(x.size(-2), q[0], q[2], q[4], q[6], q[8] != 0);
  const int64_t ow = ref_pool_out(x.size(-1), q[1], q[3], q[5], q[7], q[8] != 0);
  auto pool = [&](bool index) {
    return ref_per_plane(x, oh, ow, [&](const double* v, int64_t h, int64_t w) {
      std::vector<double> o;
      for (int64_t a = 0; a < oh; ++a)
        for (int64_t b = 0; b < ow; ++b) {
          double best = -std::numeric_limits<double>::infinity(), at = -1;
          for (int64_t i = 0; i < q[0]; ++i)
            for (int64_t j = 0; j < q[1]; ++j) {
              const int64_t y = a * q[2] - q[4] + i * q[6], z = b * q[3] - q[5] + j * q[7];
              if (y >= 0 && y < h && z >= 0 && z < w && v[y * w + z] > best) {
                best = v[y * w + z];
                at = static_cast<double>(y * w + z);
              }
            }
          o.push_back(index ? at : best);
        }
      return o;
    });
  };
  return {pool(false), pool(true).to(DType::Int64)};
}

// max_unpool over the last `out_plane.size()` dims: zeros with x's values at their indices.
Tensor ref_max_unpool(const Tensor& x, const Tensor& indices, const Shape& out_plane) {
  int64_t plane = 1, in_plane = 1;
  for (int64_t d : out_plane) plane *= d;
  for (size_t i = x.sizes().size() - out_plane.size(); i < x.sizes().size(); ++i) in_plane *= x.sizes()[i];
  const Values xv = values(x), iv = values(indices);
  const int64_t planes = x.numel() / std::max<int64_t>(in_plane, 1);
  Values out(at(planes * plane), 0.0);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t k = 0; k < in_plane; ++k) {
      out[at(p * plane + static_cast<int64_t>(iv[at(p * in_plane + k)]))] = xv[at(p * in_plane + k)];
    }
  }
  Shape s(x.sizes().begin(), x.sizes().end() - static_cast<std::ptrdiff_t>(out_plane.size()));
  s.insert(s.end(), out_plane.begin(), out_plane.end());
  return from_values(out, s);
}

// Avg-pool params: kernel h, w, stride h, w, padding h, w, ceil_mode, count_include_pad, and
// optionally divisor_override (0: none), which divides the sum of the cells inside instead.
Tensor ref_avg_pool(const Tensor& x, const std::vector<int64_t>& q) {
  const int64_t oh = ref_pool_out(x.size(-2), q[0], q[2], q[4], 1, q[6] != 0);
  const int64_t ow = ref_pool_out(x.size(-1), q[1], q[3], q[5], 1, q[6] != 0);
  return ref_per_plane(x, oh, ow, [&](const double* v, int64_t h, int64_t w) {
    std::vector<double> o;
    for (int64_t a = 0; a < oh; ++a)
      for (int64_t b = 0; b < ow; ++b) {
        double sum = 0;
        int64_t real = 0, padded = 0;
        for (int64_t i = 0; i < q[0]; ++i)
          for (int64_t j = 0; j < q[1]; ++j) {
            const int64_t y = a * q[2] - q[4] + i, z = b * q[3] - q[5] + j;
            // Window cells past the right/bottom padding (ceil_mode) count for nothing.
            if (y >= h + q[4] || z >= w + q[5]) continue;
            ++padded;
            if (y >= 0 && y < h && z >= 0 && z < w) {
              sum += v[y * w + z];
              ++real;
            }
          }
        const int64_t divisor = q.size() > 8 && q[8] != 0 ? q[8] : q[7] ? padded : real;
        o.push_back(sum / static_cast<double>(divisor));
      }
    return o;
  });
}

// PyTorch's adaptive windows: cell a of oh over h rows covers
// [floor(a h / oh), ceil((a + 1) h / oh)). Their average, or with `maximum` their maximum.
Tensor ref_adaptive(const Tensor& x, int64_t oh, int64_t ow) {
  return ref_per_plane(x, oh, ow, [&](const double* v, int64_t h, int64_t w) {
    std::vector<double> o;
    for (int64_t a = 0; a < oh; ++a)
      for (int64_t b = 0; b < ow; ++b) {
        const int64_t y0 = static_cast<int64_t>(std::floor(static_cast<double>(a * h) / oh));
        const int64_t y1 = static_cast<int64_t>(std::ceil(static_cast<double>((a + 1) * h) / oh));
        const int64_t z0 = static_cast<int64_t>(std::floor(static_cast<double>(b * w) / ow));
        const int64_t z1 = static_cast<int64_t>(std::ceil(static_cast<double>((b + 1) * w) / ow));
        double sum = 0;
        for (int64_t y = y0; y < y1; ++y)
          for (int64_t z = z0; z < z1; ++z) sum += v[y * w + z];
        o.push_back(sum / static_cast<double>((y1 - y0) * (z1 - z0)));
      }
    return o;
  });
}

// Fractional max-pool params: kernel h, w, output h, w, and 1 for a float64 sample (the starts'
// arithmetic). in[2] holds the samples, [N (or 1), C, 2] in PyTorch's (w, h) order.
TensorList ref_fractional2d(const TensorList& in) {
  const auto q = param_values(in[1]);
  const Values u = values(in[2]);
  const int64_t h = in[0].size(-2), w = in[0].size(-1);
  return ref_window_max(in[0], {q[2], q[3]}, [&](int64_t plane, size_t d, int64_t o) {
    const int64_t n = d == 0 ? h : w, k = q[d], out = q[2 + d];
    const int64_t start = ref_fractional_starts(u[at(plane * 2 + (d == 0 ? 1 : 0))], n, out, k, q[4] != 0)[at(o)];
    return std::pair<int64_t, int64_t>{start, start + k};
  });
}

Sample fractional_sample(const std::string& name, Shape shape, std::vector<int64_t> q, bool cl, uint64_t seed) {
  return {name, [=](DType t, Device d) {
            Tensor x = rnd_distinct(shape, t, d, seed);
            if (cl) x = channels_last(x);
            std::vector<int64_t> p = q;
            p.push_back(t == DType::Float64 ? 1 : 0);
            const int64_t batch = shape.size() == 4 ? shape[0] : 1;
            const Tensor u = rnd_range({batch, shape[shape.size() - 3], 2}, t, d, seed + 1, 0.0, 1.0);
            return TensorList{x, params(p, d), u};
          }};
}

// LP-pool params: kernel h, w, stride h, w, ceil_mode; (sum over each window of v^p)^(1/p).
Tensor ref_lp_pool(const Tensor& x, double p, const std::vector<int64_t>& q) {
  const int64_t oh = ref_pool_out(x.size(-2), q[0], q[2], 0, 1, q[4] != 0);
  const int64_t ow = ref_pool_out(x.size(-1), q[1], q[3], 0, 1, q[4] != 0);
  return ref_per_plane(x, oh, ow, [&](const double* v, int64_t h, int64_t w) {
    std::vector<double> o;
    for (int64_t a = 0; a < oh; ++a)
      for (int64_t b = 0; b < ow; ++b) {
        double sum = 0;
        for (int64_t i = 0; i < q[0]; ++i)
          for (int64_t j = 0; j < q[1]; ++j) {
            const int64_t y = a * q[2] + i, z = b * q[3] + j;
            if (y < h && z < w) sum += std::pow(v[y * w + z], p);
          }
        o.push_back(std::pow(sum, 1.0 / p));
      }
    return o;
  });
}

// A pooling sample: x of `shape` (distinct values for max pooling so the argmax is unique and
// gradcheck's perturbations never swap winners), optionally channels-last, then the params.
Sample pool_sample(const std::string& name, Shape shape, std::vector<int64_t> q, bool distinct, bool cl,
                   uint64_t seed) {
  return {name, [=](DType t, Device d) {
            Tensor x = distinct ? rnd_distinct(shape, t, d, seed) : rnd(shape, t, d, seed);
            if (cl) x = channels_last(x);
            return TensorList{x, params(q, d)};
          }};
}

Pair pr(const std::vector<int64_t>& q, size_t i) { return {q[i], q[i + 1]}; }

// The 1-d pools against the 2-d references on a height of 1 (a view of the same values: the 2-d
// loops read each plane's windows from the values, independently of kiln's pooling).
Tensor as_height1(const Tensor& x) { return x.unsqueeze(-2); }
Tensor drop_height(const Tensor& y) { return y.squeeze(-2); }

void add_pool1d_rows(std::vector<OpRow>& rows) {
  {
    OpRow r;
    r.name = "max_pool1d";
    r.dtypes = kFloatTypes;
    // Params: kernel, stride (0: the kernel's), padding, dilation, ceil_mode.
    r.samples = {
        pool_sample("3 stride 2 padding 1", {2, 3, 9}, {3, 2, 1, 1, 0}, true, false, 501),
        pool_sample("2-d input, 2", {4, 10}, {2, 0, 0, 1, 0}, true, false, 511),
        pool_sample("3 stride 2 dilation 2, ceil_mode", {2, 2, 12}, {3, 2, 0, 2, 1}, true, false, 521),
    };
    r.op = [](const TensorList& in) {
      auto q = param_values(in[1]);
      auto [values, indices] = max_pool1d_with_indices(in[0], q[0], q[1], q[2], q[3], q[4] != 0);
      return TensorList{max_pool1d(in[0], q[0], q[1], q[2], q[3], q[4] != 0), values, indices};
    };
    // max_pool1d, and max_pool1d_with_indices' values and indices.
    r.reference = [](const TensorList& in) {
      auto q = param_values(in[1]);
      const TensorList both = ref_max_pool_with_indices(as_height1(in[0]), {1, q[0], 1, q[1], 0, q[2], 1, q[3], q[4]});
      return TensorList{drop_height(both[0]), drop_height(both[0]), drop_height(both[1])};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};
    r.errors = {
        {"4-d input",
         [] {
           max_pool1d(zeros({1, 2, 3, 8}), 2);
         },
         {"max_pool1d", "[N, C, L]", "[1, 2, 3, 8]"}},
        {"zero kernel",
         [] {
           max_pool1d(zeros({1, 2, 8}), 0);
         },
         {"max_pool1d", "kernel 0", "[1, 2, 8]"}},
        {"padding above half the kernel",
         [] {
           max_pool1d(zeros({1, 2, 8}), 3, 1, 2);
         },
         {"max_pool1d", "padding 2", "kernel 3"}},
        {"kernel longer than the input",
         [] {
           max_pool1d(zeros({1, 2, 2}), 3);
         },
         {"max_pool1d", "output length 0", "[1, 2, 2]"}},
        {"no length",
         [] {
           max_pool1d(zeros({2, 3, 0}), 2);
         },
         {"max_pool1d", "[2, 3, 0]", "only the batch"}},
        {"integer input",
         [] {
           max_pool1d(zeros({2, 8}, DType::Int64), 2);
         },
         {"max_pool1d", "int64"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // max_unpool1d of max_pool1d_with_indices' output, windows of 3 that do not overlap.
    OpRow r;
    r.name = "max_unpool1d";
    r.dtypes = kFloatTypes;
    auto pooled = [](const Shape& shape, uint64_t seed) {
      return [=](DType t, Device d) {
        auto [values, indices] = max_pool1d_with_indices(rnd_distinct(shape, t, d, seed), 3);
        return TensorList{values, indices};
      };
    };
    r.samples = {{"3 of [2, 3, 9]", pooled({2, 3, 9}, 531)}, {"3 of [4, 12]", pooled({4, 12}, 532)}};
    r.op = [](const TensorList& in) { return TensorList{max_unpool1d(in[0], in[1], 3)}; };
    r.reference = [](const TensorList& in) { return TensorList{ref_max_unpool(in[0], in[1], {in[0].size(-1) * 3})}; };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};  // copies of the input's values
    r.errors = {
        {"4-d input",
         [] {
           max_unpool1d(zeros({1, 2, 3, 2}), zeros({1, 2, 3, 2}, DType::Int64), 2);
         },
         {"max_unpool1d", "[1, 2, 3, 2]"}},
        {"output size 0",
         [] {
           max_unpool1d(zeros({1, 2, 3}), zeros({1, 2, 3}, DType::Int64), 2, 2, 0, 0);
         },
         {"max_unpool1d", "output size 0"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "avg_pool1d";
    r.dtypes = kFloatTypes;
    // Params: kernel, stride, padding, ceil_mode, count_include_pad.
    r.samples = {
        pool_sample("3 stride 2 padding 1, count_include_pad", {2, 3, 9}, {3, 2, 1, 0, 1}, false, false, 531),
        pool_sample("3 stride 2 padding 1, ceil_mode, exclude pad", {2, 2, 10}, {3, 2, 1, 1, 0}, false, false, 541),
        pool_sample("2-d input, 4", {3, 8}, {4, 0, 0, 0, 1}, false, false, 551),
    };
    r.op = [](const TensorList& in) {
      auto q = param_values(in[1]);
      return TensorList{avg_pool1d(in[0], q[0], q[1], q[2], q[3] != 0, q[4] != 0)};
    };
    r.reference = [](const TensorList& in) {
      auto q = param_values(in[1]);
      const int64_t stride = q[1] == 0 ? q[0] : q[1];
      return TensorList{drop_height(ref_avg_pool(as_height1(in[0]), {1, q[0], 1, stride, 0, q[2], q[3], q[4]}))};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"negative stride",
         [] {
           avg_pool1d(zeros({1, 2, 8}), 2, -1);
         },
         {"avg_pool1d", "stride -1", "[1, 2, 8]"}},
        {"1-d input", [] { avg_pool1d(zeros({8}), 2); }, {"avg_pool1d", "[8]"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "adaptive_avg_pool1d";
    r.dtypes = kFloatTypes;
    r.samples = {
        pool_sample("3 from 7", {2, 3, 7}, {3}, false, false, 561),
        pool_sample("5 from 3 (upsampling windows)", {1, 2, 3}, {5}, false, false, 571),
        pool_sample("2-d input, 1 from 6", {3, 6}, {1}, false, false, 581),
    };
    r.op = [](const TensorList& in) { return TensorList{adaptive_avg_pool1d(in[0], param_values(in[1])[0])}; };
    r.reference = [](const TensorList& in) {
      return TensorList{drop_height(ref_adaptive(as_height1(in[0]), 1, param_values(in[1])[0]))};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"zero output size",
         [] {
           adaptive_avg_pool1d(zeros({1, 2, 8}), 0);
         },
         {"adaptive_avg_pool1d", "output size must be positive, got 0", "[1, 2, 8]"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "adaptive_max_pool1d";
    r.dtypes = kFloatTypes;
    r.samples = {
        pool_sample("3 from 7", {2, 3, 7}, {3}, true, false, 591),
        pool_sample("5 from 3 (upsampling windows)", {1, 2, 3}, {5}, true, false, 593),
        pool_sample("2-d input, 1 from 6", {3, 6}, {1}, true, false, 595),
    };
    // adaptive_max_pool1d, and adaptive_max_pool1d_with_indices' values and indices.
    r.op = [](const TensorList& in) {
      const int64_t out = param_values(in[1])[0];
      auto [values, indices] = adaptive_max_pool1d_with_indices(in[0], out);
      return TensorList{adaptive_max_pool1d(in[0], out), values, indices};
    };
    r.reference = [](const TensorList& in) {
      const TensorList both = ref_adaptive_max(in[0], {param_values(in[1])[0]});
      return TensorList{both[0], both[0], both[1]};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};  // copies of the input's values
    r.errors = {
        {"zero output size",
         [] {
           adaptive_max_pool1d(zeros({1, 2, 8}), 0);
         },
         {"adaptive_max_pool1d", "output size must be positive, got 0", "[1, 2, 8]"}},
        {"4-d input",
         [] {
           adaptive_max_pool1d(zeros({1, 2, 3, 4}), 2);
         },
         {"adaptive_max_pool1d", "[1, 2, 3, 4]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "lp_pool1d";
    r.dtypes = kFloatTypes;
    // Positive values: a fractional power of a negative window sum is NaN (in PyTorch too).
    r.samples = {{"p 1.5, kernel 3, stride 2, [2, 3, 9]", [](DType t, Device d) {
                    return TensorList{rnd_range({2, 3, 9}, t, d, 597, 0.2, 2.0)};
                  }}};
    r.op = [](const TensorList& in) { return TensorList{lp_pool1d(in[0], 1.5, 3, 2)}; };
    r.reference = [](const TensorList& in) {
      return TensorList{drop_height(ref_lp_pool(as_height1(in[0]), 1.5, {1, 3, 1, 2, 0}))};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"norm_type 0",
         [] {
           lp_pool1d(ones({1, 2, 8}), 0.0, 2);
         },
         {"lp_pool1d", "norm_type", "0"}},
        {"a kernel longer than the input",
         [] {
           lp_pool1d(ones({1, 2, 3}), 2.0, 4);
         },
         {"lp_pool1d", "not positive", "[1, 2, 3]"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
    rows.push_back(std::move(r));
  }
}

}  // namespace

void add_pool_rows(std::vector<OpRow>& rows) {
  {
    OpRow r;
    r.name = "max_pool2d";
    r.dtypes = kFloatTypes;
    // rnd_distinct: every window has one maximum (ties would make the gradient ill-defined).
    r.samples = {
        pool_sample("2x2", {2, 3, 6, 4}, {2, 2, 0, 0, 0, 0, 1, 1, 0}, true, false, 201),
        pool_sample("3x3 stride 2 padding 1", {2, 3, 7, 6}, {3, 3, 2, 2, 1, 1, 1, 1, 0}, true, false, 211),
        pool_sample("3x3 stride 2 padding 1, channels-last", {2, 3, 7, 6}, {3, 3, 2, 2, 1, 1, 1, 1, 0}, true, true,
                    221),
        pool_sample("3x2 stride 2, ceil_mode", {2, 2, 7, 5}, {3, 2, 2, 2, 1, 0, 1, 1, 1}, true, false, 231),
        pool_sample("2x2 dilation 2", {1, 3, 7, 7}, {2, 2, 1, 2, 1, 0, 2, 2, 0}, true, false, 241),
        pool_sample("3-d input, overlapping 3x3 stride 1", {2, 5, 5}, {3, 3, 1, 1, 0, 0, 1, 1, 0}, true, false, 251),
    };
    r.op = [](const TensorList& in) {
      auto q = param_values(in[1]);
      auto [values, indices] = max_pool2d_with_indices(in[0], pr(q, 0), pr(q, 2), pr(q, 4), pr(q, 6), q[8] != 0);
      return TensorList{max_pool2d(in[0], pr(q, 0), pr(q, 2), pr(q, 4), pr(q, 6), q[8] != 0), values, indices};
    };
    // max_pool2d, and max_pool2d_with_indices' values and indices.
    r.reference = [](const TensorList& in) {
      const TensorList both = ref_max_pool_with_indices(in[0], param_values(in[1]));
      return TensorList{both[0], both[0], both[1]};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    // Max pooling copies input values: exact in every dtype.
    for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};
    r.errors = {
        {"2-d input",
         [] {
           max_pool2d(zeros({8, 8}), {2, 2});
         },
         {"max_pool2d", "[8, 8]"}},
        {"zero kernel",
         [] {
           max_pool2d(zeros({1, 2, 8, 8}), {0, 2});
         },
         {"max_pool2d", "kernel", "0x2", "[1, 2, 8, 8]"}},
        {"negative stride",
         [] {
           max_pool2d(zeros({1, 2, 8, 8}), {2, 2}, {-1, 2});
         },
         {"max_pool2d", "stride", "-1x2", "[1, 2, 8, 8]"}},
        {"padding above half the kernel",
         [] {
           max_pool2d(zeros({1, 2, 8, 8}), {3, 3}, {1, 1}, {2, 2});
         },
         {"max_pool2d", "padding 2x2", "3x3", "[1, 2, 8, 8]"}},
        {"kernel larger than input",
         [] {
           max_pool2d(zeros({1, 2, 2, 8}), {3, 3});
         },
         {"max_pool2d", "output size 0x2", "[1, 2, 2, 8]"}},
        {"integer input",
         [] {
           max_pool2d(zeros({1, 2, 8, 8}, DType::Int32), {2, 2});
         },
         {"max_pool2d", "int32"}},
        {"no channels (only the batch may be empty)",
         [] {
           max_pool2d(zeros({2, 0, 8, 8}), {2, 2});
         },
         {"max_pool2d", "[2, 0, 8, 8]", "only the batch dim may be empty"}},
    };
    rows.push_back(std::move(r));
  }
  // max_unpool2d of max_pool2d_with_indices' output: non-overlapping windows (an element two
  // windows shared would be written once but counted twice by central differences; by hand in
  // tests/nn/test_layers.cpp), at the default size and into a larger output_size.
  {
    auto pooled = [](const Shape& shape, Pair kernel, uint64_t seed) {
      return [=](DType t, Device d) {
        auto [values, indices] = max_pool2d_with_indices(rnd_distinct(shape, t, d, seed), kernel);
        return TensorList{values, indices};
      };
    };
    struct Unpool {
      const char* name;
      std::vector<Sample> samples;
      Pair kernel;
      std::optional<Pair> size;
    };
    const std::vector<Unpool> unpools = {
        {"max_unpool2d",
         {{"2x2 of [2, 3, 6, 4]", pooled({2, 3, 6, 4}, {2, 2}, 261)},
          {"2x2 of [3, 4, 6]", pooled({3, 4, 6}, {2, 2}, 262)}},
         {2, 2},
         std::nullopt},
        {"max_unpool2d 3x2 into 7x7", {{"3x2 of [1, 2, 6, 6]", pooled({1, 2, 6, 6}, {3, 2}, 263)}}, {3, 2}, Pair{7, 7}},
    };
    const Tensor x = zeros({1, 2, 3, 2}), idx = zeros({1, 2, 3, 2}, DType::Int64);
    const std::vector<ErrorCase> errors = {
        {"indices of another shape",
         [x] {
           max_unpool2d(x, zeros({1, 2, 3, 3}, DType::Int64), {2, 2});
         },
         {"max_unpool2d", "[1, 2, 3, 2]", "[1, 2, 3, 3]"}},
        {"float indices",
         [x] {
           max_unpool2d(x, zeros({1, 2, 3, 2}), {2, 2});
         },
         {"max_unpool2d", "float32"}},
        {"an index past the plane",
         [x] {
           max_unpool2d(x, full({1, 2, 3, 2}, 24, DType::Int64), {2, 2});
         },
         {"max_unpool2d", "index 24", "[6, 4]"}},
        {"zero kernel",
         [x, idx] {
           max_unpool2d(x, idx, {0, 2});
         },
         {"max_unpool2d", "kernel_size 0x2"}},
        {"2-d input",
         [] {
           max_unpool2d(zeros({3, 2}), zeros({3, 2}, DType::Int64), {2, 2});
         },
         {"max_unpool2d", "[3, 2]"}},
        {"integer input",
         [idx] {
           max_unpool2d(zeros({1, 2, 3, 2}, DType::Int32), idx, {2, 2});
         },
         {"max_unpool2d", "int32"}},
    };
    for (const Unpool& u : unpools) {
      OpRow r;
      r.name = u.name;
      r.dtypes = kFloatTypes;
      r.samples = u.samples;
      const Pair k = u.kernel;
      const std::optional<Pair> size = u.size;
      r.op = [k, size](const TensorList& in) {
        return TensorList{max_unpool2d(in[0], in[1], k, {0, 0}, {0, 0}, size)};
      };
      r.reference = [k, size](const TensorList& in) {
        const Pair plane = size.value_or(Pair{in[0].size(-2) * k[0], in[0].size(-1) * k[1]});
        return TensorList{ref_max_unpool(in[0], in[1], {plane[0], plane[1]})};
      };
      r.differentiable = {0};
      r.out_dtype = [](DType t) { return t; };
      for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};  // copies of the input's values
      if (!size) r.errors = errors;
      rows.push_back(std::move(r));
    }
  }
  {
    OpRow r;
    r.name = "avg_pool2d";
    r.dtypes = kFloatTypes;
    r.samples = {
        pool_sample("2x2", {2, 3, 6, 4}, {2, 2, 2, 2, 0, 0, 0, 1}, false, false, 301),
        pool_sample("3x3 stride 2 padding 1, count_include_pad", {2, 3, 7, 6}, {3, 3, 2, 2, 1, 1, 0, 1}, false, false,
                    311),
        pool_sample("3x3 stride 2 padding 1, exclude pad", {2, 3, 7, 6}, {3, 3, 2, 2, 1, 1, 0, 0}, false, false, 321),
        pool_sample("3x2 stride 2 padding 1x0, ceil_mode, count_include_pad", {2, 2, 8, 5}, {3, 2, 2, 2, 1, 0, 1, 1},
                    false, false, 331),
        pool_sample("3x3 stride 2 padding 1, ceil_mode, exclude pad, channels-last", {2, 3, 6, 6},
                    {3, 3, 2, 2, 1, 1, 1, 0}, false, true, 341),
        pool_sample("3-d input", {3, 5, 7}, {2, 3, 1, 2, 1, 1, 0, 1}, false, false, 351),
        pool_sample("divisor_override 5, padding 1, ceil_mode", {2, 2, 7, 6}, {3, 3, 2, 2, 1, 1, 1, 1, 5}, false, false,
                    353),
        pool_sample("divisor_override -2, channels-last", {2, 3, 6, 6}, {2, 3, 2, 1, 1, 0, 0, 0, -2}, false, true, 355),
    };
    r.op = [](const TensorList& in) {
      auto q = param_values(in[1]);
      const std::optional<int64_t> divisor = q.size() > 8 ? std::optional<int64_t>(q[8]) : std::nullopt;
      return TensorList{avg_pool2d(in[0], pr(q, 0), pr(q, 2), pr(q, 4), q[6] != 0, q[7] != 0, divisor)};
    };
    r.reference = [](const TensorList& in) { return TensorList{ref_avg_pool(in[0], param_values(in[1]))}; };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    // divisor_override: the mean times the cells inside, then the division, each rounded in a half
    // type.
    r.tolerance[DType::Float16] = {2e-3, 2e-3};
    r.tolerance[DType::BFloat16] = {1.6e-2, 1.6e-2};
    r.errors = {
        {"5-d input",
         [] {
           avg_pool2d(zeros({1, 1, 2, 8, 8}), {2, 2});
         },
         {"avg_pool2d", "[1, 1, 2, 8, 8]"}},
        {"divisor_override 0",
         [] {
           avg_pool2d(zeros({1, 1, 8, 8}), {2, 2}, {0, 0}, {0, 0}, false, true, 0);
         },
         {"avg_pool2d", "divisor_override"}},
        {"3-d input without channels",
         [] {
           avg_pool2d(zeros({0, 8, 8}), {2, 2});
         },
         {"avg_pool2d", "[0, 8, 8]", "only the batch dim may be empty"}},
        {"padding above half the kernel",
         [] {
           avg_pool2d(zeros({1, 2, 8, 8}), {2, 2}, {2, 2}, {2, 0});
         },
         {"avg_pool2d", "padding 2x0", "2x2", "[1, 2, 8, 8]"}},
        {"zero stride",
         [] {
           avg_pool2d(zeros({1, 2, 8, 8}), {2, 2}, {2, -2});
         },
         {"avg_pool2d", "stride", "2x-2", "[1, 2, 8, 8]"}},
        {"kernel larger than input",
         [] {
           avg_pool2d(zeros({2, 3, 3}), {4, 1});
         },
         {"avg_pool2d", "output size 0x3", "[2, 3, 3]"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "adaptive_avg_pool2d";
    r.dtypes = kFloatTypes;
    r.samples = {
        pool_sample("1x1 from 6x5", {2, 3, 6, 5}, {1, 1}, false, false, 401),
        pool_sample("3x2 from 7x5", {2, 3, 7, 5}, {3, 2}, false, false, 411),
        pool_sample("3x2 from 7x5, channels-last", {2, 3, 7, 5}, {3, 2}, false, true, 421),
        pool_sample("4x3 from 3x2 (upsampling windows)", {1, 2, 3, 2}, {4, 3}, false, false, 431),
        pool_sample("3-d input, 2x4 from 5x7", {3, 5, 7}, {2, 4}, false, false, 441),
    };
    r.op = [](const TensorList& in) {
      auto q = param_values(in[1]);
      return TensorList{adaptive_avg_pool2d(in[0], {q[0], q[1]})};
    };
    r.reference = [](const TensorList& in) {
      auto q = param_values(in[1]);
      return TensorList{ref_adaptive(in[0], q[0], q[1])};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"zero output size",
         [] {
           adaptive_avg_pool2d(zeros({1, 2, 8, 8}), {0, 2});
         },
         {"adaptive_avg_pool2d", "0x2", "[1, 2, 8, 8]"}},
        {"2-d input",
         [] {
           adaptive_avg_pool2d(zeros({8, 8}), {2, 2});
         },
         {"adaptive_avg_pool2d", "[8, 8]"}},
        {"empty spatial dim",
         [] {
           adaptive_avg_pool2d(zeros({1, 2, 0, 8}), {2, 2});
         },
         {"adaptive_avg_pool2d", "[1, 2, 0, 8]"}},
        {"no channels",
         [] {
           adaptive_avg_pool2d(zeros({1, 0, 8, 8}), {2, 2});
         },
         {"adaptive_avg_pool2d", "[1, 0, 8, 8]", "only the batch dim may be empty"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  add_pool1d_rows(rows);
  {
    OpRow r;
    r.name = "adaptive_max_pool2d";
    r.dtypes = kFloatTypes;
    r.samples = {
        pool_sample("1x1 from 6x5", {2, 3, 6, 5}, {1, 1}, true, false, 451),
        pool_sample("3x2 from 7x5", {2, 3, 7, 5}, {3, 2}, true, false, 453),
        pool_sample("3x2 from 7x5, channels-last", {2, 3, 7, 5}, {3, 2}, true, true, 455),
        pool_sample("4x3 from 3x2 (upsampling windows)", {1, 2, 3, 2}, {4, 3}, true, false, 457),
        pool_sample("3-d input, 2x4 from 5x7", {3, 5, 7}, {2, 4}, true, false, 459),
    };
    // adaptive_max_pool2d, and adaptive_max_pool2d_with_indices' values and indices.
    r.op = [](const TensorList& in) {
      auto q = param_values(in[1]);
      auto [values, indices] = adaptive_max_pool2d_with_indices(in[0], {q[0], q[1]});
      return TensorList{adaptive_max_pool2d(in[0], {q[0], q[1]}), values, indices};
    };
    r.reference = [](const TensorList& in) {
      auto q = param_values(in[1]);
      const TensorList both = ref_adaptive_max(in[0], {q[0], q[1]});
      return TensorList{both[0], both[0], both[1]};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};  // copies of the input's values
    r.errors = {
        {"zero output size",
         [] {
           adaptive_max_pool2d(zeros({1, 2, 8, 8}), {2, 0});
         },
         {"adaptive_max_pool2d", "2x0", "[1, 2, 8, 8]"}},
        {"no channels",
         [] {
           adaptive_max_pool2d(zeros({1, 0, 8, 8}), {2, 2});
         },
         {"adaptive_max_pool2d", "[1, 0, 8, 8]"}},
        {"with indices, zero output size",
         [] {
           adaptive_max_pool2d_with_indices(zeros({1, 2, 8, 8}), {0, 2});
         },
         {"adaptive_max_pool2d", "0x2", "[1, 2, 8, 8]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "fractional_max_pool2d";
    r.dtypes = kFloatTypes;
    // Strides of 1 and 2 mixed (9 into 5 with a 2-wide kernel), windows wider than the stride, an
    // output of one cell (its window ends at the input's end) and one of n - k + 1 (stride 1).
    r.samples = {
        fractional_sample("[2, 3, 9, 8], kernel 2x2, to 5x4", {2, 3, 9, 8}, {2, 2, 5, 4}, false, 471),
        fractional_sample("3-d [3, 7, 7], kernel 3x2, to 4x5", {3, 7, 7}, {3, 2, 4, 5}, false, 473),
        fractional_sample("channels-last [2, 2, 8, 9], kernel 2x3, to 3x6", {2, 2, 8, 9}, {2, 3, 3, 6}, true, 475),
        fractional_sample("[1, 2, 5, 6], kernel 2x2, to 1x5", {1, 2, 5, 6}, {2, 2, 1, 5}, false, 477),
    };
    // fractional_max_pool2d, and fractional_max_pool2d_with_indices' values and indices.
    r.op = [](const TensorList& in) {
      auto q = param_values(in[1]);
      auto [values, indices] = fractional_max_pool2d_with_indices(in[0], pr(q, 0), pr(q, 2), in[2]);
      return TensorList{fractional_max_pool2d(in[0], pr(q, 0), pr(q, 2), in[2]), values, indices};
    };
    r.reference = [](const TensorList& in) {
      const TensorList both = ref_fractional2d(in);
      return TensorList{both[0], both[0], both[1]};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};  // copies of the input's values
    const Tensor u = full({1, 2, 2}, 0.5);
    r.errors = {
        {"output plus kernel past the input",
         [u] {
           fractional_max_pool2d(zeros({1, 2, 6, 8}), {3, 2}, {5, 4}, u);
         },
         {"fractional_max_pool2d", "output size 5 plus kernel 3 minus 1 exceeds the input's 6", "[1, 2, 6, 8]"}},
        {"zero kernel",
         [u] {
           fractional_max_pool2d(zeros({1, 2, 6, 8}), {0, 2}, {2, 2}, u);
         },
         {"fractional_max_pool2d", "kernel size and output size must be positive", "0x2"}},
        {"samples of the wrong shape",
         [] {
           fractional_max_pool2d(zeros({3, 2, 6, 8}), {2, 2}, {3, 3}, full({1, 2, 2}, 0.5));
         },
         {"fractional_max_pool2d", "random_samples must be [N, 2, 2] with N >= 3", "got [1, 2, 2]"}},
        {"a sample above 1",
         [] {
           fractional_max_pool2d(zeros({1, 2, 6, 8}), {2, 2}, {3, 3}, full({1, 2, 2}, 1.5));
         },
         {"fractional_max_pool2d", "random_samples must lie in [0, 1], got 1.5"}},
        {"a NaN sample",
         [] {
           fractional_max_pool2d(zeros({1, 2, 6, 8}), {2, 2}, {3, 3}, full({1, 2, 2}, std::nan("")));
         },
         {"fractional_max_pool2d", "random_samples must lie in [0, 1], got nan"}},
        {"integer samples",
         [] {
           fractional_max_pool2d(zeros({1, 2, 6, 8}), {2, 2}, {3, 3}, zeros({1, 2, 2}, DType::Int64));
         },
         {"fractional_max_pool2d", "random_samples", "int64"}},
        {"integer input",
         [u] {
           fractional_max_pool2d(zeros({1, 2, 6, 8}, DType::Int32), {2, 2}, {3, 3}, u);
         },
         {"fractional_max_pool2d", "int32"}},
        {"output_ratio of 1",
         [] {
           fractional_output_size2d(zeros({1, 2, 6, 8}), {0.5, 1.0});
         },
         {"fractional_max_pool2d", "output_ratio must be in (0, 1), got 1", "[1, 2, 6, 8]"}},
        {"output_ratio giving no output",
         [] {
           fractional_output_size2d(zeros({1, 2, 6, 8}), {0.1, 0.5});
         },
         {"fractional_max_pool2d", "output_ratio 0.1", "output size of 0"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "lp_pool2d";
    r.dtypes = kFloatTypes;
    r.samples = {
        {"p 2, kernel 2x3, [2, 3, 6, 7]",
         [](DType t, Device d) {
           return TensorList{rnd({2, 3, 6, 7}, t, d, 461), params({2, 3, 2, 3, 0}, d)};
         }},
        {"p 2, kernel 3x2, stride 2x1, ceil_mode, 3-d input",
         [](DType t, Device d) {
           return TensorList{rnd({3, 7, 5}, t, d, 463), params({3, 2, 2, 1, 1}, d)};
         }},
    };
    r.op = [](const TensorList& in) {
      auto q = param_values(in[1]);
      return TensorList{lp_pool2d(in[0], 2.0, pr(q, 0), pr(q, 2), q[4] != 0)};
    };
    r.reference = [](const TensorList& in) { return TensorList{ref_lp_pool(in[0], 2.0, param_values(in[1]))}; };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"an infinite norm_type",
         [] {
           lp_pool2d(ones({1, 2, 4, 4}), INFINITY, {2, 2});
         },
         {"lp_pool2d", "norm_type", "inf"}},
        {"zero kernel",
         [] {
           lp_pool2d(ones({1, 2, 4, 4}), 2.0, {0, 2});
         },
         {"lp_pool2d", "kernel size"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
