// Op table rows of the interpolate family: nearest, linear (1, 2 and 3 spatial dims, with and
// without align_corners), bicubic (with and without) and area to given sizes, up and down, and by
// scale factors; bilinear and bicubic with antialias. The reference computes each output element
// from PyTorch's source-position formula in double, summing over the product of the per-dim taps
// (2^k corners for linear, 4^2 for bicubic, whole windows for area and antialias) with their
// product weights (not dim by dim, as the op does).
#include <algorithm>
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// Per spatial dim and output position: the input positions it reads and their weights.
struct Taps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<double>> weight;
};

// Keys' cubic kernel, a = -0.75, at distance s.
double keys(double s) {
  const double a = -0.75;
  s = std::fabs(s);
  if (s <= 1) return (a + 2) * s * s * s - (a + 3) * s * s + 1;
  if (s < 2) return a * s * s * s - 5 * a * s * s + 8 * a * s - 4 * a;
  return 0;
}

// The antialiasing filters: the triangle (linear) and Keys' cubic at a = -0.5 (bicubic).
double aa_filter(InterpolateMode mode, double s) {
  s = std::fabs(s);
  if (mode == InterpolateMode::Linear) return std::max(0.0, 1.0 - s);
  const double a = -0.5;
  if (s < 1) return (a + 2) * s * s * s - (a + 3) * s * s + 1;
  if (s < 2) return a * s * s * s - 5 * a * s * s + 8 * a * s - 4 * a;
  return 0;
}

// Antialiased taps: every input position whose centre i + 1/2 lies within the filter's reach of
// the output's centre scale (o + 1/2), the filter stretched by the shrink factor when shrinking,
// the weights normalized to sum to 1.
Taps aa_taps(int64_t in, int64_t out, double scale, InterpolateMode mode, bool align_corners) {
  if (align_corners) scale = out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  const double stretch = std::max(scale, 1.0);
  Taps t;
  for (int64_t o = 0; o < out; ++o) {
    const double centre = scale * (static_cast<double>(o) + 0.5);
    std::vector<int64_t> index;
    std::vector<double> weight;
    double total = 0;
    for (int64_t i = 0; i < in; ++i) {
      const double w = aa_filter(mode, (static_cast<double>(i) + 0.5 - centre) / stretch);
      if (w == 0.0) continue;
      index.push_back(i);
      weight.push_back(w);
      total += w;
    }
    for (double& w : weight) w /= total;
    t.index.push_back(index);
    t.weight.push_back(weight);
  }
  return t;
}

Taps taps(int64_t in, int64_t out, double scale, InterpolateMode mode, bool align_corners, bool antialias) {
  if (antialias) return aa_taps(in, out, scale, mode, align_corners);
  Taps t;
  for (int64_t o = 0; o < out; ++o) {
    std::vector<int64_t> index;
    std::vector<double> weight;
    const double corner_step =
        out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;  // align_corners
    const double centred = (static_cast<double>(o) + 0.5) * scale - 0.5;
    if (mode == InterpolateMode::Nearest) {
      index = {std::min(static_cast<int64_t>(std::floor(static_cast<double>(o) * scale)), in - 1)};
      weight = {1.0};
    } else if (mode == InterpolateMode::Linear) {
      const double src = align_corners ? static_cast<double>(o) * corner_step : std::max(centred, 0.0);
      const int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
      index = {i0, std::min(i0 + 1, in - 1)};
      weight = {1.0 - (src - static_cast<double>(i0)), src - static_cast<double>(i0)};
    } else if (mode == InterpolateMode::Bicubic) {
      const double src = align_corners ? static_cast<double>(o) * corner_step : centred;
      const int64_t i0 = static_cast<int64_t>(std::floor(src));
      for (int64_t i = i0 - 1; i <= i0 + 2; ++i) {
        index.push_back(std::clamp<int64_t>(i, 0, in - 1));  // read at the edge past it
        weight.push_back(keys(src - static_cast<double>(i)));
      }
    } else {  // Area: PyTorch's adaptive average pooling windows
      const int64_t start = static_cast<int64_t>(std::floor(static_cast<double>(o * in) / static_cast<double>(out)));
      const int64_t end = static_cast<int64_t>(std::ceil(static_cast<double>((o + 1) * in) / static_cast<double>(out)));
      for (int64_t i = start; i < end; ++i) {
        index.push_back(i);
        weight.push_back(1.0 / static_cast<double>(end - start));
      }
    }
    t.index.push_back(index);
    t.weight.push_back(weight);
  }
  return t;
}

