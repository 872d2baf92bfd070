// augment_images on the GPU against the CPU twin, image by image: the same generator seed on each
// device gives the same Philox draw, so every image must get the same parameters and pixels.
// Direct crops, flips and normalization must match exactly; bilinear resizes and jitter are held
// to a float tolerance (the twins share their arithmetic and should agree bit for bit, but the
// issue allows rounding there, and a tolerance keeps a failure's report readable).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "data/transforms.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;
using kiln::test::require_cuda;

namespace {

const Device kCuda = Device::cuda(0);

Tensor noise(const Shape& shape, uint32_t salt) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<uint8_t>(philox_block(salt, 2, i).v[2]);
  return from_blob(v.data(), shape, DType::UInt8, TensorOptions(DType::UInt8));
}

struct Named {
  std::string name;
  AugmentSpec spec;
  bool exact;  // no bilinear, no jitter
};

std::vector<Named> specs(int64_t C, int64_t H, int64_t W) {
  AugmentSpec base;
  base.channels = C;
  base.height = H;
  base.width = W;
  base.out_height = H;
  base.out_width = W;
  for (int c = 0; c < 4; ++c) {
    base.mean[c] = 0.1 * (c + 1);
    base.std[c] = 0.2 + 0.05 * c;
  }
  std::vector<Named> out;
  AugmentSpec s = base;
  s.crop = AugmentCrop::PadCrop;
  s.padding = 4;
  s.fill = 128;
  s.flip_p = 0.5;
  out.push_back({"pad-crop + flip + normalize", s, true});
  s = base;
  s.crop = AugmentCrop::Center;
  s.out_height = H - 3;
  s.out_width = W - 6;
  s.flip_p = 0.7;
  out.push_back({"center crop + flip", s, true});
  s = base;
  s.crop = AugmentCrop::ResizedCrop;
  s.out_height = 24;
  s.out_width = 20;
  s.flip_p = 0.5;
  out.push_back({"random resized crop + flip", s, false});
  s.brightness = 0.4;
  s.contrast = 0.4;
  s.saturation = 0.4;
  out.push_back({"random resized crop + flip + jitter", s, false});
  s = base;
  s.crop = AugmentCrop::Resize;
  s.out_height = 2 * H + 1;
  s.out_width = W / 2;
  s.contrast = 0.8;
  out.push_back({"resize + contrast", s, false});
  s = base;
  s.crop = AugmentCrop::PadCrop;
  s.padding = 2;
  s.brightness = 0.5;
  s.saturation = 0.9;
  out.push_back({"pad-crop + brightness + saturation", s, false});
  return out;
}

void compare(const Tensor& cpu, const Tensor& gpu, bool exact, DType dtype) {
  REQUIRE(gpu.is_cuda());
  REQUIRE(cpu.sizes() == gpu.sizes());
  REQUIRE(cpu.strides() == gpu.strides());
  const std::vector<float> a = cpu.to_vector<float>(), b = gpu.to_vector<float>();
  // float32: a few float roundings; 16-bit: one unit in the last place of the value (a rounding of
  // a float32 result that sits on a rounding boundary may go either way)
  const double rtol = dtype == DType::Float32 ? 1e-6 : (dtype == DType::Float16 ? 1e-3 : 8e-3);
  const int64_t per_image = cpu.numel() / cpu.size(0);
  for (int64_t image = 0; image < cpu.size(0); ++image) {
    double worst = 0;
    int64_t mismatches = 0;
    for (int64_t i = image * per_image; i < (image + 1) * per_image; ++i) {
      const double x = a[static_cast<size_t>(i)], y = b[static_cast<size_t>(i)];
      const double d = std::abs(x - y);
      worst = std::max(worst, d);
      if (exact ? d != 0 : d > 1e-5 + rtol * std::abs(x)) ++mismatches;
    }
    INFO("image " << image << ": worst difference " << worst);
    CHECK(mismatches == 0);
  }
}

}  // namespace

TEST_CASE("cuda augment: every image matches the CPU twin", "[cuda][augment]") {
  require_cuda();
  const int64_t B = 37;
  for (int64_t C : {1, 3, 4}) {
    const int64_t H = 29, W = 33;
    const Tensor chw = noise({B, C, H, W}, static_cast<uint32_t>(C));
    const Tensor hwc = chw.permute({0, 2, 3, 1}).contiguous();
    for (const Named& n : specs(C, H, W)) {
      for (ImageLayout in : {ImageLayout::CHW, ImageLayout::HWC}) {
        for (AugmentOutputLayout out : {AugmentOutputLayout::NCHW, AugmentOutputLayout::NHWC}) {
          for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
            INFO(n.name << ", channels " << C << ", input " << (in == ImageLayout::HWC ? "HWC" : "CHW") << ", output "
                        << (out == AugmentOutputLayout::NHWC ? "NHWC" : "NCHW") << ", " << dtype_name(dtype));
            AugmentSpec s = n.spec;
            s.input_layout = in;
            s.out_layout = out;
            s.out_dtype = dtype;
            const Tensor x = in == ImageLayout::HWC ? hwc : chw;
            const Tensor cpu = augment_images(x, s, Generator(321));
            const Tensor gpu = augment_images(x.to(kCuda), s, Generator(321, kCuda));
            compare(cpu, gpu, n.exact, dtype);
          }
        }
      }
    }
  }
}

TEST_CASE("cuda augment: given parameters, large batches and the Compose batch path", "[cuda][augment]") {
  require_cuda();
  // Given parameters travel to the device and give the CPU's pixels.
  const Tensor img = noise({3, 3, 16, 16}, 9);
  AugmentSpec s;
  s.height = 16;
  s.width = 16;
  s.crop = AugmentCrop::ResizedCrop;
  s.out_height = 9;
  s.out_width = 13;
  const std::vector<AugmentParams> params{{0, 0, 16, 16, 0, 1.f, 1.f, 1.f},
                                          {3, 2, 7, 11, 1, 1.3f, 0.6f, 1.5f},
                                          {15, 15, 1, 1, 0, 0.5f, 2.f, 0.f}};
  compare(augment_images_with_params(img, s, params), augment_images_with_params(img.to(kCuda), s, params), false,
          DType::Float32);
  // More images than one launch's blocks would take at once, and the default generator's draw.
  const Tensor many = noise({1000, 1, 28, 28}, 10);
  AugmentSpec pad;
  pad.channels = 1;
  pad.height = pad.width = pad.out_height = pad.out_width = 28;
  pad.crop = AugmentCrop::PadCrop;
  pad.padding = 2;
  pad.flip_p = 0.5;
  manual_seed(5);
  const Tensor cpu = augment_images(many, pad);
  const Tensor gpu = augment_images(many.to(kCuda), pad);
  compare(cpu, gpu, true, DType::Float32);
  // Compose's batch path on the GPU, against its per-sample path on the CPU under the same draws.
  namespace T = kiln::data::transforms;
  const T::Compose compose({T::RandomResizedCrop(20), T::RandomHorizontalFlip(), T::ColorJitter(0.3, 0.3, 0.3),
                            T::Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}), T::ToDtype(DType::BFloat16)});
  const Tensor rgb = noise({8, 3, 32, 30}, 11);
  compare(compose.apply_batch(rgb, Generator(17)), compose.apply_batch(rgb.to(kCuda), Generator(17, kCuda)), false,
          DType::BFloat16);
}
