// augment_images: checks, the output (NCHW, or channels-last strides for an NHWC spec), one
// generator draw and one kernel call. The non-obvious part is what is NOT here: no per-image
// parameters travel from the host on the random path (the kernel derives them from the draw, so a
// CUDA graph capture works and nothing synchronizes); only the explicit-parameters entry, meant
// for tests and tools, copies its table to the device.
#include "core/ops/augment.h"

#include <cmath>
#include <string>

#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"

namespace kiln {
namespace {

std::string i64(int64_t v) { return std::to_string(v); }
std::string pre(const char* op) { return std::string(op) + ": "; }

// A (min, max) range; min may be 0 where zero_ok (a scale: as in torchvision, a draw too small for a
// pixel is one more failed attempt), never for a ratio, whose logarithm is drawn.
void check_range(const char* op, const char* what, double lo, double hi, bool zero_ok) {
  if (!(std::isfinite(lo) && std::isfinite(hi) && (zero_ok ? lo >= 0 : lo > 0) && lo <= hi)) {
    throw Error(pre(op) + "" + what + " range must satisfy " + (zero_ok ? "0 <= min" : "0 < min") +
                " <= max (finite), got [" + num_str(lo) + ", " + num_str(hi) + "]");
  }
}

// The input's expected sizes under the spec, and the check that images has them.
Shape expected_shape(const AugmentSpec& s, int64_t batch) {
  return s.input_layout == ImageLayout::HWC ? Shape{batch, s.height, s.width, s.channels}
                                             : Shape{batch, s.channels, s.height, s.width};
}

void check_images(const char* op, const Tensor& images, const AugmentSpec& spec) {
  ops::check_defined(op, images, "images");
  if (images.dtype() != DType::UInt8) {
    throw DTypeError(pre(op) + "images must be uint8, got " + ops::dtype_str(images.dtype()) + " " +
                     shape_str(images.sizes()));
  }
  const char* layout = spec.input_layout == ImageLayout::HWC ? "[B, H, W, C]" : "[B, C, H, W]";
  if (images.dim() != 4) {
    throw ShapeError(pre(op) + "images must be 4-d " + layout + ", got " + shape_str(images.sizes()));
  }
  const Shape want = expected_shape(spec, images.size(0));
  if (images.sizes() != want) {
    throw ShapeError(pre(op) + "images " + shape_str(images.sizes()) + " do not match the spec's " + layout +
                     " = " + shape_str(want));
  }
}

Tensor make_output(const char* op, const Tensor& images, const AugmentSpec& spec) {
  const Shape shape{images.size(0), spec.channels, spec.out_height, spec.out_width};
  const MemoryFormat format =
      spec.out_layout == AugmentOutputLayout::NHWC ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  return ops::empty_for(op, shape, TensorOptions(spec.out_dtype, images.device()), format);
}

}  // namespace

void check_augment_spec(const char* op, const AugmentSpec& s) {
  if (s.channels < 1 || s.channels > 4) throw ShapeError(pre(op) + "channels must be 1 to 4, got " + i64(s.channels));
  if (s.height < 1 || s.width < 1) {
    throw ShapeError(pre(op) + "input height and width must be positive, got " + i64(s.height) + "x" + i64(s.width));
  }
  if (s.out_height < 1 || s.out_width < 1) {
    throw ShapeError(pre(op) + "output height and width must be positive, got " + i64(s.out_height) + "x" +
                     i64(s.out_width));
  }
  if ((s.height > (int64_t{1} << 24)) || (s.width > (int64_t{1} << 24)) || s.out_height > (int64_t{1} << 24) ||
      s.out_width > (int64_t{1} << 24)) {
    throw ShapeError(pre(op) + "image sides are limited to 2^24 (float pixel coordinates), got " + i64(s.height) + "x" +
                     i64(s.width) + " -> " + i64(s.out_height) + "x" + i64(s.out_width));
  }
  switch (s.crop) {
    case AugmentCrop::None:
      if (s.out_height != s.height || s.out_width != s.width) {
        throw ShapeError(pre(op) + "without a crop or resize the output size must equal the input's, got " +
                         i64(s.height) + "x" + i64(s.width) + " -> " + i64(s.out_height) + "x" + i64(s.out_width));
      }
      break;
    case AugmentCrop::PadCrop:
      if (s.padding < 0 || s.padding > (int64_t{1} << 24)) {
        throw Error(pre(op) + "padding must be in [0, 2^24], got " + i64(s.padding));
      }
      if (s.out_height > s.height + 2 * s.padding || s.out_width > s.width + 2 * s.padding) {
        throw ShapeError(pre(op) + "crop " + i64(s.out_height) + "x" + i64(s.out_width) +
                         " is larger than the padded input " +
                         i64(s.height + 2 * s.padding) + "x" + i64(s.width + 2 * s.padding) + " (input " +
                         i64(s.height) + "x" + i64(s.width) + ", padding " + i64(s.padding) + ")");
      }
      break;
    case AugmentCrop::Center:
      if (s.out_height > s.height || s.out_width > s.width) {
        throw ShapeError(pre(op) + "center crop " + i64(s.out_height) + "x" + i64(s.out_width) +
                         " is larger than the input " + i64(s.height) + "x" + i64(s.width));
      }
      break;
    case AugmentCrop::ResizedCrop:
      check_range(op, "scale", s.scale_min, s.scale_max, /*zero_ok=*/true);
      check_range(op, "ratio", s.ratio_min, s.ratio_max, /*zero_ok=*/false);
      break;
    case AugmentCrop::Resize: break;
    default: throw Error(pre(op) + "unknown crop mode " + i64(static_cast<int64_t>(s.crop)));
  }
  if (!(s.flip_p >= 0 && s.flip_p <= 1)) {
    throw Error(pre(op) + "flip probability must be in [0, 1], got " + num_str(s.flip_p));
  }
  const double strength[3] = {s.brightness, s.contrast, s.saturation};
  const char* names[3] = {"brightness", "contrast", "saturation"};
  for (int k = 0; k < 3; ++k) {
    if (!(std::isfinite(strength[k]) && strength[k] >= 0)) {
      throw Error(pre(op) + "" + names[k] + " strength must be finite and >= 0, got " + num_str(strength[k]));
    }
  }
  for (int64_t c = 0; c < s.channels; ++c) {
    if (!std::isfinite(s.mean[c]))
      throw Error(pre(op) + "mean[" + i64(c) + "] must be finite, got " + num_str(s.mean[c]));
    if (!(std::isfinite(s.std[c]) && s.std[c] > 0)) {
      throw Error(pre(op) + "std[" + i64(c) + "] must be positive and finite, got " + num_str(s.std[c]));
    }
  }
  if (s.out_dtype != DType::Float32 && s.out_dtype != DType::BFloat16 && s.out_dtype != DType::Float16) {
    throw DTypeError(pre(op) + "output dtype must be float32, bfloat16 or float16, got " + ops::dtype_str(s.out_dtype));
  }
  if (s.input_layout != ImageLayout::HWC && s.input_layout != ImageLayout::CHW) {
    throw Error(pre(op) + "unknown input layout " + i64(static_cast<int64_t>(s.input_layout)));
  }
  if (s.out_layout != AugmentOutputLayout::NCHW && s.out_layout != AugmentOutputLayout::NHWC) {
    throw Error(pre(op) + "unknown output layout " + i64(static_cast<int64_t>(s.out_layout)));
  }
}

Tensor augment_images(const Tensor& images, const AugmentSpec& spec, const std::optional<Generator>& generator) {
  const char* op = "augment_images";
  check_augment_spec(op, spec);
  check_images(op, images, spec);
  const Tensor x = images.detach().contiguous();
  ops::KernelScope scope(op, x.device());
  const PhiloxState state = generator_for(op, x.device(), generator).next();
  Tensor out = make_output(op, x, spec);
  if (out.numel() > 0) {
    scope.run(kernels::augment, out.data_ptr(), static_cast<const void*>(x.data_ptr()), x.size(0), spec, state,
              static_cast<const AugmentParams*>(nullptr));
  }
  return out;
}

Tensor augment_images_with_params(const Tensor& images, const AugmentSpec& spec,
                                  const std::vector<AugmentParams>& params) {
  const char* op = "augment_images";
  check_augment_spec(op, spec);
  check_images(op, images, spec);
  const int64_t batch = images.size(0);
  if (static_cast<int64_t>(params.size()) != batch) {
    throw ShapeError(pre(op) + "" + i64(static_cast<int64_t>(params.size())) +
                     " parameter sets for a batch of " + i64(batch) + " images " + shape_str(images.sizes()));
  }
  const bool bilinear = spec.crop == AugmentCrop::ResizedCrop || spec.crop == AugmentCrop::Resize;
  for (int64_t i = 0; i < batch; ++i) {
    const AugmentParams& q = params[static_cast<size_t>(i)];
    const std::string box = "box (top " + i64(q.top) + ", left " + i64(q.left) + ", " + i64(q.height) + "x" +
                            i64(q.width) + ") of image " + i64(i);
    if (bilinear) {
      if (q.height < 1 || q.width < 1 || q.top < 0 || q.left < 0 || q.top > spec.height - q.height ||
          q.left > spec.width - q.width) {
        throw ShapeError(pre(op) + "" + box + " must lie inside the input " + i64(spec.height) + "x" +
                         i64(spec.width));
      }
    } else {
      const int64_t limit = int64_t{1} << 40;
      if (q.height != spec.out_height || q.width != spec.out_width || q.top < -limit || q.top > limit ||
          q.left < -limit || q.left > limit) {
        throw ShapeError(pre(op) + "" + box + " must be the output size " + i64(spec.out_height) + "x" +
                         i64(spec.out_width) + " (a direct crop), with |top|, |left| <= 2^40");
      }
    }
    const float f[3] = {q.brightness, q.contrast, q.saturation};
    for (float v : f) {
      if (!(std::isfinite(v) && v >= 0)) {
        throw Error(pre(op) + "jitter factors of image " + i64(i) + " must be finite and >= 0, got " +
                    num_str(q.brightness) + ", " + num_str(q.contrast) + ", " + num_str(q.saturation));
      }
    }
  }
  const Tensor x = images.detach().contiguous();
  ops::KernelScope scope(op, x.device());
  Tensor out = make_output(op, x, spec);
  if (out.numel() == 0) return out;
  Tensor table = from_blob(params.data(), {static_cast<int64_t>(params.size() * sizeof(AugmentParams))}, DType::UInt8,
                           TensorOptions(DType::UInt8, x.device()));
  scope.run(kernels::augment, out.data_ptr(), static_cast<const void*>(x.data_ptr()), batch, spec, PhiloxState{},
            static_cast<const AugmentParams*>(table.data_ptr()));
  return out;
}

std::vector<AugmentParams> augment_params(const AugmentSpec& spec, PhiloxState state, int64_t batch) {
  check_augment_spec("augment_params", spec);
  if (batch < 0) throw ShapeError("augment_params: batch must be >= 0, got " + i64(batch));
  const AugmentPlan plan = augment_plan(spec);
  state = philox_resolve(state);
  std::vector<AugmentParams> out(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) {
    out[static_cast<size_t>(i)] = augment_image_params(plan, state, static_cast<uint64_t>(i));
  }
  return out;
}

}  // namespace kiln
