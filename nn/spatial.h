// The layers that resize, pad or rearrange the spatial dims of [N, C, *] inputs, PyTorch-shaped:
// Upsample (interpolate), the padding layers (pad: ZeroPad, ConstantPad, ReflectionPad,
// ReplicationPad and CircularPad, 1-d and 2-d), PixelShuffle, PixelUnshuffle, ChannelShuffle,
// Unflatten, and Unfold and Fold (sliding windows as columns and back), printed as PyTorch prints
// them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ops/fold.h"
#include "core/ops/interpolate.h"
#include "core/ops/shape.h"
#include "nn/module.h"

namespace kiln::nn {

// interpolate to a fixed size, or by a scale factor (the same for every spatial dim).
class Upsample : public UnaryModule {
 public:
  explicit Upsample(Shape size, InterpolateMode mode = InterpolateMode::Nearest, bool align_corners = false);
  explicit Upsample(double scale_factor, InterpolateMode mode = InterpolateMode::Nearest, bool align_corners = false);
  std::string type_name() const override { return "Upsample"; }
  // "scale_factor=2.0, mode='nearest'" or "size=(8, 8), mode='bilinear'": kiln has one linear mode
  // for 1 to 3 spatial dims, where PyTorch names linear, bilinear and trilinear; the linear mode
  // is named after the dims of a size, and 'linear' with a scale factor. align_corners with
  // nearest or area is refused here.
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  Shape size;           // empty when scaling
  double scale_factor;  // 0 when sizing
  InterpolateMode mode;
  bool align_corners;
};

// pad over the last `spatial` dims of a [N, C, *] or [C, *] input; PyTorch's padding order
// (left, right, top, bottom).
class PadLayer : public UnaryModule {
 public:
  std::string type_name() const override { return name_; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  Shape padding;
  PadMode mode;
  double value;

 protected:
  // `padding` holds 2 * spatial values (one value for all is expanded by the subclasses).
  PadLayer(const char* name, int64_t spatial, Shape padding, PadMode mode, double value);

 private:
  const char* name_;
  int64_t spatial_;
};

namespace detail {
// An int padding for every side of `spatial` dims.
Shape all_sides(int64_t padding, int64_t spatial);
}  // namespace detail

// Declares a padding layer `Name` over `spatial` dims in `mode`: constructed from one padding for
// every side or from 2 * spatial values.
#define KILN_PAD_LAYER(Name, spatial, mode)                                                   \
  class Name : public PadLayer {                                                              \
   public:                                                                                    \
    explicit Name(int64_t padding) : Name(detail::all_sides(padding, spatial)) {}             \
    explicit Name(Shape padding) : PadLayer(#Name, spatial, std::move(padding), mode, 0.0) {} \
  };
KILN_PAD_LAYER(ZeroPad1d, 1, PadMode::Constant)
KILN_PAD_LAYER(ZeroPad2d, 2, PadMode::Constant)
KILN_PAD_LAYER(ReflectionPad1d, 1, PadMode::Reflect)
KILN_PAD_LAYER(ReflectionPad2d, 2, PadMode::Reflect)
KILN_PAD_LAYER(ReplicationPad1d, 1, PadMode::Replicate)
KILN_PAD_LAYER(ReplicationPad2d, 2, PadMode::Replicate)
KILN_PAD_LAYER(CircularPad1d, 1, PadMode::Circular)
KILN_PAD_LAYER(CircularPad2d, 2, PadMode::Circular)
#undef KILN_PAD_LAYER

// Constant padding with `value`, printed with it.
class ConstantPad1d : public PadLayer {
 public:
  ConstantPad1d(int64_t padding, double value) : ConstantPad1d(detail::all_sides(padding, 1), value) {}
  ConstantPad1d(Shape padding, double value)
      : PadLayer("ConstantPad1d", 1, std::move(padding), PadMode::Constant, value) {}
};
class ConstantPad2d : public PadLayer {
 public:
  ConstantPad2d(int64_t padding, double value) : ConstantPad2d(detail::all_sides(padding, 2), value) {}
  ConstantPad2d(Shape padding, double value)
      : PadLayer("ConstantPad2d", 2, std::move(padding), PadMode::Constant, value) {}
};

// pixel_shuffle / pixel_unshuffle by a factor >= 1.
class PixelShuffle : public UnaryModule {
 public:
  explicit PixelShuffle(int64_t upscale_factor);
  std::string type_name() const override { return "PixelShuffle"; }
  std::string extra_repr() const override { return "upscale_factor=" + std::to_string(upscale_factor); }
  Tensor forward(const Tensor& x) override { return pixel_shuffle(x, upscale_factor); }

  int64_t upscale_factor;
};

class PixelUnshuffle : public UnaryModule {
 public:
  explicit PixelUnshuffle(int64_t downscale_factor);
  std::string type_name() const override { return "PixelUnshuffle"; }
  std::string extra_repr() const override { return "downscale_factor=" + std::to_string(downscale_factor); }
  Tensor forward(const Tensor& x) override { return pixel_unshuffle(x, downscale_factor); }

  int64_t downscale_factor;
};

// channel_shuffle into `groups` (>= 1).
class ChannelShuffle : public UnaryModule {
 public:
  explicit ChannelShuffle(int64_t groups);
  std::string type_name() const override { return "ChannelShuffle"; }
  std::string extra_repr() const override { return "groups=" + std::to_string(groups); }
  Tensor forward(const Tensor& x) override { return channel_shuffle(x, groups); }

  int64_t groups;
};

// Flatten's inverse: dim (negative counts from the end) becomes unflattened_size, whose product
// must be that dim's size (one entry may be -1: inferred).
class Unflatten : public UnaryModule {
 public:
  Unflatten(int64_t dim, Shape unflattened_size);
  std::string type_name() const override { return "Unflatten"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  int64_t dim;
  Shape unflattened_size;
};

// unfold: [N, C, H, W] -> [N, C * kh * kw, L], the sliding windows as columns.
class Unfold : public UnaryModule {
 public:
  explicit Unfold(Pair kernel_size, Pair dilation = {1, 1}, Pair padding = {0, 0}, Pair stride = {1, 1});
  explicit Unfold(int64_t kernel_size, int64_t dilation = 1, int64_t padding = 0, int64_t stride = 1)
      : Unfold(Pair{kernel_size, kernel_size}, Pair{dilation, dilation}, Pair{padding, padding}, Pair{stride, stride}) {
  }
  std::string type_name() const override { return "Unfold"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override { return unfold(x, kernel_size, dilation, padding, stride); }

  Pair kernel_size, dilation, padding, stride;
};

// fold: [N, C * kh * kw, L] -> [N, C, H, W] of output_size, overlapping windows summed.
class Fold : public UnaryModule {
 public:
  Fold(Pair output_size, Pair kernel_size, Pair dilation = {1, 1}, Pair padding = {0, 0}, Pair stride = {1, 1});
  Fold(Pair output_size, int64_t kernel_size, int64_t dilation = 1, int64_t padding = 0, int64_t stride = 1)
      : Fold(output_size, Pair{kernel_size, kernel_size}, Pair{dilation, dilation}, Pair{padding, padding},
             Pair{stride, stride}) {}
  Fold(int64_t output_size, int64_t kernel_size, int64_t dilation = 1, int64_t padding = 0, int64_t stride = 1)
      : Fold(Pair{output_size, output_size}, kernel_size, dilation, padding, stride) {}
  std::string type_name() const override { return "Fold"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override { return fold(x, output_size, kernel_size, dilation, padding, stride); }

  Pair output_size, kernel_size, dilation, padding, stride;
};

}  // namespace kiln::nn
