// The utilization doctor: what a run measured (the step profiler's phases, the GPU monitor's
// samples, the allocator's peak) set beside how it was configured, and the tips (docs/tips/) that
// apply, each with its evidence: "data wait is 38% of the step (4.1 of 10.8 ms): raise --workers
// (tip 2), --pin-memory (tip 4)".
//
// The rules are pure functions of RunFacts, so they are tested on recorded runs on any machine: an
// example run with --doctor writes its measurements into a "doctor" record of metrics.jsonl, and
// `kiln_doctor RUN` reads that record and the run's settings back and diagnoses them again.
// Non-obvious decision: each rule names flags of the examples (what a user of them can change); a
// program of its own maps them to its loader and precision options, which the rules name too.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/gpu_monitor.h"
#include "core/profiler.h"
#include "examples/precision_options.h"
#include "examples/run_record.h"

namespace kiln::examples {

// How the run was configured: the run record's "device" and "settings" (examples' flags).
struct DoctorSettings {
  bool gpu = false;  // trained on a CUDA device
  int64_t batch_size = 0;
  int64_t workers = 0;  // data-loader threads
  int64_t prefetch = 0;
  bool pin_memory = false;
  std::string amp = "off";               // off, bf16, fp16
  bool tf32 = false;                     // TF32 math was on (on a GPU)
  std::optional<bool> channels_last;     // unset: not an image model
  bool recompute = false;
  int64_t grad_accum = 1;
};

// What the run measured.
struct DoctorMeasured {
  int64_t step = 0;          // the training step the report is made at
  profile::StepTimes steps;  // means over the steps measured
  monitor::GpuSummary gpu;   // the samples (none on the CPU)
  std::string gpu_reason;    // why there are none
  double peak_allocated_mb = std::numeric_limits<double>::quiet_NaN();  // the device allocator's peak
  double device_memory_mb = std::numeric_limits<double>::quiet_NaN();   // the card's memory
};

struct RunFacts {
  DoctorSettings settings;
  DoctorMeasured measured;
};

// One rule that applies.
struct Finding {
  std::string rule;       // "data-wait", "gpu-idle", "fp32-math", "autocast", "memory-headroom", ...
  std::vector<int> tips;  // the docs/tips pages it points to
  std::string message;    // the evidence and the advice, one line
};

// Thresholds (the rules' text in docs/profiling.md explains each).
struct DoctorThresholds {
  double data_wait_share = 0.15;      // data + h2d of the step
  double other_share = 0.20;          // the step outside every phase
  double optimizer_share = 0.20;
  double low_utilization = 60;        // % mean GPU utilization
  double short_step_ms = 10;          // below this, a step of an idle GPU is launch-bound
  double compute_share = 0.50;        // forward + backward, for the autocast advice
  double memory_share = 0.25;         // peak allocated of the card, for "raise the batch"
  double spare_memory_share = 0.50;   // for grad-accum and recompute, which trade speed for memory
  double throttled_clock = 0.85;      // mean SM clock of the card's maximum ...
  double busy_utilization = 80;       // ... while the GPU is this busy
  int64_t min_gpu_samples = 5;        // GPU rules need at least this many samples
};

// The rules that apply to `facts`, in a fixed order. No steps measured: none.
std::vector<Finding> diagnose(const RunFacts& facts, const DoctorThresholds& t = {});

// The report: the phases, the GPU, the memory, then one line per finding (or that none applies).
std::string format_report(const RunFacts& facts, const std::vector<Finding>& findings);

// metrics.jsonl's {"record": "doctor", "step", "measured": {...}, "findings": [...]}.
JsonLine doctor_record(const RunFacts& facts, const std::vector<Finding>& findings);

// A recorded run: the settings of its last "run" record and the measurements of its last "doctor"
// record (or of `step`'s, when given). A missing file, a line that is not JSON, or no such record
// is an IOError naming the file and the line.
RunFacts facts_from_metrics(const std::string& path, std::optional<int64_t> step = std::nullopt);

// The settings of a run record (run_record()'s line, or a "run" object read back).
DoctorSettings settings_from_run_record(const JsonLine& run);

// The examples' step profiler with --profile and --doctor. It owns the profiler (enabled by either
// flag), so that the --profile lines (per epoch or evaluation) and the doctor's reports (every
// --doctor-every steps, and at the end) each get their own windows of the same steps; with --doctor
// it samples the GPU while the run trains.
class RunProfile {
 public:
  RunProfile(const PrecisionOptions& p, Device device, const JsonLine& run_record);
  // The profiler the training step marks; null when neither flag is on.
  profile::StepProfiler* profiler() { return profiler_.enabled() ? &profiler_ : nullptr; }
  profile::StepProfiler& steps() { return profiler_; }  // begin/end_step: no-ops when disabled
  bool profiling() const { return profile_; }
  // --profile's window: the means of the steps since the last call (waits for the device).
  profile::StepTimes take_profile();
  // --doctor-every: whether `step` ends a window (a multiple of it).
  bool doctor_due(int64_t step) const { return doctor_ && doctor_every_ > 0 && step % doctor_every_ == 0; }
  // Prints the doctor's report of the steps since the last one (`final`: of the whole run, and a no-op
  // without --doctor) and writes its record to `metrics`.
  void doctor_report(int64_t step, bool final, MetricsFile& metrics);

 private:
  void collect();  // the profiler's new steps into every window

  bool profile_, doctor_;
  int64_t doctor_every_;
  Device device_;
  DoctorSettings settings_;
  profile::StepProfiler profiler_;
  std::unique_ptr<monitor::GpuSampler> sampler_;
  profile::StepTimes profile_window_, doctor_window_, run_;
  monitor::GpuSummary gpu_run_;
};

}  // namespace kiln::examples
