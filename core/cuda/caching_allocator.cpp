// The caching allocator's policy. One mutex guards everything; the device is touched only through
// the backend, and never by the capturing thread (no raw_alloc, no event query, no synchronize)
// while a capture runs, nor by anyone in a way that could break the capture (no free, no event).
// Logged (kernels/log.h): an out-of-memory retry at Warn, cache releases at Info, capture pool at Debug.
#include "core/cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "kernels/error.h"
#include "kernels/log.h"

namespace kiln::cuda {

namespace {
constexpr size_t kRound = 512;
// Larger requests fail as out of memory: no device has a quarter of SIZE_MAX, and rounding them to
// segment sizes could wrap.
constexpr size_t kMaxRequest = SIZE_MAX / 4;
constexpr size_t kSmallRequest = size_t{1} << 20;      // 1 MiB
constexpr size_t kSmallSegment = size_t{2} << 20;      // 2 MiB
constexpr size_t kMediumRequest = size_t{10} << 20;    // 10 MiB
constexpr size_t kMediumSegment = size_t{20} << 20;    // 20 MiB
constexpr size_t kLargeRound = size_t{2} << 20;        // 2 MiB
constexpr size_t kMinLargeRemainder = size_t{1} << 20;  // split a large block only if >= 1 MiB is left

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}
// "30.00 MiB (31457280 bytes)": the rounded figure to read, the exact one to compare.
std::string mib_bytes(int64_t bytes) { return mib(bytes) + " (" + std::to_string(bytes) + " bytes)"; }
}  // namespace

struct CachingAllocator::Block {
  void* ptr = nullptr;
  size_t size = 0;
  size_t requested = 0;
  Stream stream = nullptr;
  PoolId pool = kSmall;
  bool allocated = false;
  Block* prev = nullptr;  // neighbours inside one segment
  Block* next = nullptr;
  std::set<Stream> stream_uses;
};

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return std::less<Stream>()(a->stream, b->stream);
  if (a->size != b->size) return a->size < b->size;
  return std::less<void*>()(a->ptr, b->ptr);
}

size_t CachingAllocator::round_size(size_t nbytes) {
  return nbytes < kRound ? kRound : (nbytes + kRound - 1) / kRound * kRound;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallRequest) return kSmallSegment;
  if (rounded < kMediumRequest) return kMediumSegment;
  return (rounded + kLargeRound - 1) / kLargeRound * kLargeRound;
}

CachingAllocator::CachingAllocator(Device device, std::unique_ptr<DeviceBackend> backend, bool direct)
    : device_(device), backend_(std::move(backend)), direct_(direct) {}

CachingAllocator::~CachingAllocator() {
  // Storages may still be alive at exit; their memory goes with the process.
}

CachingAllocator::PoolId CachingAllocator::pool_for(size_t size) const { return size <= kSmallRequest ? kSmall : kLarge; }

void CachingAllocator::update_peaks() {
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
}

