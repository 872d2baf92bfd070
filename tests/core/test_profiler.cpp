// The step profiler on the CPU: phases, steps and what falls between them, reports, and a CUDA
// profiler refused where there is no GPU. (tests/cuda/test_profiler_cuda.cpp times a GPU's steps.)
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "core/cuda/runtime.h"
#include "core/kiln.h"

using namespace kiln;
using profile::Phase;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
double at(const profile::StepTimes& t, Phase p) { return t.phase_ms[static_cast<size_t>(p)]; }

}  // namespace

TEST_CASE("step profiler: each phase's time goes to it, the rest of the step to other", "[profiler]") {
  profile::StepProfiler prof(Device::cpu());
  REQUIRE(prof.enabled());
  for (int step = 0; step < 3; ++step) {
    prof.begin(Phase::DataWait);
    sleep_ms(2);
    prof.begin(Phase::Forward);  // ends the data wait
    sleep_ms(3);
    prof.end();
    sleep_ms(1);  // in the step, in no phase
    {
      profile::PhaseScope optimizer(&prof, Phase::Optimizer);
      sleep_ms(1);
    }
    prof.end_step();
    sleep_ms(200);  // between steps: counted nowhere
  }
  const profile::StepTimes t = prof.report();
  CHECK(t.steps == 3);
  // Sleeps last at least what they ask; the means are per step.
  CHECK(at(t, Phase::DataWait) >= 2.0);
  CHECK(at(t, Phase::Forward) >= 3.0);
  CHECK(at(t, Phase::Optimizer) >= 1.0);
  CHECK(at(t, Phase::Backward) == 0.0);
  CHECK(at(t, Phase::HostToDevice) == 0.0);
  CHECK(t.other_ms() >= 1.0);
  CHECK(t.step_ms >= 7.0);
  CHECK(t.step_ms < 200.0);  // the gaps between steps are not in them
  const std::string line = t.str();
  CHECK(line.find("data ") != std::string::npos);
  CHECK(line.find("forward ") != std::string::npos);
  CHECK(line.find("backward") == std::string::npos);  // took no time: left out
  CHECK(line.find("other ") != std::string::npos);
  // A report forgets what it reported.
  CHECK(prof.report().steps == 0);
  CHECK(prof.report().str() == "no steps");
}

TEST_CASE("step profiler: an open step waits for the next report, and an abandoned one counts nowhere", "[profiler]") {
  profile::StepProfiler prof(Device::cpu());
  prof.begin(Phase::Backward);
  sleep_ms(2);
  CHECK(prof.report().steps == 0);  // still open
  prof.end_step();
  profile::StepTimes t = prof.report();
  CHECK(t.steps == 1);
  CHECK(at(t, Phase::Backward) >= 2.0);

  prof.begin(Phase::DataWait);  // the loader had no more batches
  sleep_ms(5);
  prof.abandon_step();
  prof.begin(Phase::Forward);
  prof.end_step();
  t = prof.report();
  CHECK(t.steps == 1);
  CHECK(at(t, Phase::DataWait) == 0.0);
  CHECK(t.step_ms < 5.0);
  // end() and end_step() without a phase or a step do nothing.
  prof.end();
  prof.end_step();
  CHECK(prof.report().steps == 0);
}

TEST_CASE("step profiler: disabled, it records nothing", "[profiler]") {
  profile::StepProfiler prof(Device::cpu(), /*enabled=*/false);
  prof.begin(Phase::Forward);
  sleep_ms(1);
  prof.end_step();
  CHECK(prof.report().steps == 0);
  profile::PhaseScope none(nullptr, Phase::Forward);  // a null profiler is allowed
  // A disabled profiler on a GPU needs no GPU.
  CHECK_NOTHROW(profile::StepProfiler(Device::cuda(0), false));
}

TEST_CASE("step profiler: a GPU's profiler needs a GPU, and NVTX stays off without CUDA", "[profiler]") {
  if (cuda::is_available()) {
    CHECK_NOTHROW(profile::StepProfiler(Device::cuda(0)));
  } else {
    CHECK_THROWS_AS(profile::StepProfiler(Device::cuda(0)), DeviceError);
    CHECK_THROWS_WITH(profile::StepProfiler(Device::cuda(0)),
                      Catch::Contains("StepProfiler") && Catch::Contains("cuda:0"));
  }
  if (!kBuiltWithCuda) {
    profile::set_nvtx_enabled(true);
    CHECK_FALSE(profile::nvtx_enabled());
  }
  profile::nvtx_push("a range");  // harmless either way
  profile::nvtx_pop();
}
