// The row selection topk and multinomial share, as "the k smallest (key, index) pairs of each row,
// in order": rows up to 2048 sort whole in shared memory (bitonic); longer rows radix-select the
// k-th key and sort the winners, or sort in scratch memory when k > 2048. The index breaks every
// tie, so the result is one fixed order whatever the schedule. A key source says whether a row is
// valid and gives the key of (row, j); a sink writes the s-th winner of a row. Internal to the .cu
// files and tests that include it (each gets its own copy, in an unnamed namespace).
//
// Host-compilable: smallest_k makes its launches through a launcher, StreamLaunch in the .cu files,
// and the CPU tests run the kernels on the emulator of CUDA's threads
// (tests/kernels/test_sort_simt.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/device_math.cuh"
#include "kernels/error.h"
#if defined(__CUDACC__)
#include "kernels/cuda/common.cuh"
#endif

namespace kiln {
namespace {

using cuda_detail::load_as;
using cuda_detail::store_as;

constexpr int kSortMax = 2048;       // entries one block sorts in shared memory
constexpr int kSelectThreads = 1024;
constexpr uint64_t kMaxKey = ~0ull;  // padding, and multinomial's zero weights (never drawn)
constexpr uint32_t kNoIndex = 0xffffffffu;
constexpr int64_t kMaxGrid = 1 << 20;
constexpr size_t kWorkspaceCap = size_t{256} << 20;  // workspace a batch of rows may ask for


inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t pow2_at_least(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}
inline unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, kMaxGrid)));
}

// Ascending integer order of doubles with NaN above +inf and -0 equal to +0, which is the CPU's
// comparison (greater_nan_high) made total.
__device__ __forceinline__ uint64_t order_key(double v) {
  if (v != v) return kMaxKey;
  if (v == 0.0) v = 0.0;
  const uint64_t b = static_cast<uint64_t>(__double_as_longlong(v));
  return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}
// The same for integers: the sign bit flipped, so that unsigned order is signed order.
__device__ __forceinline__ uint64_t order_key(int64_t v) { return static_cast<uint64_t>(v) ^ 0x8000000000000000ull; }

__device__ __forceinline__ bool entry_less(uint64_t ka, uint32_t ia, uint64_t kb, uint32_t ib) {
  return ka < kb || (ka == kb && ia < ib);
}

__device__ __forceinline__ void compare_swap(uint64_t* keys, uint32_t* ids, int64_t i, int64_t j, bool ascending) {
  const uint64_t ki = keys[i], kj = keys[j];
  const uint32_t ii = ids[i], ij = ids[j];
  if (entry_less(kj, ij, ki, ii) == ascending) {
    keys[i] = kj;
    keys[j] = ki;
    ids[i] = ij;
    ids[j] = ii;
  }
}

// The strides `from`..1 of bitonic stage `size` over n entries at keys/ids, whose first entry sits
// at position `base` of the full sequence (a stage's direction depends on the global position).
// Starts and ends with __syncthreads.
__device__ inline void bitonic_steps(uint64_t* keys, uint32_t* ids, int n, int64_t base, int64_t size, int from) {
  for (int stride = from; stride > 0; stride >>= 1) {
    __syncthreads();
    for (int t = threadIdx.x; t < n / 2; t += blockDim.x) {
      const int i = (t / stride) * 2 * stride + t % stride;
      compare_swap(keys, ids, i, i + stride, ((base + i) & size) == 0);
    }
  }
  __syncthreads();
}

// Sorts n (a power of two) entries ascending when base is 0; a tile of a longer sequence otherwise.
// Starts and ends with __syncthreads (also when n is 1 and there is nothing to do).
__device__ inline void bitonic_sort(uint64_t* keys, uint32_t* ids, int n, int64_t base) {
  __syncthreads();
  for (int size = 2; size <= n; size <<= 1) bitonic_steps(keys, ids, n, base, size, size / 2);
  __syncthreads();
}

