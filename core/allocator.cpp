// The CPU allocator and the per-device allocator registry.
#include "core/allocator.h"

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>

#include "core/cuda/runtime.h"
#include "core/storage.h"
#include "kernels/error.h"
#include "kernels/log.h"

namespace kiln {

DataPtr& DataPtr::operator=(DataPtr&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = o.ptr_;
    nbytes_ = o.nbytes_;
    device_ = o.device_;
    owner_ = o.owner_;
    o.ptr_ = nullptr;
    o.nbytes_ = 0;
    o.owner_ = nullptr;
  }
  return *this;
}

namespace {

struct DeferredFreeErrors {
  std::mutex mutex;
  std::string first;
  int64_t count = 0;
};
DeferredFreeErrors& deferred_free_errors() {
  static auto* d = new DeferredFreeErrors();  // never destroyed: storages may be freed after statics
  return *d;
}

void record_free_error(const Allocator* owner, size_t nbytes, const char* what) noexcept {
  try {
    std::string msg = std::string(owner->name()) + " allocator: freeing a block of " + std::to_string(nbytes) +
                      " bytes failed: " + what;
    KILN_LOG(Error, msg + " (raised at the next synchronizing call)");
    DeferredFreeErrors& d = deferred_free_errors();
    std::lock_guard<std::mutex> lk(d.mutex);
    if (d.count++ == 0) d.first = std::move(msg);
  } catch (...) {
    // Out of memory while recording: nothing more can be done here without throwing.
  }
}

}  // namespace

void DataPtr::reset() noexcept {
  if (ptr_ && owner_) {
    try {
      owner_->deallocate(ptr_, nbytes_);
    } catch (const std::exception& e) {
      record_free_error(owner_, nbytes_, e.what());
    } catch (...) {
      record_free_error(owner_, nbytes_, "an unknown exception");
    }
  }
  ptr_ = nullptr;
  nbytes_ = 0;
  owner_ = nullptr;
}

bool has_deferred_free_error() {
  DeferredFreeErrors& d = deferred_free_errors();
  std::lock_guard<std::mutex> lk(d.mutex);
  return d.count > 0;
}

void raise_deferred_free_errors() {
  DeferredFreeErrors& d = deferred_free_errors();
  std::string msg;
  {
    std::lock_guard<std::mutex> lk(d.mutex);
    if (d.count == 0) return;
    msg = d.first;
    if (d.count > 1) msg += " (and " + std::to_string(d.count - 1) + " more failed frees)";
    d.first.clear();
    d.count = 0;
  }
  throw DeviceError(msg + "; the block was not returned (reported at this synchronizing call because frees run in "
                          "destructors)");
}

namespace {

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, 0, Device::cpu(), this);
    // aligned_alloc wants a multiple of the alignment; the rounding must not wrap past SIZE_MAX.
    void* p = nbytes > SIZE_MAX - 63 ? nullptr : std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
    if (!p) {
      throw OutOfMemoryError("cpu allocator: could not allocate " + std::to_string(nbytes) +
                             " bytes of host memory; try a smaller batch or model");
    }
    return DataPtr(p, nbytes, Device::cpu(), this);
  }
  const char* name() const override { return "cpu"; }

 protected:
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
};

std::mutex g_registry_mutex;
Allocator* g_cuda_allocators[16] = {};

}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator();  // never destroyed: storages may outlive statics
  return a;
}

Allocator* get_allocator(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  {
    std::lock_guard<std::mutex> lk(g_registry_mutex);
    if (device.index >= 0 && device.index < 16 && g_cuda_allocators[device.index]) return g_cuda_allocators[device.index];
  }
  // The CUDA caching allocator, created on first use (and a DeviceError when there is no CUDA).
  if (!cuda::is_available()) {
    throw DeviceError("allocator: cannot allocate on " + device.str() + ": " + cuda::unavailable_reason());
  }
  return &cuda::caching_allocator(device.index);
}

void set_allocator(Device device, Allocator* allocator) {
  if (device.is_cpu()) throw DeviceError("set_allocator: the CPU allocator cannot be replaced");
  if (device.index < 0 || device.index >= 16) throw DeviceError("set_allocator: bad device " + device.str());
  std::lock_guard<std::mutex> lk(g_registry_mutex);
  g_cuda_allocators[device.index] = allocator;
}

Storage::Storage(size_t nbytes, Device device) : data_(get_allocator(device)->allocate(nbytes)) {}

void Storage::record_stream(Stream stream) const {
  if (data_.allocator() && data_.get()) data_.allocator()->record_stream(data_.get(), stream);
}

}  // namespace kiln
