// Helpers shared by the CPU kernels: cast-on-load/store by runtime dtype, and an N-d strided loop
// that walks a range of the output's logical (row-major) order, as the thread pool chunks it.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/strided.h"

// A hot loop compiled twice, for baseline x86-64 (SSE2: what kiln's build targets) and for
// x86-64-v3 (AVX2, FMA, 8-wide floats), with the CPU's choice made once at load time (GCC's
// target_clones, an ifunc). The kernels compile with -ffp-contract=off (kernels/CMakeLists.txt), so
// no a * b + c becomes an FMA: both clones do the same IEEE operations and give the same bits, only
// more of them per instruction (tests/kernels/test_exp_poly.cpp checks it for exp).
// Clang cannot clone templates; there (the fuzz builds) the loops stay baseline.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KILN_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define KILN_CPU_CLONES
#endif
// Element access (ld, st) in those loops: always inlined, so that it is compiled for the clone's
// target; an out-of-line copy is baseline code, and a call to it from the AVX2 clone keeps the loop
// scalar. The lane sums below are not forced: inlined that early, GCC 12 vectorized layer norm's
// float32 sums across the lanes with shuffles, four times the instructions of the loop it makes
// when it inlines them itself. (It does not inline lane_sum2 over float16 terms in layer norm's
// row_dx, whose clone calls a baseline copy.)
#if defined(__GNUC__)
#define KILN_CPU_INLINE inline __attribute__((always_inline))
#else
#define KILN_CPU_INLINE inline
#endif

namespace kiln::cpu {

template <typename C> inline C load_as(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::Float32: return detail::convert_value<C>(static_cast<const float*>(base)[i]);
    case DType::Float16: return detail::convert_value<C>(static_cast<float>(static_cast<const Half*>(base)[i]));
    case DType::BFloat16: return detail::convert_value<C>(static_cast<float>(static_cast<const BFloat16*>(base)[i]));
    case DType::Float64: return detail::convert_value<C>(static_cast<const double*>(base)[i]);
    case DType::Int32: return static_cast<C>(static_cast<const int32_t*>(base)[i]);
    case DType::Int64: return static_cast<C>(static_cast<const int64_t*>(base)[i]);
    case DType::UInt8: return static_cast<C>(static_cast<const uint8_t*>(base)[i]);
    case DType::Bool: return static_cast<C>(static_cast<const bool*>(base)[i] ? 1 : 0);
  }
  return C(0);
}

template <typename C> inline void store_as(void* base, DType t, int64_t i, C v) {
  switch (t) {
    case DType::Float32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::Float16: static_cast<Half*>(base)[i] = Half(detail::float_for_16bit(v)); return;
    case DType::BFloat16: static_cast<BFloat16*>(base)[i] = BFloat16(detail::float_for_16bit(v)); return;
    case DType::Float64: static_cast<double*>(base)[i] = static_cast<double>(v); return;
    case DType::Int32: static_cast<int32_t*>(base)[i] = detail::convert_value<int32_t>(v); return;
    case DType::Int64: static_cast<int64_t*>(base)[i] = detail::convert_value<int64_t>(v); return;
    case DType::UInt8: static_cast<uint8_t*>(base)[i] = detail::convert_value<uint8_t>(v); return;
    case DType::Bool: static_cast<bool*>(base)[i] = v != C(0); return;
  }
}