template <typename T> struct SumOp {
  __device__ T operator()(T a, T b) const { return a + b; }
};
template <typename T> struct MaxOp {
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
template <typename T> struct MinOp {
  __device__ T operator()(T a, T b) const { return a < b ? a : b; }
};

// Inclusive scan over the block in a fixed order (lanes, then warps); `total` gets the block's
// reduction. Every thread must call it; buf holds 32 values.
template <typename T, typename Op> __device__ T block_inclusive_scan(T v, Op op, T identity, T* buf, T& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v = op(y, v);
  }
  if (lane == 31) buf[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < nwarps ? buf[lane] : identity;
    for (int o = 1; o < 32; o <<= 1) {
      const T y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w = op(y, w);
    }
    __syncwarp();
    if (lane < nwarps) buf[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v = op(buf[warp - 1], v);
  total = buf[nwarps - 1];
  __syncthreads();  // buf is reused by the next call
  return v;
}

// Exclusive scan (identity in thread 0) with the same order as the inclusive one; `total` as there.
template <typename T, typename Op> __device__ T block_exclusive_scan(T v, Op op, T identity, T* buf, T& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v = op(y, v);
  }
  T prev = __shfl_up_sync(0xffffffffu, v, 1);
  if (lane == 31) buf[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < nwarps ? buf[lane] : identity;
    for (int o = 1; o < 32; o <<= 1) {
      const T y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w = op(y, w);
    }
    __syncwarp();
    if (lane < nwarps) buf[lane] = w;
  }
  __syncthreads();
  if (lane == 0) prev = identity;
  const T result = warp > 0 ? op(buf[warp - 1], prev) : prev;
  total = buf[nwarps - 1];
  __syncthreads();
  return result;
}

// ---- row sorts and selection ----

// n <= 2048: one block per row sorts the whole row (padded to N, a power of two) in shared memory.
template <class Src, class Sink>
__global__ void __launch_bounds__(1024) sort_rows_kernel(Src src, Sink sink, int64_t rows, int n, int N, int k) {
  KILN_SHARED(uint64_t, keys, [kSortMax]);
  KILN_SHARED(uint32_t, ids, [kSortMax]);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    if (!src.valid(row)) {  // uniform over the block
      for (int s = threadIdx.x; s < k; s += blockDim.x) sink.write(row, s, 0);
      continue;
    }
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
      keys[i] = i < n ? src.key(row, i) : kMaxKey;
      ids[i] = i < n ? static_cast<uint32_t>(i) : kNoIndex;
    }
    bitonic_sort(keys, ids, N, 0);
    for (int s = threadIdx.x; s < k; s += blockDim.x) sink.write(row, s, ids[s]);
    __syncthreads();  // the next row overwrites keys
  }
}

// n > 2048, k <= 2048: one block per row. An MSD radix selection over the 64-bit keys finds the
// prefix of the k-th smallest key (8 bits a pass, recomputing the keys from the input each pass);
// then one ordered pass compacts the keys below it and the lowest-indexed keys equal to it into
// shared memory, where they are sorted.
template <class Src, class Sink>
__global__ void __launch_bounds__(kSelectThreads) select_rows_kernel(Src src, Sink sink, int64_t rows, int64_t n,
                                                                      int k, int M) {
  KILN_SHARED(uint64_t, keys, [kSortMax]);
  KILN_SHARED(uint32_t, ids, [kSortMax]);
  KILN_SHARED(uint32_t, hist, [256]);
  KILN_SHARED(uint32_t, buf, [32]);
  KILN_SHARED(uint32_t, s_digit);
  KILN_SHARED(uint32_t, s_below);
  KILN_SHARED(uint32_t, s_count);
  const int tid = threadIdx.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    if (!src.valid(row)) {
      for (int s = tid; s < k; s += blockDim.x) sink.write(row, s, 0);
      continue;
    }
    uint64_t prefix = 0, mask = 0;
    uint32_t rank = static_cast<uint32_t>(k);  // 1-based rank of the wanted key among those matching prefix
    for (int shift = 56; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
      __syncthreads();
      for (int64_t j = tid; j < n; j += blockDim.x) {
        const uint64_t key = src.key(row, j);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xff], 1u);  // integer counts: exact
      }
      __syncthreads();
      const uint32_t c = tid < 256 ? hist[tid] : 0u;
      uint32_t total;
      const uint32_t incl = block_inclusive_scan(c, SumOp<uint32_t>{}, 0u, buf, total);
      if (tid < 256 && incl >= rank && incl - c < rank) {  // exactly one digit qualifies
        s_digit = static_cast<uint32_t>(tid);
        s_below = incl - c;
        s_count = c;
      }
      __syncthreads();
      rank -= s_below;
      prefix |= static_cast<uint64_t>(s_digit) << shift;
      mask |= 0xffull << shift;
      const bool all_taken = s_count == rank;  // every key with this prefix is among the k
      __syncthreads();                         // s_* are rewritten by the next pass
      if (all_taken) break;
    }
    // Keys whose masked prefix is below `prefix` number exactly k - rank; of those equal to it the
    // first `rank` in index order are taken.
    const uint32_t below = static_cast<uint32_t>(k) - rank;
    uint32_t run_lt = 0, run_eq = 0;
    for (int64_t base = 0; base < n && (run_lt < below || run_eq < rank); base += blockDim.x) {
      const int64_t j = base + tid;
      uint64_t key = 0;
      bool lt = false, eq = false;
      if (j < n) {
        key = src.key(row, j);
        lt = (key & mask) < prefix;
        eq = (key & mask) == prefix;
      }
      // Both counts in one word: at most 1024 each per tile, so the low half never carries.
      const uint32_t packed = (lt ? 1u << 16 : 0u) | (eq ? 1u : 0u);
      uint32_t total;
      const uint32_t excl = block_inclusive_scan(packed, SumOp<uint32_t>{}, 0u, buf, total) - packed;
      if (lt) {
        const uint32_t slot = run_lt + (excl >> 16);
        keys[slot] = key;
        ids[slot] = static_cast<uint32_t>(j);
      }
      if (eq) {
        const uint32_t e = run_eq + (excl & 0xffffu);
        if (e < rank) {
          keys[below + e] = key;
          ids[below + e] = static_cast<uint32_t>(j);
        }
      }
      run_lt += total >> 16;
      run_eq += total & 0xffffu;
    }
    for (int i = k + tid; i < M; i += blockDim.x) {
      keys[i] = kMaxKey;
      ids[i] = kNoIndex;
    }
    bitonic_sort(keys, ids, M, 0);
    for (int s = tid; s < k; s += blockDim.x) sink.write(row, s, ids[s]);
    __syncthreads();
  }
}

