// The CUDA twin of reduce_cpu, launched by kernels/cuda/reduce.cu: one kernel family for every
// ReduceOp, parameterized by a small policy (partial, add, merge, store). The launch plan
// (make_params, finish_params) is a function of sizes and strides only, and each thread adds a fixed
// set of elements in a fixed order before a fixed tree merges the threads, so a result never
// depends on scheduling: no atomics anywhere. Few outputs with long reductions run in two passes,
// fixed-length chunks into the caller's workspace and then an in-order merge.
//
// Host-compilable: the CPU tests run the plan and the kernels on the emulator of CUDA's threads
// (tests/kernels/test_reduce_simt.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/error.h"
#include "kernels/reduce.h"

namespace kiln::reduction_cuda {

using cuda_detail::BFloat16Storage;
using cuda_detail::Float16Storage;
using cuda_detail::load_as;
using cuda_detail::store_as;
using cuda_detail::to_f32;

constexpr int kBlock = 256;
// Two passes when the outputs alone give fewer blocks than this. A constant, not the device's SM
// count: the plan (and so the order of additions) must not change from one GPU to another.
constexpr int64_t kTargetBlocks = 1024;
// A chunk gives each of its threads at least this many elements; on the 16-byte path at least
// kMinRunsPerThread runs, so that a thread keeps 64 bytes in flight whatever the element size (16
// bfloat16 values per thread, two runs, left half-precision rows at about half float32's speed).
constexpr int64_t kMinPerThread = 16;
constexpr int64_t kMinRunsPerThread = 4;
constexpr int64_t kMaxGridX = 1 << 20;  // blocks loop over output groups beyond this

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int pow2_at_least(int64_t v, int cap) {
  int p = 1;
  while (p < v && p < cap) p <<= 1;
  return p;
}

// Everything a reduction kernel reads, by value. The reduced dims are collapsed (size-1 dims dropped,
// row-major-contiguous neighbours merged) without reordering, so the linear reduced index r, which
// ArgMax/ArgMin report, is the CPU's.
struct ReduceParams {
  void* out;
  DType out_dtype;
  void* idx;
  DType idx_dtype;
  const void* in;
  DType in_dtype;
  bool arg_to_out;  // ArgMax/ArgMin with the result handed as `out`: store the index there
  int out_ndim;
  int red_ndim;
  int64_t out_sizes[kMaxDims];
  int64_t out_strides[kMaxDims];
  int64_t idx_strides[kMaxDims];
  int64_t in_strides[kMaxDims];  // input strides of the kept dims
  int64_t red_sizes[kMaxDims];
  int64_t red_strides[kMaxDims];
  int64_t count;  // elements reduced into each output
  int64_t nout;
  double correction;
  // Thread layout: bo outputs per block, br threads per output (bo * br = kBlock). r_fast puts
  // consecutive threads on consecutive reduced elements (inner reductions: coalesced along r);
  // otherwise on consecutive outputs (outer reductions: coalesced along the kept dims).
  int br, bo;
  bool r_fast;
  // > 0: the reduced range is contiguous and the input float32/float16/bfloat16, read in runs of
  // `vec` consecutive elements (16 bytes; see accumulate_runs). 0: one element at a time.
  int vec;
  int64_t groups;     // ceil(nout / bo)
  int64_t nchunks;    // 1: one pass
  int64_t chunk_len;  // reduced elements per chunk (count when one pass)
};

inline ReduceParams make_params(ReduceOp op, const ReduceArgs& a) {
  ReduceParams p{};
  p.out = a.out.data;
  p.out_dtype = a.out.dtype;
  p.idx = a.indices.data;
  p.idx_dtype = a.indices.dtype;
  p.in = a.in;
  p.in_dtype = a.in_dtype;
  p.arg_to_out = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  p.out_ndim = a.out.ndim;
  p.nout = a.out.numel();
  for (int d = 0; d < a.out.ndim; ++d) {
    p.out_sizes[d] = a.out.sizes[d];
    p.out_strides[d] = a.out.strides[d];
    p.idx_strides[d] = a.indices.data ? a.indices.strides[d] : 0;
    p.in_strides[d] = a.in_kept_strides[d];
  }
  p.count = 1;
  for (int d = 0; d < a.red_ndim; ++d) {
    const int64_t s = a.red_sizes[d];
    p.count *= s;
    if (s == 1) continue;
    if (p.red_ndim > 0 && p.red_strides[p.red_ndim - 1] == s * a.red_strides[d]) {
      p.red_sizes[p.red_ndim - 1] *= s;
      p.red_strides[p.red_ndim - 1] = a.red_strides[d];
    } else {
      p.red_sizes[p.red_ndim] = s;
      p.red_strides[p.red_ndim] = a.red_strides[d];
      ++p.red_ndim;
    }
  }
  if (p.red_ndim == 0) {  // nothing reduced, or only size-1 dims: one element per output
    p.red_ndim = 1;
    p.red_sizes[0] = 1;
    p.red_strides[0] = 0;
  }
  p.correction = a.correction;

  const bool inner = p.red_strides[p.red_ndim - 1] == 1;
  p.r_fast = inner;
  const bool half_or_float = a.in_dtype == DType::Float32 || a.in_dtype == DType::Float16 ||
                             a.in_dtype == DType::BFloat16;
  p.vec = inner && p.red_ndim == 1 && half_or_float && p.count > 1
              ? static_cast<int>(16 / (a.in_dtype == DType::Float32 ? 4 : 2))
              : 0;
  const int64_t per_thread = p.vec > 0 ? kMinRunsPerThread * p.vec : kMinPerThread;
  if (inner) {
    // Enough threads per output that each has about per_thread elements: short rows share a block
    // (fewer block-wide merges per row), long ones get the whole block.
    p.br = pow2_at_least(ceil_div(p.count, per_thread), kBlock);
    p.bo = kBlock / p.br;
  } else {
    // Up to 256 outputs side by side; when there are fewer, the spare threads split r instead of
    // idling (a full reduction of a transposed tensor has one output).
    p.bo = pow2_at_least(p.nout, kBlock);
    p.br = kBlock / p.bo;
  }
  p.groups = ceil_div(p.nout, p.bo);
  p.nchunks = 1;
  p.chunk_len = p.count;
  if (p.groups > 0 && p.groups < kTargetBlocks && p.count > 0) {
    const int64_t by_fill = ceil_div(kTargetBlocks, p.groups);
    const int64_t by_work = ceil_div(p.count, static_cast<int64_t>(p.br) * per_thread);
    const int64_t want = std::min(by_fill, by_work);
    if (want >= 2) {
      // Chunks start at multiples of br (of br runs with vec), so every thread of a chunk starts
      // on the same phase.
      const int64_t unit = static_cast<int64_t>(p.br) * (p.vec > 0 ? p.vec : 1);
      p.chunk_len = ceil_div(ceil_div(p.count, want), unit) * unit;
      p.nchunks = ceil_div(p.count, p.chunk_len);
      if (p.nchunks < 2) {
        p.nchunks = 1;
        p.chunk_len = p.count;
      }
    }
  }
  return p;
}

template <typename C> __device__ __forceinline__ bool is_nan_c(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return v != v;
  } else {
    return false;
  }
}
template <typename C> __device__ __forceinline__ C nan_c() {
  if constexpr (std::is_same_v<C, float>) {
    return __int_as_float(0x7fc00000);
  } else {
    return __longlong_as_double(0x7ff8000000000000LL);
  }
}

