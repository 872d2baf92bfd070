// Image augmentation in one pass: a batch of uint8 images in, a float32/bfloat16/float16 batch out,
// each image with its own crop, flip and colour jitter, then normalization. The non-obvious
// decision: the CPU twin and the CUDA kernel share every line of arithmetic below (KILN_HD), and
// on the device each float or double multiply, add and divide is an explicit round-to-nearest
// intrinsic, so nvcc cannot fuse a multiply and an add that the host computes in two roundings
// (kiln's host flags target baseline x86-64, which has no FMA to fuse into). Together with an exp
// written here from fma alone, an integer (order-independent) sum for contrast's mean and
// integer-only crop positions, the two twins give the same bits for every image; the tests still
// allow rounding slack where the issue allows it (bilinear, jitter). docs/augmentation.md has the
// pipeline, the Philox word layout and the differences from torchvision.
//
// Image i of a call with draw (seed, offset) reads Philox blocks i * kAugmentBlocks + k, k = 0..6
// (a pure function of (seed, offset, i), as every random op in kiln):
//   block 0: word 0 flip, word 1 brightness, word 2 contrast, word 3 saturation;
//   block 1: word 0 crop top, word 1 crop left (pad-crop and random-resized-crop positions);
//   blocks 2..6: random-resized-crop attempt a uses block 2 + a / 2, words 2 (a % 2) (scale) and
//   2 (a % 2) + 1 (log aspect ratio).
// A uniform is the word's top 24 bits over 2^24; an integer in [0, n) is (word * n) >> 32.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/macros.h"
#include "kernels/philox.h"

