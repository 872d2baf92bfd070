// KernelContext's accessors: a context without services is the caller's promise that the kernel
// needs neither scratch memory nor an error record, so asking anyway is a bug worth a clear error.
#include "kernels/kernel.h"

#include "kernels/error.h"

namespace kiln {

void* KernelContext::workspace(size_t bytes) const {
  if (bytes == 0) return nullptr;
  if (!services) throw Error("kernel scratch: this call needs " + std::to_string(bytes) + " bytes of workspace but its "
                             "KernelContext has no services (call it through core/ops/dispatch.h)");
  return services->workspace(bytes);
}

DeviceErrorRecord* KernelContext::error_record() const {
  if (!services) throw Error("kernel error record: this call checks indices on the device but its KernelContext has "
                             "no services (call it through core/ops/dispatch.h)");
  return services->error_record();
}

}  // namespace kiln
