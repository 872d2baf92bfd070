// The bad-input sweep: tables of calls that must fail cleanly. Each row makes one bad
// call and names the kiln error class it must raise and fragments its message must contain (the op
// and the offending values). A row passes only when that class (or a subclass) is thrown with every
// fragment in what(): no other exception, no silent success, and no signal. Each row runs in a
// forked child process, so a row that crashes (SIGSEGV from a wrapped size, SIGABRT from an escaping
// std::bad_alloc) is reported as that row's failure instead of ending the sweep. Shared by
// tests/core/test_bad_input.cpp (kiln_core_tests) and tests/nn/test_bad_input_nn.cpp (kiln_nn_tests).
//
// KILN_BAD_INPUT_ROW=text runs only the rows whose names contain `text`; KILN_BAD_INPUT_NO_FORK=1
// runs rows in the test process itself (for a debugger; a crashing row then ends the run);
// KILN_BAD_INPUT_ALARM=seconds ends a forked row that runs longer with SIGALRM (for sweeping a
// build whose bad sizes may send a kernel looping over a wrapped count; off by default).
#pragma once

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>
#define KILN_BAD_INPUT_CAN_FORK 1
#else
#define KILN_BAD_INPUT_CAN_FORK 0
#endif

#include "core/kiln.h"
#include "kernels/cpu/parallel.h"
#include "kernels/error.h"

namespace kiln::bad_input {

// What both tables use: non-finite hyperparameters, a count that fits int64 but no memory
// (2^62 float32 elements are 16 EiB), and zero-filled inputs of a shape.
inline const double kNaN = std::numeric_limits<double>::quiet_NaN();
inline const double kInf = std::numeric_limits<double>::infinity();
inline constexpr int64_t kP62 = int64_t{1} << 62;
inline Tensor f32(const Shape& s) { return zeros(s); }
inline Tensor i64(const Shape& s) { return zeros(s, DType::Int64); }

enum class Expect { Error, Shape, DType, Device, Index, IO, OutOfMemory, Autograd };

inline const char* expect_name(Expect e) {
  switch (e) {
    case Expect::Error:
      return "kiln::Error";
    case Expect::Shape:
      return "kiln::ShapeError";
    case Expect::DType:
      return "kiln::DTypeError";
    case Expect::Device:
      return "kiln::DeviceError";
    case Expect::Index:
      return "kiln::IndexError";
    case Expect::IO:
      return "kiln::IOError";
    case Expect::OutOfMemory:
      return "kiln::OutOfMemoryError";
    case Expect::Autograd:
      return "kiln::AutogradError";
  }
  return "?";
}

// The most derived kiln class of `e`, for failure messages.
inline const char* class_name(const Error& e) {
  if (dynamic_cast<const ShapeError*>(&e)) return "kiln::ShapeError";
  if (dynamic_cast<const DTypeError*>(&e)) return "kiln::DTypeError";
  if (dynamic_cast<const DeviceError*>(&e)) return "kiln::DeviceError";
  if (dynamic_cast<const IndexError*>(&e)) return "kiln::IndexError";
  if (dynamic_cast<const IOError*>(&e)) return "kiln::IOError";
  if (dynamic_cast<const OutOfMemoryError*>(&e)) return "kiln::OutOfMemoryError";
  if (dynamic_cast<const AutogradError*>(&e)) return "kiln::AutogradError";
  return "kiln::Error";
}

inline bool is_a(const Error& e, Expect want) {
  switch (want) {
    case Expect::Error:
      return true;
    case Expect::Shape:
      return dynamic_cast<const ShapeError*>(&e) != nullptr;
    case Expect::DType:
      return dynamic_cast<const DTypeError*>(&e) != nullptr;
    case Expect::Device:
      return dynamic_cast<const DeviceError*>(&e) != nullptr;
    case Expect::Index:
      return dynamic_cast<const IndexError*>(&e) != nullptr;
    case Expect::IO:
      return dynamic_cast<const IOError*>(&e) != nullptr;
    case Expect::OutOfMemory:
      return dynamic_cast<const OutOfMemoryError*>(&e) != nullptr;
    case Expect::Autograd:
      return dynamic_cast<const AutogradError*>(&e) != nullptr;
  }
  return false;
}

struct Row {
  std::string name;
  Expect expect;
  std::vector<std::string> fragments;  // each must appear in what()
  std::function<void()> call;
};

class Table {
 public:
  // `call` builds its own inputs: the table is filled before any row runs, and a row's inputs
  // must not be shared with another row (a row may leave them modified).
  void add(std::string name, Expect expect, std::vector<std::string> fragments, std::function<void()> call) {
    rows_.push_back(Row{std::move(name), expect, std::move(fragments), std::move(call)});
  }
  const std::vector<Row>& rows() const { return rows_; }

