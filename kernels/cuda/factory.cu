// CUDA fill and arange: the twins of fill_cpu and arange_cpu. A fill of +0 into dense memory is a
// memset; other fills copy a scalar through the unary kernels (vectorized when dense), so every dtype
// gets the same cast as on the CPU; arange is kernels/cuda/factory.cuh's launch, which rounds like
// the CPU (no FMA).
#include <cmath>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/factory.cuh"
#include "kernels/elementwise.h"
#include "kernels/factory.h"

namespace kiln {

void fill_cuda(const StridedArg& out, double value, int64_t int_value, const KernelContext& ctx) {
  const int64_t n = out.numel();
  if (n == 0) return;
  if (value == 0 && !std::signbit(value) && int_value == 0 && cuda_detail::dense_1d(out)) {
    const size_t bytes = static_cast<size_t>(n) * element_size(out.dtype);
    const cudaError_t err = cudaMemsetAsync(out.data, 0, bytes, cuda_detail::raw_stream(ctx.stream));
    cuda_detail::check_cuda(err, "fill", "cudaMemsetAsync");
    return;
  }
  // Otherwise a copy of a scalar, exactly as fill_cpu: the unary kernels (vectorized when dense).
  Operand v;
  v.is_scalar = true;
  v.scalar = fill_compute_value(out.dtype, value, int_value);
  v.int_scalar = int_value;
  unary_cuda(out, v, UnaryOp::Copy, compute_dtype_for(out.dtype), 0, 0, ctx);
}

void arange_cuda(const StridedArg& out, double start, double step, const KernelContext& ctx) {
  factory_device::arange_launch(out, start, step,
                                cuda_detail::StreamLaunch{cuda_detail::raw_stream(ctx.stream), "arange"});
}

}  // namespace kiln
