#include "kernels/cpu/philox_lanes.h"

#include "kernels/cpu/loops.h"

namespace kiln::cpu {

// Every call inside is inlined (flatten). In the sanitized clang tree (tools/sanitize.sh, the fuzzers)
// the function is also left uninstrumented: there philox_round was called rather than inlined and
// every access to the counter arrays was checked, which made the lanes several times slower than one
// block per element, as the old code drew. The function touches only its own arrays and `words`, an
// array of fixed size, and tests/kernels/test_philox.cpp checks the words it gives.
#if defined(__clang__)
#define KILN_PHILOX_LANES_ATTRIBUTES __attribute__((flatten, no_sanitize("address", "coverage")))
#else
#define KILN_PHILOX_LANES_ATTRIBUTES __attribute__((flatten))
#endif

KILN_PHILOX_LANES_ATTRIBUTES KILN_CPU_CLONES void philox_lanes_fill(uint64_t seed, uint64_t offset, uint64_t index,
                                                                    uint32_t (&words)[4][kPhiloxLanes]) {
  uint32_t c0[kPhiloxLanes], c1[kPhiloxLanes], c2[kPhiloxLanes], c3[kPhiloxLanes];
  for (int l = 0; l < kPhiloxLanes; ++l) {
    const uint64_t i = index + static_cast<uint64_t>(l);
    c0[l] = static_cast<uint32_t>(i);
    c1[l] = static_cast<uint32_t>(i >> 32);
    c2[l] = static_cast<uint32_t>(offset);
    c3[l] = static_cast<uint32_t>(offset >> 32);
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    // Kept a loop: at -O3 GCC would otherwise unroll the lanes into scalar code before vectorizing.
#pragma GCC unroll 1
    for (int l = 0; l < kPhiloxLanes; ++l) philox_round(c0[l], c1[l], c2[l], c3[l], k0, k1);
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  for (int l = 0; l < kPhiloxLanes; ++l) {
    words[0][l] = c0[l];
    words[1][l] = c1[l];
    words[2][l] = c2[l];
    words[3][l] = c3[l];
  }
}

}  // namespace kiln::cpu
