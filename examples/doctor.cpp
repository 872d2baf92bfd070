// The utilization doctor's rules, report and records (examples/doctor.h).
#include "examples/doctor.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/cuda/runtime.h"
#include "kernels/error.h"

namespace kiln::examples {
namespace {

using profile::Phase;

double phase(const profile::StepTimes& t, Phase p) { return t.phase_ms[static_cast<size_t>(p)]; }

std::string format(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, a, b, c);
  return buf;
}

// "a; b; c"
std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i > 0 ? "; " : "") + parts[i];
  return out;
}

// --- the rules: each adds a finding when it applies -----------------------------------------------

void data_wait(const RunFacts& f, const DoctorThresholds& t, std::vector<Finding>& out) {
  const profile::StepTimes& s = f.measured.steps;
  const double wait = phase(s, Phase::DataWait) + phase(s, Phase::HostToDevice);
  if (!(wait >= t.data_wait_share * s.step_ms)) return;
  Finding x{"data-wait", {}, format("data wait is %.0f%% of the step (%.2f of %.2f ms): ", 100 * wait / s.step_ms,
                                    wait, s.step_ms)};
  std::vector<std::string> advice;
  if (f.settings.workers == 0) {
    advice.push_back("read batches ahead with --workers (tip 2)");
    x.tips.push_back(2);
  } else {
    advice.push_back("raise --workers above " + std::to_string(f.settings.workers) + " (tip 2) or --prefetch (tip 3)");
    x.tips.insert(x.tips.end(), {2, 3});
  }
  if (f.settings.gpu && !f.settings.pin_memory) {
    advice.push_back("--pin-memory (tip 4)");
    x.tips.push_back(4);
  }
  advice.push_back("decode and preprocess the data once, not per sample (tip 24)");
  x.tips.push_back(24);
  x.message += join(advice);
  out.push_back(std::move(x));
}

void host_overhead(const RunFacts& f, const DoctorThresholds& t, std::vector<Finding>& out) {
  const profile::StepTimes& s = f.measured.steps;
  const double other = s.other_ms();
  if (!(other >= t.other_share * s.step_ms)) return;
  out.push_back({"host-overhead", {19, 16},
                 format("%.0f%% of the step (%.2f of %.2f ms) is outside data, forward, backward and optimizer: "
                        "host work between them, such as reading the loss every step (tip 19) or debug checks "
                        "left on (tip 16)",
                        100 * other / s.step_ms, other, s.step_ms)});
}

void optimizer(const RunFacts& f, const DoctorThresholds& t, std::vector<Finding>& out) {
  const profile::StepTimes& s = f.measured.steps;
  const double opt = phase(s, Phase::Optimizer);
  if (!(opt >= t.optimizer_share * s.step_ms)) return;
  out.push_back({"optimizer", {1, 21},
                 format("the optimizer is %.0f%% of the step (%.2f of %.2f ms): its cost does not grow with the "
                        "batch, so a larger --batch-size (tip 1), or --grad-accum at the memory limit (tip 21), "
                        "spends it on more samples",
                        100 * opt / s.step_ms, opt, s.step_ms)});
}

bool gpu_sampled(const RunFacts& f, const DoctorThresholds& t) {
  return f.settings.gpu && f.measured.gpu.utilization.n >= t.min_gpu_samples;
}

void gpu_idle(const RunFacts& f, const DoctorThresholds& t, std::vector<Finding>& out) {
  if (!gpu_sampled(f, t)) return;
  const double util = f.measured.gpu.utilization.mean();
  if (!(util < t.low_utilization)) return;
  const double step = f.measured.steps.step_ms;
  std::string message = format("GPU utilization %.0f%% with %.2f ms steps: ", util, step);
  if (step < t.short_step_ms) {
    message += "the step is launch-bound, many small kernels the host issues one by one; replay it as one CUDA "
               "graph (--cuda-graph) or raise --batch-size (tip 1)";
  } else {
    message += "the GPU waits for the host; see the data and host findings, and watch it (tip 23)";
  }
  out.push_back({"gpu-idle", {1, 23}, message});
}

