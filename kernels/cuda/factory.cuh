// arange's CUDA kernels (the twins of arange_cpu) and their launch, run by kernels/cuda/factory.cu.
// Integer outputs count in int64; float outputs compute start + i * step in double, rounded once
// per operation as on the CPU (explicit round-to-nearest intrinsics, so nvcc fuses no FMA).
//
// Host-compilable: the CPU tests run the kernels on the emulator of CUDA's threads
// (tests/kernels/test_factory_simt.cpp).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/dtype.h"
#include "kernels/strided.h"

namespace kiln::factory_device {

using cuda_detail::store_as;

__global__ void arange_int_kernel(const __grid_constant__ cuda_detail::OffsetCalc<1> calc, void* out,
                                  DType out_dtype, int64_t n, int64_t start, int64_t step) {
  for (int64_t i = cuda_detail::global_thread(); i < n; i += cuda_detail::grid_threads()) {
    int64_t off[1];
    calc.offsets(i, off);
    store_as<int64_t>(out, out_dtype, off[0], start + i * step);
  }
}

__global__ void arange_float_kernel(const __grid_constant__ cuda_detail::OffsetCalc<1> calc, void* out,
                                    DType out_dtype, int64_t n, double start, double step) {
  for (int64_t i = cuda_detail::global_thread(); i < n; i += cuda_detail::grid_threads()) {
    int64_t off[1];
    calc.offsets(i, off);
    store_as<double>(out, out_dtype, off[0], __dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
  }
}

// Launches through `launch` (cuda_detail::StreamLaunch on a GPU) the kernel of out's compute type.
template <class Launch> void arange_launch(const StridedArg& out, double start, double step, const Launch& launch) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t* strides[1] = {out.strides};
  const cuda_detail::OffsetCalc<1> calc = cuda_detail::make_offset_calc<1>(out, strides);
  if (compute_dtype_for(out.dtype) == DType::Int64) {
    launch(arange_int_kernel, cuda_detail::grid_for(n), cuda_detail::kThreads, calc, out.data, out.dtype, n,
           static_cast<int64_t>(start), static_cast<int64_t>(step));
  } else {
    launch(arange_float_kernel, cuda_detail::grid_for(n), cuda_detail::kThreads, calc, out.data, out.dtype, n, start,
           step);
  }
}

}  // namespace kiln::factory_device
