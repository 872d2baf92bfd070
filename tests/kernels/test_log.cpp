// The logging facade: level names, KILN_LOG_LEVEL parsing (an unknown value warns and falls back),
// that a message below the level is neither emitted nor even built, and byte formatting. The
// environment itself is read once per process, so the "[.log_env]" case runs in processes of its
// own with KILN_LOG_LEVEL set (tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "kernels/log.h"
#include "tests/kernels/log_capture.h"

using namespace kiln;
using kiln::test::LogCapture;

TEST_CASE("log: every level name parses, in any case, and round-trips", "[log]") {
  for (LogLevel l : {LogLevel::Off, LogLevel::Error, LogLevel::Warn, LogLevel::Info, LogLevel::Debug}) {
    CHECK(parse_log_level(log_level_name(l)) == l);
  }
  CHECK(parse_log_level("off") == LogLevel::Off);
  CHECK(parse_log_level("error") == LogLevel::Error);
  CHECK(parse_log_level("warn") == LogLevel::Warn);
  CHECK(parse_log_level("info") == LogLevel::Info);
  CHECK(parse_log_level("debug") == LogLevel::Debug);
  CHECK(parse_log_level("DEBUG") == LogLevel::Debug);
  CHECK(parse_log_level("Warn") == LogLevel::Warn);
  CHECK_FALSE(parse_log_level("warning").has_value());
  CHECK_FALSE(parse_log_level("").has_value());
  CHECK_FALSE(parse_log_level("trace").has_value());
  CHECK_FALSE(parse_log_level(" info").has_value());
}

TEST_CASE("log: KILN_LOG_LEVEL values, and one warning for an unknown one", "[log]") {
  LogCapture log(LogLevel::Warn);
  CHECK(log_level_from_env_value("info") == LogLevel::Info);
  CHECK(log_level_from_env_value("OFF") == LogLevel::Off);
  CHECK(log_level_from_env_value(nullptr) == kDefaultLogLevel);
  CHECK(log_level_from_env_value("") == kDefaultLogLevel);
  CHECK(log.lines.empty());  // known and unset values are silent

  CHECK(kDefaultLogLevel == LogLevel::Warn);
  CHECK(log_level_from_env_value("verbose") == kDefaultLogLevel);
  INFO(log.text());
  REQUIRE(log.lines.size() == 1);
  CHECK(log.count(LogLevel::Warn, {"KILN_LOG_LEVEL", "'verbose'", "off, error, warn, info, debug", "warn"}) == 1);
}

TEST_CASE("log: a message below the level is neither emitted nor built", "[log]") {
  int built = 0;
  auto message = [&built](const char* text) {
    ++built;
    return std::string(text);
  };
  {
    LogCapture log(LogLevel::Info);
    CHECK(log_level() == LogLevel::Info);
    KILN_LOG(Debug, message("debug line"));
    CHECK(built == 0);
    KILN_LOG(Info, message("info line"));
    KILN_LOG(Warn, message("warn line"));
    KILN_LOG(Error, message("error line"));
    CHECK(built == 3);
    INFO(log.text());
    REQUIRE(log.lines.size() == 3);
    CHECK(log.count(LogLevel::Info, {"info line"}) == 1);
    CHECK(log.count(LogLevel::Warn, {"warn line"}) == 1);
    CHECK(log.count(LogLevel::Error, {"error line"}) == 1);
    CHECK(log_enabled(LogLevel::Info));
    CHECK_FALSE(log_enabled(LogLevel::Debug));
    CHECK_FALSE(log_enabled(LogLevel::Off));  // Off is a level to set, never one to log at
  }
  {
    LogCapture log(LogLevel::Off);
    KILN_LOG(Error, message("silenced"));
    log_message(LogLevel::Error, "silenced too");  // the unguarded call checks the level as well
    CHECK(built == 3);
    CHECK(log.lines.empty());
  }
  {
    LogCapture log(LogLevel::Debug);
    KILN_LOG(Debug, message("debug line"));
    CHECK(log.count(LogLevel::Debug, {"debug line"}) == 1);
  }
}

TEST_CASE("log: byte counts read as people write them", "[log]") {
  CHECK(format_bytes(0) == "0 bytes");
  CHECK(format_bytes(1023) == "1023 bytes");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(uint64_t{64} << 20) == "64.00 MiB");
  CHECK(format_bytes((uint64_t{9} << 30) / 4) == "2.25 GiB");
}

// Run only by the CTest tests log_level_env_*, each a fresh process whose first use of the facade
// is here, with stderr redirected to a file to see what that first use writes.
TEST_CASE("log: KILN_LOG_LEVEL is read from the environment on first use", "[.log_env]") {
  const char* expected = std::getenv("KILN_TEST_EXPECTED_LOG_LEVEL");
  const char* warning = std::getenv("KILN_TEST_EXPECTED_WARNING");
  REQUIRE(expected != nullptr);
  char path[] = "/tmp/kiln_log_env_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  const LogLevel level = log_level();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  std::stringstream written;
  written << in.rdbuf();
  ::unlink(path);
  INFO("stderr: " << written.str());
  CHECK(std::string(log_level_name(level)) == expected);
  if (warning) {
    CHECK(written.str().find(warning) != std::string::npos);
    CHECK(written.str().find("[warning]") != std::string::npos);
  } else {
    CHECK(written.str().empty());
  }
}
