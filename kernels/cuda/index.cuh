// The CUDA twins of index_select, gather and scatter_add (kernels/cpu/index.cpp), launched by
// kernels/cuda/index.cu. A kernel cannot throw, so an index out of range is recorded in the
// device's error record, its read is skipped and the element it would have produced is 0
// (scatter_add: nothing is added). scatter_add gives each thread a whole line along `dim` and adds
// in index order like the CPU: no atomics, so it is deterministic.
//
// Host-compilable: the CPU tests run these kernels on the emulator of CUDA's threads
// (tests/kernels/test_index_simt.cpp).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/index.h"
#include "kernels/strided.h"

namespace kiln::index_device {

using cuda_detail::load_as;
using cuda_detail::store_as;

__device__ __forceinline__ bool floating(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 || t == DType::Float64;
}

// Same dtype: the element's bits move unchanged. Otherwise the CPU's rule: through double for a
// floating output, through int64 for an integer one.
__device__ __forceinline__ void copy_element(void* out, DType od, int64_t o, const void* in, DType id, int64_t i) {
  if (od == id) {
    switch (od) {
      case DType::Float64:
      case DType::Int64: static_cast<uint64_t*>(out)[o] = static_cast<const uint64_t*>(in)[i]; return;
      case DType::Float32:
      case DType::Int32: static_cast<uint32_t*>(out)[o] = static_cast<const uint32_t*>(in)[i]; return;
      case DType::Float16:
      case DType::BFloat16: static_cast<uint16_t*>(out)[o] = static_cast<const uint16_t*>(in)[i]; return;
      case DType::UInt8:
      case DType::Bool: static_cast<uint8_t*>(out)[o] = static_cast<const uint8_t*>(in)[i]; return;
    }
  }
  if (floating(od)) {
    store_as<double>(out, od, o, load_as<double>(in, id, i));
  } else {
    store_as<int64_t>(out, od, o, load_as<int64_t>(in, id, i));
  }
}

__global__ void index_select_kernel(StridedArg out, StridedArg in, int dim, StridedArg index, int64_t n,
                                    DeviceErrorRecord* err) {
  const int64_t size = in.sizes[dim];
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t rem = i, out_off = 0, in_off = 0, k = 0;
    for (int d = out.ndim - 1; d >= 0; --d) {
      const int64_t c = rem % out.sizes[d];
      rem /= out.sizes[d];
      out_off += c * out.strides[d];
      if (d == dim) {
        k = c;
      } else {
        in_off += c * in.strides[d];
      }
    }
    const int64_t idx = load_as<int64_t>(index.data, index.dtype, k * index.strides[0]);
    if (idx < 0 || idx >= size) {
      cuda_detail::record_device_error(err, IndexCheckOp::IndexSelect, idx, size);
      store_as<int64_t>(out.data, out.dtype, out_off, 0);
      continue;
    }
    copy_element(out.data, out.dtype, out_off, in.data, in.dtype, in_off + idx * in.strides[dim]);
  }
}

__global__ void gather_kernel(StridedArg out, StridedArg in, int dim, StridedArg index, int64_t n,
                              DeviceErrorRecord* err) {
  const int64_t size = in.sizes[dim];
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t rem = i, out_off = 0, in_off = 0, idx_off = 0;
    for (int d = out.ndim - 1; d >= 0; --d) {
      const int64_t c = rem % out.sizes[d];
      rem /= out.sizes[d];
      out_off += c * out.strides[d];
      idx_off += c * index.strides[d];
      if (d != dim) in_off += c * in.strides[d];
    }
    const int64_t idx = load_as<int64_t>(index.data, index.dtype, idx_off);
    if (idx < 0 || idx >= size) {
      cuda_detail::record_device_error(err, IndexCheckOp::Gather, idx, size);
      store_as<int64_t>(out.data, out.dtype, out_off, 0);
      continue;
    }
    copy_element(out.data, out.dtype, out_off, in.data, in.dtype, in_off + idx * in.strides[dim]);
  }
}

// One thread per position of index's dims other than `dim`; it walks its line along `dim` in order,
// so two threads never touch the same output element (they differ in a non-`dim` coordinate).
template <typename C>
__global__ void scatter_add_kernel(StridedArg out, int dim, StridedArg index, StridedArg src, int64_t outer,
                                   DeviceErrorRecord* err) {
  const int64_t inner = index.sizes[dim];
  const int64_t size = out.sizes[dim];
  const int64_t out_step = out.strides[dim], idx_step = index.strides[dim], src_step = src.strides[dim];
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < outer; i += step) {
    int64_t rem = i, out_off = 0, idx_off = 0, src_off = 0;
    for (int d = index.ndim - 1; d >= 0; --d) {
      if (d == dim) continue;
      const int64_t c = rem % index.sizes[d];
      rem /= index.sizes[d];
      out_off += c * out.strides[d];
      idx_off += c * index.strides[d];
      src_off += c * src.strides[d];
    }
    for (int64_t k = 0; k < inner; ++k) {
      const int64_t idx = load_as<int64_t>(index.data, index.dtype, idx_off + k * idx_step);
      if (idx < 0 || idx >= size) {
        cuda_detail::record_device_error(err, IndexCheckOp::ScatterAdd, idx, size);
        continue;
      }
      const int64_t o = out_off + idx * out_step;
      const C add = load_as<C>(src.data, src.dtype, src_off + k * src_step);
      store_as<C>(out.data, out.dtype, o, load_as<C>(out.data, out.dtype, o) + add);
    }
  }
}

// The outer positions of scatter_add (index's positions with `dim` left out): one thread each.
inline int64_t scatter_outer(const StridedArg& index, int dim) {
  int64_t outer = 1;
  for (int d = 0; d < index.ndim; ++d)
    if (d != dim) outer *= index.sizes[d];
  return outer;
}

}  // namespace kiln::index_device
