// Random state: one Philox generator per device, (seed, offset). Each random op takes the current
// offset and advances it by one, so a draw is a pure function of (seed, offset, element index) and
// the state is two integers that a checkpoint can save and restore.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "kernels/philox.h"

namespace kiln {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5EEDull) : state_{seed, 0} {}
  void manual_seed(uint64_t seed) { state_ = PhiloxState{seed, 0}; }
  uint64_t seed() const { return state_.seed; }
  PhiloxState state() const { return state_; }
  void set_state(PhiloxState s) { state_ = s; }
  // The state for one op, advancing the offset.
  PhiloxState next() {
    PhiloxState s = state_;
    ++state_.offset;
    return s;
  }

 private:
  PhiloxState state_;
};

Generator& default_generator(Device device = Device::cpu());
// Seeds the generators of every device.
void manual_seed(uint64_t seed);

}  // namespace kiln
