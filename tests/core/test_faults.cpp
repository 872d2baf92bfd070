// Faults that must neither crash nor corrupt: freeing a very long autograd graph (which once
// recursed once per node and overflowed the stack), and an allocator that fails to free a block
// (which once threw from a destructor and ended the process). Both run on the CPU: the second uses
// a fake device backend under the real caching allocator.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/cuda/caching_allocator.h"
#include "core/kiln.h"
#include "kernels/error.h"

using namespace kiln;

namespace {

// Longer than any stack could unwind recursively (the original report: 120,000 nodes).
constexpr int kLongGraph = 300000;

TEST_CASE("a 300,000-node graph is freed, and run backward through, without deep recursion", "[faults]") {
  Tensor x = tensor(std::vector<float>{0.5f}).set_requires_grad(true);
  {
    Tensor y = x;
    for (int i = 0; i < kLongGraph; ++i) y = y * 1.0f;
    REQUIRE(y.grad_fn() != nullptr);
  }  // the whole chain dies here, with only the chain's last tensor holding it
  Tensor y = x;
  for (int i = 0; i < kLongGraph; ++i) y = y + 1.0f;
  y.backward();
  REQUIRE(x.grad().item<float>() == 1.0f);
  y = Tensor();  // the released graph is freed too
  REQUIRE(x.grad().item<float>() == 1.0f);
}

TEST_CASE("a node shared by two graphs survives the first graph's destruction", "[faults]") {
  Tensor x = tensor(std::vector<float>{2.0f}).set_requires_grad(true);
  Tensor shared = x * 3.0f;
  Tensor a = shared;
  for (int i = 0; i < 1000; ++i) a = a + 1.0f;
  Tensor b = shared * 2.0f;
  a = Tensor();  // must leave shared's node, which b's graph still uses, intact
  b.backward();
  REQUIRE(x.grad().item<float>() == 6.0f);
}

// An allocator whose frees fail, as a CUDA allocator's would after a sticky device error.
class FailingFreeAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    void* p = std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
    live.insert(p);
    return DataPtr(p, nbytes, Device::cuda(15), this);
  }
  const char* name() const override { return "failing-test"; }
  std::set<void*> live;

 protected:
  void deallocate(void* ptr, size_t) override {
    throw DeviceError("cudaFree: cudaErrorIllegalAddress (an illegal memory access was encountered)");
  }
};

TEST_CASE("a free that fails is recorded and raised at the next synchronizing call, not thrown from a destructor",
          "[faults]") {
  REQUIRE_FALSE(has_deferred_free_error());
  FailingFreeAllocator alloc;
  set_allocator(Device::cuda(15), &alloc);
  {
    Storage a(256, Device::cuda(15));
    Storage b(512, Device::cuda(15));
  }  // two failing frees in destructors: the process goes on
  set_allocator(Device::cuda(15), nullptr);
  REQUIRE(has_deferred_free_error());
  try {
    raise_deferred_free_errors();
    FAIL("no error was raised");
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    // b is destroyed first, so its error is the one spelled out.
    CHECK(msg.find("failing-test allocator: freeing a block of 512 bytes failed") != std::string::npos);
    CHECK(msg.find("cudaErrorIllegalAddress") != std::string::npos);
    CHECK(msg.find("and 1 more failed frees") != std::string::npos);
  }
  REQUIRE_FALSE(has_deferred_free_error());
  REQUIRE_NOTHROW(raise_deferred_free_errors());  // raised once, then cleared
  for (void* p : alloc.live) std::free(p);
}

TEST_CASE("the CPU allocator refuses sizes whose alignment rounding would wrap", "[faults]") {
  // Up to 2^63 - 63 the rounding to 64 bytes fits; the size classes above (up to twice it) do not.
  for (size_t n : {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 62, SIZE_MAX / 2, SIZE_MAX / 2 - 62, (size_t{1} << 62) + 1}) {
    INFO("bytes " << n);
    CHECK_THROWS_AS(cpu_allocator()->allocate(n), OutOfMemoryError);
  }
  CHECK_THROWS_WITH(empty({INT64_MAX}, TensorOptions(DType::UInt8)),
                    Catch::Contains("empty") && Catch::Contains("9223372036854775807"));
}

// A fake device for the caching allocator whose event recording and frees fail on demand.
class BreakableBackend final : public cuda::DeviceBackend {
 public:
  bool broken = false;
  std::set<void*> live;
  std::set<int*> live_events;
  // The allocator owns its backend: what it kept (the blocks whose free failed, cached segments,
  // pending events) goes back with it, so that the sanitized test run can check for leaks.
  ~BreakableBackend() override {
    for (void* p : live) std::free(p);
    for (int* e : live_events) delete e;
  }
  void* raw_alloc(size_t n) override {
    void* p = std::aligned_alloc(512, (n + 511) / 512 * 512);
    live.insert(p);
    return p;
  }
  void raw_free(void* p) override {
    if (broken) throw DeviceError("cudaFree: cudaErrorLaunchFailure (unspecified launch failure)");
    live.erase(p);
    std::free(p);
  }
  EventHandle record_event(Stream) override {
    if (broken) throw DeviceError("cudaEventRecord: cudaErrorLaunchFailure (unspecified launch failure)");
    return *live_events.insert(new int(0)).first;
  }
  bool event_done(EventHandle) override { return true; }
  void destroy_event(EventHandle e) override {
    live_events.erase(static_cast<int*>(e));
    delete static_cast<int*>(e);
  }
  bool is_capturing(Stream) override { return false; }
  void synchronize() override {}
  Stream current_stream() override { return nullptr; }
};

TEST_CASE("the caching allocator leaks, never reuses, a block whose free failed", "[faults]") {
  for (bool direct : {false, true}) {
    INFO("direct mode " << direct);
    auto owned = std::make_unique<BreakableBackend>();
    BreakableBackend* backend = owned.get();
    cuda::CachingAllocator alloc(Device::cuda(0), std::move(owned), direct);
    void* leaked = nullptr;
    {
      DataPtr p = alloc.allocate(4096);
      leaked = p.get();
      alloc.record_stream(leaked, reinterpret_cast<Stream>(uintptr_t{7}));  // needs an event when freed
      backend->broken = true;
    }  // the free fails inside the destructor
    REQUIRE(has_deferred_free_error());
    REQUIRE_THROWS_AS(raise_deferred_free_errors(), DeviceError);
    backend->broken = false;
    for (int i = 0; i < 4; ++i) {
      DataPtr q = alloc.allocate(4096);
      CHECK(q.get() != leaked);
    }
    for (void* p : backend->live) std::free(p);
    backend->live.clear();
  }
}

}  // namespace