// Integer sums and products wrap like the CPU's instead of being undefined behaviour.
template <typename C> __device__ __forceinline__ C add_c(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  } else {
    return a + b;
  }
}
template <typename C> __device__ __forceinline__ C mul_c(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  } else {
    return a * b;
  }
}

// Inputs of a float accumulator can only be float32/float16/bfloat16 (the dispatch guarantees
// it), so its load switch has three cases instead of eight.
template <typename L> __device__ __forceinline__ L load_in(const void* in, DType t, int64_t i) {
  if constexpr (std::is_same_v<L, float>) {
    if (t == DType::Float32) return static_cast<const float*>(in)[i];
    if (t == DType::Float16) return to_f32(static_cast<const Float16Storage*>(in)[i]);
    return to_f32(static_cast<const BFloat16Storage*>(in)[i]);
  } else {
    return load_as<L>(in, t, i);
  }
}

// ---- policies: Partial must be trivially copyable with a size that is a multiple of 4 bytes ----

template <typename C> struct SumPolicy {
  using Load = C;
  using Partial = C;
  static __device__ Partial identity() { return C(0); }
  static __device__ void add(Partial& p, C v, int64_t) { p = add_c(p, v); }
  static __device__ void merge(Partial& a, const Partial& b) { a = add_c(a, b); }
  static __device__ void store(const ReduceParams& p, int64_t o, int64_t, const Partial& v) {
    if (p.out) store_as<C>(p.out, p.out_dtype, o, v);
  }
};

