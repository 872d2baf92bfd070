// interpolate: per spatial dim, an index (nearest), two indices and a weight (linear), four indices
// and four weights (bicubic) or a window of indices (area), computed on the host from the sizes
// alone, then index_select along that dim and a blend of the selections; with antialias, a matrix
// of weights per dim and a matmul. One dim after another, which is exactly bi/trilinear, bicubic
// and area interpolation: each mode's weights are a product of per-dim weights (separable).
#include "core/ops/interpolate.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/matmul.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln {
namespace {

const char* kOp = "interpolate";

void check_input(const Tensor& x, InterpolateMode mode) {
  ops::check_defined(kOp, x, "input");
  if (x.dim() < 3 || x.dim() > 5) {
    throw ShapeError(std::string(kOp) + ": input must be [N, C, d1] to [N, C, d1, d2, d3] (1 to 3 spatial dims), got " +
                     shape_str(x.sizes()));
  }
  if (mode != InterpolateMode::Nearest) ops::check_floating(kOp, x, "input");
  if (mode == InterpolateMode::Bicubic && x.dim() != 4) {
    throw ShapeError(std::string(kOp) + ": bicubic resizes 2 spatial dims ([N, C, H, W]), got input " +
                     shape_str(x.sizes()));
  }
  for (int64_t d = 2; d < x.dim(); ++d) {
    if (x.size(d) == 0) {
      throw ShapeError(std::string(kOp) + ": input " + shape_str(x.sizes()) + " is empty in spatial dim " +
                       std::to_string(d));
    }
  }
}

// A per-position weight broadcast along dim d of y (host values, in `dtype` on y's device).
Tensor along(const std::vector<double>& w, const Tensor& y, int64_t d, DType dtype) {
  Shape ws(static_cast<size_t>(y.dim()), 1);
  ws[static_cast<size_t>(d)] = static_cast<int64_t>(w.size());
  return tensor(w, ws, TensorOptions(DType::Float64, Device::cpu())).to(dtype).to(y.device());
}

// Keys' cubic convolution kernel at a = -0.75 (PyTorch's), for a neighbour at distance s: within
// 1, ((a + 2) s - (a + 3)) s^2 + 1; between 1 and 2, ((s - 5) s + 8) a s - 4 a.
double cubic_weight(double s) {
  constexpr double a = -0.75;
  s = std::fabs(s);
  if (s <= 1.0) return ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0;
  if (s < 2.0) return ((s - 5.0) * s + 8.0) * s * a - 4.0 * a;
  return 0.0;
}

// Bicubic along dim d: the neighbours floor(src) - 1 ... floor(src) + 2 of each output position's
// source position (not clamped, as PyTorch's cubic mode), read within [0, in - 1], blended in
// the widened dtype.
Tensor cubic_dim(const Tensor& y, int64_t d, int64_t in, int64_t out, double scale, bool align_corners) {
  std::vector<std::vector<int64_t>> index(4, std::vector<int64_t>(static_cast<size_t>(out)));
  std::vector<std::vector<double>> weight(4, std::vector<double>(static_cast<size_t>(out)));
  const double step =
      align_corners ? (out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0) : scale;
  for (int64_t o = 0; o < out; ++o) {
    const double src = align_corners ? step * static_cast<double>(o) : step * (static_cast<double>(o) + 0.5) - 0.5;
    const double base = std::floor(src), t = src - base;
    for (int64_t k = 0; k < 4; ++k) {
      const int64_t i = static_cast<int64_t>(base) - 1 + k;
      index[static_cast<size_t>(k)][static_cast<size_t>(o)] = std::clamp<int64_t>(i, 0, in - 1);
      weight[static_cast<size_t>(k)][static_cast<size_t>(o)] = cubic_weight(t + 1.0 - static_cast<double>(k));
    }
  }
  const DType wide = ops::widened_dtype(y.dtype());
  Tensor sum;
  for (size_t k = 0; k < 4; ++k) {
    const Tensor term = index_select(y, d, ops::index_on(index[k], y.device())).to(wide) * along(weight[k], y, d, wide);
    sum = k == 0 ? term : sum + term;
  }
  return sum.to(y.dtype());
}

// Area along dim d: the mean of the cells [floor(o in / out), ceil((o + 1) in / out)) of each
// output position, as a sum of masked selections (a window shorter than the longest selects its
// last cell again and masks it out, so an inf or NaN outside the window never reaches the mean).
Tensor area_dim(const Tensor& y, int64_t d, int64_t in, int64_t out) {
  std::vector<int64_t> start(static_cast<size_t>(out)), length(static_cast<size_t>(out));
  int64_t longest = 0;
  for (int64_t o = 0; o < out; ++o) {
    const int64_t s = (o * in) / out, e = ((o + 1) * in + out - 1) / out;
    start[static_cast<size_t>(o)] = s;
    length[static_cast<size_t>(o)] = e - s;
    longest = std::max(longest, e - s);
  }
  const DType wide = ops::widened_dtype(y.dtype());
  Tensor sum;
  for (int64_t k = 0; k < longest; ++k) {
    std::vector<int64_t> index(static_cast<size_t>(out));
    std::vector<double> inside(static_cast<size_t>(out));
    for (size_t o = 0; o < index.size(); ++o) {
      index[o] = start[o] + std::min(k, length[o] - 1);
      inside[o] = k < length[o] ? 1.0 : 0.0;
    }
    Tensor cell = index_select(y, d, ops::index_on(index, y.device())).to(wide);
    if (k > 0) cell = where(gt(along(inside, y, d, wide), 0.0), cell, 0.0);
    sum = k == 0 ? cell : sum + cell;
  }
  std::vector<double> inverse(static_cast<size_t>(out));
  for (size_t o = 0; o < inverse.size(); ++o) inverse[o] = 1.0 / static_cast<double>(length[o]);
  return (sum * along(inverse, y, d, wide)).to(y.dtype());
}

// The antialiasing filters: the triangle (Linear, support 1) and Keys' cubic at a = -0.5 (Bicubic,
// support 2; PIL's choice, which PyTorch's antialias follows).
double aa_filter(InterpolateMode mode, double s) {
  s = std::fabs(s);
  if (mode == InterpolateMode::Linear) return s < 1.0 ? 1.0 - s : 0.0;
  constexpr double a = -0.5;
  if (s < 1.0) return ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0;
  if (s < 2.0) return (((s - 5.0) * s + 8.0) * s - 4.0) * a;
  return 0.0;
}

// Antialiased resizing along dim d: row o of an [out, in] matrix holds the filter's weights at
// the input positions within its support of o's centre, scale (o + 1/2) in input coordinates; a
// shrink by `scale` > 1 stretches the filter (its support and its argument) by that factor. The
// rows are normalized to sum to 1, so a window cut by the border still averages. y's dim d
// multiplied by the matrix's transpose: one matmul, in the widened dtype and outside autocast.
Tensor antialias_dim(const Tensor& y, int64_t d, int64_t in, int64_t out, double scale, InterpolateMode mode,
                     bool align_corners) {
  if (align_corners) scale = out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  const double half_width = mode == InterpolateMode::Linear ? 1.0 : 2.0;
  const double stretch = scale >= 1.0 ? scale : 1.0;
  const double support = half_width * stretch;
  std::vector<double> matrix(static_cast<size_t>(out * in), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    const double centre = scale * (static_cast<double>(o) + 0.5);
    // The positions whose centres (i + 1/2) lie within the support; truncation toward zero, as
    // PyTorch's, then clamped to the input.
    const int64_t first = std::max<int64_t>(static_cast<int64_t>(centre - support + 0.5), 0);
    const int64_t last = std::min<int64_t>(static_cast<int64_t>(centre + support + 0.5), in);
    double total = 0.0;
    double* row = matrix.data() + o * in;
    for (int64_t i = first; i < last; ++i) {
      row[i] = aa_filter(mode, (static_cast<double>(i) - centre + 0.5) / stretch);
      total += row[i];
    }
    if (total != 0.0) {
      for (int64_t i = first; i < last; ++i) row[i] /= total;
    }
  }
  const DType wide = ops::widened_dtype(y.dtype());
  const AutocastGuard exact(y.device().type, false);  // the weights are not tensor-core work
  const Tensor weights =
      tensor(matrix, {out, in}, TensorOptions(DType::Float64, Device::cpu())).to(wide).to(y.device());
  return movedim(matmul(movedim(y.to(wide), d, -1), weights.t()), -1, d).to(y.dtype());
}

// Resizes dim d of y from `in` to `out` positions; `scale` is the source step (in / out, or
// 1 / scale_factor), unused with align_corners and by Area.
Tensor resize_dim(const Tensor& y, int64_t d, int64_t in, int64_t out, double scale, InterpolateMode mode,
                  bool align_corners, bool antialias) {
  if (antialias) return antialias_dim(y, d, in, out, scale, mode, align_corners);
  if (mode == InterpolateMode::Bicubic) return cubic_dim(y, d, in, out, scale, align_corners);
  if (mode == InterpolateMode::Area) return area_dim(y, d, in, out);
  if (mode == InterpolateMode::Nearest) {
    std::vector<int64_t> index(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      index[static_cast<size_t>(o)] =
          std::min(static_cast<int64_t>(std::floor(static_cast<double>(o) * scale)), in - 1);
    }
    return index_select(y, d, ops::index_on(index, y.device()));
  }
  std::vector<int64_t> lo(static_cast<size_t>(out)), hi(static_cast<size_t>(out));
  std::vector<double> w(static_cast<size_t>(out));
  const double step =
      align_corners ? (out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0) : scale;
  for (int64_t o = 0; o < out; ++o) {
    const double src =
        align_corners ? step * static_cast<double>(o) : std::max(step * (static_cast<double>(o) + 0.5) - 0.5, 0.0);
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    lo[static_cast<size_t>(o)] = i0;
    hi[static_cast<size_t>(o)] = std::min(i0 + 1, in - 1);
    w[static_cast<size_t>(o)] = src - static_cast<double>(i0);
  }
  const Tensor lambda = along(w, y, d, y.dtype());  // the weight of the upper neighbour
  const Tensor a = index_select(y, d, ops::index_on(lo, y.device()));
  const Tensor b = index_select(y, d, ops::index_on(hi, y.device()));
  return a + (b - a) * lambda;
}

Tensor resize(const Tensor& x, const Shape& size, const std::vector<double>& scales, InterpolateMode mode,
              bool align_corners, bool antialias) {
  if ((mode == InterpolateMode::Nearest || mode == InterpolateMode::Area) && align_corners) {
    throw Error(std::string(kOp) + ": align_corners applies to the linear and bicubic modes only (input " +
                shape_str(x.sizes()) + ")");
  }
  if (antialias && (mode == InterpolateMode::Nearest || mode == InterpolateMode::Area || x.dim() != 4)) {
    throw Error(std::string(kOp) +
                ": antialias applies to the linear and bicubic modes over 2 spatial dims ([N, C, "
                "H, W]) only (input " +
                shape_str(x.sizes()) + ")");
  }
  Tensor y = x;
  for (int64_t d = 2; d < x.dim(); ++d) {
    const size_t k = static_cast<size_t>(d - 2);
    const int64_t in = x.size(d), out = size[k];
    if (in == out && scales[k] == 1.0) continue;  // nothing moves along this dim
    y = resize_dim(y, d, in, out, scales[k], mode, align_corners, antialias);
  }
  return y.is_same(x) ? x.clone() : y;
}

}  // namespace

