// The caching device allocator (docs/architecture.md section 2). Blocks are carved from large
// segments, split to fit and merged back when freed, and reused only by the stream that allocated
// them; a block also used on other streams (record_stream) is reused only after events on those
// streams complete. Everything the GPU does goes through a DeviceBackend, so the whole policy runs
// and is tested on the CPU with a fake backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"

namespace kiln::cuda {

// The device operations the allocator needs. CudaBackend (core/cuda/runtime.cpp) is the real one.
class DeviceBackend {
 public:
  using EventHandle = void*;
  virtual ~DeviceBackend() = default;
  virtual void* raw_alloc(size_t nbytes) = 0;  // nullptr when the device is out of memory
  virtual void raw_free(void* ptr) = 0;
  virtual EventHandle record_event(Stream stream) = 0;  // a new event recorded on stream
  virtual bool event_done(EventHandle event) = 0;       // query
  virtual void destroy_event(EventHandle event) = 0;
  virtual bool is_capturing(Stream stream) = 0;         // stream capture in progress
  virtual void synchronize() = 0;                       // the whole device
  virtual Stream current_stream() = 0;
  virtual size_t free_memory() { return 0; }            // for error messages; 0 when unknown
  virtual void fill(void* ptr, size_t nbytes, int byte, Stream stream) {  // async memset
    (void)ptr, (void)nbytes, (void)byte, (void)stream;
  }
};

struct MemoryStats {
  int64_t allocated_bytes = 0;       // in live blocks (rounded sizes)
  int64_t reserved_bytes = 0;        // in segments obtained from the device
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t requested_bytes = 0;       // as asked by callers (unrounded)
  int64_t num_device_mallocs = 0;    // segments obtained (cudaMalloc calls that succeeded)
  int64_t num_device_frees = 0;
  int64_t num_allocations = 0;       // blocks handed out
  int64_t num_ooms = 0;
  int64_t active_blocks = 0;
};

// What the allocator holds at one moment, segment by segment (cuda::memory_summary formats it).
enum class PoolKind : uint8_t { Small, Large, Capture, Direct };

struct BlockSnapshot {
  uintptr_t address = 0;
  size_t size = 0;          // rounded, as the block occupies its segment
  size_t requested = 0;     // as the caller asked (allocated blocks only)
  bool allocated = false;
  bool pending = false;     // freed, but waiting for the other streams that used it (or a capture)
};

struct SegmentSnapshot {
  uintptr_t address = 0;
  size_t size = 0;
  Stream stream = nullptr;  // the stream whose pool it serves (none for the capture pool)
  PoolKind pool = PoolKind::Small;
  std::vector<BlockSnapshot> blocks;  // in address order; they tile the segment
};

struct MemorySnapshot {
  Device device = Device::cuda(0);
  bool direct = false;     // KILN_CUDA_ALLOC=direct
  bool capturing = false;  // a graph capture is running
  MemoryStats stats;
  size_t capture_pool_bytes = 0;
  std::vector<SegmentSnapshot> segments;  // by pool (small, large, capture, direct), stream, address
};

class CachingAllocator final : public Allocator {
 public:
  // direct = true bypasses the cache: every allocation is its own raw_alloc (so compute-sanitizer
  // sees each out-of-bounds access), as KILN_CUDA_ALLOC=direct asks.
  CachingAllocator(Device device, std::unique_ptr<DeviceBackend> backend, bool direct = false);
  ~CachingAllocator() override;

  DataPtr allocate(size_t nbytes) override;
  void record_stream(void* ptr, Stream stream) override;
  // Drops `stream` from every block's recorded uses. Called when a stream is destroyed, after its
  // work has finished: a freed block then no longer waits on (or records events into) a dead stream.
  void forget_stream(Stream stream);
  const char* name() const override { return direct_ ? "cuda-direct" : "cuda-caching"; }

  MemoryStats memory_stats() const;
  // Every segment and block, for memory_summary() and tests; touches no device.
  MemorySnapshot snapshot() const;
  void reset_peak_stats();
  // Returns every wholly free segment to the device (waits for pending cross-stream uses first).
  void empty_cache();

  // Graph capture on `stream`, begun and ended by one thread (CudaGraph captures in CUDA's
  // thread-local mode). Between begin and end, that thread's allocations come from a private pool
  // that never calls raw_alloc, queries events or synchronizes; reserve_capture_pool(bytes) obtains
  // its memory beforehand, and blocks freed during the capture are reused only by the capture pool.
  // Other threads (a data loader's) allocate from the ordinary pools meanwhile, so none of their
  // blocks can alias the graph's. A block of the ordinary pools freed during the capture that needs
  // a device call (direct mode's free, events for its uses on other streams) is released when the
  // capture ends: a free would synchronize, and an event recorded on a capturing stream cannot be
  // queried later.
  void reserve_capture_pool(size_t nbytes);
  // Bytes reserved for captures so far (the capture pool's segments are kept for the process).
  size_t capture_pool_bytes() const;
  void begin_capture(Stream stream);
  void end_capture();
  bool capturing() const;
  // Fill new blocks with 0xFF (see cuda::set_poison_allocations).
  void set_poison(bool enabled);

  // Rounding rules, exposed for tests: requests round up to 512 bytes; small requests (<= 1 MiB)
  // come from 2 MiB segments, larger ones from segments of their size rounded to 2 MiB (or 20 MiB
  // for requests between 1 and 10 MiB, so several share a segment).
  static size_t round_size(size_t nbytes);
  static size_t segment_size(size_t rounded);

 protected:
  void deallocate(void* ptr, size_t nbytes) override;

 private:
  struct Block;
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;
  enum PoolId : int { kSmall = 0, kLarge = 1, kCapture = 2 };

  Block* find_free_block(PoolId pool, Stream stream, size_t size);
  Block* new_segment(PoolId pool, Stream stream, size_t size, size_t requested);
  Block* new_block();  // a spare block (reset) or a new one
  Block* split(Block* block, size_t size);
  void free_block(Block* block);
  void release(Block* block);  // a block no longer live: back to its pool, or on its way there
  bool capture_here() const;   // a capture runs and the calling thread is the capturing one
  void merge_into(Block* block, Pool& pool);
  void process_events();
  size_t release_free_segments(bool include_capture);  // bytes returned to the device
  [[noreturn]] void throw_oom(size_t requested);
  PoolId pool_for(size_t size) const;
  void update_peaks();

  Device device_;
  std::unique_ptr<DeviceBackend> backend_;
  bool direct_;
  mutable std::mutex mutex_;
  Pool pools_[3];
  std::unordered_map<void*, Block*> live_;  // allocated blocks by pointer
  std::vector<std::unique_ptr<Block>> all_blocks_;  // ownership (blocks are recycled via free list)
  std::vector<Block*> spare_blocks_;
  // Blocks freed while used on other streams, waiting for their events.
  std::vector<std::pair<Block*, std::vector<DeviceBackend::EventHandle>>> pending_;
  // Blocks of the ordinary pools freed during a capture, released when it ends.
  std::vector<Block*> deferred_;
  MemoryStats stats_;
  size_t capture_pool_bytes_ = 0;
  bool capturing_ = false;
  bool poison_ = false;
  Stream capture_stream_ = nullptr;
  std::thread::id capture_thread_;
};

}  // namespace kiln::cuda
