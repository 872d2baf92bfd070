// What kiln's row-wise CUDA kernels share (softmax, layer norm, batch norm): a row along the last dim
// gets a warp (a block when longer than 1024), reduced with sums and maxes whose every thread gets
// the same bits; cross-row sums write per-chunk partials to scratch memory, merged in chunk order.
// Internal to the files that include it (each gets its own copy). Host-compilable (device_math.cuh
// only), so that the kernels built on it also run on the CPU's emulator of CUDA's threads.
#pragma once

#include <algorithm>
#include <string>

#include "kernels/cuda/device_math.cuh"

namespace kiln {
namespace {

using cuda_detail::align_up;
using cuda_detail::from_f32;
using cuda_detail::load_as;
using cuda_detail::store_as;
using cuda_detail::to_f32;
using cuda_detail::warp_allreduce_max;
using cuda_detail::warp_allreduce_sum;

constexpr int kWarpRowMax = 1024;      // rows up to this long get one warp, longer ones a block
constexpr int kWarpRowThreads = 256;   // 8 warp-rows per block
constexpr int kBlockRowThreads = 512;  // one long row per block
constexpr int64_t kMaxGrid = int64_t{1} << 20;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxGrid));
}

// --- rows shared by a warp or a block --------------------------------------------------------------

// The threads that share a row: a warp, or (kBlockRow) the whole block. Rows are visited in a
// grid-stride loop that is uniform over the group, so block reductions may synchronize inside it.
template <bool kBlockRow> struct RowGroup {
  static __device__ __forceinline__ int rank() {
    return kBlockRow ? static_cast<int>(threadIdx.x) : (threadIdx.x & 31);
  }
  static __device__ __forceinline__ int size() { return kBlockRow ? static_cast<int>(blockDim.x) : 32; }
  static __device__ __forceinline__ int64_t first() {
    return kBlockRow ? static_cast<int64_t>(blockIdx.x)
                     : static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  }
  static __device__ __forceinline__ int64_t step() {
    return kBlockRow ? static_cast<int64_t>(gridDim.x) : static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  }
};

// Sum / max over the row's threads, received by all of them. Across warps every thread adds the
// per-warp results in warp order, so all threads (and all runs) get the same bits.
template <bool kBlockRow> __device__ __forceinline__ float row_sum(float v) {
  v = warp_allreduce_sum(v);
  if constexpr (kBlockRow) {
    KILN_SHARED(float, part, [32]);
    __syncthreads();  // the previous reduction's readers are done with `part`
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) v += part[w];
  }
  return v;
}

template <bool kBlockRow> __device__ __forceinline__ float row_max(float v) {
  v = warp_allreduce_max(v);
  if constexpr (kBlockRow) {
    KILN_SHARED(float, part, [32]);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) v = fmaxf(v, part[w]);
  }
  return v;
}

// How rows of length n are spread: warp rows (8 per block) or block rows.
struct RowLaunch {
  bool block_row;
  unsigned grid;
  int threads;
};
inline RowLaunch row_launch(int64_t rows, int64_t n) {
  if (n <= kWarpRowMax) return {false, grid_of(ceil_div(rows, kWarpRowThreads / 32)), kWarpRowThreads};
  return {true, grid_of(rows), kBlockRowThreads};
}

// --- rows kept in registers ----------------------------------------------------------------------

// A row read once from global memory in 16-byte vectors and held as floats in the registers of the
// threads that share it: thread `rank` holds vectors rank, rank + size, ... (kSlots of them, 32
// floats in all), so a kernel that passes over the row several times (statistics, then output)
// reads it from memory once. Fits rows of n elements with n a multiple of kVec and at most
// kSlots * (group size) * kVec long, starting 16-byte aligned.
template <typename S> struct RowCache {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(S));  // elements per vector
  static constexpr int kSlots = 32 / kVec;                         // vectors per thread
  float v[kSlots][kVec];

  // Vector index of slot k for this thread; the slot is in the row when it is below n / kVec.
  template <bool kBlockRow> static __device__ __forceinline__ int64_t slot(int k) {
    return RowGroup<kBlockRow>::rank() + static_cast<int64_t>(k) * RowGroup<kBlockRow>::size();
  }

  // Loads this thread's vectors of `row` (n / kVec of them in all); slots past the end hold 0.
  template <bool kBlockRow> __device__ __forceinline__ void load(const S* row, int64_t vectors) {
    const auto* in = reinterpret_cast<const cuda_detail::Vec16<S>*>(row);
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int64_t i = slot<kBlockRow>(k);
      if (i < vectors) {
        const cuda_detail::Vec16<S> x = in[i];
#pragma unroll
        for (int e = 0; e < kVec; ++e) v[k][e] = to_f32(x.v[e]);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) v[k][e] = 0.f;
      }
    }
  }

  // Writes this thread's elements of `row` (n / kVec vectors in all): element e of slot k, at index j
  // of the row, becomes f(k, e, j) rounded to S.
  template <bool kBlockRow, typename F> __device__ __forceinline__ void store(S* row, int64_t vectors, F f) const {
    auto* out = reinterpret_cast<cuda_detail::Vec16<S>*>(row);
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int64_t i = slot<kBlockRow>(k);
      if (i >= vectors) continue;
      cuda_detail::Vec16<S> y;
#pragma unroll
      for (int e = 0; e < kVec; ++e) y.v[e] = from_f32<S>(f(k, e, i * kVec + e));
      out[i] = y;
    }
  }

  // Whether a row of n elements at `row` fits, for groups of up to `max_group` threads.
  static bool fits(const void* row, int64_t n, int max_group) {
    return n % kVec == 0 && n / kVec <= static_cast<int64_t>(kSlots) * max_group && cuda_detail::aligned16(row);
  }

  // Threads for a block row of n elements: enough that each holds at most kSlots vectors, a whole
  // number of warps, at most kMaxBlock (the cached kernels' launch bound).
  static constexpr int kMaxBlock = 512;
  static int block_threads(int64_t n) {
    const int64_t per_thread = static_cast<int64_t>(kSlots) * kVec;
    return static_cast<int>(std::clamp<int64_t>(ceil_div(ceil_div(n, per_thread), 32) * 32, 32, kMaxBlock));
  }
};

__device__ __forceinline__ float param_or(const void* p, DType t, int64_t i, float fallback) {
  return p ? load_as<float>(p, t, i) : fallback;
}

}  // namespace
}  // namespace kiln
