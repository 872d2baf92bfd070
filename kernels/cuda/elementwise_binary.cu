// CUDA binary elementwise ops: binary_cuda switches on the op and launches
// kernels/cuda/elementwise_binary.cuh's binary_dispatch on the context's stream.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise_binary.cuh"
#include "kernels/elementwise.h"

namespace kiln {

void binary_cuda(const StridedArg& out, const Operand& x, const Operand& y, BinaryOp op, DType compute, double alpha,
                 double beta, const KernelContext& ctx) {
  if (out.numel() == 0) return;
  const cuda_detail::StreamLaunch launch{cuda_detail::raw_stream(ctx.stream), binary_device::binary_name(op)};
#define KILN_BINARY_CASE(NAME) \
  case BinaryOp::NAME: binary_device::binary_dispatch<BinaryOp::NAME>(out, x, y, compute, alpha, beta, launch); break;
  switch (op) {
    KILN_FOR_EACH_BINARY_OP(KILN_BINARY_CASE)
  }
#undef KILN_BINARY_CASE
}

}  // namespace kiln