// x resized to `size` with per-dim source steps `scales`.
Tensor ref_interpolate(const Tensor& x, const Shape& size, const std::vector<double>& scales, InterpolateMode mode,
                       bool align_corners, bool antialias = false) {
  const Shape& xs = x.sizes();
  const size_t k = size.size();
  std::vector<Taps> axes;
  for (size_t i = 0; i < k; ++i) axes.push_back(taps(xs[i + 2], size[i], scales[i], mode, align_corners, antialias));
  Shape os = {xs[0], xs[1]};
  os.insert(os.end(), size.begin(), size.end());
  const Values xv = values(x);
  Values out;
  for (int64_t e = 0; e < shape_numel(os); ++e) {
    const Shape idx = unravel(e, os);
    // Every combination of one tap per dim, counted like an odometer.
    std::vector<size_t> pick(k, 0);
    double v = 0;
    while (true) {
      Shape src = {idx[0], idx[1]};
      double weight = 1;
      for (size_t i = 0; i < k; ++i) {
        const size_t o = static_cast<size_t>(idx[i + 2]);
        src.push_back(axes[i].index[o][pick[i]]);
        weight *= axes[i].weight[o][pick[i]];
      }
      if (weight != 0.0) v += weight * xv[at(ravel(src, xs))];
      size_t i = 0;
      while (i < k && ++pick[i] == axes[i].index[static_cast<size_t>(idx[i + 2])].size()) pick[i++] = 0;
      if (i == k) break;
    }
    out.push_back(v);
  }
  return from_values(out, os);
}

// A sample: x of `shape` and its output size as a trailing int64 parameter.
Sample sized(const Shape& shape, const Shape& size, uint64_t seed) {
  return {shape_str(shape) + " to " + shape_str(size), [=](DType t, Device d) {
            return TensorList{rnd(shape, t, d, seed), params(size, d)};
          }};
}

OpRow size_row(const std::string& name, InterpolateMode mode, bool align_corners, std::vector<Sample> samples,
               bool antialias = false) {
  OpRow r;
  r.name = name;
  const bool copies = mode == InterpolateMode::Nearest;
  r.dtypes = copies ? kAllNumeric : kFloatTypes;
  r.samples = std::move(samples);
  r.op = [mode, align_corners, antialias](const TensorList& x) {
    return TensorList{interpolate(x[0], param_values(x[1]), mode, align_corners, antialias)};
  };
  r.reference = [mode, align_corners, antialias](const TensorList& x) {
    const Shape size = param_values(x[1]);
    std::vector<double> scales;
    for (size_t i = 0; i < size.size(); ++i) {
      scales.push_back(static_cast<double>(x[0].size(static_cast<int64_t>(i) + 2)) / static_cast<double>(size[i]));
    }
    return TensorList{ref_interpolate(x[0], size, scales, mode, align_corners, antialias)};
  };
  r.differentiable = {0};
  r.out_dtype = same_dtype;
  if (copies) {
    for (DType t : kAllNumeric) r.tolerance[t] = {0, 0};  // nearest copies values
  } else {
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  }
  return r;
}

// By a scale factor: output floor(in * f), source step 1 / f.
OpRow scale_row(const std::string& name, InterpolateMode mode, std::vector<double> factors, const Shape& shape,
                uint64_t seed, bool antialias = false) {
  OpRow r;
  r.name = name;
  const bool copies = mode == InterpolateMode::Nearest;
  r.dtypes = copies ? kAllNumeric : kFloatTypes;
  r.samples = {{shape_str(shape), [=](DType t, Device d) { return TensorList{rnd(shape, t, d, seed)}; }}};
  r.op = [mode, factors, antialias](const TensorList& x) {
    return TensorList{interpolate_scale(x[0], factors, mode, false, antialias)};
  };
  r.reference = [mode, factors, antialias](const TensorList& x) {
    Shape size;
    std::vector<double> scales;
    for (int64_t d = 2; d < x[0].dim(); ++d) {
      const double f = factors.size() == 1 ? factors[0] : factors[static_cast<size_t>(d - 2)];
      size.push_back(static_cast<int64_t>(std::floor(static_cast<double>(x[0].size(d)) * f)));
      scales.push_back(1.0 / f);
    }
    return TensorList{ref_interpolate(x[0], size, scales, mode, false, antialias)};
  };
  r.differentiable = {0};
  r.out_dtype = same_dtype;
  if (copies) {
    for (DType t : kAllNumeric) r.tolerance[t] = {0, 0};
  } else {
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  }
  return r;
}

}  // namespace

