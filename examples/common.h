// What the example programs share: a reader for their "--flag value" command lines, the --device
// choice, and the progress line with its clock. Header-only: each example is one program.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "core/cuda/runtime.h"
#include "core/device.h"

namespace kiln::examples {

// Walks a command line of flags, each followed by its value unless it is a switch:
//   CommandLine cl(argc, argv, usage);
//   while (cl.next()) {
//     if (cl.is("--epochs")) o.epochs = cl.integer();
//     else if (cl.is("--augment")) o.augment = true;
//     else cl.unknown();
//   }
// --help and -h print the usage and exit 0; a missing or malformed value, or an unknown flag,
// prints what is wrong and the usage, and exits 2.
class CommandLine {
 public:
  using Usage = void (*)(const char* prog);
  CommandLine(int argc, char** argv, Usage usage) : argc_(argc), argv_(argv), usage_(usage) {}

  bool next() {
    if (++i_ >= argc_) return false;
    flag_ = argv_[i_];
    if (flag_ == "--help" || flag_ == "-h") {
      usage_(argv_[0]);
      std::exit(0);
    }
    return true;
  }
  bool is(const char* name) const { return flag_ == name; }
  const std::string& flag() const { return flag_; }

  std::string text() {
    if (i_ + 1 >= argc_) fail("missing value after " + flag_);
    return argv_[++i_];
  }
  int64_t integer() {
    const std::string v = text();
    return parse_whole(v, [](const std::string& s, size_t* end) { return std::stoll(s, end); });
  }
  uint64_t unsigned_integer() {
    const std::string v = text();
    if (!v.empty() && v[0] == '-') fail("bad value for " + flag_ + ": " + v + " (must not be negative)");
    return parse_whole(v, [](const std::string& s, size_t* end) { return std::stoull(s, end); });
  }
  double real() {
    const std::string v = text();
    return parse_whole(v, [](const std::string& s, size_t* end) { return std::stod(s, end); });
  }

  [[noreturn]] void unknown() { fail("unknown option " + flag_); }
  [[noreturn]] void fail(const std::string& why) {
    std::fprintf(stderr, "%s\n", why.c_str());
    usage_(argv_[0]);
    std::exit(2);
  }

 private:
  // The whole value must be the number: "3x" or "" is an error, not 3 or 0.
  template <typename F> auto parse_whole(const std::string& v, F parse) -> decltype(parse(v, nullptr)) {
    try {
      size_t end = 0;
      auto r = parse(v, &end);
      if (end == v.size()) return r;
    } catch (const std::logic_error&) {  // std::invalid_argument, std::out_of_range
    }
    fail("bad value for " + flag_ + ": '" + v + "'");
  }

  int argc_;
  char** argv_;
  Usage usage_;
  int i_ = 0;
  std::string flag_;
};

// --device: "cpu", "cuda", or empty for the GPU when there is one. Prints why and returns nothing
// when the choice cannot be had.
inline std::optional<Device> choose_device(const std::string& name) {
  if (name.empty()) return cuda::is_available() ? Device::cuda(0) : Device::cpu();
  if (name == "cuda") {
    if (!cuda::is_available()) {
      std::fprintf(stderr, "--device cuda: %s\n", cuda::unavailable_reason().c_str());
      return std::nullopt;
    }
    return Device::cuda(0);
  }
  if (name == "cpu") return Device::cpu();
  std::fprintf(stderr, "--device must be cpu or cuda, got %s\n", name.c_str());
  return std::nullopt;
}

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// 0m07s, 12m30s, 1h05m.
inline std::string format_duration(double s) {
  char buf[32];
  const auto total = static_cast<long long>(s + 0.5);
  if (total >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", total / 3600, total / 60 % 60);
  else std::snprintf(buf, sizeof buf, "%lldm%02llds", total / 60, total % 60);
  return buf;
}

// The progress line: rewritten in place on a terminal, a plain line every ~10 s otherwise (logs).
struct Progress {
  bool tty = ::isatty(::fileno(stdout)) != 0;
  Clock::time_point last = Clock::now();
  bool due() const { return seconds_since(last) >= (tty ? 0.5 : 10.0); }
  void print(const std::string& line) {
    if (tty) std::printf("\r\033[K%s", line.c_str());
    else std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    last = Clock::now();
  }
  void end_line() {
    if (tty) std::printf("\r\033[K");
  }
};

}  // namespace kiln::examples
