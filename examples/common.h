// What the example programs share: the flags (examples/flags.h: strict numbers, exit code 2 for
// any bad flag), the error policy (run_main: every failure is one line on stderr and exit code 1,
// bad input exit code 2, never an abort), the --device choice, the non-finite loss stop, and the
// progress line with its clock. Header-only but for the flags (the kiln_flags library).
// Nothing here calls std::exit, which would skip the destructors that remove a half-written
// temporary file.
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <new>
#include <optional>
#include <string>
#include <system_error>

#include "core/cuda/runtime.h"
#include "core/device.h"
#include "core/atomic_file.h"
#include "kernels/error.h"
#include "examples/flags.h"

namespace kiln::examples {

// --- errors and exit codes -------------------------------------------------------------------------

// Bad input found after the flags were read (a missing file, a checkpoint that does not fit):
// run_main prints the message and exits with code 2, the same code as a bad flag.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
[[noreturn]] inline void input_error(const std::string& message) { throw InputError(message); }

// Runs an example's body and turns every way it can fail into one line on stderr and an exit
// code: 2 for bad input (flags, files, checkpoints that do not fit), 1 for anything that goes
// wrong while running (kiln errors, I/O, out of memory, a diverged loss). Exceptions unwind
// through here, so every destructor runs: a save cut short removes its temporary file.
inline int run_main(const char* program, const std::function<int()>& body) {
  auto fail = [program](int code, const std::string& what) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s%s\n", program, code == 1 ? "error: " : "", what.c_str());
    return code;
  };
  try {
    return body();
  } catch (const ExitRequest& e) {
    return e.code;
  } catch (const InputError& e) {
    return fail(2, e.what());
  } catch (const std::bad_alloc&) {
    return fail(1, "out of host memory (try a smaller --batch-size or model)");
  } catch (const std::exception& e) {  // kiln::Error and everything else
    return fail(1, e.what());
  } catch (...) {
    return fail(1, "an unknown exception");
  }
}

// A non-finite training loss: the run has diverged, and every further step, checkpoint and
// evaluation would carry NaN. run_main reports it (exit 1); the last checkpoint is still the last
// good one, since the examples check the loss before each save.
class DivergedError : public Error {
 public:
  using Error::Error;
};
inline void check_finite_loss(double loss, const std::string& where) {
  if (std::isfinite(loss)) return;
  throw DivergedError("the loss is " + std::string(std::isnan(loss) ? "nan" : "infinite") + " at " + where +
                      ": training diverged (try a lower --lr); stopped before saving anything from it");
}

// --- command line ---------------------------------------------------------------------------------

// Creates --out (and its parents) or exits 2 saying why it cannot; then removes the temporary
// files an earlier run left there when it was killed mid-save.
inline void make_out_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) input_error("cannot create --out " + dir + ": " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) input_error("--out " + dir + " is not a folder");
  for (const std::string& stale : remove_stale_temp_files(dir)) {
    std::printf("removed %s, left by a run killed while saving\n", stale.c_str());
  }
}

// A --json FILE whose folder does not exist exits 2 at parse time, before any work is timed.
inline void check_json_path(const std::string& json) {
  if (json.empty()) return;
  const std::filesystem::path dir = std::filesystem::path(json).parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
    input_error("--json " + json + ": " + dir.string() + " is not a folder");
  }
}

// --device cpu|cuda; left out, the GPU when there is one.
inline Option* add_device_option(Flags& app, std::string& device) {
  return app.add_option("--device", device, "where to train")
      ->one_of({"cpu", "cuda"})
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
