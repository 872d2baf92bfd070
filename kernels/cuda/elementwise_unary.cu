// CUDA unary elementwise ops: unary_cuda switches on the op and launches
// kernels/cuda/elementwise_unary.cuh's unary_dispatch on the context's stream.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise_unary.cuh"
#include "kernels/elementwise.h"

namespace kiln {

void unary_cuda(const StridedArg& out, const Operand& in, UnaryOp op, DType compute, double a, double b,
                const KernelContext& ctx) {
  if (out.numel() == 0) return;
  unary_device::unary_params(op, compute, a, b);
  const cuda_detail::StreamLaunch launch{cuda_detail::raw_stream(ctx.stream), unary_device::unary_name(op)};
#define KILN_UNARY_CASE(NAME) \
  case UnaryOp::NAME: unary_device::unary_dispatch<UnaryOp::NAME>(out, in, compute, a, b, launch); break;
  switch (op) {
    KILN_FOR_EACH_UNARY_OP(KILN_UNARY_CASE)
  }
#undef KILN_UNARY_CASE
}

}  // namespace kiln
