// interpolate: per spatial dim, an index (nearest) or two indices and a weight (linear) computed on
// the host from the sizes alone, then index_select along that dim; linear blends the two
// selections. One dim after another, which for linear modes is exactly bi/trilinear interpolation
// (the weights are separable).
#include "core/ops/interpolate.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "kernels/error.h"

namespace kiln {
namespace {

const char* kOp = "interpolate";

Tensor on_device(const std::vector<int64_t>& v, Device device) {
  return tensor(v, {static_cast<int64_t>(v.size())}, TensorOptions(DType::Int64, Device::cpu())).to(device);
}

void check_input(const Tensor& x, InterpolateMode mode) {
  ops::check_defined(kOp, x, "input");
  if (x.dim() < 3 || x.dim() > 5) {
    throw ShapeError(std::string(kOp) + ": input must be [N, C, d1] to [N, C, d1, d2, d3] (1 to 3 spatial dims), got " +
                     shape_str(x.sizes()));
  }
  if (mode == InterpolateMode::Linear) ops::check_floating(kOp, x, "input");
  for (int64_t d = 2; d < x.dim(); ++d) {
    if (x.size(d) == 0) {
      throw ShapeError(std::string(kOp) + ": input " + shape_str(x.sizes()) + " is empty in spatial dim " +
                       std::to_string(d));
    }
  }
}

// Resizes dim d of y from `in` to `out` positions; `scale` is the source step (in / out, or
// 1 / scale_factor), unused with align_corners.
Tensor resize_dim(const Tensor& y, int64_t d, int64_t in, int64_t out, double scale, InterpolateMode mode,
                  bool align_corners) {
  if (mode == InterpolateMode::Nearest) {
    std::vector<int64_t> index(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      index[static_cast<size_t>(o)] =
          std::min(static_cast<int64_t>(std::floor(static_cast<double>(o) * scale)), in - 1);
    }
    return index_select(y, d, on_device(index, y.device()));
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
  // The weight of the upper neighbour, broadcast along dim d.
  Shape ws(static_cast<size_t>(y.dim()), 1);
  ws[static_cast<size_t>(d)] = out;
  const Tensor lambda = tensor(w, ws, TensorOptions(DType::Float64, Device::cpu())).to(y.dtype()).to(y.device());
  const Tensor a = index_select(y, d, on_device(lo, y.device()));
  const Tensor b = index_select(y, d, on_device(hi, y.device()));
  return a + (b - a) * lambda;
}

Tensor resize(const Tensor& x, const Shape& size, const std::vector<double>& scales, InterpolateMode mode,
              bool align_corners) {
  if (mode != InterpolateMode::Linear && align_corners) {
    throw Error(std::string(kOp) + ": align_corners applies to the linear mode only (input " + shape_str(x.sizes()) +
                ")");
  }
  Tensor y = x;
  for (int64_t d = 2; d < x.dim(); ++d) {
    const size_t k = static_cast<size_t>(d - 2);
    const int64_t in = x.size(d), out = size[k];
    if (in == out && scales[k] == 1.0) continue;  // nothing moves along this dim
    y = resize_dim(y, d, in, out, scales[k], mode, align_corners);
  }
  return y.is_same(x) ? x.clone() : y;
}

}  // namespace

Tensor interpolate(const Tensor& x, const Shape& size, InterpolateMode mode, bool align_corners) {
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
  return resize(x, size, scales, mode, align_corners);
}

Tensor interpolate_scale(const Tensor& x, const std::vector<double>& scale_factor, InterpolateMode mode,
                         bool align_corners) {
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
  return resize(x, size, scales, mode, align_corners);
}

}  // namespace kiln
