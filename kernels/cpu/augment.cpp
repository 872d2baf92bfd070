// CPU twin of the augmentation kernel, and the plan both twins read. Images run in parallel, each
// on one thread with the per-pixel code of kernels/augment.h: contrast's mean first (a pass that
// stops after brightness), then the output pass, exactly what a CUDA thread block does for its
// image. A batch of one (a data loader's per-sample call) runs inline, without the pool.
#include "kernels/augment.h"

#include <cmath>

#include "kernels/cpu/parallel.h"

namespace kiln {

AugmentPlan augment_plan(const AugmentSpec& s) {
  AugmentPlan p;
  p.channels = s.channels;
  p.height = s.height;
  p.width = s.width;
  p.out_height = s.out_height;
  p.out_width = s.out_width;
  if (s.input_layout == ImageLayout::HWC) {
    p.in_c = 1;
    p.in_x = s.channels;
    p.in_y = s.width * s.channels;
  } else {
    p.in_x = 1;
    p.in_y = s.width;
    p.in_c = s.height * s.width;
  }
  p.in_image = s.channels * s.height * s.width;
  if (s.out_layout == AugmentOutputLayout::NHWC) {
    p.out_c = 1;
    p.out_x = s.channels;
    p.out_y = s.out_width * s.channels;
  } else {
    p.out_x = 1;
    p.out_y = s.out_width;
    p.out_c = s.out_height * s.out_width;
  }
  p.out_image = s.channels * s.out_height * s.out_width;
  p.crop = s.crop;
  p.padding = s.crop == AugmentCrop::PadCrop ? s.padding : 0;
  p.fill = static_cast<float>(s.fill) / 255.f;
  if (s.crop == AugmentCrop::ResizedCrop) {
    p.scale_min = s.scale_min;
    p.scale_span = s.scale_max - s.scale_min;
    p.log_ratio_min = std::log(s.ratio_min);
    p.log_ratio_span = std::log(s.ratio_max) - p.log_ratio_min;
    p.ratio_min = s.ratio_min;
    p.ratio_max = s.ratio_max;
  }
  // flip iff u < p, u = (word >> 8) / 2^24: an integer test against ceil(p 2^24) (exact)
  const double t = std::ceil(s.flip_p * 16777216.0);
  p.flip_threshold = t <= 0 ? 0u : (t >= 16777216.0 ? 16777216u : static_cast<uint32_t>(t));
  const double strength[3] = {s.brightness, s.contrast, s.saturation};
  for (int k = 0; k < 3; ++k) {
    p.jitter[k] = strength[k] > 0;
    const double lo = strength[k] < 1 ? 1 - strength[k] : 0.0;
    p.jitter_lo[k] = static_cast<float>(lo);
    p.jitter_span[k] = static_cast<float>(1 + strength[k] - lo);
  }
  p.color_channels = s.channels >= 3 ? 3 : 1;
  for (int c = 0; c < 4; ++c) {
    p.mean[c] = static_cast<float>(s.mean[c]);
    p.std[c] = static_cast<float>(s.std[c]);
  }
  p.out_dtype = s.out_dtype;
  return p;
}

namespace {

void augment_one(const AugmentPlan& p, const AugmentParams& q, void* out, const uint8_t* img, int64_t image) {
  const int64_t oh = p.out_height, ow = p.out_width;
  float mean_gray = 0.f;
  if (q.contrast != 1.f) {
    uint64_t sum = 0;
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) sum += augment_gray_fixed(p, q, img, y, x);
    }
    mean_gray = augment_mean_gray(sum, oh * ow);
  }
  const int64_t base = image * p.out_image;
  float v[4];
  for (int64_t y = 0; y < oh; ++y) {
    for (int64_t x = 0; x < ow; ++x) {
      augment_pixel(p, q, mean_gray, img, y, x, v);
      const int64_t o = base + y * p.out_y + x * p.out_x;
      for (int64_t c = 0; c < p.channels; ++c) augment_store(out, p.out_dtype, o + c * p.out_c, v[c]);
    }
  }
}

}  // namespace

void augment_cpu(void* out, const void* in, int64_t batch, const AugmentSpec& spec, PhiloxState philox,
                 const AugmentParams* params, const KernelContext&) {
  if (batch <= 0) return;
  const AugmentPlan p = augment_plan(spec);
  philox = philox_resolve(philox);
  const uint8_t* images = static_cast<const uint8_t*>(in);
  auto run = [&](int64_t i) {
    const AugmentParams q = params ? params[i] : augment_image_params(p, philox, static_cast<uint64_t>(i));
    augment_one(p, q, out, images + i * p.in_image, i);
  };
  if (batch == 1) {
    run(0);
    return;
  }
  const int64_t cost = p.out_image * 16;  // roughly: a few dozen operations per output element
  cpu::parallel_for(batch, cpu::grain_for(cost), [&](int64_t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) run(i);
  });
}

}  // namespace kiln
