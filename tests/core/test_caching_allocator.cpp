// The caching allocator's policy, run on the CPU against a fake device: rounding, splitting and
// merging, per-stream reuse, record_stream, statistics, out-of-memory retry, direct mode and the
// graph-capture pool (which must not touch the device).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>

#include "core/cuda/caching_allocator.h"
#include "kernels/error.h"
#include "tests/kernels/log_capture.h"

using namespace kiln;
using namespace kiln::cuda;

namespace {

Stream stream_id(uintptr_t i) { return reinterpret_cast<Stream>(i); }

struct FakeDevice {
  size_t capacity = size_t{1} << 30;
  size_t used = 0;
  int mallocs = 0, frees = 0, event_queries = 0, syncs = 0;
  Stream current = nullptr;
  bool events_done = false;
  std::set<void*> live;
};

class FakeBackend final : public DeviceBackend {
 public:
  explicit FakeBackend(FakeDevice* d) : d_(d) {}
  void* raw_alloc(size_t n) override {
    if (d_->used + n > d_->capacity) return nullptr;
    void* p = std::aligned_alloc(512, (n + 511) / 512 * 512);
    d_->used += n;
    d_->mallocs++;
    d_->live.insert(p);
    sizes_[p] = n;
    return p;
  }
  void raw_free(void* p) override {
    REQUIRE(d_->live.erase(p) == 1);
    d_->used -= sizes_[p];
    d_->frees++;
    std::free(p);
  }
  EventHandle record_event(Stream) override { return new int(0); }
  bool event_done(EventHandle) override {
    d_->event_queries++;
    return d_->events_done;
  }
  void destroy_event(EventHandle e) override { delete static_cast<int*>(e); }
  bool is_capturing(Stream) override { return false; }
  void synchronize() override {
    d_->syncs++;
    d_->events_done = true;
  }
  Stream current_stream() override { return d_->current; }

 private:
  FakeDevice* d_;
  std::unordered_map<void*, size_t> sizes_;
};

std::unique_ptr<CachingAllocator> make(FakeDevice& d, bool direct = false) {
  return std::make_unique<CachingAllocator>(Device::cuda(0), std::make_unique<FakeBackend>(&d), direct);
}

}  // namespace

TEST_CASE("caching allocator: size rounding and segment sizes", "[allocator]") {
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::segment_size(1024) == (size_t{2} << 20));
  CHECK(CachingAllocator::segment_size(size_t{3} << 20) == (size_t{20} << 20));
  CHECK(CachingAllocator::segment_size((size_t{11} << 20) + 512) == (size_t{12} << 20));
}

TEST_CASE("caching allocator: small blocks share a segment and freed blocks are reused", "[allocator]") {
  FakeDevice d;
  auto a = make(d);
  DataPtr p1 = a->allocate(1000);
  DataPtr p2 = a->allocate(3000);
  CHECK(d.mallocs == 1);  // both carved from one 2 MiB segment
  CHECK(static_cast<char*>(p2.get()) - static_cast<char*>(p1.get()) == 1024);
  void* first = p1.get();
  p1.reset();
  DataPtr p3 = a->allocate(900);
  CHECK(p3.get() == first);  // best fit: the freed 1024-byte block
  CHECK(d.mallocs == 1);
  MemoryStats s = a->memory_stats();
  CHECK(s.allocated_bytes == 1024 + 3072);
  CHECK(s.reserved_bytes == (2 << 20));
  CHECK(s.num_device_mallocs == 1);
}

TEST_CASE("caching allocator: neighbours merge when freed", "[allocator]") {
  FakeDevice d;
  auto a = make(d);
  DataPtr x = a->allocate(4096), y = a->allocate(4096), z = a->allocate(4096);
  void* base = x.get();
  x.reset();
  y.reset();
  DataPtr big = a->allocate(8192);  // fits only in the merged x+y
  CHECK(big.get() == base);
  big.reset();
  z.reset();
  a->empty_cache();  // the whole segment is free again, so it goes back
  CHECK(d.frees == 1);
  CHECK(d.used == 0);
  CHECK(a->memory_stats().reserved_bytes == 0);
}

TEST_CASE("caching allocator: blocks are reused only on their own stream", "[allocator]") {
  FakeDevice d;
  auto a = make(d);
  d.current = stream_id(1);
  DataPtr p = a->allocate(size_t{4} << 20);
  void* ptr = p.get();
  p.reset();
  d.current = stream_id(2);
  DataPtr q = a->allocate(size_t{4} << 20);
  CHECK(q.get() != ptr);
  CHECK(d.mallocs == 2);
  d.current = stream_id(1);
  DataPtr r = a->allocate(size_t{4} << 20);
  CHECK(r.get() == ptr);
}

TEST_CASE("caching allocator: record_stream delays reuse until the other stream is done", "[allocator]") {
  FakeDevice d;
  auto a = make(d);
  d.current = stream_id(1);
  DataPtr p = a->allocate(2048);
  void* ptr = p.get();
  a->record_stream(ptr, stream_id(2));
  p.reset();
  DataPtr q = a->allocate(2048);
  CHECK(q.get() != ptr);  // event on stream 2 not done yet
  d.events_done = true;
  DataPtr r = a->allocate(2048);
  CHECK(r.get() == ptr);
  CHECK_THROWS_AS(a->record_stream(reinterpret_cast<void*>(0x10), stream_id(2)), Error);
}

