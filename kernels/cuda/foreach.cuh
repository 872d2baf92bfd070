// The multi-tensor ("foreach") kernels of kernels/foreach.h on CUDA, launched by
// kernels/cuda/foreach.cu. A launch covers up to kMaxBlocks chunks of up to a few dozen tensors:
// the tensor pointers and a block -> (tensor, chunk) table travel in the kernel's parameters
// (__grid_constant__, under 4 KB), so there is no host-to-device copy and no per-tensor launch, and
// a CUDA graph captures the table with the launch. lr, found_inf and grad_scale are read through
// device pointers, and each tensor's step count through a pointer in the table's last column (the
// optimizers' tables have one more column than their lists of tensors); a tensor larger than one
// launch's table continues in the next launch (launch_chunks, host code, builds the tables).
//
// Host-compilable: the CPU tests run these kernels and launch_chunks on the emulator of CUDA's
// threads (tests/kernels/test_foreach_simt.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_math.cuh"
#include "kernels/foreach.h"

namespace kiln::foreach_cuda {

using cuda_detail::block_sum;
using cuda_detail::from_f32;
using cuda_detail::to_f32;

constexpr int kBlock = 512;      // threads per block; each block owns one chunk of kForeachChunk
constexpr int kIlp = 4;          // elements in flight per thread: loads first, then math and stores
constexpr int kMaxBlocks = 320;  // chunks per launch

// Tensors per launch by list count: what fits the 4 KB parameter budget with the block table.
template <int N> constexpr int max_tensors() { return N == 1 ? 110 : N == 2 ? 64 : N == 3 ? 48 : N == 4 ? 36 : 30; }

template <int N> struct ChunkTable {
  static constexpr int kMaxTensors = max_tensors<N>();
  void* data[N][kMaxTensors];
  int64_t numel[kMaxTensors];
  int32_t block_chunk[kMaxBlocks];
  uint8_t block_tensor[kMaxBlocks];
};
static_assert(sizeof(ChunkTable<1>) <= 3600 && sizeof(ChunkTable<2>) <= 3600 && sizeof(ChunkTable<3>) <= 3600 &&
                  sizeof(ChunkTable<4>) <= 3600 && sizeof(ChunkTable<6>) <= 3600,
              "a chunk table plus the other kernel parameters must stay within 4 KB");
static_assert(max_tensors<1>() <= 256, "block_tensor is a uint8_t");

// The chunk of the list this block owns: its tensor slot, first element and element count.
template <int N> struct BlockChunk {
  int tensor;
  int64_t begin;
  int n;
};
template <int N> __device__ __forceinline__ BlockChunk<N> block_chunk(const ChunkTable<N>& t) {
  BlockChunk<N> c;
  c.tensor = t.block_tensor[blockIdx.x];
  c.begin = static_cast<int64_t>(t.block_chunk[blockIdx.x]) * kForeachChunk;
  const int64_t left = t.numel[c.tensor] - c.begin;
  c.n = static_cast<int>(left < kForeachChunk ? left : kForeachChunk);
  return c;
}

template <typename T> __device__ __forceinline__ T* chunk_ptr(void* base, int64_t begin) {
  return static_cast<T*>(base) + begin;
}

// Host: fills tables for the list tuples `lists` (n tensors each, lists[0] gives the sizes) and
// calls launch(table, blocks, first_chunk) for each full table and for the remainder. Chunks
// are enumerated in (tensor, chunk) order across launches, so first_chunk + blockIdx.x is the
// chunk's index in the whole list (the norm partials' slot).
template <int N, typename Launch>
void launch_chunks(const ForeachTensor* const (&lists)[N], int64_t n, Launch&& launch) {
  ChunkTable<N> table{};
  int nt = 0, nb = 0;
  int64_t launched = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t numel = lists[0][t].numel;
    if (numel == 0) continue;
    for (int k = 0; k < N; ++k) table.data[k][nt] = lists[k][t].data;
    table.numel[nt] = numel;
    const int64_t chunks = (numel + kForeachChunk - 1) / kForeachChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      table.block_tensor[nb] = static_cast<uint8_t>(nt);
      table.block_chunk[nb] = static_cast<int32_t>(c);
      ++nb;
      const bool last = c == chunks - 1;
      if (nb == kMaxBlocks || (last && nt == ChunkTable<N>::kMaxTensors - 1)) {
        launch(table, nb, launched);
        launched += nb;
        nb = 0;
        if (last) {
          nt = -1;  // every slot is done; the next tensor starts the table again
        } else {    // the tensor goes on in the next launch, from slot 0
          for (int k = 0; k < N; ++k) table.data[k][0] = table.data[k][nt];
          table.numel[0] = table.numel[nt];
          nt = 0;
        }
      }
    }
    ++nt;
  }
  if (nb > 0) launch(table, nb, launched);
}

