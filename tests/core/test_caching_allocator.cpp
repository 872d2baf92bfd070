// The caching allocator's policy, run on the CPU against a fake device: rounding, splitting and
// merging, per-stream reuse, record_stream, statistics, out-of-memory retry, direct mode and the
// graph-capture pool (which must not touch the device). And the CPU allocator's cache of large blocks.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>
#include <sstream>
#include <thread>

#include "core/allocator.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/memory_summary.h"
#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "kernels/error.h"
#include "tests/kernels/log_capture.h"

using namespace kiln;
using namespace kiln::cuda;

namespace {

Stream stream_id(uintptr_t i) { return reinterpret_cast<Stream>(i); }

struct FakeDevice {
  size_t capacity = size_t{1} << 30;
  size_t used = 0;
  int mallocs = 0, frees = 0, event_queries = 0, events_recorded = 0, syncs = 0;
  Stream current = nullptr;
  bool events_done = false;
  std::set<void*> live;
  std::set<int*> live_events;
  FakeDevice() = default;
  FakeDevice(const FakeDevice&) = delete;
  FakeDevice& operator=(const FakeDevice&) = delete;
  // A CachingAllocator keeps its cached segments and pending events when destroyed (a real device
  // takes them back with the process); this fake device takes them back when it goes, so that the
  // sanitized test run can check for leaks.
  ~FakeDevice() {
    for (void* p : live) std::free(p);
    for (int* e : live_events) delete e;
  }
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
  EventHandle record_event(Stream) override {
    d_->events_recorded++;
    int* e = new int(0);
    d_->live_events.insert(e);
    return e;
  }
  bool event_done(EventHandle) override {
    d_->event_queries++;
    return d_->events_done;
  }
  void destroy_event(EventHandle e) override {
    REQUIRE(d_->live_events.erase(static_cast<int*>(e)) == 1);
    delete static_cast<int*>(e);
  }
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
    // Advice names what kiln has, with the API and the examples' flag.
    CHECK(m.find("autocast (AutocastGuard / --amp)") != std::string::npos);
    CHECK(m.find("activation recompute (nn::checkpoint / --recompute)") != std::string::npos);
  }
  CHECK(a->memory_stats().num_ooms == 1);
}

