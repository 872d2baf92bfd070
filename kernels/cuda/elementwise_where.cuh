// The CUDA where kernel, the twin of where_cpu: out = cond ? x : y through the same offset
// calculator and cast-on-load path as the other elementwise kernels, instantiated per compute type
// only, and where_dispatch, which launches it.
//
// Host-compilable: where_dispatch launches through a launcher (cuda_detail::StreamLaunch in
// kernels/cuda/elementwise_where.cu), and the CPU tests run it on the emulator of CUDA's threads
// (tests/kernels/test_elementwise_simt.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/elementwise.h"
#include "kernels/error.h"

namespace kiln::where_device {

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

template <typename C, class Launch>
void launch_where(const StridedArg& out, const StridedArg& cond, const Operand& x, const Operand& y,
                  const Launch& launch) {
  const int64_t n = out.numel();
  const int64_t* strides[4] = {out.strides, cond.strides, x.is_scalar ? nullptr : x.arg.strides,
                               y.is_scalar ? nullptr : y.arg.strides};
  launch(where_kernel<C>, grid_for(n), unsigned{kThreads}, make_offset_calc<4>(out, strides), out.data, out.dtype,
         static_cast<const void*>(cond.data), cond.dtype, in_value<C>(x), in_value<C>(y), n);
}

// where_cuda's launch in the compute type. Each launch is a call launch(kernel, grid, block,
// arguments...) (cuda_detail::StreamLaunch on a GPU).
template <class Launch>
void where_dispatch(const StridedArg& out, const StridedArg& cond, const Operand& x, const Operand& y, DType compute,
                    const Launch& launch) {
  switch (compute) {
    case DType::Float32: launch_where<float>(out, cond, x, y, launch); return;
    case DType::Float64: launch_where<double>(out, cond, x, y, launch); return;
    case DType::Int64: launch_where<int64_t>(out, cond, x, y, launch); return;
    default: throw DTypeError(std::string("where: no CUDA kernel for compute dtype ") + dtype_name(compute));
  }
}

}  // namespace kiln::where_device
