// Philox4x32-10 counter-based generator (Salmon et al., SC'11), shared by the CPU and CUDA paths.
// A draw is a pure function of (seed, offset, element index), so random tensors, integer draws and
// masks are bit-identical on both devices by construction; floats agree to rounding of the maps.
// Under CUDA graph capture an op's seed and offset base are read from device memory when the kernel
// runs (PhiloxState::base), so each replay of a captured step draws new numbers.
#pragma once

#include <cstdint>

#include "kernels/macros.h"

namespace kiln {

struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // counter words consumed so far by earlier ops
  // Null for a draw whose seed and offset are known on the host. Otherwise two words in the
  // kernel's memory, {seed, offset base}, written before each replay of a captured graph: the
  // draw then uses seed base[0] and offset base[1] + offset (`seed` is ignored).
  const uint64_t* base = nullptr;
};

// The seed and offset a kernel draws with; call once per thread before drawing.
KILN_HD PhiloxState philox_resolve(const PhiloxState& s) {
  if (s.base == nullptr) return s;
  return PhiloxState{s.base[0], s.base[1] + s.offset, nullptr};
}

struct Philox4 {
  uint32_t v[4];
};

KILN_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// Philox4x32's multipliers and the Weyl increments of its key.
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

// One round: two 32x32->64 multiplies, the words permuted and the key mixed in. The CPU fill runs it
// over arrays of counters (kernels/cpu/philox_lanes.cpp) so that the rounds vectorize.
KILN_HD void philox_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0, uint32_t k1) {
  uint32_t hi0, lo0, hi1, lo1;
  philox_mulhilo(kPhiloxM0, c0, hi0, lo0);
  philox_mulhilo(kPhiloxM1, c2, hi1, lo1);
  const uint32_t n0 = hi1 ^ c1 ^ k0;
  const uint32_t n2 = hi0 ^ c3 ^ k1;
  c0 = n0;
  c1 = lo1;
  c2 = n2;
  c3 = lo0;
}

// Ten rounds over counter (c0..c3) with key (k0,k1).
KILN_HD Philox4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    philox_round(c0, c1, c2, c3, k0, k1);
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// The block of four words for subsequence `index` at counter `offset` of stream `seed`.
KILN_HD Philox4 philox_block(uint64_t seed, uint64_t offset, uint64_t index) {
  return philox4x32(static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                    static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Uniform in [0, 1): the top 24 bits, so every value is exactly representable in float.
KILN_HD float philox_uniform(uint32_t word) { return static_cast<float>(word >> 8) * (1.0f / 16777216.0f); }

// Uniform in [0, 1) with 53 random bits, for float64 tensors.
KILN_HD double philox_uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace kiln
