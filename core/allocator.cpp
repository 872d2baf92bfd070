// The CPU allocator and the per-device allocator registry.
#include "core/allocator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

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

// Host memory, with a cache of large blocks. glibc serves blocks above its mmap threshold (128 KiB
// to 32 MiB) with fresh mappings and unmaps them on free, so every training step page-faulted its
// large activations in again (the kernel's page-fault and page-clearing functions showed in
// profiles of small CNN and GPT steps, and the steps ran markedly faster with glibc's tunables set
// to keep large blocks; KILN_CPU_CACHE_MB=0 shows the difference). Blocks of kCacheMin bytes and
// more are rounded up to a size class and, when freed, kept on that class's free list for the next
// allocation of the class, up to a limit on the bytes kept (cpu_cache_limit); smaller blocks go to
// malloc, which reuses them without faults. Under AddressSanitizer the cache is off, so that a use
// after free is still caught.
class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() : limit_(default_limit()) {}

  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, 0, Device::cpu(), this);
    DataPtr block = allocate_block(nbytes);
    count_allocated(static_cast<int64_t>(nbytes));
    return block;
  }
  const char* name() const override { return "cpu"; }
  static bool available() { return kCacheAvailable; }

  CpuCacheStats stats() {
    std::lock_guard<std::mutex> lk(mutex_);
    CpuCacheStats s;
    s.cached_bytes = static_cast<int64_t>(cached_bytes_);
    for (const auto& [size, blocks] : free_) s.cached_blocks += static_cast<int64_t>(blocks.size());
    s.hits = hits_;
    s.misses = misses_;
    s.limit_bytes = static_cast<int64_t>(limit_);
    s.allocated_bytes = allocated_.load(std::memory_order_relaxed);
    s.peak_allocated_bytes = peak_.load(std::memory_order_relaxed);
    return s;
  }
  void reset_peak() { peak_.store(allocated_.load(std::memory_order_relaxed), std::memory_order_relaxed); }
  void empty() {
    std::lock_guard<std::mutex> lk(mutex_);
    release_locked(0);
  }
  void set_limit(size_t bytes) {
    std::lock_guard<std::mutex> lk(mutex_);
    limit_ = kCacheAvailable ? bytes : 0;
    release_locked(limit_);
  }

 protected:
  void deallocate(void* ptr, size_t nbytes) override {
    allocated_.fetch_sub(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
    const size_t size = block_size(nbytes);
    if (size >= kCacheMin) {
      std::lock_guard<std::mutex> lk(mutex_);
      if (cached_bytes_ + size <= limit_) {
        free_[size].push_back(ptr);
        cached_bytes_ += size;
        return;
      }
    }
    std::free(ptr);
  }

 private:
  // Live bytes and their peak: two relaxed atomics, no lock (a peak read while other threads
  // allocate may miss an allocation in flight, never count one twice).
  void count_allocated(int64_t n) {
    const int64_t now = allocated_.fetch_add(n, std::memory_order_relaxed) + n;
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

  DataPtr allocate_block(size_t nbytes) {
    const size_t size = block_size(nbytes);
    if (size >= kCacheMin) {
      std::lock_guard<std::mutex> lk(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= size;
        ++hits_;
        return DataPtr(p, nbytes, Device::cpu(), this);
      }
      ++misses_;
    }
    void* p = size == 0 ? nullptr : std::aligned_alloc(64, size);
    if (!p && size != 0) {  // the cached blocks back to the system, then once more (as the CUDA allocator)
      empty();
      p = std::aligned_alloc(64, size);
    }
    if (!p) {
      throw OutOfMemoryError("cpu allocator: could not allocate " + std::to_string(nbytes) +
                             " bytes of host memory; try a smaller batch or model");
    }
    return DataPtr(p, nbytes, Device::cpu(), this);
  }

#if defined(__SANITIZE_ADDRESS__)
  static constexpr bool kCacheAvailable = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  static constexpr bool kCacheAvailable = false;
#else
  static constexpr bool kCacheAvailable = true;
#endif
#else
  static constexpr bool kCacheAvailable = true;
#endif
  static constexpr size_t kCacheMin = size_t{1} << 16;  // 64 KiB

  // A multiple of 64 (aligned_alloc's rule); from kCacheMin on, the next of four classes per power of
  // two (2^k, 1.25, 1.5 and 1.75 times 2^k), so that a cached block fits sizes up to a quarter
  // smaller. 0 for sizes above a quarter of SIZE_MAX, whose classes (up to twice the size) could
  // pass SIZE_MAX: no machine has that much memory.
  static size_t block_size(size_t nbytes) {
    if (nbytes > SIZE_MAX / 4) return 0;
    const size_t aligned = (nbytes + 63) / 64 * 64;
    if (aligned < kCacheMin) return aligned;
    const size_t power = std::bit_floor(aligned);
    const size_t quarter = power / 4;
    return (aligned + quarter - 1) / quarter * quarter;
  }

  // KILN_CPU_CACHE_MB when set (0 turns the cache off), else a quarter of the machine's memory.
  // (A bad value is reported in every build; AddressSanitizer builds then keep no block anyway.)
  static size_t default_limit() {
    if (const char* env = std::getenv("KILN_CPU_CACHE_MB")) {
      char* end = nullptr;
      const long long mb = std::strtoll(env, &end, 10);
      if (end != env && *end == '\0' && mb >= 0) {
        const size_t capped = std::min(static_cast<size_t>(mb), SIZE_MAX >> 20);  // no wrap past SIZE_MAX
        return kCacheAvailable ? capped << 20 : 0;
      }
      KILN_LOG(Warn, std::string("KILN_CPU_CACHE_MB must be a whole number of MiB, got '") + env +
                         "'; using the default (a quarter of the machine's memory)");
    }
    if (!kCacheAvailable) return 0;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) / 4 : size_t{1} << 30;
  }

  // Frees cached blocks, largest first, until at most `keep` bytes stay cached.
  void release_locked(size_t keep) {
    for (auto it = free_.rbegin(); it != free_.rend() && cached_bytes_ > keep; ++it) {
      while (!it->second.empty() && cached_bytes_ > keep) {
        std::free(it->second.back());
        it->second.pop_back();
        cached_bytes_ -= it->first;
      }
    }
  }

  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  size_t cached_bytes_ = 0;
  size_t limit_;
  int64_t hits_ = 0, misses_ = 0;
  std::atomic<int64_t> allocated_{0}, peak_{0};
};

CpuAllocator& cpu_caching_allocator() {
  static CpuAllocator* a = new CpuAllocator();  // never destroyed: storages may outlive statics
  return *a;
}

}  // namespace

CpuCacheStats cpu_cache_stats() { return cpu_caching_allocator().stats(); }
void reset_cpu_peak_memory() { cpu_caching_allocator().reset_peak(); }
bool cpu_cache_available() { return CpuAllocator::available(); }
void cpu_empty_cache() { cpu_caching_allocator().empty(); }
void set_cpu_cache_limit(int64_t bytes) { cpu_caching_allocator().set_limit(bytes > 0 ? static_cast<size_t>(bytes) : 0); }

namespace {

std::mutex g_registry_mutex;
Allocator* g_cuda_allocators[16] = {};

}  // namespace

Allocator* cpu_allocator() { return &cpu_caching_allocator(); }

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
