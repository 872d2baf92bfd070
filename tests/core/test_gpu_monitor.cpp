// The GPU monitor without a GPU: NVML absent or failing is a reason, not a crash; against a fake
// libnvidia-ml (tests/core/fake_nvml.cpp, its path in KILN_FAKE_NVML) the sampler reads what the
// library answers, once per interval, and its summaries add up.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "core/gpu_monitor.h"

using namespace kiln;
using monitor::GpuSample;
using monitor::GpuSampler;
using monitor::GpuSummary;
using monitor::NvmlLibrary;

namespace {

// Sets an environment variable for a scope.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~EnvGuard() { ::unsetenv(name_); }

 private:
  const char* name_;
};

int fake_reads() {
  void* handle = ::dlopen(KILN_FAKE_NVML, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  auto reads = reinterpret_cast<int (*)()>(::dlsym(handle, "fake_nvml_reads"));
  REQUIRE(reads != nullptr);
  const int n = reads();
  ::dlclose(handle);
  return n;
}

}  // namespace

TEST_CASE("gpu monitor: a missing NVML library is a reason, and the sampler stays inactive", "[gpu_monitor]") {
  auto lib = std::make_shared<NvmlLibrary>("/nonexistent/libnvidia-ml.so.1");
  CHECK_FALSE(lib->available());
  CHECK(lib->reason().find("cannot load /nonexistent/libnvidia-ml.so.1") != std::string::npos);
  std::string why;
  CHECK(lib->device_by_index(0, why) == nullptr);
  CHECK(why == lib->reason());
  CHECK(std::isnan(lib->read(nullptr).utilization));

  GpuSampler sampler(lib, 0, 1.0);
  CHECK_FALSE(sampler.active());
  CHECK(sampler.reason() == lib->reason());
  CHECK(sampler.take().samples == 0);
  CHECK(sampler.summary().str() == "no GPU samples");
}

TEST_CASE("gpu monitor: a CPU run has no GPU to sample", "[gpu_monitor]") {
  GpuSampler sampler(Device::cpu());
  CHECK_FALSE(sampler.active());
  CHECK(sampler.reason() == "the run is on the CPU");
  CHECK(sampler.summary().samples == 0);
}

TEST_CASE("gpu monitor: a library without NVML's symbols, or whose init fails, is unavailable", "[gpu_monitor]") {
  NvmlLibrary not_nvml("libz.so.1");  // loads, but is not NVML
  CHECK_FALSE(not_nvml.available());
  CHECK(not_nvml.reason().find("lacks nvmlInit_v2") != std::string::npos);

  EnvGuard fail("FAKE_NVML_FAIL_INIT", "1");
  NvmlLibrary failing(KILN_FAKE_NVML);
  CHECK_FALSE(failing.available());
  CHECK(failing.reason() == "nvmlInit_v2 failed: NVML error 999 (Unknown Error)");
}

TEST_CASE("gpu monitor: KILN_NVML_LIBRARY names the library", "[gpu_monitor]") {
  EnvGuard path("KILN_NVML_LIBRARY", KILN_FAKE_NVML);
  NvmlLibrary lib;
  CHECK(lib.path() == KILN_FAKE_NVML);
  CHECK(lib.available());
}

TEST_CASE("gpu monitor: readings come from NVML in kiln's units", "[gpu_monitor]") {
  NvmlLibrary lib(KILN_FAKE_NVML);
  REQUIRE(lib.available());
  std::string why;
  void* card = lib.device_by_pci_bus_id("00000000:65:00.0", why);
  REQUIRE(card != nullptr);
  CHECK(lib.device_by_pci_bus_id("00000000:17:00.0", why) == nullptr);
  CHECK(why == "no NVML device at PCI 00000000:17:00.0: NVML error 2 (Invalid Argument)");
  CHECK(lib.device_by_index(1, why) == nullptr);
  CHECK(why.find("no NVML device 1") == 0);

  const GpuSample s = lib.read(card);
  CHECK(s.utilization == 37);
  CHECK(s.memory_utilization == 12);
  CHECK(s.memory_used_mb == 2048);
  CHECK(s.memory_total_mb == 81920);
  CHECK(s.power_w == Approx(250.5));
  CHECK(s.sm_clock_mhz == 1755);
  CHECK(lib.name(card) == "Fake GPU");
  CHECK(lib.max_sm_clock_mhz(card) == 1980);

  EnvGuard no_power("FAKE_NVML_NO_POWER", "1");
  CHECK(std::isnan(lib.read(card).power_w));  // not supported: NaN, the rest still read
  CHECK(lib.read(card).utilization == 37);
}

TEST_CASE("gpu monitor: the sampler reads once per interval until it is destroyed", "[gpu_monitor]") {
  auto lib = std::make_shared<NvmlLibrary>(KILN_FAKE_NVML);
  REQUIRE(lib->available());
  const int before = fake_reads();
  GpuSummary first, second;
  {
    GpuSampler sampler(lib, 0, 2.0);
    REQUIRE(sampler.active());
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    first = sampler.take();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    second = sampler.summary();
  }
  const int reads = fake_reads() - before;
  // Every read lands in exactly one window; the thread has stopped (no read after the destructor).
  CHECK(first.samples >= 2);
  CHECK(second.samples >= 1);
  CHECK(first.samples + second.samples <= reads);
  CHECK(reads - (first.samples + second.samples) <= 1);  // one read may finish after summary()
  CHECK(fake_reads() - before == reads);
  // At most one read per interval (plus the first at once): 90 ms at 2 ms is at most ~46.
  CHECK(reads <= 60);
  CHECK(first.name == "Fake GPU");
  CHECK(second.name == "Fake GPU");
  CHECK(first.max_sm_clock_mhz == 1980);
  CHECK(first.utilization.mean() == 37);
  CHECK(first.utilization.n == first.samples);
  CHECK(first.power_w.mean() == Approx(250.5));
  CHECK(first.memory_used_mb.max == 2048);
  CHECK(first.memory_total_mb == 81920);
  CHECK(first.str().find("GPU util 37% (min 37, max 37), memory 2048 of 81920 MiB, 250 W, SM 1755 MHz") == 0);
}

TEST_CASE("gpu monitor: a summary's statistics leave out what a card did not report", "[gpu_monitor]") {
  GpuSummary s;
  GpuSample a;
  a.utilization = 20;
  a.power_w = 100;
  GpuSample b;
  b.utilization = 80;  // no power reading
  s.add(a);
  s.add(b);
  CHECK(s.samples == 2);
  CHECK(s.utilization.mean() == 50);
  CHECK(s.utilization.min == 20);
  CHECK(s.utilization.max == 80);
  CHECK(s.power_w.n == 1);
  CHECK(s.power_w.mean() == 100);
  CHECK(std::isnan(s.sm_clock_mhz.mean()));
  CHECK(s.str() == "GPU util 50% (min 20, max 80), 100 W, 2 samples");
}

TEST_CASE("gpu monitor: a bad interval is refused", "[gpu_monitor]") {
  auto lib = std::make_shared<NvmlLibrary>(KILN_FAKE_NVML);
  CHECK_THROWS_WITH(GpuSampler(lib, 0, 0.0), Catch::Contains("interval must be in (0, 3600000] ms, got 0"));
  CHECK_THROWS_WITH(GpuSampler(lib, 0, std::nan("")), Catch::Contains("interval"));
}
