// Op table rows of the interpolate family: nearest and linear (1, 2 and 3 spatial dims, with and
// without align_corners) to given sizes, up and down, and by scale factors. The reference computes
// each output element from PyTorch's source-position formula in double, summing the 2^k corners of
// the linear cell with their product weights (not dim by dim, as the op does).
#include <algorithm>
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// Per spatial dim: the source step, the output size, and per output position the two neighbours
// and the upper one's weight.
struct Axis {
  std::vector<int64_t> lo, hi;
  std::vector<double> w;
};

Axis axis(int64_t in, int64_t out, double scale, bool linear, bool align_corners) {
  Axis a;
  for (int64_t o = 0; o < out; ++o) {
    if (!linear) {
      a.lo.push_back(std::min(static_cast<int64_t>(std::floor(static_cast<double>(o) * scale)), in - 1));
      a.hi.push_back(a.lo.back());
      a.w.push_back(0.0);
      continue;
    }
    double src;
    if (align_corners) {
      src = out > 1 ? static_cast<double>(o) * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
    } else {
      src = std::max((static_cast<double>(o) + 0.5) * scale - 0.5, 0.0);
    }
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    a.lo.push_back(i0);
    a.hi.push_back(std::min(i0 + 1, in - 1));
    a.w.push_back(src - static_cast<double>(i0));
  }
  return a;
}

// x resized to `size` with per-dim source steps `scales`.
Tensor ref_interpolate(const Tensor& x, const Shape& size, const std::vector<double>& scales, bool linear,
                       bool align_corners) {
  const Shape& xs = x.sizes();
  const size_t k = size.size();
  std::vector<Axis> axes;
  for (size_t i = 0; i < k; ++i) axes.push_back(axis(xs[i + 2], size[i], scales[i], linear, align_corners));
  Shape os = {xs[0], xs[1]};
  os.insert(os.end(), size.begin(), size.end());
  const Values xv = values(x);
  Values out;
  for (int64_t e = 0; e < shape_numel(os); ++e) {
    const Shape idx = unravel(e, os);
    double v = 0;
    for (int64_t corner = 0; corner < (int64_t{1} << k); ++corner) {
      Shape src = {idx[0], idx[1]};
      double weight = 1;
      for (size_t i = 0; i < k; ++i) {
        const Axis& a = axes[i];
        const size_t o = static_cast<size_t>(idx[i + 2]);
        const bool upper = (corner >> i) & 1;
        src.push_back(upper ? a.hi[o] : a.lo[o]);
        weight *= upper ? a.w[o] : 1.0 - a.w[o];
      }
      if (weight != 0.0) v += weight * xv[at(ravel(src, xs))];
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

OpRow size_row(const std::string& name, InterpolateMode mode, bool align_corners, std::vector<Sample> samples) {
  OpRow r;
  r.name = name;
  const bool linear = mode == InterpolateMode::Linear;
  r.dtypes = linear ? kFloatTypes : kAllNumeric;
  r.samples = std::move(samples);
  r.op = [mode, align_corners](const TensorList& x) {
    return TensorList{interpolate(x[0], param_values(x[1]), mode, align_corners)};
  };
  r.reference = [linear, align_corners](const TensorList& x) {
    const Shape size = param_values(x[1]);
    std::vector<double> scales;
    for (size_t i = 0; i < size.size(); ++i) {
      scales.push_back(static_cast<double>(x[0].size(static_cast<int64_t>(i) + 2)) / static_cast<double>(size[i]));
    }
    return TensorList{ref_interpolate(x[0], size, scales, linear, align_corners)};
  };
  r.differentiable = {0};
  r.out_dtype = same_dtype;
  if (!linear) {
    for (DType t : kAllNumeric) r.tolerance[t] = {0, 0};  // nearest copies values
  } else {
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  }
  return r;
}

// By a scale factor: output floor(in * f), source step 1 / f.
OpRow scale_row(const std::string& name, InterpolateMode mode, std::vector<double> factors, const Shape& shape,
                uint64_t seed) {
  OpRow r;
  r.name = name;
  const bool linear = mode == InterpolateMode::Linear;
  r.dtypes = linear ? kFloatTypes : kAllNumeric;
  r.samples = {{shape_str(shape), [=](DType t, Device d) { return TensorList{rnd(shape, t, d, seed)}; }}};
  r.op = [mode, factors](const TensorList& x) { return TensorList{interpolate_scale(x[0], factors, mode)}; };
  r.reference = [linear, factors](const TensorList& x) {
    Shape size;
    std::vector<double> scales;
    for (int64_t d = 2; d < x[0].dim(); ++d) {
      const double f = factors.size() == 1 ? factors[0] : factors[static_cast<size_t>(d - 2)];
      size.push_back(static_cast<int64_t>(std::floor(static_cast<double>(x[0].size(d)) * f)));
      scales.push_back(1.0 / f);
    }
    return TensorList{ref_interpolate(x[0], size, scales, linear, false)};
  };
  r.differentiable = {0};
  r.out_dtype = same_dtype;
  if (!linear) {
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
}

}  // namespace kiln::test