// --- SGD --------------------------------------------------------------------------------------

// The step count of the tensor in slot `tensor` of a table whose column `col` holds the counts.
template <int N> __device__ __forceinline__ float step_of(const ChunkTable<N>& t, int col, int tensor) {
  return *static_cast<const float*>(t.data[col][tensor]);
}

// Columns: params, grads, momentum buffers, step counts.
template <typename P, typename S>
__global__ void __launch_bounds__(kBlock)
    sgd_kernel(const __grid_constant__ ChunkTable<4> table, const SgdHyper h, const ForeachScalars s, bool use_buf) {
  if (foreach_math::skip_update(s)) return;
  const BlockChunk<4> c = block_chunk(table);
  const foreach_math::SgdCoef<float> k = foreach_math::sgd_coef<float>(h, s, step_of(table, 3, c.tensor));
  P* p = chunk_ptr<P>(table.data[0][c.tensor], c.begin);
  const P* g = chunk_ptr<P>(table.data[1][c.tensor], c.begin);
  S* b = use_buf ? chunk_ptr<S>(table.data[2][c.tensor], c.begin) : nullptr;
  const bool read_buf = use_buf && !k.first;  // the first step overwrites the buffer unread
  for (int base = 0; base < c.n; base += kBlock * kIlp) {
    float pv[kIlp], gv[kIlp], bv[kIlp];
#pragma unroll
    for (int u = 0; u < kIlp; ++u) {
      const int i = base + u * kBlock + static_cast<int>(threadIdx.x);
      if (i < c.n) {
        pv[u] = to_f32(p[i]);
        gv[u] = to_f32(g[i]);
        bv[u] = read_buf ? to_f32(b[i]) : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kIlp; ++u) {
      const int i = base + u * kBlock + static_cast<int>(threadIdx.x);
      if (i < c.n) {
        foreach_math::sgd_element<float>(pv[u], gv[u], &bv[u], k);
        p[i] = from_f32<P>(pv[u]);
        if (use_buf) b[i] = from_f32<S>(bv[u]);
      }
    }
  }
}

// --- Adam and AdamW ------------------------------------------------------------------------------

// Columns: params, grads, exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad; otherwise the exp_avg_sq
// column again, never dereferenced), step counts.
template <typename P, typename S>
__global__ void __launch_bounds__(kBlock)
    adam_kernel(const __grid_constant__ ChunkTable<6> table, const AdamHyper h, const ForeachScalars s) {
  if (foreach_math::skip_update(s)) return;
  const BlockChunk<6> c = block_chunk(table);
  const foreach_math::AdamCoef<float> k = foreach_math::adam_coef<float>(h, s, step_of(table, 5, c.tensor));
  P* p = chunk_ptr<P>(table.data[0][c.tensor], c.begin);
  const P* g = chunk_ptr<P>(table.data[1][c.tensor], c.begin);
  S* m = chunk_ptr<S>(table.data[2][c.tensor], c.begin);
  S* v = chunk_ptr<S>(table.data[3][c.tensor], c.begin);
  S* vm = k.amsgrad ? chunk_ptr<S>(table.data[4][c.tensor], c.begin) : nullptr;
  for (int base = 0; base < c.n; base += kBlock * kIlp) {
    float pv[kIlp], gv[kIlp], mv[kIlp], vv[kIlp], xv[kIlp];
#pragma unroll
    for (int u = 0; u < kIlp; ++u) {
      const int i = base + u * kBlock + static_cast<int>(threadIdx.x);
      if (i < c.n) {
        pv[u] = to_f32(p[i]);
        gv[u] = to_f32(g[i]);
        mv[u] = to_f32(m[i]);
        vv[u] = to_f32(v[i]);
        xv[u] = k.amsgrad ? to_f32(vm[i]) : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kIlp; ++u) {
      const int i = base + u * kBlock + static_cast<int>(threadIdx.x);
      if (i < c.n) {
        foreach_math::adam_element<float>(pv[u], gv[u], mv[u], vv[u], xv[u], k);
        p[i] = from_f32<P>(pv[u]);
        m[i] = from_f32<S>(mv[u]);
        v[i] = from_f32<S>(vv[u]);
        if (k.amsgrad) vm[i] = from_f32<S>(xv[u]);
      }
    }
  }
}

// --- norms ------------------------------------------------------------------------------------

enum class NormMode : int { SumSquares, SumAbs, SumPow, Max };

inline NormMode norm_mode(double p) {
  if (p == 2.0) return NormMode::SumSquares;
  if (p == 1.0) return NormMode::SumAbs;
  if (std::isinf(p)) return NormMode::Max;  // core accepts only p > 0
  return NormMode::SumPow;
}

// max that keeps a NaN once seen.
template <typename A> __device__ __forceinline__ A max_nan(A a, A b) { return (b > a || b != b) && a == a ? b : a; }
struct MaxNan {
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return max_nan(a, b); }
};

// Max over the block with NaN kept, of values >= 0; valid in thread 0. Fixed order, as block_sum.
template <typename A> __device__ A block_max_nan(A v) { return cuda_detail::block_reduce(v, A(0), MaxNan{}); }

template <typename T>
__global__ void __launch_bounds__(kBlock)
    norm_partials_kernel(const __grid_constant__ ChunkTable<1> table, double* partials, int64_t first_chunk,
                         NormMode mode, float p) {
  const BlockChunk<1> c = block_chunk(table);
  const T* x = chunk_ptr<T>(table.data[0][c.tensor], c.begin);
  float acc = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < c.n; i += kBlock) {
    const float a = to_f32(x[i]);
    switch (mode) {
      case NormMode::SumSquares: acc += a * a; break;
      case NormMode::SumAbs: acc += fabsf(a); break;
      case NormMode::SumPow: acc += powf(fabsf(a), p); break;
      case NormMode::Max: acc = max_nan(acc, fabsf(a)); break;
    }
  }
  acc = mode == NormMode::Max ? block_max_nan(acc) : block_sum(acc);
  if (threadIdx.x == 0) partials[first_chunk + blockIdx.x] = static_cast<double>(acc);
}

