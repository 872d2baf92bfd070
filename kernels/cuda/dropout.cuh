// dropout's CUDA kernels (the twins of kernels/cpu/dropout.cpp), launched by kernels/cuda/dropout.cu.
// Elements 2q and 2q+1 (logical row-major indices) use words 0 and 2 of Philox block q, so each
// thread owns such a pair and draws one block for two elements. Dims are merged only where that
// keeps the logical order, since the order is what picks the words.
//
// Host-compilable: the CPU tests run these kernels on the emulator of CUDA's threads
// (tests/kernels/test_dropout_simt.cpp).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/dropout.h"
#include "kernels/philox.h"
#include "kernels/strided.h"

namespace kiln::dropout_device {

using cuda_detail::from_f32;
using cuda_detail::load_as;
using cuda_detail::store_as;
using cuda_detail::to_f32;

__device__ __forceinline__ bool keep_word(uint32_t word, uint32_t threshold) { return (word >> 8) >= threshold; }

// Dense operands of one float dtype: typed loads, no index arithmetic.
template <typename S>
__global__ void dropout_dense_kernel(S* out, const S* in, int64_t n, uint32_t threshold, float scale,
                                     PhiloxState philox) {
  philox = philox_resolve(philox);  // a captured graph's seed and offset, read when the kernel runs
  const int64_t pairs = (n + 1) >> 1;
  for (int64_t q = cuda_detail::global_thread(); q < pairs; q += cuda_detail::grid_threads()) {
    const Philox4 r = philox_block(philox.seed, philox.offset, static_cast<uint64_t>(q));
    const int64_t i = 2 * q;
    // A dropped element is written as 0, not x * 0, so an inf or NaN there does not leak through.
    out[i] = keep_word(r.v[0], threshold) ? from_f32<S>(to_f32(in[i]) * scale) : from_f32<S>(0.f);
    if (i + 1 < n) {
      out[i + 1] = keep_word(r.v[2], threshold) ? from_f32<S>(to_f32(in[i + 1]) * scale) : from_f32<S>(0.f);
    }
  }
}

// Anything else: offsets through the merged shape, cast on load and store through C.
template <typename C>
__global__ void dropout_strided_kernel(const __grid_constant__ cuda_detail::OffsetCalc<2> calc, void* out,
                                       DType out_dtype, const void* in, DType in_dtype, int64_t n, uint32_t threshold,
                                       C scale, PhiloxState philox) {
  philox = philox_resolve(philox);
  const int64_t pairs = (n + 1) >> 1;
  for (int64_t q = cuda_detail::global_thread(); q < pairs; q += cuda_detail::grid_threads()) {
    const Philox4 r = philox_block(philox.seed, philox.offset, static_cast<uint64_t>(q));
    for (int h = 0; h < 2; ++h) {
      const int64_t i = 2 * q + h;
      if (i >= n) break;
      int64_t off[2];
      calc.offsets(i, off);
      const C v = keep_word(r.v[h * 2], threshold) ? load_as<C>(in, in_dtype, off[1]) * scale : C(0);
      store_as<C>(out, out_dtype, off[0], v);
    }
  }
}

// out's shape with size-1 dims dropped and neighbours merged where both operands are contiguous
// across them: row-major order, and so every element's index, is unchanged.
struct Merged {
  StridedArg shape;
  int64_t out_strides[kMaxDims] = {};
  int64_t in_strides[kMaxDims] = {};
};

inline Merged merge_dims(const StridedArg& out, const StridedArg& in) {
  Merged m;
  int nd = 0;
  for (int d = 0; d < out.ndim; ++d) {
    const int64_t size = out.sizes[d];
    if (size == 1) continue;
    if (nd > 0 && m.out_strides[nd - 1] == out.strides[d] * size && m.in_strides[nd - 1] == in.strides[d] * size) {
      m.shape.sizes[nd - 1] *= size;
      m.out_strides[nd - 1] = out.strides[d];
      m.in_strides[nd - 1] = in.strides[d];
      continue;
    }
    m.shape.sizes[nd] = size;
    m.out_strides[nd] = out.strides[d];
    m.in_strides[nd] = in.strides[d];
    ++nd;
  }
  if (nd == 0) {  // a single element
    m.shape.sizes[0] = 1;
    m.out_strides[0] = 1;
    m.in_strides[0] = 1;
    nd = 1;
  }
  m.shape.ndim = nd;
  return m;
}

// Whether dropout.cu takes the dense kernel: one contiguous run on both sides, of one dtype that is
// float32, float16 or bfloat16.
inline bool takes_dense_path(const Merged& m, DType out_dtype, DType in_dtype) {
  const bool dense = m.shape.ndim == 1 && m.out_strides[0] == 1 && m.in_strides[0] == 1 && out_dtype == in_dtype;
  return dense && (out_dtype == DType::Float32 || out_dtype == DType::Float16 || out_dtype == DType::BFloat16);
}

// The kept elements' scale 1 / (1 - p) in the compute type C (0 when p is 1: everything drops).
template <typename C> inline C keep_scale(double p) { return p < 1.0 ? static_cast<C>(1.0 / (1.0 - p)) : C(0); }

// dropout_cuda's launch: the dense kernel for one contiguous run of a float dtype, the strided one
// through the merged shape otherwise (in double for a float64 output). The launch is a call
// launch(kernel, grid, block, arguments...) (cuda_detail::StreamLaunch on a GPU).
template <class Launch>
void dropout_launch(const StridedArg& out, const StridedArg& in, double p, PhiloxState philox, const Launch& launch) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const uint32_t threshold = dropout_threshold(p);
  const Merged m = merge_dims(out, in);
  const unsigned grid = cuda_detail::grid_for((n + 1) / 2), block = cuda_detail::kThreads;
  if (takes_dense_path(m, out.dtype, in.dtype)) {
    auto dense = [&]<typename S>() {
      launch(dropout_dense_kernel<S>, grid, block, static_cast<S*>(out.data), static_cast<const S*>(in.data), n,
             threshold, keep_scale<float>(p), philox);
    };
    if (out.dtype == DType::Float16) {
      dense.template operator()<cuda_detail::Float16Storage>();
    } else if (out.dtype == DType::BFloat16) {
      dense.template operator()<cuda_detail::BFloat16Storage>();
    } else {
      dense.template operator()<float>();
    }
    return;
  }
  const int64_t* strides[2] = {m.out_strides, m.in_strides};
  const cuda_detail::OffsetCalc<2> calc = cuda_detail::make_offset_calc<2>(m.shape, strides);
  if (out.dtype == DType::Float64) {
    launch(dropout_strided_kernel<double>, grid, block, calc, out.data, out.dtype, static_cast<const void*>(in.data),
           in.dtype, n, threshold, keep_scale<double>(p), philox);
  } else {
    launch(dropout_strided_kernel<float>, grid, block, calc, out.data, out.dtype, static_cast<const void*>(in.data),
           in.dtype, n, threshold, keep_scale<float>(p), philox);
  }
}

}  // namespace kiln::dropout_device
