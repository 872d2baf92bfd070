// augment's CUDA kernel (the twin of kernels/cpu/augment.cpp), launched by kernels/cuda/augment.cu:
// one thread block per image (a grid-stride loop over images when the batch exceeds the grid).
// Thread 0 derives the image's parameters into shared memory; when contrast is jittered the block
// sums the fixed-point grays of its output pixels (an integer block reduction, so the mean has the
// CPU's bits whatever the order), then every thread writes whole pixels, all channels of one (y, x)
// at a time. Consecutive threads take consecutive x, so an NCHW output is written in coalesced rows
// per channel and an NHWC one in runs of C.
//
// Host-compilable: the CPU tests run the kernel on the emulator of CUDA's threads
// (tests/kernels/test_augment_simt.cpp).
#pragma once

#include <cstdint>

#include "kernels/augment.h"
#include "kernels/cuda/device_math.cuh"

namespace kiln::augment_device {

constexpr int kAugmentThreads = 256;

// Blocks for a batch: one per image, capped (the kernel loops over the rest).
inline unsigned augment_blocks(int64_t batch) { return static_cast<unsigned>(batch < 65535 * 8 ? batch : 65535 * 8); }

__global__ void augment_kernel(void* out, const uint8_t* in, int64_t batch, const AugmentPlan plan, PhiloxState philox,
                               const AugmentParams* params) {
  philox = philox_resolve(philox);  // a captured graph's seed and offset, read when the kernel runs
  KILN_SHARED(AugmentParams, shared_params);
  KILN_SHARED(float, shared_mean);
  const int64_t pixels = plan.out_height * plan.out_width;
  for (int64_t image = blockIdx.x; image < batch; image += gridDim.x) {
    if (threadIdx.x == 0) {
      shared_params = params ? params[image] : augment_image_params(plan, philox, static_cast<uint64_t>(image));
    }
    __syncthreads();
    const AugmentParams q = shared_params;
    const uint8_t* img = in + image * plan.in_image;
    float mean_gray = 0.f;
    if (q.contrast != 1.f) {
      unsigned long long sum = 0;
      for (int64_t i = threadIdx.x; i < pixels; i += blockDim.x) {
        sum += augment_gray_fixed(plan, q, img, i / plan.out_width, i % plan.out_width);
      }
      sum = cuda_detail::block_sum(sum);
      if (threadIdx.x == 0) shared_mean = augment_mean_gray(sum, pixels);
      __syncthreads();
      mean_gray = shared_mean;
    }
    const int64_t base = image * plan.out_image;
    for (int64_t i = threadIdx.x; i < pixels; i += blockDim.x) {
      const int64_t y = i / plan.out_width, x = i % plan.out_width;
      float v[4];
      augment_pixel(plan, q, mean_gray, img, y, x, v);
      const int64_t o = base + y * plan.out_y + x * plan.out_x;
      for (int64_t c = 0; c < plan.channels; ++c) augment_store(out, plan.out_dtype, o + c * plan.out_c, v[c]);
    }
    __syncthreads();  // shared_params and shared_mean are rewritten for the next image
  }
}

}  // namespace kiln::augment_device
