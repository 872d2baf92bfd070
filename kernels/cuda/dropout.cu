// CUDA twin of kernels/cpu/dropout.cpp: kernels/cuda/dropout.cuh's launch on the context's stream.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dropout.cuh"
#include "kernels/dropout.h"

namespace kiln {

void dropout_cuda(const StridedArg& out, const StridedArg& in, double p, PhiloxState philox,
                  const KernelContext& ctx) {
  dropout_device::dropout_launch(out, in, p, philox,
                                 cuda_detail::StreamLaunch{cuda_detail::raw_stream(ctx.stream), "dropout"});
}

}  // namespace kiln