template <typename C> struct MeanPolicy : SumPolicy<C> {
  static __device__ void store(const ReduceParams& p, int64_t o, int64_t, const C& v) {
    if (p.out) store_as<C>(p.out, p.out_dtype, o, p.count == 0 ? nan_c<C>() : v / static_cast<C>(p.count));
  }
};

template <typename C> struct ProdPolicy {
  using Load = C;
  using Partial = C;
  static __device__ Partial identity() { return C(1); }
  static __device__ void add(Partial& p, C v, int64_t) { p = mul_c(p, v); }
  static __device__ void merge(Partial& a, const Partial& b) { a = mul_c(a, b); }
  static __device__ void store(const ReduceParams& p, int64_t o, int64_t, const Partial& v) {
    if (p.out) store_as<C>(p.out, p.out_dtype, o, v);
  }
};

// Max/Min and ArgMax/ArgMin. The merge is symmetric, so the interleaved ranges of the threads give
// the CPU's answer: a NaN beats every number and the lowest index wins among equals (NaN and NaN
// count as equal, as do -0 and +0).
template <typename C, bool kMax> struct ExtremePolicy {
  using Load = C;
  struct Partial {
    C v;
    int64_t idx;  // -1: nothing seen
  };
  static __device__ Partial identity() { return Partial{C(0), -1}; }
  static __device__ void merge(Partial& a, const Partial& b) {
    if (b.idx < 0) return;
    if (a.idx < 0) {
      a = b;
      return;
    }
    const bool an = is_nan_c(a.v), bn = is_nan_c(b.v);
    bool take;
    if (an || bn) {
      take = bn && (!an || b.idx < a.idx);
    } else {
      take = (kMax ? b.v > a.v : b.v < a.v) || (b.v == a.v && b.idx < a.idx);
    }
    if (take) a = b;
  }
  // A thread sees its elements in increasing r, so a strictly better value is the only reason to
  // move (equal values keep the earlier index), and the first NaN stays.
  static __device__ void add(Partial& p, C v, int64_t r) {
    if (p.idx < 0 || (!is_nan_c(p.v) && (is_nan_c(v) || (kMax ? v > p.v : v < p.v)))) {
      p.v = v;
      p.idx = r;
    }
  }
  static __device__ void store(const ReduceParams& p, int64_t o, int64_t io, const Partial& v) {
    if (p.idx) store_as<int64_t>(p.idx, p.idx_dtype, io, v.idx);
    if (!p.out) return;
    if (p.arg_to_out) {
      store_as<int64_t>(p.out, p.out_dtype, o, v.idx);
    } else {
      store_as<C>(p.out, p.out_dtype, o, v.v);
    }
  }
};

