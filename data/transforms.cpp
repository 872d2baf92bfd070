// Compose: steps fused into one AugmentSpec. The per-sample path calls the CPU twin directly on a
// batch of one instead of going through augment_images: no dispatch scope, no 4-d view, no
// contiguous copy of an already dense sample; just the output allocation and the kernel, which is
// what a loader worker pays per sample.
#include "data/transforms.h"

#include <string>
#include <type_traits>

#include "core/ops/factory.h"
#include "data/dataset.h"
#include "kernels/error.h"

namespace kiln::data::transforms {
namespace {

constexpr const char* kOp = "transforms::Compose";

// A step's name and place in the canonical order (-1: anywhere).
struct StepInfo {
  const char* name;
  int rank;
};

StepInfo info(const Step& s) {
  return std::visit(
      [](const auto& t) -> StepInfo {
        using T = std::decay_t<decltype(t)>;
        if constexpr (std::is_same_v<T, RandomCrop>) return {"RandomCrop", 0};
        if constexpr (std::is_same_v<T, RandomResizedCrop>) return {"RandomResizedCrop", 0};
        if constexpr (std::is_same_v<T, CenterCrop>) return {"CenterCrop", 0};
        if constexpr (std::is_same_v<T, Resize>) return {"Resize", 0};
        if constexpr (std::is_same_v<T, RandomHorizontalFlip>) return {"RandomHorizontalFlip", 1};
        if constexpr (std::is_same_v<T, ColorJitter>) return {"ColorJitter", 2};
        if constexpr (std::is_same_v<T, Normalize>) return {"Normalize", 3};
        if constexpr (std::is_same_v<T, ToDtype>) return {"ToDtype", -1};
      },
      s);
}

std::string order_str(const std::vector<Step>& steps) {
  std::string s = "[";
  for (size_t i = 0; i < steps.size(); ++i) s += (i ? ", " : "") + std::string(info(steps[i]).name);
  return s + "]";
}

// The channel, height and width sizes of an image of `dims` dims (3: a sample, 4: a batch).
void image_sizes(const Tensor& t, ImageLayout layout, int64_t& c, int64_t& h, int64_t& w) {
  const int64_t d = t.dim() - 3;
  if (layout == ImageLayout::HWC) {
    h = t.size(d);
    w = t.size(d + 1);
    c = t.size(d + 2);
  } else {
    c = t.size(d);
    h = t.size(d + 1);
    w = t.size(d + 2);
  }
}

}  // namespace

Compose::Compose(std::vector<Step> steps, ImageLayout input_layout, MemoryFormat output)
    : steps_(std::move(steps)), input_layout_(input_layout), output_(output) {
  if (output != MemoryFormat::Contiguous && output != MemoryFormat::ChannelsLast) {
    throw Error(std::string(kOp) + ": the output format must be Contiguous or ChannelsLast");
  }
  int last = -1;
  bool seen[4] = {false, false, false, false};
  bool dtype_seen = false;
  for (const Step& step : steps_) {
    const StepInfo in = info(step);
    const bool repeated = in.rank < 0 ? dtype_seen : seen[in.rank];
    if (repeated || (in.rank >= 0 && in.rank < last)) {
      throw Error(std::string(kOp) + ": steps must come in the order (RandomCrop | RandomResizedCrop | " +
                  "CenterCrop | Resize), RandomHorizontalFlip, ColorJitter, Normalize, each at most once " +
                  "(ToDtype anywhere, once); got " + order_str(steps_));
    }
    if (in.rank < 0) {
      dtype_seen = true;
    } else {
      seen[in.rank] = true;
      last = in.rank;
    }
  }
  base_.input_layout = input_layout;
  base_.out_layout = output == MemoryFormat::ChannelsLast ? AugmentOutputLayout::NHWC : AugmentOutputLayout::NCHW;
  for (const Step& step : steps_) {
    std::visit(
        [&](const auto& t) {
          using T = std::decay_t<decltype(t)>;
          if constexpr (std::is_same_v<T, RandomCrop>) {
            base_.crop = AugmentCrop::PadCrop;
            base_.padding = t.padding;
            base_.fill = t.fill;
            out_size_ = std::array<int64_t, 2>{t.height, t.width};
          } else if constexpr (std::is_same_v<T, RandomResizedCrop>) {
            base_.crop = AugmentCrop::ResizedCrop;
            base_.scale_min = t.scale[0];
            base_.scale_max = t.scale[1];
            base_.ratio_min = t.ratio[0];
            base_.ratio_max = t.ratio[1];
            out_size_ = std::array<int64_t, 2>{t.height, t.width};
          } else if constexpr (std::is_same_v<T, CenterCrop>) {
            base_.crop = AugmentCrop::Center;
            out_size_ = std::array<int64_t, 2>{t.height, t.width};
          } else if constexpr (std::is_same_v<T, Resize>) {
            base_.crop = AugmentCrop::Resize;
            out_size_ = std::array<int64_t, 2>{t.height, t.width};
          } else if constexpr (std::is_same_v<T, RandomHorizontalFlip>) {
            base_.flip_p = t.p;
          } else if constexpr (std::is_same_v<T, ColorJitter>) {
            base_.brightness = t.brightness;
            base_.contrast = t.contrast;
            base_.saturation = t.saturation;
          } else if constexpr (std::is_same_v<T, Normalize>) {
            if (t.mean.empty() || t.mean.size() > 4 || t.std.size() != t.mean.size()) {
              throw Error(std::string(kOp) + ": Normalize needs 1 to 4 means and as many stds, got " +
                          std::to_string(t.mean.size()) + " means and " + std::to_string(t.std.size()) + " stds");
            }
            mean_ = t.mean;
            std_ = t.std;
          } else {
            base_.out_dtype = t.dtype;
          }
        },
        step);
  }
  // A spec check that needs no image sizes now (ranges, dtype), so a bad Compose fails where it is built.
  AugmentSpec probe = spec(mean_.empty() ? 1 : static_cast<int64_t>(mean_.size()), 1 << 20, 1 << 20);
  (void)probe;
}

AugmentSpec Compose::spec(int64_t channels, int64_t height, int64_t width) const {
  AugmentSpec s = base_;
  s.channels = channels;
  s.height = height;
  s.width = width;
  s.out_height = out_size_ ? (*out_size_)[0] : height;
  s.out_width = out_size_ ? (*out_size_)[1] : width;
  if (!mean_.empty()) {
    if (mean_.size() != 1 && static_cast<int64_t>(mean_.size()) != channels) {
      throw ShapeError(std::string(kOp) + ": Normalize has " + std::to_string(mean_.size()) +
                       " means and stds for an image of " + std::to_string(channels) + " channels");
    }
    for (int64_t c = 0; c < channels && c < 4; ++c) {
      const size_t k = mean_.size() == 1 ? 0 : static_cast<size_t>(c);
      s.mean[c] = mean_[k];
      s.std[c] = std_[k];
    }
  }
  check_augment_spec(kOp, s);
  return s;
}

Tensor Compose::operator()(const Tensor& image) const {
  if (!image.defined()) throw Error(std::string(kOp) + ": image is undefined");
  if (image.dtype() != DType::UInt8) {
    throw DTypeError(std::string(kOp) + ": images must be uint8, got " + dtype_name(image.dtype()) + " " +
                     shape_str(image.sizes()));
  }
  if (image.dim() != 3) {
    throw ShapeError(std::string(kOp) + ": a sample must be 3-d " +
                     (input_layout_ == ImageLayout::HWC ? "[H, W, C]" : "[C, H, W]") + ", got " +
                     shape_str(image.sizes()) + " (apply_batch takes batches)");
  }
  if (!image.is_cpu()) {
    throw DeviceError(std::string(kOp) + ": per-sample transforms run on the CPU, got an image on " +
                      image.device().str() + " (apply_batch runs on any device)");
  }
  int64_t c = 0, h = 0, w = 0;
  image_sizes(image, input_layout_, c, h, w);
  const AugmentSpec s = spec(c, h, w);
  const Tensor x = image.is_contiguous() ? image : image.contiguous();
  const PhiloxState state = sample_generator().next();
  Tensor out = output_ == MemoryFormat::ChannelsLast
                   ? empty_strided({c, s.out_height, s.out_width}, {1, s.out_width * c, c}, TensorOptions(s.out_dtype))
                   : empty({c, s.out_height, s.out_width}, TensorOptions(s.out_dtype));
  augment_cpu(out.data_ptr(), x.data_ptr(), 1, s, state, nullptr, KernelContext{});
  return out;
}

Tensor Compose::apply_batch(const Tensor& images, const std::optional<Generator>& generator) const {
  if (!images.defined()) throw Error(std::string(kOp) + ": images are undefined");
  if (images.dim() != 4) {
    throw ShapeError(std::string(kOp) + ": apply_batch takes a 4-d batch " +
                     (input_layout_ == ImageLayout::HWC ? "[B, H, W, C]" : "[B, C, H, W]") + ", got " +
                     shape_str(images.sizes()));
  }
  int64_t c = 0, h = 0, w = 0;
  image_sizes(images, input_layout_, c, h, w);
  return augment_images(images, spec(c, h, w), generator);
}

}  // namespace kiln::data::transforms
