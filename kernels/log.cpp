// The logging facade over spdlog: one logger "kiln" writing to stderr (library code never writes
// to stdout), registered with spdlog so a program can restyle it. kiln's own level is the gate and
// the logger lets through everything that passes it, so KILN_LOG_LEVEL alone decides what appears.
#include "kernels/log.h"

#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <mutex>

namespace kiln {
namespace {

constexpr int kUnread = -1;  // KILN_LOG_LEVEL not read yet

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::Off: return spdlog::level::off;
    case LogLevel::Error: return spdlog::level::err;
    case LogLevel::Warn: return spdlog::level::warn;
    case LogLevel::Info: return spdlog::level::info;
    case LogLevel::Debug: return spdlog::level::debug;
  }
  return spdlog::level::off;
}

LogLevel from_spdlog(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug: return LogLevel::Debug;
    case spdlog::level::info: return LogLevel::Info;
    case spdlog::level::warn: return LogLevel::Warn;
    case spdlog::level::err:
    case spdlog::level::critical: return LogLevel::Error;
    default: return LogLevel::Off;
  }
}

// stderr, unless a test has installed its sink. Messages reach it through spdlog's logger either
// way, so a test sees what the logger passes on.
class KilnSink final : public spdlog::sinks::sink {
 public:
  KilnSink() : stderr_(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()) {}

  void set_test_sink(LogSink sink) {
    std::lock_guard<std::mutex> lock(mutex_);
    test_ = std::move(sink);
  }

  void log(const spdlog::details::log_msg& msg) override {
    LogSink test;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      test = test_;  // a copy: the test sink runs without the lock held
    }
    if (test) {
      test(from_spdlog(msg.level), std::string(msg.payload.data(), msg.payload.size()));
      return;
    }
    stderr_->log(msg);
  }
  void flush() override { stderr_->flush(); }
  void set_pattern(const std::string& pattern) override { stderr_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    stderr_->set_formatter(std::move(formatter));
  }

 private:
  std::shared_ptr<spdlog::sinks::stderr_color_sink_mt> stderr_;
  std::mutex mutex_;
  LogSink test_;
};

struct LogState {
  std::atomic<int> level{kUnread};
  std::once_flag once;
  std::shared_ptr<KilnSink> sink;
  std::shared_ptr<spdlog::logger> logger;
};

// Leaked on purpose: code running during static destruction may still log.
LogState& state() {
  static LogState* s = new LogState;
  return *s;
}

// The level KILN_LOG_LEVEL's value names; for an unknown value, the default and the warning to emit.
LogLevel resolve(const char* value, std::string* warning) {
  if (!value || !*value) return kDefaultLogLevel;
  if (std::optional<LogLevel> level = parse_log_level(value)) return *level;
  *warning = std::string("KILN_LOG_LEVEL: unknown level '") + value +
             "'; accepted: off, error, warn, info, debug; using the default, " + log_level_name(kDefaultLogLevel);
  return kDefaultLogLevel;
}

void emit(LogState& s, LogLevel level, const std::string& message) {
  try {
    s.logger->log(spdlog::source_loc{}, to_spdlog(level), spdlog::string_view_t(message.data(), message.size()));
  } catch (...) {
    // Logging must never fail the work it describes.
  }
}

LogState& initialized_state() {
  LogState& s = state();
  std::call_once(s.once, [&s] {
    s.sink = std::make_shared<KilnSink>();
    s.logger = std::make_shared<spdlog::logger>("kiln", s.sink);
    s.logger->set_level(spdlog::level::trace);
    try {
      spdlog::register_logger(s.logger);
    } catch (const spdlog::spdlog_ex&) {
      // The program already has a logger named "kiln": kiln keeps its own, unregistered.
    }
    std::string warning;
    const LogLevel level = resolve(std::getenv("KILN_LOG_LEVEL"), &warning);
    s.level.store(static_cast<int>(level), std::memory_order_relaxed);
    // Direct, not through log_message: we are inside the call_once that log_message would wait on.
    if (!warning.empty()) emit(s, LogLevel::Warn, warning);
  });
  return s;
}

}  // namespace

std::optional<LogLevel> parse_log_level(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (LogLevel level : {LogLevel::Off, LogLevel::Error, LogLevel::Warn, LogLevel::Info, LogLevel::Debug}) {
    if (lower == log_level_name(level)) return level;
  }
  return std::nullopt;
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Off: return "off";
    case LogLevel::Error: return "error";
    case LogLevel::Warn: return "warn";
    case LogLevel::Info: return "info";
    case LogLevel::Debug: return "debug";
  }
  return "?";
}

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(units)) {
    v /= 1024.0;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

LogLevel log_level() {
  return static_cast<LogLevel>(initialized_state().level.load(std::memory_order_relaxed));
}

void set_log_level(LogLevel level) {
  initialized_state().level.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool log_enabled(LogLevel level) {
  int current = state().level.load(std::memory_order_relaxed);
  if (current == kUnread) current = initialized_state().level.load(std::memory_order_relaxed);
  return level != LogLevel::Off && static_cast<int>(level) <= current;
}

void log_message(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  emit(initialized_state(), level, message);
}

LogLevel log_level_from_env_value(const char* value) {
  std::string warning;
  const LogLevel level = resolve(value, &warning);
  if (!warning.empty()) log_message(LogLevel::Warn, warning);
  return level;
}

void set_log_sink_for_testing(LogSink sink) { initialized_state().sink->set_test_sink(std::move(sink)); }

}  // namespace kiln