// Welford within a thread, Chan et al.'s pairwise merge between threads and chunks.
template <typename C> struct VarPolicy {
  using Load = C;
  struct Partial {
    int64_t n;
    C mean;
    C m2;
  };
  static __device__ Partial identity() { return Partial{0, C(0), C(0)}; }
  static __device__ void add(Partial& p, C v, int64_t) {
    p.n += 1;
    const C d = v - p.mean;
    p.mean += d / static_cast<C>(p.n);
    p.m2 += d * (v - p.mean);
  }
  static __device__ void merge(Partial& a, const Partial& b) {
    if (b.n == 0) return;
    if (a.n == 0) {
      a = b;
      return;
    }
    const C na = static_cast<C>(a.n), nb = static_cast<C>(b.n), n = na + nb;
    const C delta = b.mean - a.mean;
    a.mean += delta * (nb / n);
    a.m2 += b.m2 + delta * delta * (na * nb / n);
    a.n += b.n;
  }
  static __device__ void store(const ReduceParams& p, int64_t o, int64_t, const Partial& v) {
    if (!p.out) return;
    const double dof = ::fmax(0.0, static_cast<double>(v.n) - p.correction);  // 0: inf, or NaN for 0 / 0
    store_as<C>(p.out, p.out_dtype, o, v.m2 / static_cast<C>(dof));
  }
};

// Loads as double: every nonzero value of every dtype stays nonzero (a float load would flush tiny
// float64 values to 0). The partial is an int so that it shuffles as one 32-bit word.
template <bool kAny> struct LogicalPolicy {
  using Load = double;
  using Partial = int;
  static __device__ Partial identity() { return kAny ? 0 : 1; }
  static __device__ void add(Partial& p, double v, int64_t) {
    if constexpr (kAny) {
      p |= v != 0.0 ? 1 : 0;
    } else {
      p &= v != 0.0 ? 1 : 0;
    }
  }
  static __device__ void merge(Partial& a, const Partial& b) {
    if constexpr (kAny) {
      a |= b;
    } else {
      a &= b;
    }
  }
  static __device__ void store(const ReduceParams& p, int64_t o, int64_t, const Partial& v) {
    if (p.out) store_as<int64_t>(p.out, p.out_dtype, o, v);
  }
};

// ---- the kernels ----

template <typename P> __device__ __forceinline__ P shfl_down_partial(const P& v, int delta, int width) {
  static_assert(sizeof(P) % 4 == 0, "partials shuffle as 32-bit words");
  constexpr int kWords = static_cast<int>(sizeof(P) / 4);
  uint32_t w[kWords];
  memcpy(w, &v, sizeof(P));
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = __shfl_down_sync(0xffffffffu, w[i], delta, width);
  P out;
  memcpy(&out, w, sizeof(P));
  return out;
}

// Offsets of output o: in the input (kept dims), in `out` and in `indices`.
__device__ __forceinline__ void output_offsets(const ReduceParams& p, int64_t o, int64_t& in_off, int64_t& out_off,
                                               int64_t& idx_off) {
  in_off = out_off = idx_off = 0;
  for (int d = p.out_ndim - 1; d >= 0; --d) {
    const int64_t s = p.out_sizes[d];
    const int64_t c = o % s;
    o /= s;
    in_off += c * p.in_strides[d];
    out_off += c * p.out_strides[d];
    idx_off += c * p.idx_strides[d];
  }
}

__device__ __forceinline__ int64_t reduced_offset(const ReduceParams& p, int64_t r) {
  return cuda_detail::row_major_offset(p.red_sizes, p.red_strides, p.red_ndim, r);
}

