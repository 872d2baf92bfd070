// What every kiln fuzz target shares: the input as a file the readers can open, and the rule that a
// kiln::Error (any subclass) is the only acceptable way for a reader to refuse an input. Any other
// exception aborts, so libFuzzer records the input as a finding just like a crash or a sanitizer report.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>

#include "kernels/error.h"
#include "kernels/log.h"

namespace kiln::fuzz {

// One in-memory file per process, rewritten for each input. The readers take paths, and a memfd
// reached through /proc/self/fd is a regular file with a path but no directory entry: nothing is
// left behind when a crash ends the process, and parallel fuzzing jobs never share a file.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) die("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  // Replaces the file's contents with `size` bytes and returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) die("ftruncate failed");
    size_t done = 0;
    while (done < size) {
      ssize_t w = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (w <= 0) die("pwrite failed");
      done += static_cast<size_t>(w);
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] static void die(const char* what) {
    std::perror(what);
    std::abort();
  }
  int fd_;
  std::string path_;
};

// Runs f(); a kiln::Error is a clean refusal, anything else escaping is reported and aborts.
template <class F> void expect_kiln_errors_only(const char* target, F&& f) {
  try {
    f();
  } catch (const kiln::Error&) {
    // The reader refused the input with kiln's documented error: the expected outcome for junk.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: FINDING: a %s escaped instead of a kiln::Error: %s\n", target, typeid(e).name(),
                 e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s: FINDING: a non-std exception escaped instead of a kiln::Error\n", target);
    std::abort();
  }
}

// Quiet logs: a warning per refused input would drown libFuzzer's own status lines.
inline void init_quiet_logging() { kiln::set_log_level(kiln::LogLevel::Error); }

}  // namespace kiln::fuzz
