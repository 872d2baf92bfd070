// The one place an op turns into a kernel call. An op names a kernel pair (kernels/kernel.h) and
// its arguments; KernelScope picks the twin for the device, makes a CUDA device current, and gives
// the kernel its context: the device's current stream, scratch memory from the caching allocator
// (held until the scope ends, which is safe because freed blocks are reused in stream order), and
// the device error record. A build without CUDA gets one DeviceError naming the op here instead
// of a branch in every op. Autocast (core/autocast.h) acts one step earlier, at the op's public
// entry: its casts must be recorded on the autograd tape, which this scope, opened after the op's
// checks on its already-detached inputs, is too late for.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>

#include "core/device.h"
#include "core/profiler.h"
#include "kernels/kernel.h"

namespace kiln {
class Tensor;
}

namespace kiln::ops {

class KernelScope {
 public:
  KernelScope(const char* op, Device device);
  // The device of the op's defined tensor inputs, which must all be on it (a DeviceError naming
  // `op` and both devices otherwise); undefined entries are skipped, none defined means the CPU.
  KernelScope(const char* op, std::initializer_list<const Tensor*> inputs);
  ~KernelScope();
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

  Device device() const { return device_; }
  const char* op() const { return op_; }
  const KernelContext& context() const { return context_; }

  // Calls the twin of `kernel` for this scope's device with `args` and the context.
  template <typename Fn, typename... Args> void run(const Kernel<Fn>& kernel, Args&&... args) const {
    Fn* fn = device_.is_cpu() ? kernel.cpu : kernel.cuda;
    if (!fn) missing(kernel.name);
    fn(std::forward<Args>(args)..., context_);
  }

 private:
  struct State;
  void enter();
  [[noreturn]] void missing(const char* kernel) const;

  const char* op_;
  Device device_;
  std::unique_ptr<State> state_;
  KernelContext context_;
  std::optional<profile::NvtxRange> nvtx_;  // the op's NVTX range, when NVTX is on (core/profiler.h)
};

// One kernel call for `op` on `device`.
template <typename Fn, typename... Args>
void launch(const char* op, Device device, const Kernel<Fn>& kernel, Args&&... args) {
  KernelScope(op, device).run(kernel, std::forward<Args>(args)...);
}

}  // namespace kiln::ops
