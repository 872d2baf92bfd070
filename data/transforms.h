// Image transforms in torchvision's vocabulary (RandomCrop, RandomResizedCrop, RandomHorizontalFlip,
// ColorJitter, Normalize, ToDtype, ...) that compose into ONE augmentation pass rather than a chain
// of tensor ops: Compose fuses its steps into an AugmentSpec (kernels/augment.h) and runs it per
// sample on the CPU (a loader worker's call) or per batch on the images' device (one CUDA kernel),
// with the same per-image arithmetic on both. The price of fusion is a fixed order, which Compose
// enforces: one geometric step, then the flip, then the jitter, then Normalize (ToDtype anywhere).
// docs/augmentation.md describes the pipeline and where it differs from torchvision.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "core/ops/augment.h"
#include "core/random.h"
#include "core/tensor.h"

namespace kiln::data::transforms {

// Pads each side by `padding` with `fill`, then crops a uniformly placed height x width window.
struct RandomCrop {
  RandomCrop(int64_t size, int64_t padding = 0, uint8_t fill = 0) : RandomCrop({size, size}, padding, fill) {}
  RandomCrop(std::array<int64_t, 2> size, int64_t padding = 0, uint8_t fill = 0)
      : height(size[0]), width(size[1]), padding(padding), fill(fill) {}
  int64_t height, width, padding;
  uint8_t fill;
};

// A box of area share in `scale` and aspect ratio (width / height) log-uniform in `ratio`,
// bilinear to height x width (10 attempts, then torchvision's centered fallback).
struct RandomResizedCrop {
  RandomResizedCrop(int64_t size, std::array<double, 2> scale = {0.08, 1.0},
                    std::array<double, 2> ratio = {3.0 / 4.0, 4.0 / 3.0})
      : RandomResizedCrop(std::array<int64_t, 2>{size, size}, scale, ratio) {}
  RandomResizedCrop(std::array<int64_t, 2> size, std::array<double, 2> scale = {0.08, 1.0},
                    std::array<double, 2> ratio = {3.0 / 4.0, 4.0 / 3.0})
      : height(size[0]), width(size[1]), scale(scale), ratio(ratio) {}
  int64_t height, width;
  std::array<double, 2> scale, ratio;
};

// The centered height x width window (no larger than the image).
struct CenterCrop {
  CenterCrop(int64_t size) : CenterCrop({size, size}) {}  // NOLINT: CenterCrop(24) as in torchvision
  CenterCrop(std::array<int64_t, 2> size) : height(size[0]), width(size[1]) {}  // NOLINT
  int64_t height, width;
};

// The whole image, bilinear to height x width (both sides given: torchvision's Resize((h, w))).
struct Resize {
  Resize(int64_t size) : Resize({size, size}) {}                      // NOLINT
  Resize(std::array<int64_t, 2> size) : height(size[0]), width(size[1]) {}  // NOLINT
  int64_t height, width;
};

struct RandomHorizontalFlip {
  RandomHorizontalFlip(double p = 0.5) : p(p) {}  // NOLINT
  double p;
};

// Strengths s: each factor uniform in [max(0, 1 - s), 1 + s]; 0 leaves that property alone. Applied
// in the fixed order brightness, contrast, saturation (torchvision shuffles the order per image).
struct ColorJitter {
  ColorJitter(double brightness = 0, double contrast = 0, double saturation = 0)  // NOLINT
      : brightness(brightness), contrast(contrast), saturation(saturation) {}
  double brightness, contrast, saturation;
};

// out = (v - mean) / std per channel, v in [0, 1]; one value applies to every channel.
struct Normalize {
  Normalize(std::vector<double> mean, std::vector<double> std) : mean(std::move(mean)), std(std::move(std)) {}
  std::vector<double> mean, std;
};

// The output dtype: float32 (the default), bfloat16 or float16.
struct ToDtype {
  ToDtype(DType dtype) : dtype(dtype) {}  // NOLINT
  DType dtype;
};

using Step = std::variant<RandomCrop, RandomResizedCrop, CenterCrop, Resize, RandomHorizontalFlip, ColorJitter,
                          Normalize, ToDtype>;

// Steps fused into one augmentation. Copyable, and a kiln::data::Transform (std::function) as it is.
class Compose {
 public:
  // Steps in the canonical order (else an Error naming the order given). `input_layout`: the layout
  // of the images given (a sample [C, H, W] or [H, W, C]; a batch with a leading B). `output`:
  // Contiguous (NCHW / CHW) or ChannelsLast (NHWC / HWC memory, logical sizes unchanged).
  explicit Compose(std::vector<Step> steps, ImageLayout input_layout = ImageLayout::CHW,
                   MemoryFormat output = MemoryFormat::Contiguous);

  // One uint8 CPU sample, [C, H, W] (or [H, W, C]), with one draw of data::sample_generator() (the
  // loader seeds it per sample); returns [C, out_height, out_width].
  Tensor operator()(const Tensor& image) const;
  // A uint8 batch, [B, C, H, W] (or [B, H, W, C]), on its device in one kernel; one draw of
  // `generator` (the device's default generator when absent). Returns [B, C, out_height, out_width].
  Tensor apply_batch(const Tensor& images, const std::optional<Generator>& generator = std::nullopt) const;
  // The fused spec for images of these sizes (checked: an Error names the transform and the value).
  AugmentSpec spec(int64_t channels, int64_t height, int64_t width) const;

  const std::vector<Step>& steps() const { return steps_; }

 private:
  std::vector<Step> steps_;
  ImageLayout input_layout_;
  MemoryFormat output_;
  AugmentSpec base_;          // everything but the sizes and the per-channel normalization
  std::vector<double> mean_, std_;
  std::optional<std::array<int64_t, 2>> out_size_;  // the geometric step's output size, if any
};

}  // namespace kiln::data::transforms
