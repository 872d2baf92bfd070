// tril's and triu's CUDA kernel (the twin of triangle_cpu) and its launch, run by
// kernels/cuda/triangle.cu. Elements are copied as raw bits of their size (1, 2, 4 or 8 bytes),
// since input and output share one dtype: there is neither a compute type nor a kernel per dtype,
// and all-zero bits are zero in every dtype.
//
// Host-compilable: the CPU tests run the kernel on the emulator of CUDA's threads
// (tests/kernels/test_factory_simt.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/strided.h"

namespace kiln::triangle_device {

// Keeps element (r, c) of each matrix when c - r <= k (tril) or c - r >= k (triu), else writes 0.
// W: an unsigned integer of the element's size.
template <typename W>
__global__ void triangle_kernel(const __grid_constant__ cuda_detail::OffsetCalc<2> calc, W* out, const W* in,
                                int64_t n, int64_t rows, int64_t cols, int64_t k, bool upper) {
  for (int64_t i = cuda_detail::global_thread(); i < n; i += cuda_detail::grid_threads()) {
    int64_t r, c;
    if (calc.small) {
      const uint32_t q = static_cast<uint32_t>(i) / static_cast<uint32_t>(cols);
      c = static_cast<int64_t>(static_cast<uint32_t>(i) - q * static_cast<uint32_t>(cols));
      r = static_cast<int64_t>(q % static_cast<uint32_t>(rows));
    } else {
      c = i % cols;
      r = (i / cols) % rows;
    }
    int64_t off[2];
    calc.offsets(i, off);
    const bool keep = upper ? (c - r >= k) : (c - r <= k);
    out[off[0]] = keep ? in[off[1]] : W(0);
  }
}

template <typename W, class Launch>
void launch_words(const StridedArg& out, const StridedArg& in, int64_t k, bool upper, const Launch& launch) {
  const int64_t n = out.numel();
  const int64_t* strides[2] = {out.strides, in.strides};
  launch(triangle_kernel<W>, cuda_detail::grid_for(n), cuda_detail::kThreads,
         cuda_detail::make_offset_calc<2>(out, strides), static_cast<W*>(out.data), static_cast<const W*>(in.data), n,
         out.sizes[out.ndim - 2], out.sizes[out.ndim - 1], k, upper);
}

// Refuses fewer than 2 dims and differing dtypes by name, then launches through `launch`
// (cuda_detail::StreamLaunch on a GPU) the kernel of the element's size.
template <class Launch>
void triangle_launch(const StridedArg& out, const StridedArg& in, int64_t k, bool upper, const Launch& launch) {
  const char* name = upper ? "triu" : "tril";
  if (out.numel() == 0) return;
  if (out.ndim < 2) throw ShapeError(std::string(name) + ": expects at least 2 dims");
  if (in.dtype != out.dtype) {
    throw DTypeError(std::string(name) + ": input " + dtype_name(in.dtype) + " and output " + dtype_name(out.dtype) +
                     " differ");
  }
  switch (element_size(out.dtype)) {
    case 1: launch_words<uint8_t>(out, in, k, upper, launch); break;
    case 2: launch_words<uint16_t>(out, in, k, upper, launch); break;
    case 4: launch_words<uint32_t>(out, in, k, upper, launch); break;
    default: launch_words<uint64_t>(out, in, k, upper, launch); break;
  }
}

}  // namespace kiln::triangle_device
