// The metrics file's records (run_record.h). The only example code that talks to the CUDA runtime
// directly: kiln has no call for a GPU's name, and this file is compiled with cudart only when the
// CUDA backend is built.
#include "examples/run_record.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <optional>
#include <system_error>

#include <sys/resource.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/cuda/runtime.h"
#include "examples/common.h"
#include "kernels/error.h"
#include "kernels/cpu/parallel.h"

#ifdef KILN_EXAMPLES_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln::examples {

namespace {

// The length of the well-formed UTF-8 sequence at s[i] (1 to 4), or 0 where it is not one (a stray
// continuation byte, a cut-short sequence, an overlong form, a surrogate, past U+10FFFF).
size_t utf8_length(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = at(i);
  if (b < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (b >= 0xc2 && b <= 0xdf) {
    n = 2;
  } else if (b >= 0xe0 && b <= 0xef) {
    n = 3;
    if (b == 0xe0) lo = 0xa0;  // overlong
    if (b == 0xed) hi = 0x9f;  // surrogates
  } else if (b >= 0xf0 && b <= 0xf4) {
    n = 4;
    if (b == 0xf0) lo = 0x90;  // overlong
    if (b == 0xf4) hi = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xbf) return 0;
  }
  return n;
}

// A JSON string. Bytes that are not UTF-8 (a Latin-1 path or prompt) become \u00XX, the code point
// of the same number, so the record stays valid JSON for every reader.
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    const size_t n = utf8_length(s, i);
    if (n > 1) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || n == 0) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
    ++i;
  }
  return out + "\"";
}

// The "model name" line of /proc/cpuinfo (x86); other machines say less, so fall back to "CPU".
std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        const size_t begin = line.find_first_not_of(" \t", colon + 1);
        if (begin != std::string::npos) return line.substr(begin);
      }
    }
  }
  return "CPU";
}

}  // namespace

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

JsonLine& JsonLine::raw(std::string_view key, std::string_view json) {
  if (!body_.empty()) body_ += ", ";
  body_ += quote(key);
  body_ += ": ";
  body_ += json;
  return *this;
}

JsonLine& JsonLine::scalar(std::string_view key, std::string_view json, std::string_view value) {
  scalars_[std::string(key)] = std::string(value);
  return raw(key, json);
}

JsonLine& JsonLine::text(std::string_view key, std::string_view value) { return scalar(key, quote(value), value); }

JsonLine& JsonLine::integer(std::string_view key, int64_t value) {
  const std::string v = std::to_string(value);
  return scalar(key, v, v);
}

JsonLine& JsonLine::unsigned_integer(std::string_view key, uint64_t value) {
  const std::string v = std::to_string(value);
  return scalar(key, v, v);
}

JsonLine& JsonLine::real(std::string_view key, double value, const char* format) {
  if (!std::isfinite(value)) return null(key);
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return scalar(key, buf, buf);
}

JsonLine& JsonLine::boolean(std::string_view key, bool value) {
  const char* v = value ? "true" : "false";
  return scalar(key, v, v);
}

JsonLine& JsonLine::null(std::string_view key) { return scalar(key, "null", "null"); }

std::vector<std::string> changed_settings(const std::map<std::string, std::string>& checkpoint,
                                          const std::map<std::string, std::string>& now,
                                          std::initializer_list<std::string_view> ignore) {
  std::map<std::string, std::pair<std::string, std::string>> both;  // name: checkpoint's, now
  for (const auto& [k, v] : checkpoint) both[k] = {v, "(none)"};
  for (const auto& [k, v] : now) {
    auto it = both.find(k);
    if (it == both.end()) {
      both[k] = {"(none)", v};
    } else {
      it->second.second = v;
    }
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : both) {
    if (v.first == v.second || std::find(ignore.begin(), ignore.end(), k) != ignore.end()) continue;
    out.push_back(k + ": " + v.first + " -> " + v.second);
  }
  return out;
}

void note_changed_settings(const std::string& checkpoint, const std::vector<std::string>& changed) {
  std::string list;
  for (const std::string& c : changed) list += (list.empty() ? "" : ", ") + c;
  std::printf(
      "note: --resume %s: this run changes the checkpoint run's settings (%s); it continues with them, "
      "and is no longer the uninterrupted run bit for bit\n",
      checkpoint.c_str(), list.c_str());
}

JsonLine& JsonLine::texts(std::string_view key, const std::vector<std::string>& values) {
  std::string list = "[";
  for (size_t i = 0; i < values.size(); ++i) list += (i ? ", " : "") + quote(values[i]);
  return raw(key, list + "]");
}

JsonLine& JsonLine::object(std::string_view key, const JsonLine& value) { return raw(key, value.str()); }

JsonLine& JsonLine::integers(std::string_view key, const std::vector<int64_t>& values) {
  std::string list = "[";
  for (size_t i = 0; i < values.size(); ++i) list += (i > 0 ? ", " : "") + std::to_string(values[i]);
  return raw(key, list + "]");
}

JsonLine& JsonLine::objects(std::string_view key, const std::vector<JsonLine>& values) {
  std::string list = "[";
  for (size_t i = 0; i < values.size(); ++i) list += (i > 0 ? ", " : "") + values[i].str();
  return raw(key, list + "]");
}

namespace {

// The "step" of a record as JsonLine writes it (`"step": 123` at the top level), if it has one.
std::optional<int64_t> record_step(const std::string& line) {
  const std::string key = "\"step\": ";
  const size_t at = line.find(key);
  if (at == std::string::npos) return std::nullopt;
  int64_t v = 0;
  const char* begin = line.data() + at + key.size();
  const auto [ptr, ec] = std::from_chars(begin, line.data() + line.size(), v);
  if (ec != std::errc() || ptr == begin) return std::nullopt;
  return v;
}

}  // namespace

