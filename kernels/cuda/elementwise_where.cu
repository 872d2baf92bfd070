// CUDA where: the launch of kernels/cuda/elementwise_where.cuh's kernel on the context's stream.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise_where.cuh"
#include "kernels/elementwise.h"

namespace kiln {

void where_cuda(const StridedArg& out, const StridedArg& cond, const Operand& x, const Operand& y, DType compute,
                const KernelContext& ctx) {
  if (out.numel() == 0) return;
  const cuda_detail::StreamLaunch launch{cuda_detail::raw_stream(ctx.stream), "where"};
  where_device::where_dispatch(out, cond, x, y, compute, launch);
}

}  // namespace kiln