CachingAllocator::Block* CachingAllocator::find_free_block(PoolId pool, Stream stream, size_t size) {
  Block key;
  key.stream = pool == kCapture ? nullptr : stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = pools_[pool].lower_bound(&key);
  if (it == pools_[pool].end() || (*it)->stream != key.stream) return nullptr;
  Block* b = *it;
  pools_[pool].erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(PoolId pool, Stream stream, size_t size, size_t requested) {
  size_t seg = pool == kCapture ? size : segment_size(size);
  void* p = backend_->raw_alloc(seg);
  if (!p) {
    // Free what the cache holds and try once more; not while another thread captures a graph
    // (cudaFree synchronizes the device, which would break the capture). Blocks freed while other
    // streams still used them (record_stream) come back first: after a device synchronize their
    // events are done, as empty_cache does, so memory held only by queued work is not an OOM.
    const int64_t allocated = stats_.allocated_bytes, reserved = stats_.reserved_bytes;
    if (!capturing_ && !pending_.empty()) {
      backend_->synchronize();
      process_events();
    }
    const size_t released = capturing_ ? 0 : release_free_segments(false);
    KILN_LOG(Warn, "cuda caching allocator: out of memory on " + device_.str() + " obtaining a " +
                       mib(static_cast<int64_t>(seg)) + " segment for a request of " +
                       mib(static_cast<int64_t>(requested)) + " (" + mib(allocated) + " allocated, " + mib(reserved) +
                       " reserved); released " + mib(static_cast<int64_t>(released)) +
                       " of free cached segments, retrying once");
    p = backend_->raw_alloc(seg);
  }
  if (!p) throw_oom(requested);
  std::unique_ptr<Block> b = std::make_unique<Block>();
  b->ptr = p;
  b->size = seg;
  b->stream = pool == kCapture ? nullptr : stream;
  b->pool = pool;
  all_blocks_.push_back(std::move(b));
  stats_.reserved_bytes += static_cast<int64_t>(seg);
  stats_.num_device_mallocs++;
  if (pool == kCapture) capture_pool_bytes_ += seg;
  update_peaks();
  return all_blocks_.back().get();
}

CachingAllocator::Block* CachingAllocator::new_block() {
  if (spare_blocks_.empty()) {
    all_blocks_.push_back(std::make_unique<Block>());
    return all_blocks_.back().get();
  }
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  *b = Block();
  return b;
}

CachingAllocator::Block* CachingAllocator::split(Block* block, size_t size) {
  size_t rest = block->size - size;
  bool worth = block->pool == kLarge ? rest >= kMinLargeRemainder : rest >= kRound;
  if (!worth) return block;
  Block* r = new_block();
  r->ptr = static_cast<char*>(block->ptr) + size;
  r->size = rest;
  r->stream = block->stream;
  r->pool = block->pool;
  r->prev = block;
  r->next = block->next;
  if (block->next) block->next->prev = r;
  block->next = r;
  block->size = size;
  pools_[r->pool].insert(r);
  return block;
}

DataPtr CachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return DataPtr(nullptr, 0, device_, this);
  std::lock_guard<std::mutex> lk(mutex_);
  if (nbytes > kMaxRequest) throw_oom(nbytes);
  Stream stream = backend_->current_stream();
  Block* block = nullptr;
  // Direct mode (a debugging aid: each tensor its own cudaMalloc) still serves a graph capture from
  // the reserved capture pool: the capturing thread may not call cudaMalloc.
  const bool for_capture = capture_here();
  if (direct_ && !for_capture) {
    void* p = backend_->raw_alloc(nbytes);
    if (!p) throw_oom(nbytes);
    block = new_block();
    block->ptr = p;
    block->size = nbytes;
    block->stream = stream;
    stats_.reserved_bytes += static_cast<int64_t>(nbytes);
    stats_.num_device_mallocs++;
  } else if (for_capture) {
    size_t size = round_size(nbytes);
    block = find_free_block(kCapture, stream, size);
    if (!block) {
      size_t free_bytes = 0;
      for (const Block* b : pools_[kCapture]) free_bytes = std::max(free_bytes, b->size);
      stats_.num_ooms++;
      throw OutOfMemoryError("cuda caching allocator: " + mib(static_cast<int64_t>(nbytes)) +
                             " requested during graph capture, but the capture pool's largest free block is " +
                             mib(static_cast<int64_t>(free_bytes)) +
                             "; reserve more with reserve_capture_pool() before capturing (nothing may call "
                             "cudaMalloc while a stream captures)");
    }
    block = split(block, size);
  } else {
    process_events();
    size_t size = round_size(nbytes);
    PoolId pool = pool_for(size);
    block = find_free_block(pool, stream, size);
    if (!block) block = new_segment(pool, stream, size, nbytes);
    block = split(block, size);
  }
  block->allocated = true;
  block->requested = nbytes;
  live_[block->ptr] = block;
  stats_.allocated_bytes += static_cast<int64_t>(block->size);
  stats_.requested_bytes += static_cast<int64_t>(nbytes);
  stats_.num_allocations++;
  stats_.active_blocks++;
  update_peaks();
  if (poison_) backend_->fill(block->ptr, block->size, 0xFF, stream);
  return DataPtr(block->ptr, nbytes, device_, this);
}

void CachingAllocator::record_stream(void* ptr, Stream stream) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lk(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    throw Error("record_stream: pointer is not a live block of the " + device_.str() + " caching allocator");
  }
  if (stream != it->second->stream) it->second->stream_uses.insert(stream);
}

void CachingAllocator::forget_stream(Stream stream) {
  std::lock_guard<std::mutex> lk(mutex_);
  for (const auto& b : all_blocks_) b->stream_uses.erase(stream);
}