void add_interpolate_rows(std::vector<OpRow>& rows) {
  const std::vector<Sample> mixed = {sized({2, 3, 5}, {9}, 1500), sized({2, 2, 4, 5}, {7, 3}, 1501),
                                     sized({1, 2, 3, 4, 2}, {5, 2, 3}, 1502), sized({2, 1, 6, 6}, {1, 1}, 1503)};
  rows.push_back(size_row("interpolate nearest", InterpolateMode::Nearest, false, mixed));
  rows.back().errors = {
      {"a 2-d input",
       [] {
         interpolate(zeros({3, 4}), {8});
       },
       {"interpolate", "[3, 4]"}},
      {"sizes for other dims",
       [] {
         interpolate(zeros({1, 2, 3, 4}), {8});
       },
       {"interpolate", "[8]", "2 spatial"}},
      {"a zero size",
       [] {
         interpolate(zeros({1, 2, 3, 4}), {0, 2});
       },
       {"interpolate", "positive", "[0, 2]"}},
      {"align_corners with nearest",
       [] {
         interpolate(zeros({1, 2, 3, 4}), {6, 8}, InterpolateMode::Nearest, true);
       },
       {"interpolate", "align_corners"}},
      {"an integer input to linear",
       [] {
         interpolate(zeros({1, 2, 3}, DType::Int64), {6}, InterpolateMode::Linear);
       },
       {"interpolate", "int64"}},
      {"a bad scale factor",
       [] {
         interpolate_scale(zeros({1, 2, 3}), {0.1});
       },
       {"interpolate", "scale factor 0.1"}},
  };
  rows.push_back(size_row("interpolate linear", InterpolateMode::Linear, false, mixed));
  rows.push_back(size_row("interpolate linear align_corners", InterpolateMode::Linear, true, mixed));
  rows.push_back(scale_row("interpolate_scale nearest 2", InterpolateMode::Nearest, {2.0}, {2, 3, 4, 5}, 1510));
  rows.push_back(
      scale_row("interpolate_scale nearest 1.5 and 0.6", InterpolateMode::Nearest, {1.5, 0.6}, {1, 2, 5, 7}, 1511));
  rows.push_back(scale_row("interpolate_scale linear 1.7", InterpolateMode::Linear, {1.7}, {2, 2, 4, 3}, 1512));
  // Bicubic reads 2 spatial dims only: up, down, to one pixel, and a size whose source positions
  // fall left of 0 (their taps read the edge).
  const std::vector<Sample> planes = {sized({2, 2, 4, 5}, {7, 3}, 1520), sized({1, 3, 6, 6}, {4, 9}, 1521),
                                      sized({2, 1, 5, 3}, {1, 1}, 1522), sized({1, 2, 2, 2}, {5, 6}, 1523)};
  rows.push_back(size_row("interpolate bicubic", InterpolateMode::Bicubic, false, planes));
  rows.back().errors = {
      {"a 1-d input",
       [] {
         interpolate(zeros({1, 2, 5}), {8}, InterpolateMode::Bicubic);
       },
       {"interpolate", "bicubic", "[1, 2, 5]"}},
      {"an integer input",
       [] {
         interpolate(zeros({1, 2, 3, 3}, DType::Int64), {6, 6}, InterpolateMode::Bicubic);
       },
       {"interpolate", "int64"}},
  };
  rows.push_back(size_row("interpolate bicubic align_corners", InterpolateMode::Bicubic, true, planes));
  rows.push_back(scale_row("interpolate_scale bicubic 1.5", InterpolateMode::Bicubic, {1.5}, {2, 2, 4, 3}, 1524));
  // Area: windows of one size (6 to 3), of two overlapping sizes (7 to 3, 5 to 2) and up (3 to 5).
  const std::vector<Sample> windows = {sized({2, 3, 6}, {3}, 1530), sized({2, 2, 7, 5}, {3, 2}, 1531),
                                       sized({1, 2, 3, 4, 5}, {5, 2, 2}, 1532), sized({2, 1, 6, 6}, {1, 1}, 1533)};
  rows.push_back(size_row("interpolate area", InterpolateMode::Area, false, windows));
  rows.back().errors = {{"align_corners with area",
                         [] {
                           interpolate(zeros({1, 2, 6}), {3}, InterpolateMode::Area, true);
                         },
                         {"interpolate", "align_corners"}}};
  rows.push_back(scale_row("interpolate_scale area 0.5", InterpolateMode::Area, {0.5}, {2, 2, 7, 5}, 1534));
  // Antialias: shrinks by 2 and by odd factors (every output blends a stretched window, cut at
  // the borders), one dim shrunk while the other grows, to one pixel.
  const std::vector<Sample> shrinks = {sized({1, 2, 9, 8}, {4, 3}, 1540), sized({2, 1, 5, 12}, {8, 5}, 1541),
                                       sized({1, 2, 7, 6}, {1, 1}, 1542)};
  rows.push_back(size_row("interpolate bilinear antialias", InterpolateMode::Linear, false, shrinks, true));
  rows.back().errors = {
      {"antialias with nearest",
       [] {
         interpolate(zeros({1, 2, 6, 6}), {3, 3}, InterpolateMode::Nearest, false, true);
       },
       {"interpolate", "antialias", "[1, 2, 6, 6]"}},
      {"antialias over 3 spatial dims",
       [] {
         interpolate(zeros({1, 2, 6, 6, 6}), {3, 3, 3}, InterpolateMode::Linear, false, true);
       },
       {"interpolate", "antialias", "[1, 2, 6, 6, 6]"}},
  };
  rows.push_back(
      size_row("interpolate bilinear antialias align_corners", InterpolateMode::Linear, true, shrinks, true));
  rows.push_back(size_row("interpolate bicubic antialias", InterpolateMode::Bicubic, false, shrinks, true));
  rows.push_back(
      size_row("interpolate bicubic antialias align_corners", InterpolateMode::Bicubic, true, shrinks, true));
  rows.push_back(
      scale_row("interpolate_scale bicubic antialias 0.4", InterpolateMode::Bicubic, {0.4}, {1, 2, 10, 8}, 1543, true));
}

}  // namespace kiln::test
