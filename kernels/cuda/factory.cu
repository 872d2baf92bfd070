// CUDA fill and arange: the twins of fill_cpu and arange_cpu. A fill of +0 into dense memory is a
// memset; other fills copy a scalar through the unary kernels (vectorized when dense), so every dtype
// gets the same cast as on the CPU; arange rounds like the CPU (no FMA).
#include <cmath>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"
#include "kernels/factory.h"

namespace kiln {
namespace {

using namespace cuda_detail;

// Integer outputs: int64 arithmetic, as arange_cpu.
__global__ void arange_int_kernel(const __grid_constant__ OffsetCalc<1> calc, void* out, DType out_dtype, int64_t n,
                                  int64_t start, int64_t step) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[1];
    calc.offsets(i, off);
    store_as<int64_t>(out, out_dtype, off[0], start + i * step);
  }
}

// Float outputs: start + i * step in double, rounded once per operation as on the CPU (no FMA).
__global__ void arange_float_kernel(const __grid_constant__ OffsetCalc<1> calc, void* out, DType out_dtype, int64_t n,
                                    double start, double step) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[1];
    calc.offsets(i, off);
    store_as<double>(out, out_dtype, off[0], __dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
  }
}

}  // namespace

void fill_cuda(const StridedArg& out, double value, const KernelContext& ctx) {
  const int64_t n = out.numel();
  if (n == 0) return;
  if (value == 0 && !std::signbit(value) && dense_1d(out)) {
    const cudaError_t err =
        cudaMemsetAsync(out.data, 0, static_cast<size_t>(n) * element_size(out.dtype), raw_stream(ctx.stream));
    cuda_detail::check_cuda(err, "fill", "cudaMemsetAsync");
    return;
  }
  // Otherwise a copy of a scalar, exactly as fill_cpu: the unary kernels (vectorized when dense).
  Operand v;
  v.is_scalar = true;
  v.scalar = value;
  unary_cuda(out, v, UnaryOp::Copy, compute_dtype_for(out.dtype), 0, 0, ctx);
}

void arange_cuda(const StridedArg& out, double start, double step, const KernelContext& ctx) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t* strides[1] = {out.strides};
  const OffsetCalc<1> calc = make_offset_calc<1>(out, strides);
  const cudaStream_t s = raw_stream(ctx.stream);
  if (compute_dtype_for(out.dtype) == DType::Int64) {
    arange_int_kernel<<<grid_for(n), kThreads, 0, s>>>(calc, out.data, out.dtype, n, static_cast<int64_t>(start),
                                                       static_cast<int64_t>(step));
  } else {
    arange_float_kernel<<<grid_for(n), kThreads, 0, s>>>(calc, out.data, out.dtype, n, start, step);
  }
  check_launch("arange");
}

}  // namespace kiln
