// kiln's logging facade. spdlog stays behind it (kernels/log.cpp): this header includes nothing of
// spdlog or fmt, so .cu files log through it too (nvcc 13 in C++20 rejects Debian's fmt 9). Messages
// are plain strings, built only when their level is enabled: use KILN_LOG, which checks first.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

// Ordered by verbosity: a message is emitted when its level is at or below the current one.
enum class LogLevel : int { Off = 0, Error = 1, Warn = 2, Info = 3, Debug = 4 };

// The level when KILN_LOG_LEVEL is unset, empty or not understood.
inline constexpr LogLevel kDefaultLogLevel = LogLevel::Warn;

// "off", "error", "warn", "info", "debug" (any case); nullopt for anything else.
std::optional<LogLevel> parse_log_level(std::string_view text);
const char* log_level_name(LogLevel level);

// The current level. The first call of any function here reads KILN_LOG_LEVEL (once, thread-safely;
// an unknown value is reported by one Warn message naming it and the accepted ones, and the
// default is used).
LogLevel log_level();
void set_log_level(LogLevel level);
// True when a message at `level` would be emitted: one relaxed atomic load once initialized.
bool log_enabled(LogLevel level);
// Emits one line through the logger "kiln" (stderr) when `level` is enabled. Never throws: a
// failure to log is not a reason to fail the work being logged.
void log_message(LogLevel level, const std::string& message);

// A byte count for a message: "512 bytes", "1.50 KiB", "64.00 MiB", "2.25 GiB".
std::string format_bytes(uint64_t bytes);

// Where KILN_LOG_LEVEL's value goes: the level it names, or the default after one Warn message
// naming the bad value. nullptr or "" is the default, silently. Exposed for tests.
LogLevel log_level_from_env_value(const char* value);

// Tests: while set, messages that pass the level go to `sink` (after spdlog's logger) instead of
// stderr. An empty function restores stderr.
using LogSink = std::function<void(LogLevel, const std::string&)>;
void set_log_sink_for_testing(LogSink sink);

}  // namespace kiln

// KILN_LOG(Info, "conv2d: ..." + std::to_string(n)): the message expression is evaluated only when
// the level is enabled, so a disabled log line costs one atomic load.
#define KILN_LOG(LEVEL, MESSAGE)                                                       \
  do {                                                                                 \
    if (::kiln::log_enabled(::kiln::LogLevel::LEVEL)) {                                \
      ::kiln::log_message(::kiln::LogLevel::LEVEL, MESSAGE);                           \
    }                                                                                  \
  } while (0)
