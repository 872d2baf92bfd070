// The CPU allocator and the per-device allocator registry.
#include "core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <new>

#include "core/cuda/runtime.h"
#include "core/storage.h"
#include "kernels/error.h"

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

void DataPtr::reset() {
  if (ptr_ && owner_) owner_->deallocate(ptr_, nbytes_);
  ptr_ = nullptr;
  nbytes_ = 0;
  owner_ = nullptr;
}

namespace {

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, 0, Device::cpu(), this);
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
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