void fp32_math(const RunFacts& f, const DoctorThresholds& t, std::vector<Finding>& out) {
  if (!f.settings.gpu || f.settings.amp != "off") return;
  if (!f.settings.tf32) {
    out.push_back({"fp32-math", {10, 17},
                   "float32 matmuls and convolutions without TF32 (tip 10) or autocast (tip 17): --tf32, or "
                   "--amp bf16"});
    return;
  }
  const profile::StepTimes& s = f.measured.steps;
  const double compute = phase(s, Phase::Forward) + phase(s, Phase::Backward);
  if (!(compute >= t.compute_share * s.step_ms)) return;
  out.push_back({"autocast", {17},
                 format("forward and backward are %.0f%% of the step in float32 with TF32: --amp bf16 runs "
                        "matmuls at twice TF32's rate and halves activation memory (tip 17)",
                        100 * compute / s.step_ms)});
}

void channels_last(const RunFacts& f, const DoctorThresholds&, std::vector<Finding>& out) {
  if (!f.settings.gpu || f.settings.amp == "off" || !f.settings.channels_last || *f.settings.channels_last) return;
  out.push_back({"channels-last", {15},
                 "convolutions in " + f.settings.amp + " on NCHW tensors: --channels-last gives tensor-core "
                 "convolutions the layout they read (tip 15)"});
}

void memory(const RunFacts& f, const DoctorThresholds& t, std::vector<Finding>& out) {
  const double peak = f.measured.peak_allocated_mb, card = f.measured.device_memory_mb;
  if (!f.settings.gpu || !(peak > 0) || !(card > 0)) return;
  const double share = peak / card;
  const std::string evidence = format("peak memory %.0f%% of the card (%.0f of %.0f MiB)", 100 * share, peak, card);
  if (share < t.memory_share) {
    out.push_back({"memory-headroom", {1, 25},
                   evidence + ": raise --batch-size (tip 1), scaling the learning rate with a warmup (tip 25)"});
  }
  if (share < t.spare_memory_share && f.settings.grad_accum > 1) {
    out.push_back({"grad-accum", {21},
                   evidence + ": fewer --grad-accum micro-batches than " + std::to_string(f.settings.grad_accum) +
                       " run faster in the memory to spare (tip 21)"});
  }
  if (share < t.spare_memory_share && f.settings.recompute) {
    out.push_back({"recompute", {22},
                   evidence + ": --recompute runs each block's forward twice to save memory the run does not need "
                              "(tip 22)"});
  }
}

void throttled(const RunFacts& f, const DoctorThresholds& t, std::vector<Finding>& out) {
  if (!gpu_sampled(f, t)) return;
  const monitor::GpuSummary& g = f.measured.gpu;
  const double clock = g.sm_clock_mhz.mean(), max = g.max_sm_clock_mhz;
  if (!(g.utilization.mean() >= t.busy_utilization) || !(max > 0) || !(clock < t.throttled_clock * max)) return;
  out.push_back({"clock", {23},
                 format("the SM clock averaged %.0f of the card's %.0f MHz while the GPU was %.0f%% busy: a power "
                        "or thermal limit (tip 23)",
                        clock, max, g.utilization.mean())});
}

}  // namespace

std::vector<Finding> diagnose(const RunFacts& facts, const DoctorThresholds& t) {
  std::vector<Finding> out;
  if (facts.measured.steps.steps == 0 || !(facts.measured.steps.step_ms > 0)) return out;
  for (auto rule : {data_wait, host_overhead, optimizer, gpu_idle, fp32_math, channels_last, memory, throttled}) {
    rule(facts, t, out);
  }
  return out;
}

std::string format_report(const RunFacts& facts, const std::vector<Finding>& findings) {
  const DoctorMeasured& m = facts.measured;
  std::string out = "doctor at step " + std::to_string(m.step) + ", " + std::to_string(m.steps.steps) +
                    " steps measured:\n  " + m.steps.str() + "\n  ";
  out += m.gpu.samples > 0 ? m.gpu.str() : "no GPU samples: " + m.gpu_reason;
  if (m.peak_allocated_mb > 0 && m.device_memory_mb > 0) {
    out += format("\n  memory: peak %.0f MiB allocated of %.0f MiB (%.0f%%)", m.peak_allocated_mb,
                  m.device_memory_mb, 100 * m.peak_allocated_mb / m.device_memory_mb);
  }
  if (m.steps.steps == 0) return out + "\n  no steps measured: nothing to diagnose\n";
  if (findings.empty()) return out + "\n  no rule applies\n";
  for (const Finding& f : findings) out += "\n  - " + f.message;
  return out + "\n";
}

