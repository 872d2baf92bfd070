// Random state. A Generator is a Philox stream of one device: (seed, offset), where each random op
// takes the current offset and advances it by one, so a draw is a pure function of (seed, offset,
// element index) and the whole state is two integers a checkpoint can save. Generators are handles
// (copies share one state) and lock their state, so threads may share one or each use their own.
// During a CUDA graph capture the draws of the captured device's generators come from a
// GeneratorCapture instead: the kernels read seed and offset from device memory that each replay
// rewrites, so every replay draws new numbers, exactly the ones the same eager steps would.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/device.h"
#include "kernels/philox.h"

namespace kiln {

class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 0x5EEDull;

  explicit Generator(uint64_t seed = kDefaultSeed, Device device = Device::cpu());

  Device device() const;
  void manual_seed(uint64_t seed);  // offset back to 0
  uint64_t seed() const;
  PhiloxState state() const;  // {seed, offset}, host values
  void set_state(PhiloxState s);
  // The draw of one op, advancing the offset by one (or, while this generator's device is being
  // captured, a draw relative to the capture's base; see GeneratorCapture).
  PhiloxState next();
  // Takes `draws` consecutive offsets at once (a graph replay's), returning the state before them.
  PhiloxState reserve(uint64_t draws);
  // Where the next draw comes from, as one number that can be saved and put back: the host offset,
  // or, while this generator's device is being captured, the capture's count of this generator's
  // draws (the k of base + k). Activation recompute (nn/checkpoint.h) saves it before forward and
  // puts it back for the recompute, so a recompute inside a capture replays forward's draws too.
  uint64_t position() const;
  void set_position(uint64_t position);

  // Whether two handles share one state.
  bool operator==(const Generator& other) const { return impl_ == other.impl_; }

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// The device's own generator (one per CUDA device index below 16, and one for the CPU).
Generator& default_generator(Device device = Device::cpu());
// Seeds the generators of every device.
void manual_seed(uint64_t seed);

// The generator an op on `device` draws from: `generator` when given (which must be of that device:
// a DeviceError naming `op` otherwise), else the device's default generator.
Generator generator_for(const char* op, Device device, const std::optional<Generator>& generator);

// What a CUDA graph capture keeps of the random draws its work made. While it is active (from
// construction to end()), every generator of `device` that an op draws from hands out draws whose
// seed and offset are read at run time from a two-word buffer {seed, offset base} the capture owns
// (one per generator), the k-th draw of the capture getting base + k. prepare_replay() then writes
// each generator's current state into its buffer, in stream order, and advances the generator by
// the draws the graph makes, as that many eager ops would. CudaGraph drives this; it works for
// the CPU too, which is how the mechanism is tested without a GPU.
class GeneratorCapture {
 public:
  explicit GeneratorCapture(Device device);
  ~GeneratorCapture();
  GeneratorCapture(const GeneratorCapture&) = delete;
  GeneratorCapture& operator=(const GeneratorCapture&) = delete;

  // Ends capture mode; draws after this come from the generators again.
  void end();
  // Before each replay, on the device's current stream (the one the replay runs on).
  void prepare_replay();
  // The generators the captured work drew from, and how many draws each made.
  size_t generators() const;
  uint64_t draws(size_t i) const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kiln
