// CUDA where: the twin of where_cpu, through the same offset calculator and cast-on-load path as the
// other elementwise kernels, instantiated per compute type only.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"

namespace kiln {
namespace {

using namespace cuda_detail;

template <typename C>
__global__ void where_kernel(const __grid_constant__ OffsetCalc<4> calc, void* out, DType out_dtype, const void* cond,
                             DType cond_dtype, const InValue<C> x, const InValue<C> y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[4];
    calc.offsets(i, off);
    const bool c = load_as<int64_t>(cond, cond_dtype, off[1]) != 0;
    store_as<C>(out, out_dtype, off[0], c ? x.load(off[2]) : y.load(off[3]));
  }
}

template <typename C> InValue<C> in_value(const Operand& o) {
  InValue<C> v;
  v.data = o.is_scalar ? nullptr : o.arg.data;
  v.dtype = o.arg.dtype;
  v.is_scalar = o.is_scalar;
  v.scalar = static_cast<C>(o.scalar);
  return v;
}

template <typename C>
void launch_where(const StridedArg& out, const StridedArg& cond, const Operand& x, const Operand& y,
                  cudaStream_t stream) {
  const int64_t n = out.numel();
  const int64_t* strides[4] = {out.strides, cond.strides, x.is_scalar ? nullptr : x.arg.strides,
                               y.is_scalar ? nullptr : y.arg.strides};
  where_kernel<C><<<grid_for(n), kThreads, 0, stream>>>(make_offset_calc<4>(out, strides), out.data, out.dtype,
                                                        cond.data, cond.dtype, in_value<C>(x), in_value<C>(y), n);
}

}  // namespace

void where_cuda(const StridedArg& out, const StridedArg& cond, const Operand& x, const Operand& y, DType compute,
                const KernelContext& ctx) {
  if (out.numel() == 0) return;
  const cudaStream_t s = raw_stream(ctx.stream);
  switch (compute) {
    case DType::Float32: launch_where<float>(out, cond, x, y, s); break;
    case DType::Float64: launch_where<double>(out, cond, x, y, s); break;
    case DType::Int64: launch_where<int64_t>(out, cond, x, y, s); break;
    default: throw DTypeError(std::string("where: no CUDA kernel for compute dtype ") + dtype_name(compute));
  }
  check_launch("where");
}

}  // namespace kiln