// k > 2048 (so n > 2048): a bitonic sort of each row, padded to P entries, in global memory. Stages
// up to 2048 and the strides below 2048 of later stages run on shared-memory tiles; larger strides
// are one launch each.
template <class Src>
__global__ void __launch_bounds__(1024) tile_sort_kernel(Src src, uint64_t* gkeys, uint32_t* gids, int64_t rows,
                                                         int64_t n, int64_t P) {
  KILN_SHARED(uint64_t, keys, [kSortMax]);
  KILN_SHARED(uint32_t, ids, [kSortMax]);
  const int64_t tiles = P / kSortMax;
  for (int64_t t = blockIdx.x; t < rows * tiles; t += gridDim.x) {
    const int64_t row = t / tiles, base = (t % tiles) * kSortMax;
    for (int i = threadIdx.x; i < kSortMax; i += blockDim.x) {
      const int64_t j = base + i;
      keys[i] = j < n ? src.key(row, j) : kMaxKey;
      ids[i] = j < n ? static_cast<uint32_t>(j) : kNoIndex;
    }
    bitonic_sort(keys, ids, kSortMax, base);
    for (int i = threadIdx.x; i < kSortMax; i += blockDim.x) {
      gkeys[row * P + base + i] = keys[i];
      gids[row * P + base + i] = ids[i];
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(1024) tile_merge_kernel(uint64_t* gkeys, uint32_t* gids, int64_t rows, int64_t P,
                                                          int64_t size) {
  KILN_SHARED(uint64_t, keys, [kSortMax]);
  KILN_SHARED(uint32_t, ids, [kSortMax]);
  const int64_t tiles = P / kSortMax;
  for (int64_t t = blockIdx.x; t < rows * tiles; t += gridDim.x) {
    const int64_t row = t / tiles, base = (t % tiles) * kSortMax;
    for (int i = threadIdx.x; i < kSortMax; i += blockDim.x) {
      keys[i] = gkeys[row * P + base + i];
      ids[i] = gids[row * P + base + i];
    }
    bitonic_steps(keys, ids, kSortMax, base, size, kSortMax / 2);
    for (int i = threadIdx.x; i < kSortMax; i += blockDim.x) {
      gkeys[row * P + base + i] = keys[i];
      gids[row * P + base + i] = ids[i];
    }
    __syncthreads();
  }
}

__global__ void global_step_kernel(uint64_t* gkeys, uint32_t* gids, int64_t rows, int64_t P, int64_t size,
                                   int64_t stride) {
  const int64_t half = P / 2;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < rows * half; q += step) {
    const int64_t row = q / half, t = q % half;
    const int64_t i = (t / stride) * 2 * stride + t % stride;
    compare_swap(gkeys + row * P, gids + row * P, i, i + stride, (i & size) == 0);
  }
}

template <class Src, class Sink>
__global__ void write_sorted_kernel(Src src, Sink sink, const uint32_t* gids, int64_t rows, int64_t P, int64_t k) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < rows * k; q += step) {
    const int64_t row = q / k, s = q % k;
    sink.write(row, s, src.valid(row) ? gids[row * P + s] : 0u);
  }
}