// V consecutive elements (16 bytes) as floats: one 16-byte load when aligned, else V loads. Either
// way the same values come out, so alignment never changes a result.
template <typename T, int V> __device__ __forceinline__ void load_run(const T* src, bool aligned, float (&v)[V]) {
  static_assert(V * sizeof(T) == 16, "a run is 16 bytes");
  if (aligned) {
    const cuda_detail::Vec16<T> raw = *reinterpret_cast<const cuda_detail::Vec16<T>*>(src);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = to_f32(raw.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = to_f32(src[j]);
  }
}

// The contiguous path (p.vec == V): the reduced range [begin, end) is cut into runs of V elements;
// thread tr takes runs tr, tr + br, ... and adds each run's elements in order, then the tail
// elements (fewer than V) go one each to threads 0, 1, ... So a thread still sees increasing r (as
// ExtremePolicy needs), and the order of additions depends on sizes only.
template <class Policy, typename T, int V>
__device__ typename Policy::Partial accumulate_runs(const ReduceParams& p, int64_t base, int64_t begin, int64_t end,
                                                    int tr) {
  typename Policy::Partial acc = Policy::identity();
  const T* x = static_cast<const T*>(p.in) + base;
  const int64_t step = p.br;
  const int64_t nruns = (end - begin) / V;
  const bool aligned = reinterpret_cast<uintptr_t>(x + begin) % 16 == 0;
  int64_t g = tr;
  // Four runs in flight before their in-order adds.
  for (; g + 3 * step < nruns; g += 4 * step) {
    float v[4][V];
#pragma unroll
    for (int k = 0; k < 4; ++k) load_run<T, V>(x + begin + (g + k * step) * V, aligned, v[k]);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t r0 = begin + (g + k * step) * V;
#pragma unroll
      for (int j = 0; j < V; ++j) Policy::add(acc, v[k][j], r0 + j);
    }
  }
  for (; g < nruns; g += step) {
    float v[V];
    load_run<T, V>(x + begin + g * V, aligned, v);
    const int64_t r0 = begin + g * V;
#pragma unroll
    for (int j = 0; j < V; ++j) Policy::add(acc, v[j], r0 + j);
  }
  for (int64_t r = begin + nruns * V + tr; r < end; r += step) Policy::add(acc, to_f32(x[r]), r);
  return acc;
}

// One thread's partial over r = begin + tr, begin + tr + br, ... < end, in increasing r (or, with
// p.vec, over runs of p.vec elements: accumulate_runs).
template <class Policy>
__device__ typename Policy::Partial accumulate(const ReduceParams& p, int64_t base, int64_t begin, int64_t end,
                                               int tr) {
  using L = typename Policy::Load;
  if constexpr (std::is_same_v<L, float>) {
    if (p.vec > 0) {
      if (p.in_dtype == DType::Float32) return accumulate_runs<Policy, float, 4>(p, base, begin, end, tr);
      if (p.in_dtype == DType::Float16) return accumulate_runs<Policy, Float16Storage, 8>(p, base, begin, end, tr);
      return accumulate_runs<Policy, BFloat16Storage, 8>(p, base, begin, end, tr);
    }
  }
  typename Policy::Partial acc = Policy::identity();
  const int64_t step = p.br;
  int64_t r = begin + tr;
  if (p.red_ndim == 1) {
    const int64_t rs = p.red_strides[0];
    // Four loads in flight before four in-order adds: more memory parallelism, same order.
    for (; r + 3 * step < end; r += 4 * step) {
      const L v0 = load_in<L>(p.in, p.in_dtype, base + r * rs);
      const L v1 = load_in<L>(p.in, p.in_dtype, base + (r + step) * rs);
      const L v2 = load_in<L>(p.in, p.in_dtype, base + (r + 2 * step) * rs);
      const L v3 = load_in<L>(p.in, p.in_dtype, base + (r + 3 * step) * rs);
      Policy::add(acc, v0, r);
      Policy::add(acc, v1, r + step);
      Policy::add(acc, v2, r + 2 * step);
      Policy::add(acc, v3, r + 3 * step);
    }
    for (; r < end; r += step) Policy::add(acc, load_in<L>(p.in, p.in_dtype, base + r * rs), r);
  } else {
    for (; r < end; r += step) Policy::add(acc, load_in<L>(p.in, p.in_dtype, base + reduced_offset(p, r)), r);
  }
  return acc;
}