namespace kiln {

// Memory order of one input image (the batch dim comes first in both).
enum class ImageLayout : uint8_t { HWC, CHW };
// Memory order of the output batch; its logical sizes are [B, C, H, W] either way (NHWC is kiln's
// MemoryFormat::ChannelsLast).
enum class AugmentOutputLayout : uint8_t { NCHW, NHWC };

// The geometric step. None: output size = input size. PadCrop: torchvision RandomCrop (pad by
// `padding` with `fill` on all four sides, crop a uniformly placed out_height x out_width window).
// ResizedCrop: torchvision RandomResizedCrop (a box of random area and aspect ratio, bilinear to
// the output size). Center: torchvision CenterCrop (no padding: the output fits in the input).
// Resize: the whole image, bilinear to the output size.
enum class AugmentCrop : uint8_t { None, PadCrop, ResizedCrop, Center, Resize };

// What augment does to every image of a batch; plain data. Defaults: no crop, no flip, no
// jitter, mean 0 and std 1 (values in [0, 1]), float32 NCHW out.
struct AugmentSpec {
  ImageLayout input_layout = ImageLayout::CHW;
  int64_t channels = 3;  // 1 to 4; with 2 or 4 the last is alpha, which jitter leaves alone
  int64_t height = 0, width = 0;
  int64_t out_height = 0, out_width = 0;
  AugmentCrop crop = AugmentCrop::None;
  int64_t padding = 0;  // PadCrop
  uint8_t fill = 0;     // PadCrop: the value of padded pixels, in every channel
  double scale_min = 0.08, scale_max = 1.0;               // ResizedCrop: the box's share of the area
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // ResizedCrop: width / height, log-uniform
  double flip_p = 0.0;                                   // horizontal flip probability
  // ColorJitter strengths s: a factor uniform in [max(0, 1 - s), 1 + s]; 0 leaves the image alone.
  double brightness = 0.0, contrast = 0.0, saturation = 0.0;
  double mean[4] = {0.0, 0.0, 0.0, 0.0};  // per channel: out = (v - mean) / std
  double std[4] = {1.0, 1.0, 1.0, 1.0};
  DType out_dtype = DType::Float32;  // Float32, BFloat16 or Float16
  AugmentOutputLayout out_layout = AugmentOutputLayout::NCHW;
};

// One image's parameters. The box is in input pixel coordinates: for a direct (unscaled) crop it
// is out_height x out_width and may reach into the padding (pixels outside the input read `fill`);
// for a bilinear one it lies inside the input and is resized to the output. The flip mirrors the
// output horizontally. A jitter factor of 1 leaves the image as it is.
struct AugmentParams {
  int64_t top = 0, left = 0, height = 0, width = 0;
  int32_t flip = 0;
  float brightness = 1.f, contrast = 1.f, saturation = 1.f;
};

// Philox blocks per image (blocks 0..6 are used; see the file comment).
inline constexpr uint64_t kAugmentBlocks = 8;
// Attempts of random-resized-crop before its center-crop fallback (as torchvision).
inline constexpr int kAugmentAttempts = 10;

// The spec in the form the per-pixel code reads, derived on the host by both twins (so also the
// logarithms agree): element strides of one image in and out, thresholds and ranges.
struct AugmentPlan {
  int64_t channels = 0, height = 0, width = 0, out_height = 0, out_width = 0;
  int64_t in_c = 0, in_y = 0, in_x = 0, in_image = 0;
  int64_t out_c = 0, out_y = 0, out_x = 0, out_image = 0;
  AugmentCrop crop = AugmentCrop::None;
  int64_t padding = 0;
  float fill = 0.f;  // fill / 255
  double scale_min = 0, scale_span = 0, log_ratio_min = 0, log_ratio_span = 0, ratio_min = 0, ratio_max = 0;
  uint32_t flip_threshold = 0;  // flip iff (word >> 8) < flip_threshold
  float jitter_lo[3] = {1.f, 1.f, 1.f}, jitter_span[3] = {0.f, 0.f, 0.f};  // brightness, contrast, saturation
  bool jitter[3] = {false, false, false};
  int color_channels = 0;  // the channels jitter touches: 3 for RGB(A), 1 for gray(+alpha)
  float mean[4] = {}, std[4] = {};
  DType out_dtype = DType::Float32;
};

// Host: the plan of a valid spec (core/ops/augment.h checks specs).
AugmentPlan augment_plan(const AugmentSpec& spec);

// out: [batch, C, out_height, out_width] in spec.out_dtype, NCHW or NHWC memory, dense. in: batch
// uint8 images of spec's layout and sizes, dense. Image i's parameters are params[i] when params
// is non-null (memory the kernel can read: host for the CPU twin, device for the CUDA one), else
// derived from Philox (seed, offset, i) as the file comment says.
void augment_cpu(void* out, const void* in, int64_t batch, const AugmentSpec& spec, PhiloxState philox,
                 const AugmentParams* params, const KernelContext& ctx);
void augment_cuda(void* out, const void* in, int64_t batch, const AugmentSpec& spec, PhiloxState philox,
                  const AugmentParams* params, const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(augment);
}  // namespace kernels

// --- arithmetic shared by both twins ---------------------------------------------------------
// Each operation rounds once on both devices: on CUDA through the _rn intrinsics, which nvcc never
// contracts into a fused multiply-add.

namespace augment_detail {

KILN_HD float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KILN_HD float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KILN_HD float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
KILN_HD float fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
KILN_HD double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
KILN_HD double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
KILN_HD double ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
KILN_HD double dfma(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
KILN_HD double dsqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
// Round half to even, as Python's round() in torchvision's box arithmetic.
KILN_HD double drint(double a) {
#if defined(__CUDA_ARCH__)
  return rint(a);
#else
  return std::nearbyint(a);
#endif
}
KILN_HD float frint(float a) {
#if defined(__CUDA_ARCH__)
  return rintf(a);
#else
  return std::nearbyint(a);
#endif
}
KILN_HD float clamp01(float v) { return v < 0.f ? 0.f : (v > 1.f ? 1.f : v); }

// e^x for |x| < 700 from fma alone: x = k ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to
// degree 13 (relative error below 1e-16), times 2^k built from the exponent bits. Not libm's
// value to the last bit, but the same bits on both devices, which libm's exp is not.
KILN_HD double exp_exact(double x) {
  const double k = drint(dmul(x, 1.4426950408889634));
  double r = dfma(-k, 6.93147180369123816490e-01, x);  // ln2 in two parts (fdlibm's split)
  r = dfma(-k, 1.90821492927058770002e-10, r);
  double p = 1.0 / 6227020800.0;  // 1/13!
  const double inv_fact[13] = {1.0,          1.0,           1.0 / 2,        1.0 / 6,         1.0 / 24,
                               1.0 / 120,    1.0 / 720,     1.0 / 5040,     1.0 / 40320,     1.0 / 362880,
                               1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600};
  for (int n = 12; n >= 0; --n) p = dfma(p, r, inv_fact[n]);
  const int64_t e = static_cast<int64_t>(k) + 1023;
  uint64_t bits = static_cast<uint64_t>(e) << 52;
  double scale;
  static_assert(sizeof(bits) == sizeof(scale));
#if defined(__CUDA_ARCH__)
  scale = __longlong_as_double(static_cast<long long>(bits));
#else
  __builtin_memcpy(&scale, &bits, sizeof(scale));
#endif
  return dmul(p, scale);
}

// An integer in [0, n) from a word (n <= 2^32): the high half of word * n.
KILN_HD int64_t below(uint32_t word, int64_t n) {
  return static_cast<int64_t>((static_cast<uint64_t>(word) * static_cast<uint64_t>(n)) >> 32);
}
// The word's 24-bit uniform in [0, 1), exact in float and double.
KILN_HD double uniform24(uint32_t word) { return static_cast<double>(word >> 8) * (1.0 / 16777216.0); }

}  // namespace augment_detail

// Jitter factor k (brightness, contrast, saturation) from its word: lo + u * span in float.
KILN_HD float jitter_factor(const AugmentPlan& p, int k, uint32_t word) {
  using namespace augment_detail;
  return fadd(p.jitter_lo[k], fmul(static_cast<float>(uniform24(word)), p.jitter_span[k]));
}

// Image `image`'s parameters under a resolved Philox state (philox_resolve already applied).
KILN_HD AugmentParams augment_image_params(const AugmentPlan& p, PhiloxState philox, uint64_t image) {
  using namespace augment_detail;
  const uint64_t base = image * kAugmentBlocks;
  const Philox4 b0 = philox_block(philox.seed, philox.offset, base);
  AugmentParams q;
  q.flip = (b0.v[0] >> 8) < p.flip_threshold ? 1 : 0;
  if (p.jitter[0]) q.brightness = jitter_factor(p, 0, b0.v[1]);
  if (p.jitter[1]) q.contrast = jitter_factor(p, 1, b0.v[2]);
  if (p.jitter[2]) q.saturation = jitter_factor(p, 2, b0.v[3]);
  const int64_t H = p.height, W = p.width;
  q.top = 0;
  q.left = 0;
  q.height = H;
  q.width = W;
  switch (p.crop) {
    case AugmentCrop::None:
    case AugmentCrop::Resize: break;
    case AugmentCrop::Center:
      // torchvision: int(round((H - h) / 2.0)), half to even
      q.top = static_cast<int64_t>(drint(static_cast<double>(H - p.out_height) * 0.5));
      q.left = static_cast<int64_t>(drint(static_cast<double>(W - p.out_width) * 0.5));
      q.height = p.out_height;
      q.width = p.out_width;
      break;
    case AugmentCrop::PadCrop: {
      const Philox4 b1 = philox_block(philox.seed, philox.offset, base + 1);
      q.top = below(b1.v[0], H + 2 * p.padding - p.out_height + 1) - p.padding;
      q.left = below(b1.v[1], W + 2 * p.padding - p.out_width + 1) - p.padding;
      q.height = p.out_height;
      q.width = p.out_width;
      break;
    }
    case AugmentCrop::ResizedCrop: {
      const double area = static_cast<double>(H) * static_cast<double>(W);
      Philox4 blk{};
      for (int a = 0; a < kAugmentAttempts; ++a) {
        if ((a & 1) == 0) blk = philox_block(philox.seed, philox.offset, base + 2 + static_cast<uint64_t>(a / 2));
        const double target = dmul(area, dadd(p.scale_min, dmul(uniform24(blk.v[(a & 1) * 2]), p.scale_span)));
        const double aspect =
            exp_exact(dadd(p.log_ratio_min, dmul(uniform24(blk.v[(a & 1) * 2 + 1]), p.log_ratio_span)));
        const int64_t w = static_cast<int64_t>(drint(dsqrt(dmul(target, aspect))));
        const int64_t h = static_cast<int64_t>(drint(dsqrt(ddiv(target, aspect))));
        if (w > 0 && w <= W && h > 0 && h <= H) {
          const Philox4 b1 = philox_block(philox.seed, philox.offset, base + 1);
          q.top = below(b1.v[0], H - h + 1);
          q.left = below(b1.v[1], W - w + 1);
          q.height = h;
          q.width = w;
          return q;
        }
      }
      // torchvision's fallback: the largest centered box whose ratio is within range
      const double in_ratio = ddiv(static_cast<double>(W), static_cast<double>(H));
      int64_t w = W, h = H;
      if (in_ratio < p.ratio_min) {
        h = static_cast<int64_t>(drint(ddiv(static_cast<double>(W), p.ratio_min)));
      } else if (in_ratio > p.ratio_max) {
        w = static_cast<int64_t>(drint(dmul(static_cast<double>(H), p.ratio_max)));
      }
      h = h < 1 ? 1 : (h > H ? H : h);
      w = w < 1 ? 1 : (w > W ? W : w);
      q.top = (H - h) / 2;
      q.left = (W - w) / 2;
      q.height = h;
      q.width = w;
      break;
    }
  }
  return q;
}

// Whether the parameters scale their box (bilinear) or copy it pixel for pixel.
KILN_HD bool augment_bilinear(const AugmentPlan& p) {
  return p.crop == AugmentCrop::ResizedCrop || p.crop == AugmentCrop::Resize;
}

// The channels of output pixel (y, x) after the geometric step and brightness, in [0, 1]; img
// points at the image's first byte. v has room for 4 channels.
KILN_HD void augment_geometry(const AugmentPlan& p, const AugmentParams& q, const uint8_t* img, int64_t y, int64_t x,
                              float* v) {
  using namespace augment_detail;
  const int64_t xs = q.flip ? p.out_width - 1 - x : x;
  const int64_t C = p.channels;
  if (!augment_bilinear(p)) {
    const int64_t sy = q.top + y, sx = q.left + xs;
    if (sy >= 0 && sy < p.height && sx >= 0 && sx < p.width) {
      const uint8_t* px = img + sy * p.in_y + sx * p.in_x;
      for (int64_t c = 0; c < C; ++c) v[c] = fdiv(static_cast<float>(px[c * p.in_c]), 255.f);
    } else {
      for (int64_t c = 0; c < C; ++c) v[c] = p.fill;
    }
  } else {
    // align_corners=False, as torch's bilinear resize: src = scale (dst + 0.5) - 0.5, clamped at 0
    const float scale_y = fdiv(static_cast<float>(q.height), static_cast<float>(p.out_height));
    const float scale_x = fdiv(static_cast<float>(q.width), static_cast<float>(p.out_width));
    float fy = fsub(fmul(scale_y, fadd(static_cast<float>(y), 0.5f)), 0.5f);
    float fx = fsub(fmul(scale_x, fadd(static_cast<float>(xs), 0.5f)), 0.5f);
    fy = fy < 0.f ? 0.f : fy;
    fx = fx < 0.f ? 0.f : fx;
    int64_t y0 = static_cast<int64_t>(fy), x0 = static_cast<int64_t>(fx);
    y0 = y0 > q.height - 1 ? q.height - 1 : y0;
    x0 = x0 > q.width - 1 ? q.width - 1 : x0;
    const int64_t y1 = y0 + (y0 < q.height - 1 ? 1 : 0), x1 = x0 + (x0 < q.width - 1 ? 1 : 0);
    const float ly = fsub(fy, static_cast<float>(y0)), lx = fsub(fx, static_cast<float>(x0));
    const float hy = fsub(1.f, ly), hx = fsub(1.f, lx);
    const uint8_t* r0 = img + (q.top + y0) * p.in_y;
    const uint8_t* r1 = img + (q.top + y1) * p.in_y;
    const int64_t c0 = (q.left + x0) * p.in_x, c1 = (q.left + x1) * p.in_x;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t o = c * p.in_c;
      const float a = static_cast<float>(r0[c0 + o]), b = static_cast<float>(r0[c1 + o]);
      const float d = static_cast<float>(r1[c0 + o]), e = static_cast<float>(r1[c1 + o]);
      const float top = fadd(fmul(hx, a), fmul(lx, b)), bottom = fadd(fmul(hx, d), fmul(lx, e));
      v[c] = fdiv(fadd(fmul(hy, top), fmul(ly, bottom)), 255.f);
    }
  }
  if (q.brightness != 1.f) {
    for (int c = 0; c < p.color_channels; ++c) v[c] = clamp01(fmul(v[c], q.brightness));
  }
}

// Grayscale of a pixel's colour channels (0.299 R + 0.587 G + 0.114 B; gray images: the channel).
KILN_HD float augment_gray(const AugmentPlan& p, const float* v) {
  using namespace augment_detail;
  if (p.color_channels < 3) return v[0];
  return fadd(fadd(fmul(0.299f, v[0]), fmul(0.587f, v[1])), fmul(0.114f, v[2]));
}

// Contrast's mean is the sum of these over the output pixels (integers: any order gives the same
// sum) divided by 2^24 and the pixel count.
KILN_HD uint64_t augment_gray_fixed(const AugmentPlan& p, const AugmentParams& q, const uint8_t* img, int64_t y,
                                    int64_t x) {
  float v[4];
  augment_geometry(p, q, img, y, x, v);
  return static_cast<uint64_t>(augment_detail::frint(augment_detail::fmul(augment_gray(p, v), 16777216.f)));
}
KILN_HD float augment_mean_gray(uint64_t fixed_sum, int64_t pixels) {
  return static_cast<float>(augment_detail::ddiv(static_cast<double>(fixed_sum),
                                                 augment_detail::dmul(static_cast<double>(pixels), 16777216.0)));
}

// Output pixel (y, x) in every channel, before the cast to the output dtype: geometry, brightness,
// contrast (blend with `mean_gray`), saturation (blend with the pixel's gray), each clamped to
// [0, 1], then (v - mean) / std.
KILN_HD void augment_pixel(const AugmentPlan& p, const AugmentParams& q, float mean_gray, const uint8_t* img,
                           int64_t y, int64_t x, float* v) {
  using namespace augment_detail;
  augment_geometry(p, q, img, y, x, v);
  if (q.contrast != 1.f) {
    const float rest = fmul(fsub(1.f, q.contrast), mean_gray);
    for (int c = 0; c < p.color_channels; ++c) v[c] = clamp01(fadd(fmul(q.contrast, v[c]), rest));
  }
  if (q.saturation != 1.f && p.color_channels == 3) {
    const float rest = fmul(fsub(1.f, q.saturation), augment_gray(p, v));
    for (int c = 0; c < 3; ++c) v[c] = clamp01(fadd(fmul(q.saturation, v[c]), rest));
  }
  for (int64_t c = 0; c < p.channels; ++c) v[c] = fdiv(fsub(v[c], p.mean[c]), p.std[c]);
}

// Element i of an output of dtype t (Float32, BFloat16 or Float16), rounded to nearest even.
KILN_HD void augment_store(void* out, DType t, int64_t i, float v) {
  if (t == DType::Float32) {
    static_cast<float*>(out)[i] = v;
  } else if (t == DType::BFloat16) {
    static_cast<BFloat16*>(out)[i] = BFloat16(v);
  } else {
    static_cast<Half*>(out)[i] = Half(v);
  }
}

}  // namespace kiln