// Accumulation type of a floating element type: double for double, float for the rest.
template <typename T> using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Typed element access for kernels that switched on the dtype once (half types go through float,
// as their 16-bit patterns: GCC vectorizes a loop that stores the member, not one that assigns
// the struct).
template <typename T, typename A> KILN_CPU_INLINE A ld(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, Half>) {
    return static_cast<A>(detail::half_bits_to_float(p[i].bits));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return static_cast<A>(detail::bf16_bits_to_float(p[i].bits));
  } else {
    return detail::convert_value<A>(p[i]);
  }
}
template <typename T, typename A> KILN_CPU_INLINE void st(T* p, int64_t i, A v) {
  if constexpr (std::is_same_v<T, Half>) {
    p[i].bits = detail::float_to_half_bits(detail::float_for_16bit(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    p[i].bits = detail::float_to_bf16_bits(detail::float_for_16bit(v));
  } else {
    p[i] = detail::convert_value<T>(v);
  }
}

// dst[e] += src[e] over a run of n (vectorizes where the caller is a KILN_CPU_CLONES function).
template <typename C> inline void add_run(C* __restrict dst, const C* __restrict src, int64_t n) {
  for (int64_t e = 0; e < n; ++e) dst[e] += src[e];
}

// v where keep holds, else +0: a select written as a mask of v's bits. GCC 12 at -O3 miscompiles
// `keep ? v : 0.0` as the term of a lane_sum in double in the AVX2 clone (the sum loses terms;
// float is unaffected); the mask gives the same bits and compiles right. batch_norm's ReLU mask
// uses it (tests/core/test_nn_ops.cpp's epilogue test fails in float64 with the plain select).
template <typename A> inline A keep_if(bool keep, A v) {
  static_assert(std::is_same_v<A, float> || std::is_same_v<A, double>, "keep_if: float or double");
  using U = std::conditional_t<std::is_same_v<A, double>, uint64_t, uint32_t>;
  return std::bit_cast<A>(std::bit_cast<U>(v) & (keep ? ~U{0} : U{0}));
}

// Reductions over a contiguous run in kLanes interleaved accumulators, folded in one fixed order at
// the end: the loop vectorizes (a single running sum is a chain of dependent adds), and the bits
// depend only on the run's length, never on the thread count. term(j) is the j-th term. Call them
// from a KILN_CPU_CLONES function so that the AVX2 clone gets 8-wide lanes.
constexpr int kLanes = 8;
template <typename A> inline A fold_lanes(const A (&lane)[kLanes]) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
// Adds a run's terms into the lanes: term(j) into lane j % kLanes. A run cut into pieces that start
// at multiples of kLanes, added one after another into the same lanes, gives every lane the whole
// run's terms in the whole run's order: the bits of one call.
template <typename A, typename F> inline void lane_add(A (&lane)[kLanes], int64_t n, F&& term) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] += term(j + l);
  }
  for (; j < n; ++j) lane[j % kLanes] += term(j);
}
template <typename A, typename F> inline A lane_sum(int64_t n, F&& term) {
  A lane[kLanes] = {};
  lane_add(lane, n, term);
  return fold_lanes(lane);
}
// Two sums in one pass over the run, of term0(j) and of term1(j). Each has lane_sum's lanes and
// fold, so its bits are those of its own lane_sum; the terms can share loads the compiler merges.
template <typename A, typename F0, typename F1>
inline void lane_add2(A (&lane0)[kLanes], A (&lane1)[kLanes], int64_t n, F0&& term0, F1&& term1) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    // Both sums in one loop over the lanes: GCC 12 vectorizes this, but not a loop per sum nor a
    // term returning both.
    for (int l = 0; l < kLanes; ++l) {
      lane0[l] += term0(j + l);
      lane1[l] += term1(j + l);
    }
  }
  for (; j < n; ++j) {
    lane0[j % kLanes] += term0(j);
    lane1[j % kLanes] += term1(j);
  }
}
template <typename A> struct LanePair {
  A first, second;
};
template <typename A, typename F0, typename F1>
inline LanePair<A> lane_sum2(int64_t n, F0&& term0, F1&& term1) {
  A lane0[kLanes] = {}, lane1[kLanes] = {};
  lane_add2(lane0, lane1, n, term0, term1);
  return {fold_lanes(lane0), fold_lanes(lane1)};
}
// The largest term, NaNs skipped as std::max(m, v) skips them (so the order does not matter); -inf
// for an empty run.
template <typename A, typename F> inline A lane_max(int64_t n, F&& term) {
  A lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = -std::numeric_limits<A>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const A v = term(j + l);
      lane[l] = lane[l] < v ? v : lane[l];
    }
  }
  for (; j < n; ++j) {
    const A v = term(j);
    lane[j % kLanes] = lane[j % kLanes] < v ? v : lane[j % kLanes];
  }
  A m = lane[0];
  for (int l = 1; l < kLanes; ++l) m = m < lane[l] ? lane[l] : m;
  return m;
}

