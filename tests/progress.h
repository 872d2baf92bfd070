#pragma once
// Test progress for tools/resume_tests.py (docs/gpu-testing.md). With KILN_TEST_PROGRESS=FILE set,
// every test executable appends one tab-separated line per event to FILE, each written whole by one
// write(2) as it happens, so the file survives a crash of the process:
//   start <name>              a test case begins
//   end <name> passed|failed  it ended (failed: an assertion failed or it threw)
//   stray <name> <error>      it left a CUDA error that no check read (kiln_cuda_tests)
//   lost <name> <error>       after it the CUDA context was unusable; the process ended at once
//   fatal <name> <signal>     a fatal signal in it (Catch2 then writes "end" and "done" before the
//                             signal ends the process: a run with "fatal" did not finish)
//   done                      the run reached its end
// A "start" with no "end" after it is the test case the process died in (a signal Catch2 does not
// catch, such as SIGKILL, leaves no "fatal"). Unset: nothing is written.
#include <string>

namespace kiln::test {

// The exit code of a run ended by end_run_context_lost.
inline constexpr int kContextLostExit = 75;

// Appends one line (without its newline) to KILN_TEST_PROGRESS's file; nothing when unset.
void progress_line(const std::string& line);

// Ends the test process at once, after test case `test` left the CUDA context unusable (`why`: the
// error): every later test would fail in this process, and a fresh one can run them. Flushes the
// console, says so on stderr, writes "lost" to the progress file and exits with kContextLostExit,
// without running destructors (which would only add errors from the dead context).
[[noreturn]] void end_run_context_lost(const std::string& test, const std::string& why);

}  // namespace kiln::test
