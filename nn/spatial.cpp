// Upsample and the padding layers: options checked at construction, forward calls interpolate or
// pad (whose own checks name the input's shape).
#include "nn/spatial.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/error.h"
#include "nn/layers.h"

namespace kiln::nn {
namespace {

// align_corners means something to the linear and bicubic modes only: refused with the others at
// construction, rather than at the first forward.
void check_align_corners(InterpolateMode mode, bool align_corners) {
  if (align_corners && (mode == InterpolateMode::Nearest || mode == InterpolateMode::Area)) {
    throw Error(std::string("Upsample: align_corners applies to the linear and bicubic modes only, not mode ") +
                (mode == InterpolateMode::Nearest ? "'nearest'" : "'area'"));
  }
}

}  // namespace

Upsample::Upsample(Shape size, InterpolateMode mode, bool align_corners)
    : size(std::move(size)), scale_factor(0.0), mode(mode), align_corners(align_corners) {
  check_align_corners(mode, align_corners);
  if (this->size.empty()) throw Error("Upsample: size must name at least one spatial dim");
  for (int64_t s : this->size) {
    if (s <= 0) throw Error("Upsample: sizes must be positive, got " + shape_str(this->size));
  }
}

Upsample::Upsample(double scale_factor, InterpolateMode mode, bool align_corners)
    : scale_factor(scale_factor), mode(mode), align_corners(align_corners) {
  check_align_corners(mode, align_corners);
  if (!(scale_factor > 0.0) || !std::isfinite(scale_factor)) {
    throw Error("Upsample: scale_factor must be a finite number > 0, got " + num_str(scale_factor));
  }
}

std::string Upsample::extra_repr() const {
  std::string m = "'nearest'";
  if (mode == InterpolateMode::Bicubic) m = "'bicubic'";
  if (mode == InterpolateMode::Area) m = "'area'";
  if (mode == InterpolateMode::Linear) {  // PyTorch's name for the dims a size gives
    m = size.size() == 2 ? "'bilinear'" : size.size() == 3 ? "'trilinear'" : "'linear'";
  }
  if (size.empty()) return "scale_factor=" + detail::py_float(scale_factor) + ", mode=" + m;
  return "size=" + (size.size() == 1 ? std::to_string(size[0]) : detail::py_tuple(size)) + ", mode=" + m;
}

Tensor Upsample::forward(const Tensor& x) {
  if (size.empty()) return interpolate_scale(x, {scale_factor}, mode, align_corners);
  return interpolate(x, size, mode, align_corners);
}

Shape detail::all_sides(int64_t padding, int64_t spatial) { return Shape(static_cast<size_t>(2 * spatial), padding); }

PadLayer::PadLayer(const char* name, int64_t spatial, Shape padding, PadMode mode, double value)
    : padding(std::move(padding)), mode(mode), value(value), name_(name), spatial_(spatial) {
  if (static_cast<int64_t>(this->padding.size()) != 2 * spatial) {
    throw Error(std::string(name) + ": padding must hold " + std::to_string(2 * spatial) + " values (" +
                (spatial == 1 ? "left, right" : "left, right, top, bottom") + "), got " + shape_str(this->padding));
  }
  if (mode != PadMode::Constant) {
    for (int64_t p : this->padding) {
      if (p < 0) throw Error(std::string(name) + ": padding must be >= 0, got " + shape_str(this->padding));
    }
  }
}

// PyTorch prints the padding tuple, and ConstantPad's value.
std::string PadLayer::extra_repr() const {
  const std::string p = detail::py_tuple(padding);
  if (std::string(name_).rfind("ConstantPad", 0) == 0) return "padding=" + p + ", value=" + detail::py_float(value);
  return p;
}

Tensor PadLayer::forward(const Tensor& x) {
  if (!x.defined()) throw Error(std::string(name_) + ": the input is an undefined tensor");
  if (x.dim() != spatial_ + 1 && x.dim() != spatial_ + 2) {
    throw ShapeError(std::string(name_) + ": expected a " + std::to_string(spatial_ + 1) + "-d or " +
                     std::to_string(spatial_ + 2) + "-d input, got shape " + shape_str(x.sizes()));
  }
  return pad(x, padding, mode, value);
}

PixelShuffle::PixelShuffle(int64_t upscale_factor) : upscale_factor(upscale_factor) {
  detail::check_positive("PixelShuffle", "upscale_factor", upscale_factor);
}

PixelUnshuffle::PixelUnshuffle(int64_t downscale_factor) : downscale_factor(downscale_factor) {
  detail::check_positive("PixelUnshuffle", "downscale_factor", downscale_factor);
}

ChannelShuffle::ChannelShuffle(int64_t groups) : groups(groups) {
  detail::check_positive("ChannelShuffle", "groups", groups);
}

Unflatten::Unflatten(int64_t dim, Shape unflattened_size) : dim(dim), unflattened_size(std::move(unflattened_size)) {
  int inferred = 0;
  for (int64_t s : this->unflattened_size) {
    if (s == -1) ++inferred;
    if (s < -1 || inferred > 1) {
      throw Error("Unflatten: unflattened_size takes sizes >= 0 and at most one -1, got " +
                  shape_str(this->unflattened_size));
    }
  }
  if (this->unflattened_size.empty()) throw Error("Unflatten: unflattened_size must not be empty");
}

std::string Unflatten::extra_repr() const {
  return "dim=" + std::to_string(dim) + ", unflattened_size=" + detail::py_tuple(unflattened_size);
}

Tensor Unflatten::forward(const Tensor& x) {
  const int64_t d = wrap_dim(dim, x.dim(), "Unflatten");
  Shape shape(x.sizes().begin(), x.sizes().begin() + d);
  shape.insert(shape.end(), unflattened_size.begin(), unflattened_size.end());
  shape.insert(shape.end(), x.sizes().begin() + d + 1, x.sizes().end());
  int64_t known = 1;
  bool overflow = false;
  for (int64_t s : unflattened_size) overflow = overflow || __builtin_mul_overflow(known, s == -1 ? 1 : s, &known);
  const bool inferred = std::find(unflattened_size.begin(), unflattened_size.end(), -1) != unflattened_size.end();
  const bool fits = !overflow && (inferred ? known != 0 && x.size(d) % known == 0 : known == x.size(d));
  if (!fits) {
    throw ShapeError("Unflatten: dim " + std::to_string(dim) + " of input " + shape_str(x.sizes()) + " has size " +
                     std::to_string(x.size(d)) + ", which unflattened_size " + shape_str(unflattened_size) +
                     " does not cover");
  }
  return x.reshape(shape);
}

namespace {

// kernel_size, dilation and stride positive, padding non-negative (kiln::Error naming `layer`).
void check_window(const char* layer, Pair kernel_size, Pair dilation, Pair padding, Pair stride) {
  detail::check_positive(layer, "kernel_size", kernel_size);
  detail::check_positive(layer, "dilation", dilation);
  detail::check_positive(layer, "stride", stride);
  detail::check_non_negative(layer, "padding", std::min(padding[0], padding[1]));
}

}  // namespace

Unfold::Unfold(Pair kernel_size, Pair dilation, Pair padding, Pair stride)
    : kernel_size(kernel_size), dilation(dilation), padding(padding), stride(stride) {
  check_window("Unfold", kernel_size, dilation, padding, stride);
}

std::string Unfold::extra_repr() const {
  return "kernel_size=" + detail::int_or_tuple(kernel_size) + ", dilation=" + detail::int_or_tuple(dilation) +
         ", padding=" + detail::int_or_tuple(padding) + ", stride=" + detail::int_or_tuple(stride);
}

Fold::Fold(Pair output_size, Pair kernel_size, Pair dilation, Pair padding, Pair stride)
    : output_size(output_size), kernel_size(kernel_size), dilation(dilation), padding(padding), stride(stride) {
  detail::check_positive("Fold", "output_size", output_size);
  check_window("Fold", kernel_size, dilation, padding, stride);
}

std::string Fold::extra_repr() const {
  return "output_size=" + detail::int_or_tuple(output_size) + ", kernel_size=" + detail::int_or_tuple(kernel_size) +
         ", dilation=" + detail::int_or_tuple(dilation) + ", padding=" + detail::int_or_tuple(padding) +
         ", stride=" + detail::int_or_tuple(stride);
}

}  // namespace kiln::nn