JsonLine doctor_record(const RunFacts& facts, const std::vector<Finding>& findings) {
  const DoctorMeasured& m = facts.measured;
  JsonLine phases;
  for (int p = 0; p < profile::kPhases; ++p) {
    phases.real(profile::phase_name(static_cast<Phase>(p)), m.steps.phase_ms[static_cast<size_t>(p)], "%.4f");
  }
  JsonLine gpu;
  gpu.integer("samples", m.gpu.samples).text("name", m.gpu.name).text("reason", m.gpu_reason);
  gpu.integer("utilization_samples", m.gpu.utilization.n);
  gpu.real("utilization_mean", m.gpu.utilization.mean(), "%.2f").real("utilization_min", m.gpu.utilization.min, "%.0f");
  gpu.real("utilization_max", m.gpu.utilization.max, "%.0f");
  gpu.real("memory_used_max_mb", m.gpu.memory_used_mb.max, "%.1f");
  gpu.real("memory_total_mb", m.gpu.memory_total_mb, "%.1f");
  gpu.real("power_mean_w", m.gpu.power_w.mean(), "%.1f").real("sm_clock_mean_mhz", m.gpu.sm_clock_mhz.mean(), "%.1f");
  gpu.real("sm_clock_max_mhz", m.gpu.max_sm_clock_mhz, "%.0f");
  JsonLine measured;
  measured.integer("steps", m.steps.steps).real("step_ms", m.steps.step_ms, "%.4f").object("phase_ms", phases);
  measured.object("gpu", gpu);
  measured.real("peak_allocated_mb", m.peak_allocated_mb, "%.1f").real("device_memory_mb", m.device_memory_mb, "%.1f");
  std::vector<JsonLine> list;
  for (const Finding& f : findings) {
    list.push_back(JsonLine().text("rule", f.rule).integers("tips", {f.tips.begin(), f.tips.end()}).text("message",
                                                                                                       f.message));
  }
  JsonLine r;
  r.text("record", "doctor").integer("step", m.step).object("measured", measured).objects("findings", list);
  return r;
}

// --- reading a recorded run ---------------------------------------------------------------------------

namespace {

using nlohmann::json;

double number(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : std::numeric_limits<double>::quiet_NaN();
}

DoctorSettings settings_from(const json& run) {
  DoctorSettings s;
  s.gpu = run.value("device", std::string("cpu")).rfind("cuda", 0) == 0;
  const json& set = run.at("settings");
  s.batch_size = set.value("batch_size", int64_t{0});
  s.workers = set.value("workers", int64_t{0});
  s.prefetch = set.value("prefetch", int64_t{0});
  s.pin_memory = set.value("pin_memory", false);
  s.amp = set.value("amp", std::string("off"));
  s.tf32 = set.value("tf32", false);
  if (set.contains("channels_last")) s.channels_last = set.at("channels_last").get<bool>();
  s.recompute = set.value("recompute", false);
  s.grad_accum = set.value("grad_accum", int64_t{1});
  return s;
}

DoctorMeasured measured_from(const json& doctor) {
  DoctorMeasured m;
  m.step = doctor.at("step").get<int64_t>();
  const json& j = doctor.at("measured");
  m.steps.steps = j.at("steps").get<int64_t>();
  m.steps.step_ms = number(j, "step_ms");
  for (int p = 0; p < profile::kPhases; ++p) {
    m.steps.phase_ms[static_cast<size_t>(p)] = number(j.at("phase_ms"), profile::phase_name(static_cast<Phase>(p)));
  }
  m.peak_allocated_mb = number(j, "peak_allocated_mb");
  m.device_memory_mb = number(j, "device_memory_mb");
  const json& g = j.at("gpu");
  m.gpu.samples = g.value("samples", int64_t{0});
  m.gpu.name = g.value("name", std::string());
  m.gpu_reason = g.value("reason", std::string());
  // The record keeps each quantity's summary, not its samples: a Stat of n readings with that mean.
  auto stat = [&](const char* mean_key, int64_t n, double min = NAN, double max = NAN) {
    monitor::Stat s;
    const double mean = number(g, mean_key);
    if (std::isnan(mean) || n == 0) return s;
    s.n = n;
    s.sum = mean * static_cast<double>(n);
    s.min = std::isnan(min) ? mean : min;
    s.max = std::isnan(max) ? mean : max;
    return s;
  };
  const int64_t n = g.value("utilization_samples", m.gpu.samples);
  m.gpu.utilization = stat("utilization_mean", n, number(g, "utilization_min"), number(g, "utilization_max"));
  m.gpu.power_w = stat("power_mean_w", m.gpu.samples);
  m.gpu.sm_clock_mhz = stat("sm_clock_mean_mhz", m.gpu.samples);
  m.gpu.memory_used_mb = stat("memory_used_max_mb", m.gpu.samples);
  m.gpu.memory_total_mb = number(g, "memory_total_mb");
  m.gpu.max_sm_clock_mhz = number(g, "sm_clock_max_mhz");
  return m;
}

}  // namespace

