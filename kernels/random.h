// Random draws from Philox (kernels/philox.h): fills with uniform, normal or integer values, and
// multinomial sampling. Element i of a fill, in the output's logical order, uses subsequence i, so
// the result does not depend on how the work is split, and both devices draw the same integers.
#pragma once

#include <cstdint>
#include <cstring>
#include <math.h>

#include "kernels/half.h"
#include "kernels/kernel.h"
#include "kernels/philox.h"
#include "kernels/strided.h"

namespace kiln {

// Uniform: [a, b); Normal: mean a, std b (Box-Muller); RandInt: integers in [a, b).
enum class RandomDist : uint8_t { Uniform, Normal, RandInt };

// Element i reads words (i & 1) * 2 and (i & 1) * 2 + 1 of block i >> 1 (float64 normals take a
// whole block of their own). The CUDA twin rounds the affine maps like x86 (no FMA), so only
// log/cos may differ, by an ulp.
// Uniform: [a, b); Normal: mean a, std b; RandInt: [low, low + range), exact in int64 (range is
// high - low as uint64, at least 1), each draw 64 random bits modulo the range: relative bias below
// range / 2^64, as PyTorch's.
struct RandomParams {
  double a = 0.0, b = 1.0;
  int64_t low = 0;
  uint64_t range = 1;
};
void random_cpu(const StridedArg& out, RandomDist dist, const RandomParams& p, PhiloxState philox,
                const KernelContext& ctx);
void random_cuda(const StridedArg& out, RandomDist dist, const RandomParams& p, PhiloxState philox,
                 const KernelContext& ctx);

// out: contiguous int64 [rows, num_samples]; probs: [rows, n] non-negative weights (any strides).
// Element (r, s) of a draw with replacement uses Philox subsequence r * num_samples + s; without
// replacement, category (r, j) gets an exponential key from subsequence r * n + j and the
// num_samples smallest keys win (sequential sampling without replacement in distribution).
// Invalid rows (negative, inf or NaN weights, zero sum, too few non-zero weights) are an Error on
// the CPU. The CUDA twin draws the same categories except where u * total lands within rounding of
// a cumulative-sum boundary (its prefix sum adds in another order) or two exponential keys are
// within an ulp (CUDA's log1p); it cannot throw from the device: an invalid row's outputs are set to
// 0 and the first one found is recorded in the context's error record as
// {op = IndexCheckOp::Multinomial, index = row, size = MultinomialRowError}, raised by the host at
// its next synchronizing call. It sorts keys in scratch memory from the context.
enum class MultinomialRowError : int64_t { InvalidWeight = 1, NegativeWeight, ZeroSum, InfiniteSum, TooFewNonZero };
void multinomial_cpu(int64_t* out, const StridedArg& probs, int64_t num_samples, bool replacement, PhiloxState philox,
                     const KernelContext& ctx);
void multinomial_cuda(int64_t* out, const StridedArg& probs, int64_t num_samples, bool replacement,
                      PhiloxState philox, const KernelContext& ctx);

// Writes a generator's {seed, offset} into the two words the draws of a captured graph read
// (PhiloxState::base), in stream order before a replay; the CPU twin stores them at once.
void philox_base_store_cpu(uint64_t* base, uint64_t seed, uint64_t offset, const KernelContext& ctx);
void philox_base_store_cuda(uint64_t* base, uint64_t seed, uint64_t offset, const KernelContext& ctx);

// --- uniform draws in [a, b), shared by both backends -------------------------------------------
// u takes as many random bits as the output dtype has significant digits (float32 24, float16 11,
// bfloat16 8; float64 53 through philox_uniform_double), so a draw in [0, 1) is a value of the
// dtype and never rounds up to 1. Then a + (b - a) u, in float (double for float64), capped at
// uniform_cap: where b - a is small against the spacing of the dtype's values near b, that sum would
// round to b itself.
KILN_HD int uniform_digits(DType t) { return t == DType::Float16 ? 11 : t == DType::BFloat16 ? 8 : 24; }
KILN_HD float philox_uniform_digits(uint32_t word, int digits) {
  return static_cast<float>(word >> (32 - digits)) * (1.0f / static_cast<float>(1u << digits));
}

namespace detail {
// The 16-bit float pattern one step toward -infinity (sign and magnitude: zero goes to the
// smallest negative subnormal).
KILN_HD uint16_t step_down16(uint16_t h) {
  if ((h & 0x7fff) == 0) return 0x8001;
  return (h & 0x8000) != 0 ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h - 1);
}
// The same for a double (not NaN or -infinity): the bits one step down, as std::nextafter(b, -inf),
// which is host code only.
KILN_HD double step_down64(double b) {
  uint64_t u;
#if defined(__CUDA_ARCH__)
  u = static_cast<uint64_t>(__double_as_longlong(b));
#else
  std::memcpy(&u, &b, sizeof u);
#endif
  if ((u & 0x7fffffffffffffffull) == 0) {
    u = 0x8000000000000001ull;
  } else {
    u = (u >> 63) != 0 ? u + 1 : u - 1;
  }
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
#endif
}
}  // namespace detail

// The largest value of `t` below b (b itself when a == b: the draw is a): what a draw in [a, b) may
// reach. Computed once per fill.
KILN_HD double uniform_cap(double a, double b, DType t) {
  if (!(a < b)) return b;
  switch (t) {
    case DType::Float64: return detail::step_down64(b);
    case DType::Float16: {
      uint16_t h = detail::float_to_half_bits(static_cast<float>(b));
      if (static_cast<double>(detail::half_bits_to_float(h)) >= b) h = detail::step_down16(h);
      return detail::half_bits_to_float(h);
    }
    case DType::BFloat16: {
      uint16_t h = detail::float_to_bf16_bits(static_cast<float>(b));
      if (static_cast<double>(detail::bf16_bits_to_float(h)) >= b) h = detail::step_down16(h);
      return detail::bf16_bits_to_float(h);
    }
    default: {
      float f = static_cast<float>(b);
      if (static_cast<double>(f) >= b) f = ::nextafterf(f, -INFINITY);
      return f;
    }
  }
}

namespace kernels {
KILN_KERNEL(random);
KILN_KERNEL(philox_base_store);
KILN_KERNEL(multinomial);
}  // namespace kernels

}  // namespace kiln