Tensor interpolate(const Tensor& x, const Shape& size, InterpolateMode mode, bool align_corners, bool antialias) {
  check_input(x, mode);
  const int64_t spatial = x.dim() - 2;
  if (static_cast<int64_t>(size.size()) != spatial) {
    throw ShapeError(std::string(kOp) + ": size " + shape_str(size) + " must name the input's " +
                     std::to_string(spatial) + " spatial dims (input " + shape_str(x.sizes()) + ")");
  }
  std::vector<double> scales;
  for (int64_t d = 2; d < x.dim(); ++d) {
    const int64_t out = size[static_cast<size_t>(d - 2)];
    if (out <= 0) {
      throw ShapeError(std::string(kOp) + ": output sizes must be positive, got " + shape_str(size) + " (input " +
                       shape_str(x.sizes()) + ")");
    }
    scales.push_back(static_cast<double>(x.size(d)) / static_cast<double>(out));
  }
  return resize(x, size, scales, mode, align_corners, antialias);
}

Tensor interpolate_scale(const Tensor& x, const std::vector<double>& scale_factor, InterpolateMode mode,
                         bool align_corners, bool antialias) {
  check_input(x, mode);
  const int64_t spatial = x.dim() - 2;
  if (scale_factor.size() != 1 && static_cast<int64_t>(scale_factor.size()) != spatial) {
    throw ShapeError(std::string(kOp) + ": " + std::to_string(scale_factor.size()) + " scale factors for the input's " +
                     std::to_string(spatial) + " spatial dims (input " + shape_str(x.sizes()) +
                     "): one per dim, or one for all");
  }
  Shape size;
  std::vector<double> scales;
  for (int64_t d = 2; d < x.dim(); ++d) {
    const double f = scale_factor.size() == 1 ? scale_factor[0] : scale_factor[static_cast<size_t>(d - 2)];
    const double out = std::floor(static_cast<double>(x.size(d)) * f);
    if (!(f > 0.0) || !std::isfinite(f) || out < 1.0 || out > 9.0e18) {
      throw Error(std::string(kOp) + ": scale factor " + num_str(f) + " of spatial dim " + std::to_string(d) +
                  " gives no valid output size (input " + shape_str(x.sizes()) + ")");
    }
    size.push_back(static_cast<int64_t>(out));
    scales.push_back(1.0 / f);
  }
  return resize(x, size, scales, mode, align_corners, antialias);
}

}  // namespace kiln
