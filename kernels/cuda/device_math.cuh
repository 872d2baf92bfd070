// The device helpers of kiln's CUDA kernels that compile for the host too: conversions between the
// storage types and float, cast-on-load and store by a run-time dtype, warp and block reductions,
// grid-stride bounds, 16-byte vectors and the split of a dense pass into them, elementwise inputs
// (InValue), the device-side index check's record, and the block's shared memory (KILN_SHARED, and
// the dynamic part).
// kernels/cuda/common.cuh includes this file with the rest (launch checks, streams, launchers).
// Compiled by the host compiler, it runs on the emulator of CUDA's threads (kernels/simt/simt.h),
// and the 16-bit storage types are kiln's own (kernels/half.h), bit for bit the same as __half and
// __nv_bfloat16, converted with the same round-to-nearest-even.
#pragma once

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#else
#include "kernels/half.h"
#include "kernels/simt/simt.h"
#endif

// A static shared variable of the block: KILN_SHARED(float, part, [32]) declares `part` as
// `__shared__ float part[32]` does (KILN_SHARED(Params, p) a scalar). On a GPU it is that
// declaration. On the host it is a reference to the emulator's copy for the running block, which
// starts as all-ones bytes and is an allocation of its own size (kernels/simt/simt.h): a plain
// static would be one variable for every block, zeros at first, with no bounds the sanitizers see.
#if defined(__CUDACC__)
#define KILN_SHARED(T, name, ...) __shared__ T name __VA_ARGS__
#else
#define KILN_SHARED(T, name, ...) auto& name = ::kiln::simt::shared_variable<T __VA_ARGS__>([] {})
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/elementwise.h"
#include "kernels/index.h"
#include "kernels/strided.h"

namespace kiln::cuda_detail {

// The 16-bit and 32-bit float storage types of the kernels, converted to and from float with the
// hardware's round-to-nearest-even conversions.
#if defined(__CUDACC__)
using Float16Storage = __half;
using BFloat16Storage = __nv_bfloat16;
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename S> __device__ __forceinline__ S from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
// The hardware's conversion gives every NaN as 0x7FFF; kiln's (kernels/half.h) keeps its sign, as the
// CPU does: one compare and select, the same bits on both devices.
template <> __device__ __forceinline__ __half from_f32<__half>(float v) {
  return v == v ? __float2half_rn(v) : __ushort_as_half(detail::float_to_half_bits(v));
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return v == v ? __float2bfloat16_rn(v) : __ushort_as_bfloat16(detail::float_to_bf16_bits(v));
}
#else
using Float16Storage = Half;
using BFloat16Storage = BFloat16;
inline float to_f32(float v) { return v; }
inline float to_f32(Half v) { return static_cast<float>(v); }
inline float to_f32(BFloat16 v) { return static_cast<float>(v); }
template <typename S> S from_f32(float v) { return S(v); }
#endif

template <typename C> __device__ __forceinline__ C load_as(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::Float32: return detail::convert_value<C>(static_cast<const float*>(base)[i]);
    case DType::Float16: return detail::convert_value<C>(to_f32(static_cast<const Float16Storage*>(base)[i]));
    case DType::BFloat16: return detail::convert_value<C>(to_f32(static_cast<const BFloat16Storage*>(base)[i]));
    case DType::Float64: return detail::convert_value<C>(static_cast<const double*>(base)[i]);
    case DType::Int32: return static_cast<C>(static_cast<const int32_t*>(base)[i]);
    case DType::Int64: return static_cast<C>(static_cast<const int64_t*>(base)[i]);
    case DType::UInt8: return static_cast<C>(static_cast<const uint8_t*>(base)[i]);
    case DType::Bool: return static_cast<C>(static_cast<const bool*>(base)[i] ? 1 : 0);
  }
  return C(0);
}

template <typename C> __device__ __forceinline__ void store_as(void* base, DType t, int64_t i, C v) {
  switch (t) {
    case DType::Float32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::Float16:
      static_cast<Float16Storage*>(base)[i] = from_f32<Float16Storage>(detail::float_for_16bit(v));
      return;
    case DType::BFloat16:
      static_cast<BFloat16Storage*>(base)[i] = from_f32<BFloat16Storage>(detail::float_for_16bit(v));
      return;
    case DType::Float64: static_cast<double*>(base)[i] = static_cast<double>(v); return;
    case DType::Int32: static_cast<int32_t*>(base)[i] = detail::convert_value<int32_t>(v); return;
    case DType::Int64: static_cast<int64_t*>(base)[i] = detail::convert_value<int64_t>(v); return;
    case DType::UInt8: static_cast<uint8_t*>(base)[i] = detail::convert_value<uint8_t>(v); return;
    case DType::Bool: static_cast<bool*>(base)[i] = v != C(0); return;
  }
}

