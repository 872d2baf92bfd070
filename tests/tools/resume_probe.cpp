// A test executable that misbehaves on purpose, for tests/tools/resume_tests_check.py: the check
// runs it through tools/resume_tests.py and asserts what the runner makes of a crash, a lost CUDA
// context, an error left unread and a test that outlasts the deadline. Not a CTest test itself.
// With KILN_PROBE_BEHAVE set, every test case passes: tests/tools/gpu_check_rehearsal.py stages it
// as the CUDA test executable of a run that should pass.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <string>

#include "tests/progress.h"

namespace kiln::test {
namespace {

bool behave() { return std::getenv("KILN_PROBE_BEHAVE") != nullptr; }

TEST_CASE("probe: passes first", "[probe]") { CHECK(1 + 1 == 2); }

TEST_CASE("probe: fails an assertion", "[probe]") { CHECK(1 + 1 == (behave() ? 2 : 3)); }

TEST_CASE("probe: dies (a segfault)", "[probe]") {
  CHECK(true);
  if (!behave()) std::raise(SIGSEGV);
}

// A name with a comma and brackets, as kiln's test names have: the first resumed run must select
// it literally.
TEST_CASE("probe: passes between (a comma, [brackets])", "[probe]") { CHECK(true); }

// Stands in for kiln_cuda_tests' guard (tests/cuda/context_guard.cpp), which needs a GPU to see a
// lost context: the same call ends the process.
TEST_CASE("probe: loses the CUDA context", "[probe]") {
  CHECK(true);
  if (!behave()) {
    end_run_context_lost("probe: loses the CUDA context", "cudaErrorIllegalAddress: an illegal memory access");
  }
}

TEST_CASE("probe: leaves an error unread", "[probe]") {
  CHECK(true);
  if (!behave()) {
    progress_line("stray\tprobe: leaves an error unread\tcudaErrorInvalidConfiguration: invalid argument");
  }
}

// Sleeps KILN_PROBE_SLEEP seconds when it is set, for the deadline.
TEST_CASE("probe: sleeps when asked", "[probe]") {
  if (const char* s = std::getenv("KILN_PROBE_SLEEP")) ::sleep(static_cast<unsigned>(std::atoi(s)));
  CHECK(true);
}

TEST_CASE("probe: passes last", "[probe]") { CHECK(true); }

}  // namespace
}  // namespace kiln::test
