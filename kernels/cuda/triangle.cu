// CUDA tril/triu: the twin of triangle_cpu, kernels/cuda/triangle.cuh's launch on the context's
// stream.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/triangle.cuh"
#include "kernels/triangle.h"

namespace kiln {

void triangle_cuda(const StridedArg& out, const StridedArg& in, int64_t k, bool upper, const KernelContext& ctx) {
  triangle_device::triangle_launch(
      out, in, k, upper, cuda_detail::StreamLaunch{cuda_detail::raw_stream(ctx.stream), upper ? "triu" : "tril"});
}

}  // namespace kiln
