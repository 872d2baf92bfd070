// The allocator interface every storage is carved from. It is shaped for the CUDA caching and
// pinned-host allocators: a block can be marked as used on further streams (record_stream) so the
// allocator reuses it only after all of them are done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "kernels/stream.h"

namespace kiln {

class Allocator;

// Owning pointer to a block: returns it to its allocator on destruction.
class DataPtr {
 public:
  DataPtr() = default;
  DataPtr(void* ptr, size_t nbytes, Device device, Allocator* owner) : ptr_(ptr), nbytes_(nbytes), device_(device), owner_(owner) {}
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  DataPtr(DataPtr&& o) noexcept { *this = std::move(o); }
  DataPtr& operator=(DataPtr&& o) noexcept;
  ~DataPtr() { reset(); }

  void* get() const { return ptr_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  Allocator* allocator() const { return owner_; }
  // Returns the block. Never throws (it runs in destructors): an allocator's failure to free is
  // recorded and raised by the next synchronizing call, see raise_deferred_free_errors().
  void reset() noexcept;

 private:
  void* ptr_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* owner_ = nullptr;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // A block of at least nbytes, aligned to at least 64 bytes; nbytes == 0 gives a null block.
  virtual DataPtr allocate(size_t nbytes) = 0;
  // Marks the block holding `ptr` as in use on `stream` too. CPU allocators ignore it.
  virtual void record_stream(void* ptr, Stream stream) {
    (void)ptr;
    (void)stream;
  }
  virtual const char* name() const = 0;

 protected:
  friend class DataPtr;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
};

// Errors from freeing memory. A free runs in a destructor, where throwing would end the process
// (std::terminate), so DataPtr records the allocator's error instead (logged at once) and this
// raises it as a DeviceError, as CUDA reports a failed asynchronous operation at the next call
// that waits for the device: kiln's synchronizing calls (cuda::synchronize, stream and event
// waits, copies to the host, item()) call it. Only the first error since the last raise is kept
// in the message, with the count of any others.
void raise_deferred_free_errors();
bool has_deferred_free_error();

// The allocator for a device. CPU: 64-byte aligned host memory. CUDA: registered by the CUDA
// runtime when kiln is built with it; otherwise asking for one is a DeviceError.
Allocator* get_allocator(Device device);
void set_allocator(Device device, Allocator* allocator);
Allocator* cpu_allocator();

// The CPU allocator keeps freed blocks of 64 KiB and more for reuse (core/allocator.cpp), up to a
// limit: KILN_CPU_CACHE_MB, else a quarter of the machine's memory; 0 (and AddressSanitizer builds)
// turn it off.
struct CpuCacheStats {
  int64_t cached_bytes = 0;   // kept for reuse now
  int64_t cached_blocks = 0;
  int64_t hits = 0;           // large allocations served from the cache
  int64_t misses = 0;         // large allocations that went to malloc
  int64_t limit_bytes = 0;
  int64_t allocated_bytes = 0;       // in live tensors' storage now (as asked, unrounded)
  int64_t peak_allocated_bytes = 0;  // the most at once since the start or the last reset
};
CpuCacheStats cpu_cache_stats();
// Starts the peak over from what is allocated now (a measurement's first line, as
// cuda::reset_peak_memory_stats on a GPU).
void reset_cpu_peak_memory();
// False in AddressSanitizer builds, whose CPU allocator keeps no block.
bool cpu_cache_available();
// Returns every cached block to the system.
void cpu_empty_cache();
// Sets the limit (bytes; 0 turns the cache off), freeing what is cached beyond it.
void set_cpu_cache_limit(int64_t bytes);

}  // namespace kiln
