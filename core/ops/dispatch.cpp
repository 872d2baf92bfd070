// KernelScope: device choice, device guard, and the services a kernel context hands out. The error
// record is fetched only when a kernel asks for it: creating it allocates, which must not happen
// while a stream is being captured into a CUDA graph, and most kernels never need it.
#include "core/ops/dispatch.h"

#include <optional>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"

namespace kiln::ops {

struct KernelScope::State final : KernelContext::Services {
  Device device;
  std::optional<cuda::DeviceGuard> guard;
  std::vector<Tensor> workspaces;  // released when the scope ends

  explicit State(Device d) : device(d) {}

  void* workspace(size_t bytes) override {
    workspaces.push_back(empty({static_cast<int64_t>(bytes)}, TensorOptions(DType::UInt8, device)));
    return workspaces.back().data_ptr();
  }
  DeviceErrorRecord* error_record() override {
    if (device.is_cpu()) throw Error("kernel error record: CPU kernels raise index errors themselves");
    return cuda::device_error_record(device.index);
  }
};

KernelScope::KernelScope(const char* op, Device device) : op_(op), device_(device) { enter(); }

KernelScope::KernelScope(const char* op, std::initializer_list<const Tensor*> inputs)
    : op_(op), device_(common_device(op, std::vector<const Tensor*>(inputs))) {
  enter();
}

KernelScope::~KernelScope() = default;

void KernelScope::enter() {
  // The op's NVTX range (a member: it closes when a throw below unwinds the scope, too).
  if (profile::nvtx_enabled()) nvtx_.emplace(op_);
  state_ = std::make_unique<State>(device_);
  context_.services = state_.get();
  if (device_.is_cpu()) return;
  if (!kBuiltWithCuda) {
    throw DeviceError(std::string(op_) + ": no CUDA kernel in this build of kiln (built without the CUDA backend; the "
                                         "tensors are on " + device_.str() + ")");
  }
  state_->guard.emplace(device_.index);
  context_.stream = cuda::current_stream(device_.index);
}

void KernelScope::missing(const char* kernel) const {
  throw DeviceError(std::string(op_) + ": no CUDA kernel in this build of kiln (kernel " + kernel + ", tensors on " +
                    device_.str() + ")");
}

}  // namespace kiln::ops