// One block combines every partial in double: thread j takes partials j, j + kBlock, ... in order,
// then a fixed tree; the same partials give the same bits on every run. The norm is stored as a
// float, or as a double when out_f64.
__global__ void __launch_bounds__(kBlock)
    norm_finish_kernel(void* out, bool out_f64, const double* partials, int64_t count, NormMode mode, double p) {
  double acc = 0.0;
  for (int64_t k = threadIdx.x; k < count; k += kBlock) {
    const double a = partials[k];
    acc = mode == NormMode::Max ? max_nan(acc, a) : acc + a;
  }
  acc = mode == NormMode::Max ? block_max_nan(acc) : block_sum(acc);
  if (threadIdx.x == 0) {
    switch (mode) {
      case NormMode::SumSquares: acc = ::sqrt(acc); break;
      case NormMode::SumPow: acc = ::pow(acc, 1.0 / p); break;
      case NormMode::SumAbs:
      case NormMode::Max: break;
    }
    if (out_f64) {
      *static_cast<double*>(out) = acc;
    } else {
      *static_cast<float*>(out) = static_cast<float>(acc);
    }
  }
}

// --- scale, add, zero -------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kBlock)
    mul_scalar_kernel(const __grid_constant__ ChunkTable<1> table, const void* scalar, bool scalar_f64) {
  const float v =
      scalar_f64 ? static_cast<float>(*static_cast<const double*>(scalar)) : *static_cast<const float*>(scalar);
  const BlockChunk<1> c = block_chunk(table);
  T* x = chunk_ptr<T>(table.data[0][c.tensor], c.begin);
  for (int i = static_cast<int>(threadIdx.x); i < c.n; i += kBlock) x[i] = from_f32<T>(to_f32(x[i]) * v);
}