MetricsFile::MetricsFile(const std::string& path, std::optional<int64_t> resumed_at_step) : path_(path) {
  if (resumed_at_step) {
    // Keep what the run reported up to its checkpoint; what a killed process wrote after it (or a
    // line it was killed in the middle of) the resumed run writes again. Rewritten atomically.
    std::ifstream in(path, std::ios::binary);
    std::string kept, line;
    int64_t dropped = 0;
    while (std::getline(in, line)) {
      const bool whole = !in.eof() && !line.empty() && line.back() == '}';
      const auto step = record_step(line);
      if (whole && (!step || *step <= *resumed_at_step)) kept += line + "\n";
      else ++dropped;
    }
    if (dropped > 0) {
      write_file_atomically(path, kept, "metrics");
      std::printf("%s: dropped %lld record(s) written after the checkpoint's step %lld\n", path.c_str(),
                  static_cast<long long>(dropped), static_cast<long long>(*resumed_at_step));
    }
  }
  file_ = std::fopen(path.c_str(), resumed_at_step ? "a" : "w");
  if (!file_) input_error("cannot write " + path + ": " + std::strerror(errno));
}

MetricsFile::~MetricsFile() {
  if (file_) std::fclose(file_);
}

void MetricsFile::write(const JsonLine& record) {
  const std::string line = record.str() + "\n";
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0) {
    throw IOError("cannot write " + path_ + ": " + std::strerror(errno));
  }
}

std::string device_name(Device device) {
#ifdef KILN_EXAMPLES_WITH_CUDA
  if (device.is_cuda()) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device.index) == cudaSuccess) return prop.name;
    return "unknown GPU";
  }
#endif
  return cpu_name();
}

double cpu_seconds() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return std::numeric_limits<double>::quiet_NaN();
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double one_minute = std::numeric_limits<double>::quiet_NaN();
  if (!(in >> one_minute)) return std::numeric_limits<double>::quiet_NaN();
  return one_minute;
}

JsonLine& add_host_usage(JsonLine& record) {
  return record.real("cpu_seconds", cpu_seconds(), "%.1f").real("load_average", load_average(), "%.2f");
}

JsonLine run_record(std::string_view program, int argc, char** argv, Device device, std::string_view resumed_from,
                    const JsonLine& settings) {
  JsonLine r;
  r.text("record", "run").text("program", program).texts("argv", std::vector<std::string>(argv, argv + argc));
  r.text("start_utc", utc_now()).text("kiln_commit", build_commit());
  r.text("device", device.str()).text("device_name", device_name(device)).integer("threads", cpu::num_threads());
  r.real("load_average", load_average(), "%.2f");
  r.text("resumed_from", resumed_from);
  return r.object("settings", settings);
}

JsonLine memory_usage(Device device) {
  constexpr double kMiB = 1024.0 * 1024.0;
  JsonLine m;
  if (device.is_cuda()) {
    const cuda::MemoryStats stats = cuda::memory_stats(device.index);
    m.real("allocated", static_cast<double>(stats.allocated_bytes) / kMiB, "%.1f");
    m.real("reserved", static_cast<double>(stats.reserved_bytes) / kMiB, "%.1f");
    return m.real("peak_allocated", static_cast<double>(stats.peak_allocated_bytes) / kMiB, "%.1f");
  }
  // statm's second field: resident pages; ru_maxrss: the peak, in KiB on Linux.
  double rss = std::numeric_limits<double>::quiet_NaN();
  std::ifstream statm("/proc/self/statm");
  long long size = 0, resident = 0;
  if (statm >> size >> resident) {
    rss = static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / kMiB;
  }
  rusage usage{};
  const double peak = getrusage(RUSAGE_SELF, &usage) == 0 ? static_cast<double>(usage.ru_maxrss) / 1024.0
                                                          : std::numeric_limits<double>::quiet_NaN();
  // The kernel updates the peak lazily, so it can trail the resident set read a moment before.
  return m.real("rss", rss, "%.1f").real("peak_rss", std::isnan(rss) ? peak : std::max(peak, rss), "%.1f");
}

JsonLine train_record(int64_t step, double loss, double lr, const char* rate_key, double rate, Device device) {
  // %.9g: a float32 loss round-trips, so a resumed run's records can be compared exactly.
  return JsonLine()
      .text("record", "train")
      .integer("step", step)
      .real("loss", loss, "%.9g")
      .real("lr", lr, "%.6g")
      .real(rate_key, rate, "%.1f")
      .object("memory_mb", memory_usage(device));
}

JsonLine first_step_record(int64_t step, double seconds) {
  return JsonLine().text("record", "first_step").integer("step", step).real("seconds", seconds, "%.4f");
}

double RateWindow::take_rate() {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double rate = secs > 0 ? items / secs : 0;
  restart();
  return rate;
}

JsonLine profile_record(const profile::StepTimes& times, int64_t step) {
  JsonLine phases;
  for (int p = 0; p < profile::kPhases; ++p) {
    phases.real(profile::phase_name(static_cast<profile::Phase>(p)), times.phase_ms[static_cast<size_t>(p)], "%.4f");
  }
  JsonLine r;
  r.text("record", "profile").integer("step", step).integer("steps", times.steps);
  r.real("step_ms", times.step_ms, "%.4f").object("phase_ms", phases).real("other_ms", times.other_ms(), "%.4f");
  return r;
}

}  // namespace kiln::examples