// A fold over the warp with `op` (associative), the result in lane 0: op(v, v of the lane `o`
// above) for o = 16, 8, 4, 2, 1. Sum and max are folds.
template <typename T, typename Op> __device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}
struct Plus {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOf {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return b > a ? b : a; }
};
template <typename T> __device__ __forceinline__ T warp_sum(T v) { return warp_reduce(v, Plus{}); }
template <typename T> __device__ __forceinline__ T warp_max(T v) { return warp_reduce(v, MaxOf{}); }

// Warp sum and max that every lane receives. The xor butterfly pairs lanes symmetrically and float
// addition is commutative, so all 32 lanes end with the same bits. fmaxf drops a NaN operand, as
// the CPU's std::max(running, x) does.
template <typename T> __device__ __forceinline__ T warp_allreduce_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_allreduce_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// A reduction over the block (blockDim.x a multiple of 32, at most 1024) with `op`, associative,
// and `identity` its neutral value; the result is valid in thread 0. Each warp folds
// (warp_reduce), then warp 0 folds the warps' results: the order is fixed by the thread layout, so it is
// deterministic.
template <typename T, typename Op> __device__ T block_reduce(T v, T identity, Op op) {
  KILN_SHARED(T, partial, [32]);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_reduce(v, op);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int nwarps = static_cast<int>((blockDim.x + 31) >> 5);
  v = static_cast<int>(threadIdx.x) < nwarps ? partial[lane] : identity;
  if (warp == 0) v = warp_reduce(v, op);
  __syncthreads();
  return v;
}
template <typename T> __device__ T block_sum(T v) { return block_reduce(v, T(0), Plus{}); }

// Grid-stride loop bounds: this thread's first index and the stride between its indices.
__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Host side of a launch: threads per block of the grid-stride kernels, and the blocks for n items
// (enough to fill the GPU, capped).
constexpr int kThreads = 256;
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535 * 8) blocks = 65535 * 8;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

// 16 bytes of T, for vectorized loads and stores when pointers are 16-byte aligned.
template <typename T> struct alignas(16) Vec16 {
  static constexpr int kCount = 16 / static_cast<int>(sizeof(T));
  T v[kCount];
};
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Bytes rounded up to 256, so regions carved one after another from one workspace stay aligned.
inline size_t align_up(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

// Device-side index checks (docs/architecture.md section 7): the first failing thread claims the device's
// record (op goes from 0 to `op`) and fills in the details; later failures leave it as it is.
__device__ __forceinline__ void record_device_error(DeviceErrorRecord* err, IndexCheckOp op, int64_t index,
                                                    int64_t size) {
  if (err == nullptr) return;
  if (atomicCAS(&err->op, 0, static_cast<int32_t>(op)) == 0) {
    err->index = index;
    err->size = size;
  }
}

// The block's dynamic shared memory, 16-byte aligned.
#if defined(__CUDACC__)
__device__ __forceinline__ float4* dynamic_smem() {
  extern __shared__ float4 kiln_dynamic_smem[];
  return kiln_dynamic_smem;
}
#else
inline float4* dynamic_smem() { return static_cast<float4*>(simt::dynamic_smem()); }
#endif

// A dense pass over n elements in steps of `width` (the vector kernels' loop): n_vec whole steps
// when every pointer is 16-byte aligned, none otherwise, then a tail of single elements; `items`,
// the larger of the two loops' trip counts, sizes the grid.
struct VecSplit {
  int64_t n_vec, items;
};
inline VecSplit vec_split(int64_t n, int width, bool aligned) {
  const int64_t n_vec = aligned ? n / width : 0;
  return {n_vec, n_vec > n - n_vec * width ? n_vec : n - n_vec * width};
}

// An elementwise input in the kernel: a strided tensor read with cast-on-load, or a scalar.
template <typename C> struct InValue {
  const void* data = nullptr;
  DType dtype = DType::Float32;
  bool is_scalar = false;
  C scalar = C(0);
  __device__ __forceinline__ C load(int64_t off) const { return is_scalar ? scalar : load_as<C>(data, dtype, off); }
};

// An elementwise operand as a kernel reads it: a scalar in the compute type as the CPU's
// operand_value converts it.
template <typename C> inline InValue<C> in_value(const Operand& o) {
  InValue<C> v;
  v.data = o.is_scalar ? nullptr : o.arg.data;
  v.dtype = o.arg.dtype;
  v.is_scalar = o.is_scalar;
  v.scalar = scalar_as<C>(o);
  return v;
}

// The fast path's test: 1-D and unit-stride (a single element counts whatever its stride).
inline bool dense_1d(const StridedArg& a) { return a.ndim == 1 && (a.strides[0] == 1 || a.sizes[0] == 1); }

// The smaller of two 64-bit counts (a name of its own: kiln::min is the tensor reduction, and the
// host has no CUDA min overloads).
__host__ __device__ __forceinline__ int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

}  // namespace kiln::cuda_detail
