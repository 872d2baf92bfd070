// The one Catch2 main, compiled once and linked into every test executable, with the progress
// listener of tests/progress.h.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "tests/progress.h"

namespace kiln::test {
namespace {

// KILN_TEST_PROGRESS's file, opened for appending on first use; -1 when the variable is unset. A
// path that cannot be opened ends the program: a runner relying on the file would misread a run
// that wrote nothing as one that crashed before its first test.
int progress_fd() {
  static const int fd = [] {
    const char* path = std::getenv("KILN_TEST_PROGRESS");
    if (path == nullptr || *path == '\0') return -1;
    const int f = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (f < 0) {
      std::fprintf(stderr, "kiln tests: cannot open KILN_TEST_PROGRESS=%s: %s\n", path, std::strerror(errno));
      std::_Exit(2);
    }
    return f;
  }();
  return fd;
}

struct ProgressListener final : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const& info) override {
    current_ = info.name;
    progress_line("start\t" + info.name);
  }
  // A fatal signal comes as an assertion of its own kind; Catch2 then ends the test case and the run
  // as if they had finished ("end", "done") before the signal kills the process, so "fatal" must
  // come first.
  bool assertionEnded(Catch::AssertionStats const& stats) override {
    if (stats.assertionResult.getResultType() != Catch::ResultWas::FatalErrorCondition) return false;
    std::string text = stats.assertionResult.getMessage();
    for (char& c : text) c = (c == '\t' || c == '\n') ? ' ' : c;
    progress_line("fatal\t" + current_ + "\t" + text);
    return false;
  }
  void testCaseEnded(Catch::TestCaseStats const& stats) override {
    progress_line("end\t" + stats.testInfo.name + "\t" + (stats.totals.assertions.allOk() ? "passed" : "failed"));
  }
  void testRunEnded(Catch::TestRunStats const&) override { progress_line("done"); }

 private:
  std::string current_;
};
CATCH_REGISTER_LISTENER(ProgressListener)

}  // namespace

void progress_line(const std::string& line) {
  const int fd = progress_fd();
  if (fd < 0) return;
  // One write per line with O_APPEND: the line lands whole, also when the process dies right after.
  const std::string text = line + '\n';
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a full disk must not fail the tests themselves
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void end_run_context_lost(const std::string& test, const std::string& why) {
  std::cout.flush();
  std::cerr << "\nkiln tests: the CUDA context is unusable after \"" << test << "\" (" << why
            << "); every later test of this process would fail, so the run ends here (exit " << kContextLostExit
            << "); tools/resume_tests.py runs the rest in a new process\n";
  std::cerr.flush();
  progress_line("lost\t" + test + "\t" + why);
  std::_Exit(kContextLostExit);
}

}  // namespace kiln::test