// Merges the br partials of each output in a fixed tree; the result is valid in its tr == 0 thread.
// Every thread of the block must call it (it shuffles and synchronizes).
template <class Policy>
__device__ typename Policy::Partial combine(typename Policy::Partial acc, const ReduceParams& p, int tr, int to,
                                            typename Policy::Partial* sh) {
  if (p.r_fast) {
    // tid = to * br + tr: an output's threads are consecutive lanes (br <= 32) or whole warps.
    const int width = p.br < 32 ? p.br : 32;
    for (int s = width / 2; s > 0; s >>= 1) {
      const typename Policy::Partial other = shfl_down_partial(acc, s, width);
      if ((tr & (width - 1)) < s) Policy::merge(acc, other);
    }
    if (p.br > 32) {
      const int nw = p.br / 32;
      if ((tr & 31) == 0) sh[to * nw + tr / 32] = acc;
      __syncthreads();
      if (tr == 0) {
        for (int w = 1; w < nw; ++w) Policy::merge(acc, sh[to * nw + w]);
      }
      __syncthreads();  // sh is reused by the next output group
    }
  } else if (p.br > 1) {
    // tid = tr * bo + to: a tree over tr in shared memory, halving the live rows each step.
    sh[tr * p.bo + to] = acc;
    __syncthreads();
    for (int s = p.br / 2; s > 0; s >>= 1) {
      if (tr < s) {
        Policy::merge(acc, sh[(tr + s) * p.bo + to]);
        sh[tr * p.bo + to] = acc;
      }
      __syncthreads();
    }
  }
  return acc;
}

// A block's partials in shared memory, as bytes: a Partial may have constructors, which the type of
// a __shared__ variable may not.
template <typename Partial> struct alignas(16) PartialBytes {
  unsigned char bytes[kBlock * sizeof(Partial)];
};

// Pass 1 (or the only pass): blockIdx.y is the chunk of the reduced range; with `partials` the
// merged partial of (output, chunk) goes to partials[o * nchunks + chunk], else to the output.
template <class Policy>
__global__ void __launch_bounds__(kBlock) reduce_kernel(ReduceParams p, typename Policy::Partial* partials) {
  using Partial = typename Policy::Partial;
  KILN_SHARED(PartialBytes<Partial>, smem);
  Partial* sh = reinterpret_cast<Partial*>(smem.bytes);
  const int tid = static_cast<int>(threadIdx.x);
  const int tr = p.r_fast ? tid % p.br : tid / p.bo;
  const int to = p.r_fast ? tid / p.br : tid % p.bo;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * p.chunk_len;
  const int64_t end = begin + p.chunk_len < p.count ? begin + p.chunk_len : p.count;
  for (int64_t g = blockIdx.x; g < p.groups; g += gridDim.x) {
    const int64_t o = g * p.bo + to;
    const bool live = o < p.nout;
    int64_t in_off = 0, out_off = 0, idx_off = 0;
    if (live) output_offsets(p, o, in_off, out_off, idx_off);
    Partial acc = live ? accumulate<Policy>(p, in_off, begin, end, tr) : Policy::identity();
    acc = combine<Policy>(acc, p, tr, to, sh);
    if (live && tr == 0) {
      if (partials) {
        partials[o * p.nchunks + chunk] = acc;
      } else {
        Policy::store(p, out_off, idx_off, acc);
      }
    }
  }
}