void CachingAllocator::deallocate(void* ptr, size_t) {
  std::lock_guard<std::mutex> lk(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not ours: nothing to do (never happens through DataPtr)
  Block* block = it->second;
  live_.erase(it);
  stats_.allocated_bytes -= static_cast<int64_t>(block->size);
  stats_.requested_bytes -= static_cast<int64_t>(block->requested);
  stats_.active_blocks--;
  if (capturing_ && block->pool != kCapture && (direct_ || !block->stream_uses.empty())) {
    deferred_.push_back(block);  // stays marked allocated: no neighbour merges with it meanwhile
    return;
  }
  release(block);
}

bool CachingAllocator::capture_here() const {
  return capturing_ && std::this_thread::get_id() == capture_thread_;
}

void CachingAllocator::release(Block* block) {
  // Should the backend fail below (a sticky CUDA error), the block is leaked: it is no longer live,
  // stays marked allocated so no neighbour merges with it, and is never handed out again. The
  // error goes up to DataPtr, which records it for the next synchronizing call.
  if (direct_ && block->pool != kCapture) {
    backend_->raw_free(block->ptr);
    stats_.reserved_bytes -= static_cast<int64_t>(block->size);
    stats_.num_device_frees++;
    *block = Block();
    spare_blocks_.push_back(block);
    return;
  }
  if (!block->stream_uses.empty() && block->pool != kCapture) {
    // Reusable only once every stream that used it has passed this point.
    std::vector<DeviceBackend::EventHandle> events;
    try {
      for (Stream s : block->stream_uses) events.push_back(backend_->record_event(s));
    } catch (...) {
      for (auto e : events) {
        try {
          backend_->destroy_event(e);
        } catch (...) {
        }
      }
      throw;
    }
    block->stream_uses.clear();
    block->allocated = false;
    pending_.emplace_back(block, std::move(events));
    return;
  }
  block->stream_uses.clear();
  free_block(block);
}

void CachingAllocator::free_block(Block* block) {
  block->allocated = false;
  Pool& pool = pools_[block->pool];
  // Merge with free neighbours of the same segment.
  for (Block* n : {block->prev, block->next}) {
    if (!n || n->allocated || pool.find(n) == pool.end()) continue;
    pool.erase(n);
    if (n == block->prev) {
      n->size += block->size;
      n->next = block->next;
      if (block->next) block->next->prev = n;
      *block = Block();
      spare_blocks_.push_back(block);
      block = n;
    } else {
      block->size += n->size;
      block->next = n->next;
      if (n->next) n->next->prev = block;
      *n = Block();
      spare_blocks_.push_back(n);
    }
  }
  pool.insert(block);
}

void CachingAllocator::process_events() {
  if (capturing_) return;  // no event queries during capture
  for (size_t i = 0; i < pending_.size();) {
    auto& [block, events] = pending_[i];
    bool done = std::all_of(events.begin(), events.end(), [&](auto e) { return backend_->event_done(e); });
    if (!done) {
      ++i;
      continue;
    }
    for (auto e : events) backend_->destroy_event(e);
    free_block(block);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

size_t CachingAllocator::release_free_segments(bool include_capture) {
  size_t released = 0;
  for (int p = 0; p < 3; ++p) {
    if (p == kCapture && !include_capture) continue;
    for (auto it = pools_[p].begin(); it != pools_[p].end();) {
      Block* b = *it;
      if (b->prev || b->next) {
        ++it;
        continue;
      }
      it = pools_[p].erase(it);
      backend_->raw_free(b->ptr);
      released += b->size;
      if (p == kCapture) capture_pool_bytes_ -= b->size;
      stats_.reserved_bytes -= static_cast<int64_t>(b->size);
      stats_.num_device_frees++;
      *b = Block();
      spare_blocks_.push_back(b);
    }
  }
  return released;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lk(mutex_);
  if (capturing_) throw Error("empty_cache: not allowed while a graph capture is running");
  backend_->synchronize();
  process_events();
  const size_t released = release_free_segments(false);
  KILN_LOG(Info, "cuda caching allocator: empty_cache released " + mib(static_cast<int64_t>(released)) + " on " +
                     device_.str() + "; " + mib(stats_.reserved_bytes) + " still reserved, " +
                     mib(stats_.allocated_bytes) + " allocated");
}

void CachingAllocator::throw_oom(size_t requested) {
  stats_.num_ooms++;
  size_t free_dev = backend_->free_memory();
  // The advice names what kiln has, with the switch that turns each on in the training examples.
  throw OutOfMemoryError(
      "CUDA out of memory on " + device_.str() + ": tried to allocate " + mib_bytes(static_cast<int64_t>(requested)) +
      (direct_ ? " (KILN_CUDA_ALLOC=direct: nothing is cached)"
               : " (still failing after freeing the cache and retrying)") +
      "; kiln has " + mib_bytes(stats_.allocated_bytes) + " allocated and " + mib_bytes(stats_.reserved_bytes) +
      " reserved, peak allocated " + mib_bytes(stats_.peak_allocated_bytes) +
      (free_dev ? ", and the device reports " + mib_bytes(static_cast<int64_t>(free_dev)) + " free" : "") +
      ". To fit, try: autocast (AutocastGuard / --amp) to keep activations in 16 bits, activation recompute "
      "(nn::checkpoint / --recompute) to keep fewer activations, gradient accumulation (--grad-accum) to keep "
      "the effective batch with smaller ones (.grad accumulates across backward calls), a smaller batch. "
      "cuda::memory_summary() shows where the memory is.");
}

MemoryStats CachingAllocator::memory_stats() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return stats_;
}

MemorySnapshot CachingAllocator::snapshot() const {
  std::lock_guard<std::mutex> lk(mutex_);
  MemorySnapshot snap;
  snap.device = device_;
  snap.direct = direct_;
  snap.capturing = capturing_;
  snap.stats = stats_;
  snap.capture_pool_bytes = capture_pool_bytes_;
  // Freed and not yet reusable: waiting for events on the streams that used them, or (deferred)
  // for the capture under way to end. A deferred block stays marked allocated inside the allocator
  // (no neighbour merges with it), but it is freed as the statistics count it.
  std::set<const Block*> pending(deferred_.begin(), deferred_.end());
  for (const auto& [block, events] : pending_) pending.insert(block);
  // Spare blocks are reset (no pointer); every other block lies in a segment, whose first block
  // has no predecessor.
  for (const auto& owned : all_blocks_) {
    const Block* head = owned.get();
    if (!head->ptr || head->prev) continue;
    SegmentSnapshot seg;
    seg.address = reinterpret_cast<uintptr_t>(head->ptr);
    seg.stream = head->stream;
    seg.pool = (direct_ && head->pool != kCapture) ? PoolKind::Direct
               : head->pool == kSmall              ? PoolKind::Small
               : head->pool == kLarge              ? PoolKind::Large
                                                   : PoolKind::Capture;
    for (const Block* b = head; b; b = b->next) {
      BlockSnapshot bs;
      bs.address = reinterpret_cast<uintptr_t>(b->ptr);
      bs.size = b->size;
      bs.pending = pending.count(b) > 0;
      bs.allocated = b->allocated && !bs.pending;
      bs.requested = bs.allocated ? b->requested : 0;
      seg.size += b->size;
      seg.blocks.push_back(bs);
    }
    snap.segments.push_back(std::move(seg));
  }
  std::sort(snap.segments.begin(), snap.segments.end(), [](const SegmentSnapshot& a, const SegmentSnapshot& b) {
    if (a.pool != b.pool) return a.pool < b.pool;
    if (a.stream != b.stream) return std::less<Stream>()(a.stream, b.stream);
    return a.address < b.address;
  });
  return snap;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lk(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void CachingAllocator::reserve_capture_pool(size_t nbytes) {
  std::lock_guard<std::mutex> lk(mutex_);
  if (capturing_) throw Error("reserve_capture_pool: call it before the capture begins");
  if (nbytes > kMaxRequest) throw_oom(nbytes);
  size_t size = round_size(nbytes);
  Block* b = new_segment(kCapture, nullptr, size, nbytes);
  pools_[kCapture].insert(b);
  if (log_enabled(LogLevel::Debug)) {
    size_t pool_free = 0;
    for (const Block* f : pools_[kCapture]) pool_free += f->size;
    log_message(LogLevel::Debug, "cuda caching allocator: reserved a " + mib(static_cast<int64_t>(size)) +
                                     " capture pool segment on " + device_.str() + "; the capture pool has " +
                                     mib(static_cast<int64_t>(capture_pool_bytes_)) + ", " +
                                     mib(static_cast<int64_t>(pool_free)) + " of it free");
  }
}

size_t CachingAllocator::capture_pool_bytes() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return capture_pool_bytes_;
}

void CachingAllocator::begin_capture(Stream stream) {
  std::lock_guard<std::mutex> lk(mutex_);
  if (capturing_) throw Error("begin_capture: a capture is already running");
  process_events();  // the last chance to query events before the capture
  capturing_ = true;
  capture_stream_ = stream;
  capture_thread_ = std::this_thread::get_id();
}

void CachingAllocator::end_capture() {
  std::lock_guard<std::mutex> lk(mutex_);
  capturing_ = false;
  capture_stream_ = nullptr;
  capture_thread_ = std::thread::id();
  // The blocks freed during the capture that waited for a device call. end_capture also runs while
  // a failed capture unwinds, so it does not throw: a block whose call fails is leaked and logged.
  std::vector<Block*> deferred;
  deferred.swap(deferred_);
  for (Block* b : deferred) {
    try {
      release(b);
    } catch (const std::exception& e) {
      KILN_LOG(Warn, std::string("cuda caching allocator: a block freed during the capture could not be released on ") +
                         device_.str() + " and is leaked: " + e.what());
    }
  }
}

void CachingAllocator::set_poison(bool enabled) {
  std::lock_guard<std::mutex> lk(mutex_);
  poison_ = enabled;
}

bool CachingAllocator::capturing() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return capturing_;
}

}  // namespace kiln::cuda
