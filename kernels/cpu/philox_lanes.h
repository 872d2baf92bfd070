// Philox blocks for the CPU kernels that draw per element: the random fills, dropout and attention's
// dropout. Those give element i words of block i >> 1 (kernels/random.h), so consecutive elements
// read consecutive blocks, each block twice. PhiloxLanes computes kPhiloxLanes consecutive blocks at
// once and hands out their words: each block is computed once, and the ten rounds run over arrays of
// counters, one lane per block, which the compiler turns into vector multiplies (8 lanes in the
// x86-64-v3 clone, 4 in the baseline). The words are philox_block's, bit for bit
// (tests/kernels/test_philox.cpp).
#pragma once

#include <cstdint>

#include "kernels/philox.h"

namespace kiln::cpu {

inline constexpr int kPhiloxLanes = 16;

// Blocks index .. index + kPhiloxLanes - 1 of (seed, offset): words[k][l] is word k of block index + l.
void philox_lanes_fill(uint64_t seed, uint64_t offset, uint64_t index, uint32_t (&words)[4][kPhiloxLanes]);

// One thread's cursor over the blocks of a resolved PhiloxState (philox_resolve): cheapest when the
// blocks asked for mostly increase, as in a pass over elements in order.
class PhiloxLanes {
 public:
  explicit PhiloxLanes(const PhiloxState& resolved) : seed_(resolved.seed), offset_(resolved.offset) {}

  // Word k (0 to 3) of block `index`; computes the lanes from `index` on when they do not hold it.
  uint32_t word(uint64_t index, int k) {
    if (index - first_ >= filled_) {
      philox_lanes_fill(seed_, offset_, index, words_);
      first_ = index;
      filled_ = kPhiloxLanes;
    }
    return words_[k][index - first_];
  }

 private:
  uint64_t seed_, offset_;
  uint64_t first_ = 0;   // the block in lane 0
  uint64_t filled_ = 0;  // lanes that hold blocks: none at first, then all
  uint32_t words_[4][kPhiloxLanes];
};

}  // namespace kiln::cpu