RunFacts facts_from_metrics(const std::string& path, std::optional<int64_t> step) {
  std::ifstream in(path);
  if (!in) throw IOError("cannot read " + path);
  // The doctor record chosen, and the run record before it: the settings of the process that measured
  // it (a resumed run appends a run record of its own, perhaps with other settings, after it).
  std::optional<json> last_run, run, doctor;
  std::string line;
  for (int64_t number_of_line = 1; std::getline(in, line); ++number_of_line) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    const std::string where = path + " line " + std::to_string(number_of_line);
    if (j.is_discarded() || !j.is_object()) throw IOError(where + " is not a JSON object");
    const auto record = j.find("record");
    if (record == j.end()) continue;
    if (!record->is_string()) throw IOError(where + ": \"record\" is a " + record->type_name() + ", not a string");
    const std::string kind = record->get<std::string>();
    if (kind == "run") {
      last_run = std::move(j);
    } else if (kind == "doctor") {
      const auto at = j.find("step");
      if (at != j.end() && !at->is_number_integer()) {
        throw IOError(where + ": the doctor record's \"step\" is a " + at->type_name() + ", not an integer");
      }
      if (step && (at == j.end() || at->get<int64_t>() != *step)) continue;
      doctor = std::move(j);
      run = last_run;
    }
  }
  if (!doctor) run = last_run;  // for the error below
  if (!run) throw IOError(path + " has no \"run\" record");
  if (!doctor) {
    throw IOError(path + " has no \"doctor\" record" +
                  (step ? " at step " + std::to_string(*step) : std::string()) +
                  " (was the run started with --doctor?)");
  }
  try {
    return {settings_from(*run), measured_from(*doctor)};
  } catch (const json::exception& e) {
    throw IOError(path + ": a run or doctor record lacks a field or has the wrong type: " + e.what());
  }
}

// --- the examples' --profile and --doctor -------------------------------------------------------------

DoctorSettings settings_from_run_record(const JsonLine& run) { return settings_from(json::parse(run.str())); }

RunProfile::RunProfile(const PrecisionOptions& p, Device device, const JsonLine& run_record)
    : profile_(p.profile),
      doctor_(p.doctor || p.doctor_every > 0),
      doctor_every_(p.doctor_every),
      device_(device),
      settings_(settings_from_run_record(run_record)),
      profiler_(device, profile_ || doctor_) {
  if (doctor_) sampler_ = std::make_unique<monitor::GpuSampler>(device);
}

void RunProfile::collect() {
  if (!profiler_.enabled()) return;
  const profile::StepTimes t = profiler_.report();
  profile_window_.add(t);
  doctor_window_.add(t);
  run_.add(t);
}

profile::StepTimes RunProfile::take_profile() {
  collect();
  return std::exchange(profile_window_, {});
}

void RunProfile::doctor_report(int64_t step, bool final, MetricsFile& metrics) {
  if (!doctor_) return;
  collect();
  RunFacts facts{settings_, {}};
  const monitor::GpuSummary window_gpu = sampler_->take();
  gpu_run_.merge(window_gpu);
  facts.measured.step = step;
  facts.measured.steps = final ? run_ : doctor_window_;
  facts.measured.gpu = final ? gpu_run_ : window_gpu;
  facts.measured.gpu_reason = sampler_->reason();
  if (device_.is_cuda()) {
    const cuda::MemoryStats stats = cuda::memory_stats(device_.index);
    facts.measured.peak_allocated_mb = static_cast<double>(stats.peak_allocated_bytes) / (1024.0 * 1024.0);
    facts.measured.device_memory_mb = static_cast<double>(cuda::total_memory(device_.index)) / (1024.0 * 1024.0);
  }
  doctor_window_ = {};
  const std::vector<Finding> findings = diagnose(facts);
  std::printf("%s", format_report(facts, findings).c_str());
  std::fflush(stdout);
  metrics.write(JsonLine(doctor_record(facts, findings)).boolean("final", final));
}

}  // namespace kiln::examples