inline size_t sort_workspace_per_row(int64_t n, int64_t k) {
  if (n <= kSortMax || k <= kSortMax) return 0;
  return static_cast<size_t>(pow2_at_least(n)) * (sizeof(uint64_t) + sizeof(uint32_t));
}

// The k smallest entries of `rows` rows of n keys, sorted, into the sink. `workspace` holds the
// global sort of at least `rows` rows when sort_workspace_per_row is not 0. Each launch is a call
// launch(kernel, grid, block, arguments...) (StreamLaunch on a GPU); every kernel loops over its
// rows or entries, so it is correct for a grid smaller than the one asked for.
template <class Src, class Sink, class Launch>
inline void smallest_k(const Src& src, const Sink& sink, int64_t rows, int64_t n, int64_t k, void* workspace,
                       const Launch& launch) {
  if (n <= kSortMax) {
    const int N = static_cast<int>(pow2_at_least(n));
    const unsigned threads = static_cast<unsigned>(std::min(1024, std::max(32, N / 2)));
    launch(sort_rows_kernel<Src, Sink>, grid_of(rows), threads, src, sink, rows, static_cast<int>(n), N,
           static_cast<int>(k));
    return;
  }
  if (k <= kSortMax) {
    const int M = static_cast<int>(pow2_at_least(k));
    launch(select_rows_kernel<Src, Sink>, grid_of(rows), unsigned{kSelectThreads}, src, sink, rows, n,
           static_cast<int>(k), M);
    return;
  }
  const int64_t P = pow2_at_least(n);
  uint64_t* gkeys = static_cast<uint64_t*>(workspace);
  uint32_t* gids = reinterpret_cast<uint32_t*>(gkeys + rows * P);
  const unsigned tile_blocks = grid_of(rows * (P / kSortMax));
  launch(tile_sort_kernel<Src>, tile_blocks, 1024u, src, gkeys, gids, rows, n, P);
  for (int64_t size = 2 * kSortMax; size <= P; size <<= 1) {
    for (int64_t stride = size / 2; stride >= kSortMax; stride >>= 1) {
      launch(global_step_kernel, grid_of(ceil_div(rows * P / 2, 256)), 256u, gkeys, gids, rows, P, size, stride);
    }
    launch(tile_merge_kernel, tile_blocks, 1024u, gkeys, gids, rows, P, size);
  }
  launch(write_sorted_kernel<Src, Sink>, grid_of(ceil_div(rows * k, 256)), 256u, src, sink,
         static_cast<const uint32_t*>(gids), rows, P, k);
}

#if defined(__CUDACC__)
using cuda_detail::raw_stream;
using cuda_detail::StreamLaunch;
#endif

// Rows per batch for a workspace of `bytes` (at least one row's worth, checked).
inline int64_t batch_rows(const char* op, int64_t rows, size_t per_row, void* workspace, size_t bytes) {
  if (per_row == 0) return rows;
  if (workspace == nullptr || bytes < per_row) {
    throw Error(std::string(op) + ": the CUDA workspace has " + std::to_string(bytes) + " bytes, a row needs " +
                std::to_string(per_row));
  }
  return std::min<int64_t>(rows, static_cast<int64_t>(bytes / per_row));
}

// The workspace for `rows` rows of per_row bytes: as many rows as fit in `cap`, at least one.
inline size_t capped(int64_t rows, size_t per_row, size_t cap = kWorkspaceCap) {
  if (per_row == 0 || rows <= 0) return 0;
  const int64_t fit = std::max<int64_t>(1, static_cast<int64_t>(cap / per_row));
  return static_cast<size_t>(std::min(rows, fit)) * per_row;
}

inline void check_row_length(const char* op, int64_t n) {
  if (n >= static_cast<int64_t>(kNoIndex)) {
    throw Error(std::string(op) + ": rows of " + std::to_string(n) + " elements are too long for the CUDA kernel " +
                "(at most " + std::to_string(kNoIndex - 1) + ")");
  }
}

}  // namespace
}  // namespace kiln