// Calls f.template operator()<T>() for the floating dtypes (float32 for anything else).
template <typename F> void visit_float(DType t, F&& f) {
  switch (t) {
    case DType::Float64: f.template operator()<double>(); return;
    case DType::Float16: f.template operator()<Half>(); return;
    case DType::BFloat16: f.template operator()<BFloat16>(); return;
    default: f.template operator()<float>(); return;
  }
}

// A per-channel / per-feature parameter vector of any dtype, loaded once; `fill` where absent.
template <typename A> std::vector<A> load_vector(const void* p, DType t, int64_t n, A fill) {
  std::vector<A> v(static_cast<size_t>(n), fill);
  if (p) {
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = load_as<A>(p, t, i);
  }
  return v;
}

// Calls f.template operator()<C>() for an elementwise compute dtype (double, float or int64).
template <typename F> void visit_compute(DType compute, F&& f) {
  switch (compute) {
    case DType::Float64: f.template operator()<double>(); return;
    case DType::Float32: f.template operator()<float>(); return;
    case DType::Int64: f.template operator()<int64_t>(); return;
    default: throw DTypeError(std::string("elementwise: unsupported compute dtype ") + dtype_name(compute));
  }
}

// Walks the elements [begin, end) of the logical order of a `sizes` shape a run of the innermost dim
// at a time: f(offsets, count, inner_strides) for each stretch of up to sizes[ndim - 1] elements,
// where offsets[a] is the first element's offset into operand a (strides[a]), so that a typed caller
// can run a tight inner loop (stride 1 or 0 in the common cases: contiguous, or broadcast along the
// last dim). NARGS operands.
template <int NARGS, typename F>
inline void nd_rows(int ndim, const int64_t* sizes, const int64_t* const* strides, int64_t begin, int64_t end, F&& f) {
  int64_t off[NARGS];
  int64_t inner_stride[NARGS];
  if (ndim == 0) {
    for (int a = 0; a < NARGS; ++a) off[a] = inner_stride[a] = 0;
    if (begin < end) f(off, int64_t{1}, inner_stride);
    return;
  }
  int64_t idx[kMaxDims];
  int64_t rem = begin;
  for (int a = 0; a < NARGS; ++a) off[a] = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    idx[d] = rem % sizes[d];
    rem /= sizes[d];
    for (int a = 0; a < NARGS; ++a) off[a] += idx[d] * strides[a][d];
  }
  const int last = ndim - 1;
  for (int a = 0; a < NARGS; ++a) inner_stride[a] = strides[a][last];
  int64_t i = begin;
  while (i < end) {
    const int64_t count = std::min(sizes[last] - idx[last], end - i);
    f(off, count, inner_stride);
    i += count;
    if (i >= end) break;
    // The run ended at the innermost dim's end (count = sizes[last] - idx[last]): back to its start,
    // then carry into the outer dims.
    for (int a = 0; a < NARGS; ++a) off[a] -= idx[last] * inner_stride[a];
    idx[last] = 0;
    for (int d = last - 1; d >= 0; --d) {
      ++idx[d];
      for (int a = 0; a < NARGS; ++a) off[a] += strides[a][d];
      if (idx[d] < sizes[d]) break;
      for (int a = 0; a < NARGS; ++a) off[a] -= sizes[d] * strides[a][d];
      idx[d] = 0;
    }
  }
}

// Calls f(offsets) for each element of [begin, end), in order, with offsets[a] the element's offset
// into operand a: nd_rows, one element at a time.
template <int NARGS, typename F>
inline void nd_loop(int ndim, const int64_t* sizes, const int64_t* const* strides, int64_t begin, int64_t end, F&& f) {
  nd_rows<NARGS>(ndim, sizes, strides, begin, end, [&](const int64_t* first, int64_t count, const int64_t* inner) {
    int64_t off[NARGS];
    for (int a = 0; a < NARGS; ++a) off[a] = first[a];
    for (int64_t k = 0; k < count; ++k) {
      f(off);
      for (int a = 0; a < NARGS; ++a) off[a] += inner[a];
    }
  });
}

}  // namespace kiln::cpu
