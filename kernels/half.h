// kiln's own 16-bit float types, bit-compatible with __half and __nv_bfloat16.
// Conversions from float round to nearest even and keep NaN a NaN, from double and the integers
// correctly rounded too; both directions are host and device code (KILN_HD_INLINE, kernels/macros.h),
// so the CPU reference and the CUDA kernels convert identically (the kernels' hardware conversions
// agree with them, NaN included: kernels/cuda/device_math.cuh).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/macros.h"

namespace kiln {

namespace detail {
KILN_HD_INLINE uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
KILN_HD_INLINE float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// The conversions are straight-line code (selects, no branches), so that CPU loops storing or
// loading halves vectorize (a variable shift per lane is an AVX2 instruction) and a warp never
// diverges on them. Both were checked against the branching forms they replaced for every float32
// and every 16-bit pattern.

// a where c holds, else b, as a mask: GCC 12 does not vectorize float_to_half_bits' selects written
// as ?: (it narrows one arm to 16 bits and then has no vector select for the mixed widths).
KILN_HD_INLINE uint32_t select_bits(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (a & m) | (b & ~m);
}

// float -> float16, to nearest even; overflow to +-inf, a NaN to the quiet NaN 0x7E00 with its sign.
KILN_HD_INLINE uint16_t float_to_half_bits(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7FFFFFFFu;
  // Normal halves: rebias the exponent (127 -> 15), keep 10 mantissa bits and round to nearest even
  // by adding just under half an ulp, plus one when the kept bits are odd; a carry into the
  // exponent is the right result.
  const uint32_t r = absx - 0x38000000u;
  const uint32_t normal = (r + 0xFFFu + ((r >> 13) & 1u)) >> 13;
  // Below 2^-14: the count of 2^-24 steps, rounded the same way, from the 24-bit significand shifted
  // right by s (14 to 24; 25 for everything below 2^-25, which rounds to zero). A count of 0x400
  // is the smallest normal, correctly encoded.
  const bool tiny = absx < 0x38800000u;
  const uint32_t exp = absx >> 23;
  const uint32_t s = select_bits(tiny, 126u - exp < 25u ? 126u - exp : 25u, 14u);
  const uint32_t mant = (absx & 0x7FFFFFu) | 0x800000u;
  const uint32_t subnormal = (mant + (1u << (s - 1u)) - 1u + ((mant >> s) & 1u)) >> s;
  uint32_t h = select_bits(tiny, subnormal, normal);
  h = select_bits(absx >= 0x477FF000u, 0x7C00u, h);  // rounds to 65520 or more, or is inf: inf
  h = select_bits(absx > 0x7F800000u, 0x7E00u, h);   // NaN
  return static_cast<uint16_t>(sign | h);
}

KILN_HD_INLINE float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  const uint32_t normal = sign | ((exp + 112u) << 23) | (mant << 13);
  const uint32_t inf_nan = sign | 0x7F800000u | (mant << 13);
  const uint32_t subnormal = sign | f32_bits(static_cast<float>(mant) * 5.9604644775390625e-8f);  // mant * 2^-24
  return bits_f32(exp == 0x1Fu ? inf_nan : exp == 0 ? subnormal : normal);
}

// float -> bfloat16, to nearest even (the same rounding as float16's normals); a NaN keeps its sign
// and top payload bits and is made quiet.
KILN_HD_INLINE uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

KILN_HD_INLINE float bf16_bits_to_float(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

// Wider values reach 16 bits through a float rounded to odd: toward zero, with its last bit set when
// it is inexact. Rounding that float to nearest even gives the wide value correctly rounded (a float
// keeps more than two bits beyond either 16-bit format's), where rounding to nearest twice can
// meet a tie the first rounding made: 1 + 2^-11 + 2^-40 in float is the tie 1 + 2^-11, which float16
// rounds down to 1, not up to 1 + 2^-10; 65519.99999 in float is 65520, which is float16's inf.

// double -> float rounded to odd; a NaN stays a NaN, and a finite double past float's range gives
// float's largest finite value (which every 16-bit format rounds on to its inf).
KILN_HD_INLINE float double_to_float_odd(double d) {
  const double a = d < 0 ? -d : d;
  if (!(a <= 3.4028234663852886e38)) {                          // NaN, inf, or past FLT_MAX
    if (!(a <= 1.7976931348623157e308)) return static_cast<float>(d);  // NaN or inf
    return bits_f32((d < 0 ? 0x80000000u : 0u) | 0x7F7FFFFFu);
  }
  const float f = static_cast<float>(d);
  const double back = static_cast<double>(f);
  if (back == d) return f;
  uint32_t u = f32_bits(f);
  if ((back < 0 ? -back : back) > a) u -= 1u;  // rounded away from zero: one step back
  return bits_f32(u | 1u);
}

// Whether a scalar carried twice, as a double `value` and an int64 `int_value` (kernels/elementwise.h's
// Operand, the fills), is an integer past 2^53, where doubles no longer hold every integer: a float
// is then rounded from the integer, once (through the double it would round twice).
KILN_HD_INLINE bool is_wide_integer(double value, int64_t int_value) {
  return (value > 0x1p53 || value < -0x1p53) && static_cast<double>(int_value) == value;
}

// A floating value as an integer of type I, defined for every input (a plain cast is undefined past
// I's range): NaN is 0, the rest truncated toward zero and held to int64's range, then wrapped to I
// as an int64 converts (two's complement: 300.7 is 44 in uint8, -1.5 is 255). Both devices' kernels
// and Scalar::to_int convert with it, so they agree on NaN, inf and huge values, where the
// hardware does not (x86 gives INT64_MIN for all three, a GPU saturates and makes NaN 0).
template <typename I, typename F>
KILN_HD_INLINE I float_to_integer(F v) {
  static_assert(std::is_floating_point_v<F> && std::is_integral_v<I> && !std::is_same_v<I, bool>);
  const double d = static_cast<double>(v);
  int64_t n = 0;
  if (d >= 0x1p63) {
    n = INT64_MAX;
  } else if (d < -0x1p63) {
    n = INT64_MIN;
  } else if (d == d) {
    n = static_cast<int64_t>(d);
  }
  return static_cast<I>(n);
}

// static_cast for the element conversions of the kernels' loads and stores, except that a floating
// value becomes an integer (not bool) through float_to_integer.
template <typename To, typename From>
KILN_HD_INLINE To convert_value(From v) {
  if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To> && !std::is_same_v<To, bool>) {
    return float_to_integer<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// int64 -> double rounded to odd (exact up to 2^53 in magnitude), so that an integer reaches 16 bits
// rounded once too.
KILN_HD_INLINE double int64_to_double_odd(int64_t n) {
  const uint64_t m = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  if (m <= (uint64_t{1} << 53)) return static_cast<double>(n);
#if defined(__CUDA_ARCH__)
  const int width = 64 - __clzll(static_cast<long long>(m));
#else
  const int width = 64 - __builtin_clzll(m);
#endif
  const int shift = width - 53;  // 1 to 11
  uint64_t t = m >> shift;
  if ((m & ((uint64_t{1} << shift) - 1)) != 0) t |= 1u;
  const double r = static_cast<double>(t) * static_cast<double>(uint64_t{1} << shift);  // both exact
  return n < 0 ? -r : r;
}

// The float that a value of type C (float, double or an integer) is rounded from when it is stored
// in 16 bits: v itself for a float, else v rounded to odd.
template <typename C> KILN_HD_INLINE float float_for_16bit(C v) {
  if constexpr (std::is_same_v<C, float>) {
    return v;
  } else if constexpr (std::is_integral_v<C>) {
    return double_to_float_odd(int64_to_double_odd(static_cast<int64_t>(v)));
  } else {
    return double_to_float_odd(static_cast<double>(v));
  }
}
}  // namespace detail

struct alignas(2) Half {
  uint16_t bits = 0;
  Half() = default;
  KILN_HD_INLINE Half(float f) : bits(detail::float_to_half_bits(f)) {}  // NOLINT: implicit like float
  KILN_HD_INLINE operator float() const { return detail::half_bits_to_float(bits); }
  static KILN_HD_INLINE Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct alignas(2) BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  KILN_HD_INLINE BFloat16(float f) : bits(detail::float_to_bf16_bits(f)) {}  // NOLINT
  KILN_HD_INLINE operator float() const { return detail::bf16_bits_to_float(bits); }
  static KILN_HD_INLINE BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit float types must be 2 bytes");

}  // namespace kiln
