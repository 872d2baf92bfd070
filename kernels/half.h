// kiln's own 16-bit float types, bit-compatible with __half and __nv_bfloat16.
// Conversions from float round to nearest even and keep NaN a NaN; both directions are host and
// device code (KILN_HD_INLINE, kernels/macros.h), so the CPU reference and the CUDA kernels convert
// identically.
#pragma once

#include <cstdint>
#include <cstring>

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