template <typename T>
__global__ void __launch_bounds__(kBlock)
    add_scalar_kernel(const __grid_constant__ ChunkTable<1> table, float value, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const BlockChunk<1> c = block_chunk(table);
  T* x = chunk_ptr<T>(table.data[0][c.tensor], c.begin);
  for (int i = static_cast<int>(threadIdx.x); i < c.n; i += kBlock) x[i] = from_f32<T>(to_f32(x[i]) + value);
}

template <typename U>
__global__ void __launch_bounds__(kBlock) zero_kernel(const __grid_constant__ ChunkTable<1> table) {
  const BlockChunk<1> c = block_chunk(table);
  U* x = chunk_ptr<U>(table.data[0][c.tensor], c.begin);
  for (int i = static_cast<int>(threadIdx.x); i < c.n; i += kBlock) x[i] = U(0);
}

// --- loss scaling -----------------------------------------------------------------------------

// The compute type of the check and the multiply: float for the 32- and 16-bit types, double for
// float64 (which only this kernel of the family accepts: a gradient may be float64 on any device).
template <typename T> struct UnscaleAcc {
  using type = float;
};
template <> struct UnscaleAcc<double> {
  using type = double;
};
__device__ __forceinline__ double to_acc(double v) { return v; }
template <typename T> __device__ __forceinline__ float to_acc(T v) { return to_f32(v); }
template <typename T> __device__ __forceinline__ T from_acc(typename UnscaleAcc<T>::type v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return from_f32<T>(v);
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlock)
    check_unscale_kernel(const __grid_constant__ ChunkTable<1> table, float* found_inf, const float* inv_scale) {
  using C = typename UnscaleAcc<T>::type;
  const BlockChunk<1> c = block_chunk(table);
  T* x = chunk_ptr<T>(table.data[0][c.tensor], c.begin);
  int bad = 0;
  if (inv_scale != nullptr) {
    const C inv = static_cast<C>(*inv_scale);
    for (int i = static_cast<int>(threadIdx.x); i < c.n; i += kBlock) {
      const C v = to_acc(x[i]);
      bad |= !std::isfinite(v);
      x[i] = from_acc<T>(v * inv);
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < c.n; i += kBlock) bad |= !std::isfinite(to_acc(x[i]));
  }
  // One plain store per block that saw a bad value. Blocks race only to write the same 1, and
  // nothing in this launch reads the flag, so no atomic is needed.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

// One thread: the update is a handful of scalar operations, read and written in stream order.
__global__ void amp_update_scale_kernel(float* scale, int32_t* growth_tracker, const float* found_inf,
                                        double growth_factor, double backoff_factor, int32_t growth_interval) {
  foreach_math::amp_update_scale(*scale, *growth_tracker, *found_inf, growth_factor, backoff_factor, growth_interval);
}

}  // namespace kiln::foreach_cuda
