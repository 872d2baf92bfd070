// e^x in float for the CPU kernels' hot loops (GELU, sigmoid, softmax, cross-entropy, attention),
// written so that the compiler vectorizes a loop that calls it: no branch, no table, no call into
// the math library (glibc's expf is one scalar call per element, and the branch of a sign-split
// sigmoid mispredicted on every other element of a GELU). The method is the classic one:
//   e^x = 2^n e^r,  n = round(x / ln 2),  r = x - n ln 2,  |r| <= ln(2) / 2,
// with e^r from its degree-7 Taylor polynomial (truncation error below 6e-9, a tenth of float's
// unit roundoff) and 2^n built from the exponent bits. tests/kernels/test_exp_poly.cpp checks it
// against double's exp over float's whole range (within 2 units in the last place), and at the
// edges: overflow to +inf, gradual underflow into the subnormals, 0 below, NaN through.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln {

inline float exp_poly(float x) {
  // Past these, e^x is +inf or rounds to 0; clamping keeps n in [-151, 128]. A NaN fails both
  // comparisons and goes through, and NaN times anything below is NaN.
  x = x < -104.0f ? -104.0f : x;
  x = x > 88.8f ? 88.8f : x;
  // n = round(x log2 e): adding 1.5 * 2^23 rounds to an integer held in the low mantissa bits.
  const float shifter = 12582912.0f;
  const float t = x * 1.44269504088896341f + shifter;
  const float nf = t - shifter;
  int32_t tb, sb;
  std::memcpy(&tb, &t, sizeof tb);
  std::memcpy(&sb, &shifter, sizeof sb);
  const int32_t n = tb - sb;
  // r = x - n ln 2 in two steps (Cody and Waite): ln2_hi has few enough bits that n * ln2_hi is exact.
  const float ln2_hi = 0.693145751953125f, ln2_lo = 1.428606765330187045e-06f;
  float r = x - nf * ln2_hi;
  r = r - nf * ln2_lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n as two normal powers of two, so that a result in the subnormal range rounds once, at the end.
  const int32_t n1 = n / 2, n2 = n - n1;
  const int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, sizeof s1);
  std::memcpy(&s2, &b2, sizeof s2);
  return p * s1 * s2;
}

}  // namespace kiln
