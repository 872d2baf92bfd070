// A scoped capture of kiln's log: sets a level and collects every message that passes it through
// the test sink of kernels/log.h, then restores the previous level and stderr.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "kernels/log.h"

namespace kiln::test {

class LogCapture {
 public:
  explicit LogCapture(LogLevel level) : previous_(log_level()) {
    set_log_level(level);
    set_log_sink_for_testing([this](LogLevel l, const std::string& m) { lines.emplace_back(l, m); });
  }
  ~LogCapture() {
    set_log_sink_for_testing({});
    set_log_level(previous_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Messages at `level` that contain every one of `parts`.
  size_t count(LogLevel level, std::initializer_list<std::string> parts) const {
    size_t n = 0;
    for (const auto& [l, m] : lines) {
      bool all = l == level;
      for (const std::string& p : parts) all = all && m.find(p) != std::string::npos;
      n += all ? 1 : 0;
    }
    return n;
  }
  // Everything captured, one message per line, for INFO() on failure.
  std::string text() const {
    std::string s;
    for (const auto& [l, m] : lines) s += std::string(log_level_name(l)) + ": " + m + "\n";
    return s;
  }

  std::vector<std::pair<LogLevel, std::string>> lines;

 private:
  LogLevel previous_;
};

}  // namespace kiln::test
