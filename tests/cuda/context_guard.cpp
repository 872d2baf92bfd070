// kiln_cuda_tests' guard against one broken kernel spoiling the whole run (tests/progress.h).
//
// A kernel that faults (an illegal address, a device-side trap) leaves the CUDA context unusable:
// every later CUDA call of the process returns the same error, so every later test case would fail
// for a reason that is not its own, and the run's report would bury the one real failure. After
// each test case this listener waits for the device; if that fails, and fails again once the
// pending error is cleared, the context is gone and the process ends at once, naming the test case
// (kiln::test::end_run_context_lost). tools/resume_tests.py then runs the remaining test cases in a
// new process. An error that clears is a launch error the test case left unread, which kiln's
// next check would have blamed on the next test: it is written to the progress file as "stray".
#include <cuda_runtime_api.h>

// The listener and reporter interfaces, which Catch2 v2 declares outside the main's file only when asked.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>
#include <iostream>
#include <string>

#include "core/cuda/runtime.h"
#include "tests/progress.h"

namespace kiln::test {
namespace {

std::string describe(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

struct CudaContextGuard final : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;

  // Catch2 ends the test case from its signal handler after a fatal signal: no CUDA calls there.
  bool assertionEnded(Catch::AssertionStats const& stats) override {
    fatal_ = fatal_ || stats.assertionResult.getResultType() == Catch::ResultWas::FatalErrorCondition;
    return false;
  }

  void testCaseEnded(Catch::TestCaseStats const& stats) override {
    if (fatal_ || !cuda::is_available()) return;  // no device: the tests fail on their own REQUIRE
    const std::string& name = stats.testInfo.name;
    const cudaError_t unread = cudaGetLastError();  // reads and clears a launch error left behind
    const cudaError_t synced = cudaDeviceSynchronize();
    if (synced != cudaSuccess) {
      (void)cudaGetLastError();
      const cudaError_t again = cudaDeviceSynchronize();
      if (again != cudaSuccess) end_run_context_lost(name, describe(again));
    }
    const cudaError_t stray = unread != cudaSuccess ? unread : synced;
    if (stray != cudaSuccess) {
      std::cerr << "kiln tests: \"" << name << "\" left a CUDA error no check read (" << describe(stray) << ")\n";
      progress_line("stray\t" + name + "\t" + describe(stray));
    }
  }

 private:
  bool fatal_ = false;
};
CATCH_REGISTER_LISTENER(CudaContextGuard)

}  // namespace
}  // namespace kiln::test
