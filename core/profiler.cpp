// Step profiler and NVTX ranges (core/profiler.h).
#include "core/profiler.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/cuda/runtime.h"
#include "kernels/error.h"

#if defined(KILN_WITH_CUDA)
#include <nvtx3/nvToolsExt.h>
#endif

namespace kiln::profile {
namespace {

constexpr const char* kNames[kPhases] = {"data", "h2d", "forward", "backward", "comm", "optimizer"};

// Pending marks past this many are folded at once (on a GPU that waits for the device): a loop
// that never calls report() does not grow without bound.
constexpr size_t kMaxPendingMarks = size_t{1} << 16;

double now_ms() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

bool nvtx_from_env() {
#if defined(KILN_WITH_CUDA)
  const char* v = std::getenv("KILN_NVTX");
  return v != nullptr && std::strcmp(v, "1") == 0;
#else
  return false;
#endif
}

std::atomic<bool> g_nvtx{nvtx_from_env()};

// An NVTX range whatever the switch says now (the caller remembers that it opened one).
void nvtx_push_range(const char* name) {
#if defined(KILN_WITH_CUDA)
  nvtxRangePushA(name);
#else
  (void)name;
#endif
}
void nvtx_pop_range() {
#if defined(KILN_WITH_CUDA)
  nvtxRangePop();
#endif
}

}  // namespace

const char* phase_name(Phase p) { return kNames[static_cast<int>(p)]; }

double StepTimes::other_ms() const {
  double phases = 0;
  for (double ms : phase_ms) phases += ms;
  return step_ms - phases;
}

void StepTimes::add(const StepTimes& more) {
  const int64_t total = steps + more.steps;
  if (more.steps == 0) return;
  const double a = static_cast<double>(steps) / static_cast<double>(total);
  const double b = static_cast<double>(more.steps) / static_cast<double>(total);
  step_ms = a * step_ms + b * more.step_ms;
  for (size_t p = 0; p < phase_ms.size(); ++p) phase_ms[p] = a * phase_ms[p] + b * more.phase_ms[p];
  steps = total;
}

std::string StepTimes::str() const {
  if (steps == 0) return "no steps";
  char buf[64];
  auto share = [&](double ms) { return step_ms > 0 ? 100.0 * ms / step_ms : 0.0; };
  std::snprintf(buf, sizeof buf, "step %.2f ms:", step_ms);
  std::string out = buf;
  const char* sep = " ";
  for (int p = 0; p < kPhases; ++p) {
    if (phase_ms[static_cast<size_t>(p)] <= 0) continue;
    std::snprintf(buf, sizeof buf, "%s%s %.2f (%.0f%%)", sep, kNames[p], phase_ms[static_cast<size_t>(p)],
                  share(phase_ms[static_cast<size_t>(p)]));
    out += buf;
    sep = ", ";
  }
  std::snprintf(buf, sizeof buf, "%sother %.2f (%.0f%%)", sep, other_ms(), share(other_ms()));
  return out + buf;
}

// A GPU's timing events, reused from one report to the next.
struct StepProfiler::Events {
  std::vector<std::unique_ptr<cuda::Event>> pool;
  size_t used = 0;
  int record(Device device) {
    cuda::DeviceGuard guard(device.index);
    if (used == pool.size()) pool.push_back(std::make_unique<cuda::Event>(/*enable_timing=*/true));
    pool[used]->record(cuda::current_stream(device.index));
    return static_cast<int>(used++);
  }
};

StepProfiler::StepProfiler(Device device, bool enabled) : device_(device), enabled_(enabled) {
  if (!enabled_ || !device_.is_cuda()) return;
  if (!cuda::is_available()) {
    throw DeviceError("StepProfiler: cannot time steps on " + device_.str() + ": " + cuda::unavailable_reason());
  }
  events_ = std::make_unique<Events>();
}

StepProfiler::~StepProfiler() = default;

void StepProfiler::mark(int phase, bool step_end) {
  Mark m;
  m.phase = phase;
  m.step_end = step_end;
  if (events_) {
    m.event = events_->record(device_);
  } else {
    m.cpu_ms = now_ms();
  }
  marks_.push_back(m);
}

// The running phase's NVTX range closes only if it was opened: NVTX may be switched on or off
// while a phase runs.
void StepProfiler::close_range() {
  if (range_open_) nvtx_pop_range();
  range_open_ = false;
}

void StepProfiler::begin(Phase p) {
  if (!enabled_) return;
  close_range();
  running_ = static_cast<int>(p);
  in_step_ = true;
  mark(running_, false);
  range_open_ = nvtx_enabled();
  if (range_open_) nvtx_push_range(kNames[running_]);
}

void StepProfiler::end() {
  if (!enabled_ || running_ < 0) return;
  close_range();
  running_ = -1;
  mark(-1, false);
}

void StepProfiler::end_step() {
  if (!enabled_ || !in_step_) return;
  close_range();
  running_ = -1;
  in_step_ = false;
  mark(-1, true);
  if (marks_.size() >= kMaxPendingMarks) fold();
}

void StepProfiler::abandon_step() {
  if (!enabled_ || !in_step_) return;
  close_range();
  running_ = -1;
  in_step_ = false;
  while (!marks_.empty() && !marks_.back().step_end) marks_.pop_back();
  if (events_) events_->used = marks_.empty() ? 0 : static_cast<size_t>(marks_.back().event) + 1;
}

void StepProfiler::fold() {
  // The ended steps' marks: everything up to the last step end. An open step's stay.
  size_t last_end = marks_.size();
  for (size_t i = marks_.size(); i-- > 0;) {
    if (marks_[i].step_end) {
      last_end = i;
      break;
    }
  }
  if (last_end == marks_.size()) return;  // no step ended
  // Milliseconds from mark a to mark b: the CPU's clock, or the device's between two events.
  auto interval = [&](const Mark& a, const Mark& b) -> double {
    if (!events_) return b.cpu_ms - a.cpu_ms;
    return static_cast<double>(events_->pool[static_cast<size_t>(a.event)]->elapsed_ms(
        *events_->pool[static_cast<size_t>(b.event)]));
  };
  if (events_) events_->pool[static_cast<size_t>(marks_[last_end].event)]->synchronize();
  size_t first = 0;  // the current step's first mark
  for (size_t i = 0; i <= last_end; ++i) {
    const Mark& m = marks_[i];
    if (m.step_end) {
      totals_.step_ms += interval(marks_[first], m);
      ++totals_.steps;
      first = i + 1;
    } else if (m.phase >= 0) {  // the interval to the next mark belongs to the phase this mark starts
      totals_.phase_ms[static_cast<size_t>(m.phase)] += interval(m, marks_[i + 1]);
    }
  }
  marks_.erase(marks_.begin(), marks_.begin() + static_cast<std::ptrdiff_t>(last_end + 1));
  if (events_) {
    // The open step's events move to the front of the pool; the rest are free again.
    size_t k = 0;
    for (Mark& m : marks_) {
      std::swap(events_->pool[k], events_->pool[static_cast<size_t>(m.event)]);
      m.event = static_cast<int>(k++);
    }
    events_->used = k;
  }
}

StepTimes StepProfiler::report() {
  if (!enabled_) return {};
  fold();
  StepTimes mean = totals_;
  if (mean.steps > 0) {
    const double n = static_cast<double>(mean.steps);
    mean.step_ms /= n;
    for (double& ms : mean.phase_ms) ms /= n;
  }
  totals_ = StepTimes{};
  return mean;
}

PhaseScope::PhaseScope(StepProfiler* profiler, Phase p) : profiler_(profiler) {
  if (profiler_) profiler_->begin(p);
}

PhaseScope::~PhaseScope() {
  if (profiler_) profiler_->end();
}

bool nvtx_enabled() { return g_nvtx.load(std::memory_order_relaxed); }

void set_nvtx_enabled(bool on) {
#if defined(KILN_WITH_CUDA)
  g_nvtx.store(on, std::memory_order_relaxed);
#else
  (void)on;
#endif
}

void nvtx_push(const char* name) {
  if (nvtx_enabled()) nvtx_push_range(name);
}

void nvtx_pop() {
  if (nvtx_enabled()) nvtx_pop_range();
}

NvtxRange::NvtxRange(const char* name) : open_(nvtx_enabled()) {
  if (open_) nvtx_push_range(name);
}

NvtxRange::~NvtxRange() {
  if (open_) nvtx_pop_range();
}

}  // namespace kiln::profile