 private:
  std::vector<Row> rows_;
};

// What the row did, judged: empty when it passed, else why it failed.
inline std::string judge(const Row& row) {
  try {
    row.call();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (!is_a(e, row.expect)) {
      return std::string("threw ") + class_name(e) + ", expected " + expect_name(row.expect) + ": " + what;
    }
    for (const std::string& f : row.fragments) {
      if (what.find(f) == std::string::npos) return "message lacks \"" + f + "\": " + what;
    }
    return "";
  } catch (const std::exception& e) {
    return std::string("threw a non-kiln exception (") + typeid(e).name() + "): " + e.what();
  } catch (...) {
    return "threw something that is not a std::exception";
  }
  return std::string("no error (expected ") + expect_name(row.expect) + ")";
}

// Runs the row in a child process; a signal or an odd exit becomes the row's failure.
inline std::string run_isolated(const Row& row) {
#if KILN_BAD_INPUT_CAN_FORK
  const char* no_fork = std::getenv("KILN_BAD_INPUT_NO_FORK");
  if (no_fork && std::strcmp(no_fork, "1") == 0) return judge(row);
  int fds[2];
  if (pipe(fds) != 0) return "pipe() failed";
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return "fork() failed";
  }
  if (pid == 0) {
    close(fds[0]);
    if (const char* alarm_s = std::getenv("KILN_BAD_INPUT_ALARM")) alarm(static_cast<unsigned>(std::atoi(alarm_s)));
    // '+' marks a verdict that reached the parent; a child that dies first leaves none.
    std::string verdict(1, '+');
    verdict += judge(row);
    size_t done = 0;
    while (done < verdict.size()) {
      const ssize_t w = write(fds[1], verdict.data() + done, verdict.size() - done);
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
    close(fds[1]);
    _exit(0);  // no atexit handlers or static destructors in the child
  }
  close(fds[1]);
  std::string verdict;
  char buf[4096];
  for (;;) {
    const ssize_t r = read(fds[0], buf, sizeof buf);
    if (r > 0) {
      verdict.append(buf, static_cast<size_t>(r));
    } else if (r == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return "child exited with status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  if (verdict.empty() || verdict[0] != '+') return "child exited without a verdict";
  return verdict.substr(1);
#else
  return judge(row);
#endif
}

// Runs every row (or those KILN_BAD_INPUT_ROW selects), reports each failure through Catch, and
// requires at least `min_rows` rows in the table so that rows cannot silently vanish.
inline void run_table(const Table& table, size_t min_rows) {
  const char* filter = std::getenv("KILN_BAD_INPUT_ROW");
  // A forked child has only the thread that forked it: with worker threads in the parent (earlier
  // tests of this process started them) the child's pool would wait for workers that are not
  // there. One thread while the rows run leaves nothing to miss; the count is restored after.
  struct OneThread {
    int saved = cpu::num_threads();
    OneThread() { cpu::set_num_threads(1); }
    ~OneThread() { cpu::set_num_threads(saved); }
  } one_thread;
  size_t ran = 0, failed = 0;
  std::vector<std::string> names;
  for (const Row& row : table.rows()) {
    for (const std::string& n : names) {
      if (n == row.name) FAIL_CHECK("two rows are named \"" << row.name << "\"");
    }
    names.push_back(row.name);
    if (filter && row.name.find(filter) == std::string::npos) continue;
    ++ran;
    const std::string verdict = run_isolated(row);
    if (!verdict.empty()) {
      ++failed;
      FAIL_CHECK("row \"" << row.name << "\": " << verdict);
    }
  }
  INFO(failed << " of " << ran << " rows failed (table of " << table.rows().size() << " rows)");
  CHECK(failed == 0);
  if (!filter) REQUIRE(table.rows().size() >= min_rows);
}

}  // namespace kiln::bad_input
