// What the example programs share: the command-line policy on top of CLI11 (strict numbers, exit
// code 2 for any bad flag), the --device choice, and the progress line with its clock. Header-only:
// each example is one program. Non-obvious decision: numbers are parsed here, not by CLI11, which
// reads "010" as octal, wraps "-1" into an unsigned type and saturates an overflow.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>

#include "core/cuda/runtime.h"
#include "core/device.h"

namespace kiln::examples {

// --- command line ---------------------------------------------------------------------------------

// Bad input found after the flags were read (a missing file, a checkpoint that does not fit): the
// message, and exit code 2, the same code as a bad flag.
[[noreturn]] inline void input_error(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::exit(2);
}

// Creates --out (and its parents) or exits 2 saying why it cannot.
inline void make_out_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) input_error("cannot create --out " + dir + ": " + ec.message());
}

// kiln's defaults for a CLI11 app, set before its flags are added: --help shows every default, and
// a flag given twice takes its last value (so a wrapper's defaults can be overridden by appending,
// as tools/demo.sh does).
inline void set_flag_defaults(CLI::App& app) {
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(34);
}

// Parses the command line. --help prints the description and every flag with its default, exit 0;
// anything wrong (a bad value, an unknown flag, a missing value) prints what and exits 2.
inline void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    const std::string prog = app.get_name();
    std::fprintf(stderr, "%s: %s\n(%s --help lists the flags and their defaults)\n", prog.c_str(), e.what(),
                 prog.c_str());
    std::exit(2);
  }
}

// A validator for an integer flag of type T: plain decimal digits with an optional leading '-',
// the whole argument, within [lo, hi] (which default to T's range). It hands CLI11 the number
// rewritten in canonical decimal, which CLI11's own conversion then reads back exactly.
template <typename T>
CLI::Validator whole(T lo = std::numeric_limits<T>::lowest(), T hi = std::numeric_limits<T>::max()) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  const std::string at_most = " (at most " + std::to_string(hi) + ")";
  std::string desc = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  std::string says = "expects a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (hi == std::numeric_limits<T>::max() && (lo == 0 || lo == 1)) {
    desc = lo == 1 ? "POSITIVE" : "NONNEGATIVE";
    says = std::string("expects a ") + (lo == 1 ? "positive" : "non-negative") + " whole number" + at_most;
  }
  return CLI::Validator(
      [lo, hi, says](std::string& text) -> std::string {
        T v{};
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);  // base 10, no '+', no spaces
        if (text.empty() || ec != std::errc() || ptr != end || v < lo || v > hi) return says + ", got '" + text + "'";
        text = std::to_string(v);
        return "";
      },
      desc);
}

// Which ends of a real flag's range are included.
enum class Ends { closed, open_low, open_high, open };

// A validator for a real flag: a finite decimal number, the whole argument, within [lo, hi] (or
// the open ends named by `ends`). Rewritten with 17 significant digits, which CLI11's conversion
// (through long double) reads back as the same double that std::from_chars parsed.
inline CLI::Validator real(double lo, double hi = INFINITY, Ends ends = Ends::closed) {
  const bool lo_open = ends == Ends::open_low || ends == Ends::open;
  const bool hi_open = ends == Ends::open_high || ends == Ends::open || std::isinf(hi);
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  std::string desc = (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + (hi_open ? ")" : "]");
  if (std::isinf(hi)) {
    desc = lo == 0 && lo_open ? "POSITIVE" : lo == 0 ? "NONNEGATIVE" : (lo_open ? ">" : ">=") + num(lo);
  }
  std::string says = desc == "POSITIVE"      ? "expects a positive number"
                     : desc == "NONNEGATIVE" ? "expects a number >= 0"
                                             : "expects a number in " + desc;
  return CLI::Validator(
      [lo, hi, lo_open, hi_open, says](std::string& text) -> std::string {
        double v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        const bool in_range = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
        if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(v) || !in_range) {
          return says + ", got '" + text + "'";
        }
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.17g", v);
        text = buf;
        return "";
      },
      desc);
}

// --device cpu|cuda; left out, the GPU when there is one.
inline CLI::Option* add_device_option(CLI::App& app, std::string& device) {
  return app.add_option("--device", device, "where to train")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->default_str("cuda when a GPU is visible, else cpu");
}

// The device --device names (empty: cuda when available). Asking for cuda without a usable GPU is
// bad input: the reason and exit 2.
inline Device choose_device(const std::string& name) {
  if (name.empty()) return cuda::is_available() ? Device::cuda(0) : Device::cpu();
  if (name == "cuda") {
    if (!cuda::is_available()) input_error("--device cuda: " + cuda::unavailable_reason());
    return Device::cuda(0);
  }
  if (name == "cpu") return Device::cpu();
  input_error("--device must be cpu or cuda, got " + name);
}

// --- clock and progress ---------------------------------------------------------------------------

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
