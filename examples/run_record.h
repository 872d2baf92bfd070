// The metrics file a training example writes into its --out folder (metrics.jsonl, one JSON object
// a line): a "run" record first (command line, device, threads, the commit the binary was built
// from, start time, resolved settings), then the program's progress records, then a "summary".
// tools/record_training.py turns such a file into a bench/TRAINING.md entry. Non-obvious decision:
// the commit is stamped into the binary at build time (build_commit.cmake), so a record names the
// code that ran, not whatever the repository holds when the file is read.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/profiler.h"

namespace kiln::examples {

// One JSON object, written on one line, keys in the order they were added.
class JsonLine {
 public:
  JsonLine& text(std::string_view key, std::string_view value);
  JsonLine& integer(std::string_view key, int64_t value);
  JsonLine& unsigned_integer(std::string_view key, uint64_t value);
  // printf `format` for the number; NaN and infinities become null (JSON has no spelling for them).
  JsonLine& real(std::string_view key, double value, const char* format = "%.6g");
  JsonLine& boolean(std::string_view key, bool value);
  JsonLine& null(std::string_view key);
  JsonLine& texts(std::string_view key, const std::vector<std::string>& values);
  JsonLine& object(std::string_view key, const JsonLine& value);
  JsonLine& integers(std::string_view key, const std::vector<int64_t>& values);
  JsonLine& objects(std::string_view key, const std::vector<JsonLine>& values);
  std::string str() const { return "{" + body_ + "}"; }
  // Its scalar fields (text, numbers, booleans, null), key to value as written (a text without its
  // quotes): a run's settings as its checkpoints keep them (nn::TrainingState::settings).
  const std::map<std::string, std::string>& scalars() const { return scalars_; }

 private:
  JsonLine& raw(std::string_view key, std::string_view json);
  JsonLine& scalar(std::string_view key, std::string_view json, std::string_view value);
  std::string body_;
  std::map<std::string, std::string> scalars_;
};

// The settings a resumed run changes, as "name: checkpoint's value -> this run's" (in name order;
// "(none)" for a setting one side does not have), leaving out the names in `ignore` (settings that
// do not change the training's numbers, or that the caller checks itself). A resume that changes
// any continues, but no longer reproduces the uninterrupted run; the examples say so in a note.
std::vector<std::string> changed_settings(const std::map<std::string, std::string>& checkpoint,
                                          const std::map<std::string, std::string>& now,
                                          std::initializer_list<std::string_view> ignore);
// Prints that note (stdout): "note: --resume CKPT: this run changes the checkpoint run's settings
// (a: x -> y, ...); it continues with them, and is no longer the uninterrupted run bit for bit".
void note_changed_settings(const std::string& checkpoint, const std::vector<std::string>& changed);

// OUT/metrics.jsonl. A fresh run starts it anew; a run resumed from a checkpoint of step S first
// drops the records with a "step" after S (a killed run wrote them after its last checkpoint, and
// the resumed run writes them again) and any torn last line, then appends. Each record is flushed
// as it is written, so a run cut short keeps what it reported. A file that cannot be opened is
// bad input (message, exit 2); a failed write is an IOError.
class MetricsFile {
 public:
  MetricsFile(const std::string& path, std::optional<int64_t> resumed_at_step);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  void write(const JsonLine& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// `git describe --always --dirty` of the source tree when this binary was built ("-dirty": tracked
// files differed from that commit), or "unknown" without git.
const char* build_commit();

// Now, in UTC, as 2026-11-24T03:51:26Z.
std::string utc_now();

// The GPU's name for a CUDA device; the CPU's model name otherwise.
std::string device_name(Device device);

// The machine's share in a run's speed, for its records: CPU seconds (user and system) this process
// has used, and the host's 1-minute load average (NaN, written as null, where /proc/loadavg is
// missing). On a shared machine a busy neighbour slows a run; these say so.
double cpu_seconds();
double load_average();
// Adds "cpu_seconds" and "load_average" to a record.
JsonLine& add_host_usage(JsonLine& record);

// The process's memory now, in MiB: on a CUDA device the caching allocator's allocated, reserved and
// peak allocated bytes ({"allocated", "reserved", "peak_allocated"}); on the CPU the resident set and
// its peak ({"rss", "peak_rss"}).
JsonLine memory_usage(Device device);

// --log-every's record: {"record": "train", "step", "loss" and "lr" (that step's), `rate_key` (images_per_s
// or tokens_per_s, over the steps since the last train record or evaluation), "memory_mb"}.
JsonLine train_record(int64_t step, double loss, double lr, const char* rate_key, double rate, Device device);

// The throughput window of the train records: items (images, tokens) trained since the last record,
// and since when. An evaluation or a checkpoint restarts it, so that its time does not count.
struct RateWindow {
  double items = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  void restart() {
    items = 0;
    start = std::chrono::steady_clock::now();
  }
  // Items per second over the window, then restarts it.
  double take_rate();
};

// --profile's record: {"record": "profile", "step": the step reached, "steps": steps averaged,
// "step_ms", "phase_ms": {"data": ..., "h2d": ..., ...}, "other_ms"}, the means of `times`.
JsonLine profile_record(const profile::StepTimes& times, int64_t step);

// The first step's latency: {"record": "first_step", "step": this process's first step,
// "seconds": from the program's start to that step's end}.
JsonLine first_step_record(int64_t step, double seconds);

// The first record of a run: program, argv, start time (UTC), build commit, device, its name, the
// CPU thread count, the host's load average, the checkpoint resumed from ("" for a fresh run) and
// the resolved settings.
JsonLine run_record(std::string_view program, int argc, char** argv, Device device, std::string_view resumed_from,
                    const JsonLine& settings);

}  // namespace kiln::examples
