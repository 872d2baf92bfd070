// Offsets of strided operands from a linear element index, for the elementwise kernels (and the
// other kernels that walk a tensor in its memory order). Host-compilable like device_math.cuh, so
// that the kernels that use it run on the emulator of CUDA's threads (kernels/simt/simt.h).
#pragma once

#include <climits>
#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/strided.h"

namespace kiln::cuda_detail {

// Offsets of N operands that share one index space (the output's sizes), for one thread per
// element. Dims are stored innermost first so the unrolled loop below indexes the kernel
// parameter with constants; the outermost dim needs no division. When every index fits in 31 bits
// (`small`) the divisions are 32-bit, several times cheaper than 64-bit ones on the GPU.
template <int N> struct OffsetCalc {
  int ndim = 0;
  bool small = true;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims][N] = {};

  template <typename I> __device__ __forceinline__ void walk(I rem, int64_t (&off)[N]) const {
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      I idx = rem;
      if (d != ndim - 1) {
        const I s = static_cast<I>(sizes[d]);
        const I q = rem / s;
        idx = rem - q * s;
        rem = q;
      }
#pragma unroll
      for (int a = 0; a < N; ++a) off[a] += static_cast<int64_t>(idx) * strides[d][a];
    }
  }

  __device__ __forceinline__ void offsets(int64_t linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int a = 0; a < N; ++a) off[a] = 0;
    if (small) {
      walk<uint32_t>(static_cast<uint32_t>(linear), off);
    } else {
      walk<int64_t>(linear, off);
    }
  }
};

// The element offset of logical (row-major) index `linear` over `ndim` dims of `sizes` and
// `strides`: the plain walk, a 64-bit division per dim (a reduction's reduced dims, the random
// fills). OffsetCalc above is the elementwise kernels' walk, with 32-bit divisions when the
// indices fit.
__device__ __forceinline__ int64_t row_major_offset(const int64_t* sizes, const int64_t* strides, int ndim,
                                                    int64_t linear) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    const int64_t s = sizes[d];
    off += (linear % s) * strides[d];
    linear /= s;
  }
  return off;
}

// Host side: the calculator for `shape`'s sizes (outermost first, as in a StridedArg) and one
// stride array per operand (nullptr: a scalar, stride 0 everywhere).
template <int N> inline OffsetCalc<N> make_offset_calc(const StridedArg& shape, const int64_t* const (&strides)[N]) {
  OffsetCalc<N> c;
  c.ndim = shape.ndim;
  for (int k = 0; k < shape.ndim; ++k) {
    const int d = shape.ndim - 1 - k;
    c.sizes[k] = shape.sizes[d];
    for (int a = 0; a < N; ++a) c.strides[k][a] = strides[a] ? strides[a][d] : 0;
  }
  c.small = shape.numel() <= INT32_MAX;
  return c;
}

}  // namespace kiln::cuda_detail
