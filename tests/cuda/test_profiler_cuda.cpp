// The step profiler on a GPU (core/profiler.h): phases are timed between CUDA events on the current
// stream, read back only by report(). A phase the GPU spends idle while the host waits (a data wait
// with nothing queued) is timed; one the host spends waiting while the GPU still works through
// queued kernels costs little on the device's timeline; forward work is timed where the GPU runs it.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "core/cuda/runtime.h"
#include "core/gpu_monitor.h"
#include "core/kiln.h"

using namespace kiln;
using profile::Phase;

namespace {

double at(const profile::StepTimes& t, Phase p) { return t.phase_ms[static_cast<size_t>(p)]; }

}  // namespace

TEST_CASE("step profiler on a GPU: phases on the device's timeline, read back by report()", "[profiler][cuda]") {
  const Device gpu = Device::cuda(0);
  profile::StepProfiler prof(gpu);
  Tensor a = randn({1024, 1024}).to(gpu), b = randn({1024, 1024}).to(gpu);
  for (int step = 0; step < 4; ++step) {
    prof.begin(Phase::DataWait);
    cuda::synchronize();  // nothing queued: the GPU idles while the host sleeps
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    prof.begin(Phase::Forward);
    Tensor c = a;
    for (int i = 0; i < 20; ++i) c = matmul(c, b) * 1e-3;  // about 43 GFLOP queued
    prof.begin(Phase::Optimizer);
    c.add_(1.0);
    prof.end_step();
  }
  const profile::StepTimes t = prof.report();
  CHECK(t.steps == 4);
  CHECK(at(t, Phase::DataWait) >= 4.0);  // the sleep, as the idle GPU saw it
  CHECK(at(t, Phase::Forward) > 0.0);
  CHECK(at(t, Phase::Optimizer) > 0.0);
  CHECK(at(t, Phase::Backward) == 0.0);
  CHECK(t.other_ms() > -1e-3);
  CHECK(prof.report().steps == 0);

  // The host waits while the GPU is busy: the device sees no gap. 10 products of 4096^3 (1.4 TFLOP)
  // keep an H100 busy for milliseconds even on TF32 tensor cores.
  Tensor big_a = randn({4096, 4096}).to(gpu) * 1e-2, big_b = randn({4096, 4096}).to(gpu) * 1e-2;
  cuda::synchronize();
  Tensor c = big_a;
  for (int i = 0; i < 10; ++i) c = matmul(c, big_b);  // queued, not waited for
  prof.begin(Phase::DataWait);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  prof.begin(Phase::Forward);
  c = c + 1.0;
  prof.end_step();
  const profile::StepTimes busy = prof.report();
  CHECK(busy.steps == 1);
  CHECK(at(busy, Phase::DataWait) < 0.5);
}

TEST_CASE("gpu monitor: the driver's NVML samples the card CUDA runs on", "[cuda][gpu_monitor]") {
  // The real libnvidia-ml.so.1 of the driver, found by the CUDA device's PCI address.
  const Device gpu = Device::cuda(0);
  monitor::GpuSampler sampler(gpu, 10.0);
  INFO(sampler.reason());
  REQUIRE(sampler.active());
  Tensor a = randn({4096, 4096}).to(gpu), b = randn({4096, 4096}).to(gpu);
  for (int i = 0; i < 200; ++i) a = matmul(a, b) * 1e-2;  // 27 TFLOP: a tenth of a second or more
  cuda::synchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const monitor::GpuSummary s = sampler.take();
  CHECK(s.samples >= 5);
  CHECK(s.utilization.n == s.samples);
  CHECK(s.utilization.max <= 100);
  CHECK(s.utilization.max > 0);  // the products kept it busy through at least one NVML period
  CHECK(s.memory_total_mb == Approx(static_cast<double>(cuda::total_memory(0)) / (1024.0 * 1024.0)).epsilon(0.05));
  CHECK(s.memory_used_mb.max > 0);
  CHECK(s.sm_clock_mhz.mean() > 0);
  CHECK(s.max_sm_clock_mhz >= s.sm_clock_mhz.max);
  CHECK_FALSE(s.name.empty());
}