// Pass 2: `p` has the layout of the partials (r_fast, br threads over an output's nchunks partials),
// merged by the same thread order and tree as pass 1.
template <class Policy>
__global__ void __launch_bounds__(kBlock)
    reduce_finish_kernel(ReduceParams p, const typename Policy::Partial* partials) {
  using Partial = typename Policy::Partial;
  KILN_SHARED(PartialBytes<Partial>, smem);
  Partial* sh = reinterpret_cast<Partial*>(smem.bytes);
  const int tid = static_cast<int>(threadIdx.x);
  const int tr = tid % p.br, to = tid / p.br;
  for (int64_t g = blockIdx.x; g < p.groups; g += gridDim.x) {
    const int64_t o = g * p.bo + to;
    const bool live = o < p.nout;
    Partial acc = Policy::identity();
    if (live) {
      for (int64_t c = tr; c < p.nchunks; c += p.br) Policy::merge(acc, partials[o * p.nchunks + c]);
    }
    acc = combine<Policy>(acc, p, tr, to, sh);
    if (live && tr == 0) {
      int64_t in_off, out_off, idx_off;
      output_offsets(p, o, in_off, out_off, idx_off);
      Policy::store(p, out_off, idx_off, acc);
    }
  }
}

template <class Policy> inline size_t partials_bytes(const ReduceParams& p) {
  if (p.nout == 0 || p.nchunks <= 1) return 0;
  return static_cast<size_t>(p.nout) * static_cast<size_t>(p.nchunks) * sizeof(typename Policy::Partial);
}

// Pass 2's plan: the partials of pass 1 (nchunks per output, contiguous) reduced along r by br
// threads per output, with the same policy and tree.
inline ReduceParams finish_params(const ReduceParams& p) {
  ReduceParams q = p;
  q.r_fast = true;
  q.vec = 0;  // pass 2 reads the partials, not the input
  q.br = pow2_at_least(p.nchunks, kBlock);
  q.bo = kBlock / q.br;
  q.groups = ceil_div(p.nout, q.bo);
  return q;
}

template <typename T> struct Tag {
  using type = T;
};

// Calls f(Tag<Policy>{}) for the op and the input's accumulator: float for float32/float16/bfloat16,
// double for float64, int64 for integers (sum, prod, max/min); mean and var of integers, which core
// rejects, would accumulate in double.
template <typename F> decltype(auto) visit_policy(ReduceOp op, DType in, F&& f) {
  const bool f32 = in == DType::Float32 || in == DType::Float16 || in == DType::BFloat16;
  const bool f64 = in == DType::Float64;
  switch (op) {
    case ReduceOp::Sum:
      if (f32) return f(Tag<SumPolicy<float>>{});
      if (f64) return f(Tag<SumPolicy<double>>{});
      return f(Tag<SumPolicy<int64_t>>{});
    case ReduceOp::Prod:
      if (f32) return f(Tag<ProdPolicy<float>>{});
      if (f64) return f(Tag<ProdPolicy<double>>{});
      return f(Tag<ProdPolicy<int64_t>>{});
    case ReduceOp::Mean:
      if (f32) return f(Tag<MeanPolicy<float>>{});
      return f(Tag<MeanPolicy<double>>{});
    case ReduceOp::Var:
      if (f32) return f(Tag<VarPolicy<float>>{});
      return f(Tag<VarPolicy<double>>{});
    case ReduceOp::Max:
    case ReduceOp::ArgMax:
      if (f32) return f(Tag<ExtremePolicy<float, true>>{});
      if (f64) return f(Tag<ExtremePolicy<double, true>>{});
      return f(Tag<ExtremePolicy<int64_t, true>>{});
    case ReduceOp::Min:
    case ReduceOp::ArgMin:
      if (f32) return f(Tag<ExtremePolicy<float, false>>{});
      if (f64) return f(Tag<ExtremePolicy<double, false>>{});
      return f(Tag<ExtremePolicy<int64_t, false>>{});
    case ReduceOp::Any: return f(Tag<LogicalPolicy<true>>{});
    case ReduceOp::All: return f(Tag<LogicalPolicy<false>>{});
  }
  throw Error("reduce: unknown ReduceOp");
}

}  // namespace kiln::reduction_cuda