// A block freed while another stream still used it (record_stream) waits for that stream's event;
// memory held only so is not out of memory: the retry synchronizes the device first, as empty_cache
// does, and the block's segment is released (it threw with nothing allocated).
TEST_CASE("caching allocator: out of memory waits for blocks pending on other streams", "[allocator]") {
  FakeDevice d;
  d.capacity = size_t{100} << 20;
  auto a = make(d);
  {
    DataPtr p = a->allocate(size_t{60} << 20);
    a->record_stream(p.get(), stream_id(2));
  }  // freed, pending on stream 2's event
  CHECK(a->memory_stats().allocated_bytes == 0);
  const int syncs = d.syncs;
  DataPtr q = a->allocate(size_t{60} << 20);
  CHECK(q.get() != nullptr);
  CHECK(d.syncs == syncs + 1);
  CHECK(d.frees == 1);
  CHECK(a->memory_stats().num_ooms == 0);
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

TEST_CASE("caching allocator: a request too large to round is out of memory and aliases nothing", "[allocator]") {
  const bool direct = GENERATE(false, true);
  INFO("direct mode " << direct);
  FakeDevice d;
  auto a = make(d, direct);
  // Rounded to 512 bytes, SIZE_MAX - 100 wrapped to 0 and got a block the next request shared.
  for (size_t n : {SIZE_MAX, SIZE_MAX - 100, SIZE_MAX / 2, (SIZE_MAX / 4) + 1}) {
    INFO("bytes " << n);
    CHECK_THROWS_AS(a->allocate(n), OutOfMemoryError);
    CHECK_THROWS_AS(a->reserve_capture_pool(n), OutOfMemoryError);
  }
  CHECK(a->memory_stats().num_ooms == 8);
  CHECK(d.mallocs == 0);
  DataPtr p = a->allocate(4096), q = a->allocate(4096);
  CHECK(p.get() != q.get());
  CHECK(a->memory_stats().allocated_bytes == 8192);
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
  const int64_t ooms = a->memory_stats().num_ooms;
  CHECK_THROWS_WITH(a->allocate(size_t{16} << 20), Catch::Contains("capture pool"));
  CHECK(a->memory_stats().num_ooms == ooms + 1);
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

TEST_CASE("caching allocator: during a capture other threads allocate from the ordinary pools", "[allocator]") {
  // CudaGraph captures in thread-local mode, so a data loader's thread keeps allocating meanwhile:
  // a block of the capture pool in its hands could be written by every replay of the graph.
  const bool direct = GENERATE(false, true);
  INFO("direct mode " << direct);
  FakeDevice d;
  auto a = make(d, direct);
  a->reserve_capture_pool(size_t{8} << 20);
  const int mallocs = d.mallocs;
  const size_t pool = a->capture_pool_bytes();
  a->begin_capture(stream_id(5));
  DataPtr mine = a->allocate(1000);
  CHECK(d.mallocs == mallocs);  // the capturing thread: from the capture pool
  void* theirs = nullptr;
  std::thread loader([&] {
    DataPtr p = a->allocate(1000);
    theirs = p.get();
  });
  loader.join();
  CHECK(d.mallocs == mallocs + 1);  // the other thread: a device allocation of its own
  CHECK(theirs != nullptr);
  CHECK(theirs != mine.get());
  CHECK(a->capture_pool_bytes() == pool);
  CHECK(d.frees == 0);  // direct mode frees nothing during the capture (a free synchronizes)
  a->end_capture();
  CHECK(d.frees == (direct ? 1 : 0));
}

TEST_CASE("caching allocator: a block freed during a capture makes its device calls when the capture ends",
          "[allocator]") {
  FakeDevice d;
  SECTION("used on another stream: its event is recorded after the capture, then it is reused") {
    auto a = make(d);
    a->reserve_capture_pool(size_t{8} << 20);
    d.current = stream_id(1);
    DataPtr p = a->allocate(1000);
    void* ptr = p.get();
    a->record_stream(ptr, stream_id(7));  // e.g. the gradient bucket a communication stream read
    a->begin_capture(stream_id(5));
    p.reset();
    CHECK(d.events_recorded == 0);  // an event recorded now could be on a capturing stream
    // Freed as the statistics and the snapshot tell it, waiting to be reusable.
    CHECK(a->memory_stats().allocated_bytes == 0);
    int seen = 0;
    for (const SegmentSnapshot& seg : a->snapshot().segments) {
      for (const BlockSnapshot& b : seg.blocks) {
        if (b.address != reinterpret_cast<uintptr_t>(ptr)) continue;
        ++seen;
        CHECK(b.pending);
        CHECK_FALSE(b.allocated);
        CHECK(b.requested == 0);
      }
    }
    CHECK(seen == 1);
    a->end_capture();
    CHECK(d.events_recorded == 1);
    DataPtr q = a->allocate(1000);
    CHECK(q.get() != ptr);  // stream 7 has not passed the event yet
    d.events_done = true;
    q.reset();
    DataPtr r = a->allocate(1000);
    CHECK(r.get() == ptr);
  }
  SECTION("direct mode: the free happens after the capture") {
    auto a = make(d, true);
    a->reserve_capture_pool(size_t{8} << 20);
    DataPtr p = a->allocate(1000);
    const int frees = d.frees;
    a->begin_capture(stream_id(5));
    p.reset();
    CHECK(d.frees == frees);
    a->end_capture();
    CHECK(d.frees == frees + 1);
    CHECK(a->memory_stats().reserved_bytes == static_cast<int64_t>(a->capture_pool_bytes()));
  }
}

// --- cuda::memory_summary and the out-of-memory message ------------------------------------------

namespace {

// The summary line that starts with `label` (after its two-space indent); fails the test when absent.
std::string summary_line(const std::string& summary, const std::string& label) {
  std::istringstream lines(summary);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  " + label, 0) == 0) return line;
  }
  FAIL("no line starting with \"" << label << "\" in:\n" << summary);
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("memory_summary: names the allocator's numbers after known allocations", "[allocator][memory_summary]") {
  FakeDevice d;
  auto a = make(d);
  d.current = stream_id(1);
  DataPtr small = a->allocate(1000);            // 1024 bytes of a 2 MiB small segment
  DataPtr medium = a->allocate(size_t{3} << 20);  // 3 MiB of a 20 MiB segment, 17 MiB left free
  d.current = stream_id(2);
  DataPtr big = a->allocate(size_t{30} << 20);  // a 30 MiB segment of its own
  small.reset();                                // the small segment is whole and free again
  d.current = stream_id(1);
  DataPtr shared = a->allocate(2048);           // used on stream 3 too, then freed: waits for it
  a->record_stream(shared.get(), stream_id(3));
  shared.reset();

  const std::string s = memory_summary(*a);
  INFO(s);
  CHECK(has(s, "kiln CUDA memory summary, cuda:0 (caching allocator)"));
  // allocated 3 + 30 MiB; peak also held the 1024- and 2048-byte blocks, never both at once.
  const std::string allocated = summary_line(s, "allocated");
  CHECK(has(allocated, "33.00 MiB (34603008 bytes)"));
  CHECK(has(allocated, "33.00 MiB (34605056 bytes)"));
  const std::string reserved = summary_line(s, "reserved");
  CHECK(has(reserved, "52.00 MiB (54525952 bytes)"));  // 2 + 20 + 30 MiB, current and peak
  CHECK(has(summary_line(s, "active"), "(34605056 bytes)"));  // + the 2048 bytes waiting on stream 3
  CHECK(has(summary_line(s, "requested"), "(34603008 bytes)"));
  // 17 MiB left of the 20 MiB segment, and the small segment less the waiting block: 17 MiB + 2 MiB - 2048.
  CHECK(has(summary_line(s, "cached free"), "(19920896 bytes)"));
  CHECK(has(summary_line(s, "segments"), "3 (small pool 1, large pool 2, graph capture pool 0)"));
  CHECK(has(summary_line(s, "blocks"), "5 (2 allocated, 1 waiting for other streams, 2 free)"));
  CHECK(has(summary_line(s, "device calls"), "3 allocations, 0 frees; 4 blocks served in all, 0 out-of-memory"));
  CHECK(has(summary_line(s, "largest free block"), "17.00 MiB (17825792 bytes)"));
  // The largest blocks, largest first: the 30 MiB block on stream 2, then the 17 MiB free remainder.
  const size_t first = s.find("    30.00 MiB (31457280 bytes)"), second = s.find("    17.00 MiB (17825792 bytes)");
  REQUIRE(first != std::string::npos);
  REQUIRE(second != std::string::npos);
  CHECK(first < second);
  CHECK(has(s.substr(first, s.find('\n', first) - first), "allocated"));
  CHECK(has(s.substr(second, s.find('\n', second) - second), "free"));
  // Per-stream pools: stream 1 holds the small and the 20 MiB segment, stream 2 the 30 MiB one.
  std::string pools = s.substr(s.find("per-stream pools"));
  const std::string s1 = summary_line(pools.substr(pools.find('\n') + 1), "  stream " + [] {
    std::ostringstream os;
    os << static_cast<void*>(stream_id(1));
    return os.str();
  }());
  CHECK(has(s1, "reserved 22.00 MiB (23068672 bytes), allocated 3.00 MiB (3145728 bytes)"));
  CHECK(has(s1, "2 segments, 4 blocks"));
  CHECK(has(s, "reserved 30.00 MiB (31457280 bytes), allocated 30.00 MiB (31457280 bytes), free 0.00 MiB (0 bytes)"));
  CHECK(has(s, "graph capture pool: none reserved"));
  CHECK(d.mallocs == 3);  // the summary touched no device
}

TEST_CASE("memory_summary: the graph capture pool and direct mode", "[allocator][memory_summary]") {
  FakeDevice d;
  auto a = make(d);
  a->reserve_capture_pool(size_t{4} << 20);
  a->begin_capture(stream_id(5));
  DataPtr inside = a->allocate(size_t{1} << 20);
  const std::string s = memory_summary(a->snapshot());
  INFO(s);
  CHECK(has(s, "a graph capture is running"));
  CHECK(has(s, "graph capture pool: reserved 4.00 MiB (4194304 bytes), allocated 1.00 MiB (1048576 bytes), free "
               "3.00 MiB (3145728 bytes); 1 segment, 2 blocks; capturing now"));
  CHECK(has(summary_line(s, "segments"), "1 (small pool 0, large pool 0, graph capture pool 1)"));
  CHECK(has(s, "per-stream pools: none"));
  a->end_capture();

  FakeDevice dd;
  auto direct = make(dd, true);
  DataPtr p = direct->allocate(100), q = direct->allocate(5000);
  const std::string ds = memory_summary(*direct);
  INFO(ds);
  CHECK(has(ds, "KILN_CUDA_ALLOC=direct"));
  CHECK(has(summary_line(ds, "allocated"), "(5100 bytes)"));  // direct blocks are not rounded
  CHECK(has(summary_line(ds, "segments"), "direct 2"));
}

TEST_CASE("memory_summary: a device that is not there is a DeviceError", "[allocator][memory_summary]") {
  if (!cuda::is_available()) {
    CHECK_THROWS_AS(memory_summary(), DeviceError);
    CHECK_THROWS_WITH(memory_summary(0), Catch::Contains("cuda::memory_summary"));
  } else {
    CHECK(has(memory_summary(), "kiln CUDA memory summary, cuda:"));
  }
}

TEST_CASE("caching allocator: the out-of-memory message names the sizes and what kiln offers",
          "[allocator][memory_summary]") {
  FakeDevice d;
  d.capacity = size_t{64} << 20;
  auto a = make(d);
  DataPtr kept = a->allocate(size_t{20} << 20);
  { DataPtr freed = a->allocate(size_t{20} << 20); }  // peak 40 MiB allocated; then cached
  try {
    DataPtr q = a->allocate(size_t{50} << 20);  // 20 + 50 > 64 even after the cache is released
    FAIL("expected OutOfMemoryError");
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(has(m, "CUDA out of memory on cuda:0"));
    CHECK(has(m, "tried to allocate 50.00 MiB (52428800 bytes)"));
    CHECK(has(m, "20.00 MiB (20971520 bytes) allocated"));
    CHECK(has(m, "20.00 MiB (20971520 bytes) reserved"));  // the cached 20 MiB went back before the retry
    CHECK(has(m, "peak allocated 40.00 MiB (41943040 bytes)"));
    CHECK(has(m, "autocast (AutocastGuard / --amp)"));
    CHECK(has(m, "activation recompute (nn::checkpoint / --recompute)"));
    CHECK(has(m, "gradient accumulation (--grad-accum)"));
    CHECK(has(m, "a smaller batch"));
    CHECK(has(m, "cuda::memory_summary()"));
  }
  CHECK(a->memory_stats().num_ooms == 1);
  CHECK(has(summary_line(memory_summary(*a), "device calls"), "1 out-of-memory"));
}

namespace {

// Restores the CPU cache's limit (and empties it) when a test ends.
struct CpuCacheLimitGuard {
  int64_t saved = cpu_cache_stats().limit_bytes;
  ~CpuCacheLimitGuard() {
    cpu_empty_cache();
    set_cpu_cache_limit(saved);
  }
};

}  // namespace

TEST_CASE("cpu allocator: a freed large block serves the next allocation of its size class", "[allocator]") {
  CpuCacheLimitGuard guard;
  cpu_empty_cache();
  set_cpu_cache_limit(int64_t{64} << 20);
  if (!cpu_cache_available()) {
    // AddressSanitizer builds keep no block, so that a use after free is still caught.
    CHECK(cpu_cache_stats().limit_bytes == 0);
    return;
  }
  Allocator* a = cpu_allocator();
  void* first = nullptr;
  {
    DataPtr block = a->allocate(1 << 20);  // 1 MiB: above the 64 KiB the cache starts at
    first = block.get();
    REQUIRE(first != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
  }
  CpuCacheStats s = cpu_cache_stats();
  CHECK(s.cached_blocks == 1);
  CHECK(s.cached_bytes == 1 << 20);
  const int64_t hits = s.hits;
  {
    // A little smaller: the same size class (classes are a quarter of a power of two apart).
    DataPtr again = a->allocate((1 << 20) - 1000);
    CHECK(again.get() == first);
    CHECK(cpu_cache_stats().hits == hits + 1);
    CHECK(cpu_cache_stats().cached_bytes == 0);
    // Another class while the first block is in use: a fresh block.
    DataPtr other = a->allocate(3 << 20);
    CHECK(other.get() != first);
  }
  CHECK(cpu_cache_stats().cached_blocks == 2);
  // Small blocks are malloc's.
  { DataPtr small = a->allocate(1000); }
  CHECK(cpu_cache_stats().cached_blocks == 2);
  // The limit: lowering it frees what is kept beyond it; blocks freed past it are not kept.
  set_cpu_cache_limit(2 << 20);
  CHECK(cpu_cache_stats().cached_bytes <= 2 << 20);
  { DataPtr big = a->allocate(8 << 20); }
  CHECK(cpu_cache_stats().cached_bytes <= 2 << 20);
  cpu_empty_cache();
  CHECK(cpu_cache_stats().cached_bytes == 0);
  CHECK(cpu_cache_stats().cached_blocks == 0);
  // Off: nothing is kept.
  set_cpu_cache_limit(0);
  { DataPtr block = a->allocate(1 << 20); }
  CHECK(cpu_cache_stats().cached_blocks == 0);
}

TEST_CASE("cpu allocator: tensors reuse cached blocks and keep their values", "[allocator]") {
  CpuCacheLimitGuard guard;
  set_cpu_cache_limit(int64_t{64} << 20);
  cpu_empty_cache();
  for (int i = 0; i < 3; ++i) {
    Tensor x = full({512, 512}, static_cast<double>(i + 1));  // 1 MiB each
    Tensor y = x * 2.0;
    CHECK(y.sum().item<double>() == 512.0 * 512.0 * 2.0 * (i + 1));
  }
  CHECK((cpu_cache_stats().hits > 0) == cpu_cache_available());
}

// Run only by the CTest tests cpu_cache_env_*, each a process of its own: KILN_CPU_CACHE_MB is read
// once, when the CPU allocator starts (before main: static tensors of the test program allocate).
// The warning for a value that is not a number is checked by the CTest test on the output.
TEST_CASE("cpu allocator: KILN_CPU_CACHE_MB sets the cache's limit when the allocator starts", "[.cpu_cache_env]") {
  const char* expected_mb = std::getenv("KILN_TEST_EXPECTED_CPU_CACHE_MB");  // a number, or "default"
  REQUIRE(expected_mb != nullptr);
  const CpuCacheStats s = cpu_cache_stats();
  if (!cpu_cache_available()) {  // AddressSanitizer builds: off, whatever the environment says
    CHECK(s.limit_bytes == 0);
  } else if (std::string(expected_mb) == "default") {
    CHECK(s.limit_bytes > 0);  // a quarter of the machine's memory
  } else {
    CHECK(s.limit_bytes == std::stoll(expected_mb) * (int64_t{1} << 20));
  }
}

TEST_CASE("cpu allocator: live bytes and their peak, with or without the cache", "[cpu_cache]") {
  Allocator* a = cpu_allocator();
  const int64_t base = cpu_cache_stats().allocated_bytes;  // what other tests' statics still hold
  reset_cpu_peak_memory();
  CHECK(cpu_cache_stats().peak_allocated_bytes == base);
  {
    DataPtr big = a->allocate(3 << 20);
    DataPtr small = a->allocate(1000);
    CHECK(cpu_cache_stats().allocated_bytes == base + (3 << 20) + 1000);
    {
      Tensor t = zeros({1024}, TensorOptions(DType::Float64));  // tensors count through their storage
      CHECK(cpu_cache_stats().allocated_bytes == base + (3 << 20) + 1000 + 8192);
    }
  }
  // Freed blocks, cached or not, are not live; the peak remembers the most at once.
  CHECK(cpu_cache_stats().allocated_bytes == base);
  CHECK(cpu_cache_stats().peak_allocated_bytes == base + (3 << 20) + 1000 + 8192);
  reset_cpu_peak_memory();
  CHECK(cpu_cache_stats().peak_allocated_bytes == base);
  { DataPtr again = a->allocate(1 << 20); }
  CHECK(cpu_cache_stats().peak_allocated_bytes == base + (1 << 20));
}

TEST_CASE("cpu allocator: a failed allocation returns the cache to the system and tries once more", "[cpu_cache]") {
  Allocator* a = cpu_allocator();
  { DataPtr block = a->allocate(1 << 20); }
  // AddressSanitizer builds keep no block; elsewhere the freed MiB is cached.
  CHECK(cpu_cache_stats().cached_bytes >= (cpu_cache_available() ? 1 << 20 : 0));
  const int64_t live = cpu_cache_stats().allocated_bytes;
  CHECK_THROWS_AS(a->allocate(size_t{1} << 50), OutOfMemoryError);  // a pebibyte: fails twice
  CHECK(cpu_cache_stats().cached_bytes == 0);
  CHECK(cpu_cache_stats().allocated_bytes == live);  // the failure left no count behind
}
