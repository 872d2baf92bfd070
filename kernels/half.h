// kiln's own 16-bit float types, bit-compatible with __half and __nv_bfloat16.
// Conversions from float round to nearest even and keep NaN a NaN; both directions are
// KILN_HD so the CPU reference and the CUDA kernels convert identically.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/macros.h"

namespace kiln {

namespace detail {
KILN_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
KILN_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

KILN_HD uint16_t float_to_half_bits(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7C00u | (absx > 0x7F800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477FF000u) {  // rounds to >= 65520: overflow to inf
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (absx < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to zero
    uint32_t exp = absx >> 23;
    uint32_t mant = (absx & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - exp;  // so that the result is mant >> (shift - 10)... in half ulps
    // value = mant * 2^(exp-150); half subnormal ulp = 2^-24 -> q = mant * 2^(exp-126)
    uint32_t s = shift;  // right shift amount in [14, 24]
    uint32_t q = mant >> s;
    uint32_t rem = mant & ((1u << s) - 1u);
    uint32_t halfway = 1u << (s - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // normal: rebias exponent 127 -> 15, keep 10 mantissa bits, round to nearest even
  uint32_t r = absx - 0x38000000u;  // exponent - 112
  uint32_t q = r >> 13;
  uint32_t rem = r & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

KILN_HD float half_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return bits_f32(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

KILN_HD uint16_t float_to_bf16_bits(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding = 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

KILN_HD float bf16_bits_to_float(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }
}  // namespace detail

struct alignas(2) Half {
  uint16_t bits = 0;
  Half() = default;
  KILN_HD Half(float f) : bits(detail::float_to_half_bits(f)) {}  // NOLINT: implicit like float
  KILN_HD operator float() const { return detail::half_bits_to_float(bits); }
  static KILN_HD Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct alignas(2) BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  KILN_HD BFloat16(float f) : bits(detail::float_to_bf16_bits(f)) {}  // NOLINT
  KILN_HD operator float() const { return detail::bf16_bits_to_float(bits); }
  static KILN_HD BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit float types must be 2 bytes");

}  // namespace kiln
