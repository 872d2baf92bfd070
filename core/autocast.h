// Autocast: a thread-local mixed-precision policy, as PyTorch's torch.autocast. While a guard is
// enabled for a device type, ops on tensors of that device cast their floating inputs by the op's
// entry in one policy table (core/autocast.cpp): matrix products run in the low-precision dtype,
// numerically touchy ops in float32, multi-input ops at their widest input type. The casts are the
// differentiable to(dtype), so backward runs in the dtypes forward chose and the gradient of a
// float32 parameter arrives in float32. Casts of parameters (leaf tensors that require grad) are
// cached until the outermost guard exits, so a weight used several times is cast once per forward.
// The autograd engine turns autocast off while backward runs.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace kiln {

// The autocast settings of one device type on this thread.
struct AutocastState {
  bool enabled = false;
  DType dtype = DType::BFloat16;  // float16 or bfloat16
};

// Both device types' settings: what a recompute (nn/checkpoint.h) captures in forward and
// re-applies when it runs the forward again in backward.
struct AutocastSnapshot {
  AutocastState cpu, cuda;
};

// The default low-precision dtype of a device type: float16 for CUDA, bfloat16 for the CPU (as in
// PyTorch).
DType autocast_default_dtype(DeviceType device);

AutocastState autocast_state(DeviceType device);
AutocastSnapshot autocast_snapshot();
// True when autocast is enabled for any device type on this thread (the ops' fast check).
bool autocast_any_enabled();

// Enables (or, with enabled = false, disables) autocast for `device` until destroyed; restores the
// previous settings on exit. Nestable. The dtype must be float16 or bfloat16 (a DTypeError
// otherwise). Leaving the outermost guard of the thread empties the cast cache.
class AutocastGuard {
 public:
  AutocastGuard(DeviceType device, DType dtype, bool enabled = true);
  explicit AutocastGuard(DeviceType device, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  AutocastState prev_;
};

// Applies a whole snapshot (both device types) until destroyed, then restores the previous one;
// counts as a guard for the cast cache. What recompute and the autograd engine use.
class AutocastSnapshotGuard {
 public:
  explicit AutocastSnapshotGuard(const AutocastSnapshot& snapshot);
  ~AutocastSnapshotGuard();
  AutocastSnapshotGuard(const AutocastSnapshotGuard&) = delete;
  AutocastSnapshotGuard& operator=(const AutocastSnapshotGuard&) = delete;

 private:
  AutocastSnapshot prev_;
};

// Gives the code inside it a cast cache of its own, empty at first, and puts the enclosing one back
// on exit. Recompute (nn/checkpoint.h) runs fn inside one: its casts must be its own, made by the
// recompute, never ones the forward or an earlier recompute of the same backward made (they carry
// older history, which checkpoint refuses, and would join two graphs).
class AutocastCacheScope {
 public:
  AutocastCacheScope();
  ~AutocastCacheScope();
  AutocastCacheScope(const AutocastCacheScope&) = delete;
  AutocastCacheScope& operator=(const AutocastCacheScope&) = delete;
};

// Number of parameter casts held in this thread's cache (tests and memory accounting).
size_t autocast_cache_size();
// Empties the cache now (the outermost guard does it on exit).
void clear_autocast_cache();

namespace autocast {

// How an op's floating inputs are treated under autocast.
enum class Policy : uint8_t {
  LowPrecision,  // cast to the autocast dtype (float16 or bfloat16)
  Float32,       // cast float16/bfloat16 inputs to float32
  Widest,        // cast to the widest floating dtype among the inputs
  // No cast: the op reads float16/bfloat16 inputs as they are, computes in float32 and returns a
  // float32 result (the values a Float32 cast would give, without the cast's pass over the input);
  // the op asks float32_result() for its output dtype.
  Float32Result,
};

// The policy of `op` (the op's name as it appears in its errors), or nullopt when autocast leaves
// the op alone (it runs in its inputs' dtype).
std::optional<Policy> policy_of(const char* op);

// One row of the policy table, for tests and docs.
struct PolicyRow {
  const char* op;
  Policy policy;
};
const std::vector<PolicyRow>& policy_table();

// The op's entry: when autocast is enabled for the device of `inputs` and the table gives `op` a
// policy that changes at least one input's dtype, the inputs cast accordingly (undefined and
// non-floating entries pass through unchanged); otherwise nullopt, and the op proceeds with its
// own arguments. An op calls it first and, on a value, calls itself again with the cast inputs.
std::optional<TensorList> cast_inputs(const char* op, std::initializer_list<const Tensor*> inputs);

// Whether `op`, a Float32Result op, must return float32 for `input`: autocast is enabled for its
// device and it is float16 or bfloat16.
bool float32_result(const char* op, const Tensor& input);

}  // namespace autocast
}  // namespace kiln