TEST_CASE("caching allocator: peak statistics and their reset", "[allocator]") {
  FakeDevice d;
  auto a = make(d);
  {
    DataPtr big = a->allocate(size_t{30} << 20);
    CHECK(a->memory_stats().peak_allocated_bytes == (int64_t{30} << 20));
  }
  CHECK(a->memory_stats().allocated_bytes == 0);
  CHECK(a->memory_stats().peak_allocated_bytes == (int64_t{30} << 20));
  a->reset_peak_stats();
  CHECK(a->memory_stats().peak_allocated_bytes == 0);
}

TEST_CASE("caching allocator: out of memory frees the cache, retries, then explains", "[allocator]") {
  FakeDevice d;
  d.capacity = size_t{64} << 20;
  auto a = make(d);
  { DataPtr cached = a->allocate(size_t{40} << 20); }  // freed into the cache, still reserved
  DataPtr p = a->allocate(size_t{50} << 20);             // needs the cache released first
  CHECK(p.get() != nullptr);
  CHECK(d.frees == 1);
  try {
    DataPtr q = a->allocate(size_t{30} << 20);
    FAIL("expected OutOfMemoryError");
  } catch (const OutOfMemoryError& e) {
    std::string m = e.what();
    CHECK(m.find("tried to allocate 30.00 MiB") != std::string::npos);
    CHECK(m.find("reserved") != std::string::npos);
    CHECK(m.find("smaller batch") != std::string::npos);
    CHECK(m.find("gradient accumulation") != std::string::npos);
    CHECK(m.find("after freeing the cache and retrying") != std::string::npos);
    // Advice names only what kiln has (it has neither autocast nor activation checkpointing).
    CHECK(m.find("autocast") == std::string::npos);
    CHECK(m.find("checkpointing") == std::string::npos);
  }
  CHECK(a->memory_stats().num_ooms == 1);
}

TEST_CASE("caching allocator: logs the out-of-memory retry, cache releases and capture pool", "[allocator][log]") {
  FakeDevice d;
  d.capacity = size_t{64} << 20;
  auto a = make(d);
  {
    kiln::test::LogCapture log(LogLevel::Warn);
    { DataPtr cached = a->allocate(size_t{40} << 20); }
    CHECK(log.lines.empty());
    DataPtr p = a->allocate(size_t{50} << 20);  // succeeds only after the retry
    INFO(log.text());
    REQUIRE(log.lines.size() == 1);
    CHECK(log.count(LogLevel::Warn, {"out of memory on cuda:0", "request of 50.00 MiB", "40.00 MiB reserved",
                                     "released 40.00 MiB", "retrying"}) == 1);
  }
  {
    kiln::test::LogCapture log(LogLevel::Info);
    { DataPtr small = a->allocate(1000); }  // a 2 MiB segment, free again, as the 50 MiB one is
    a->empty_cache();
    INFO(log.text());
    REQUIRE(log.lines.size() == 1);
    CHECK(log.count(LogLevel::Info, {"empty_cache released 52.00 MiB on cuda:0", "0.00 MiB still reserved"}) == 1);
    a->reserve_capture_pool(size_t{3} << 20);  // Debug: not shown at Info
    CHECK(log.lines.size() == 1);
  }
  {
    kiln::test::LogCapture log(LogLevel::Debug);
    a->reserve_capture_pool(size_t{1} << 20);
    INFO(log.text());
    CHECK(log.count(LogLevel::Debug, {"reserved a 1.00 MiB capture pool segment on cuda:0", "4.00 MiB"}) == 1);
    CHECK(a->capture_pool_bytes() == (size_t{4} << 20));
  }
}

TEST_CASE("caching allocator: steady-state reuse makes no new device allocations", "[allocator]") {
  FakeDevice d;
  auto a = make(d);
  auto step = [&] {
    std::vector<DataPtr> live;
    for (size_t s : {1000u, 70000u, 3u << 20, 512u, 12u << 20}) live.push_back(a->allocate(s));
  };
  step();
  int after_warmup = d.mallocs;
  for (int i = 0; i < 20; ++i) step();
  CHECK(d.mallocs == after_warmup);
}

TEST_CASE("caching allocator: direct mode allocates and frees every block", "[allocator]") {
  FakeDevice d;
  auto a = make(d, true);
  { DataPtr p = a->allocate(100), q = a->allocate(100); }
  CHECK(d.mallocs == 2);
  CHECK(d.frees == 2);
  CHECK(std::string(a->name()) == "cuda-direct");
}

TEST_CASE("caching allocator: a capture uses its own pool and never touches the device", "[allocator]") {
  // In direct mode too: it allocates every other block with its own device call, but a capture
  // may make none.
  const bool direct = GENERATE(false, true);
  INFO("direct mode " << direct);
  FakeDevice d;
  auto a = make(d, direct);
  a->reserve_capture_pool(size_t{8} << 20);
  int mallocs = d.mallocs;
  a->begin_capture(stream_id(5));
  int queries = d.event_queries, syncs = d.syncs;
  std::vector<DataPtr> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(a->allocate(size_t{1} << 20));
  blocks.pop_back();  // freed during capture: reusable by the same capture
  blocks.push_back(a->allocate(size_t{1} << 20));
  CHECK_THROWS_WITH(a->allocate(size_t{16} << 20), Catch::Contains("capture pool"));
  CHECK_THROWS_AS(a->empty_cache(), Error);
  CHECK(d.mallocs == mallocs);
  CHECK(d.event_queries == queries);
  CHECK(d.syncs == syncs);
  a->end_capture();
  DataPtr outside = a->allocate(1000);  // ordinary pools again
  CHECK(d.mallocs == mallocs + 1);
  blocks.clear();  // capture blocks go back to the capture pool, in direct mode as well
  CHECK(d.frees == 0);
}
