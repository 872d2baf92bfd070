// CUDA twin of kernels/cpu/augment.cpp: the launch of kernels/cuda/augment.cuh's kernel, one block
// per image.
#include "kernels/augment.h"
#include "kernels/cuda/augment.cuh"
#include "kernels/cuda/common.cuh"

namespace kiln {

void augment_cuda(void* out, const void* in, int64_t batch, const AugmentSpec& spec, PhiloxState philox,
                  const AugmentParams* params, const KernelContext& ctx) {
  if (batch <= 0) return;
  const AugmentPlan plan = augment_plan(spec);
  const unsigned blocks = augment_device::augment_blocks(batch);
  augment_device::augment_kernel<<<blocks, augment_device::kAugmentThreads, 0, cuda_detail::raw_stream(ctx.stream)>>>(
      out, static_cast<const uint8_t*>(in), batch, plan, philox, params);
  cuda_detail::check_launch("augment");
}

}  // namespace kiln
