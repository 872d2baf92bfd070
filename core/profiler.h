// Where a training step's time goes: per-phase step timing, and NVTX ranges for Nsight Systems.
//
// StepProfiler cuts each step into phases (waiting for data, the host-to-device copy, forward,
// backward, communication, optimizer) and reports their mean time per step over the steps since
// the last report. Time inside a step that no phase covers is "other"; time between steps
// (evaluation, checkpoints) belongs to no step.
// - On the CPU a phase is steady-clock time on the calling thread.
// - On a GPU a phase is the time between two CUDA events recorded on the current stream where it
//   begins and ends: the device's timeline, with no host synchronization per phase. The events
//   are read back only by report(), which waits for the last one, so call it where the host waits
//   anyway (a log interval that prints the loss). A phase the host spends waiting while the GPU
//   still works through earlier steps (a data wait behind queued kernels) then costs what it costs
//   the GPU: nothing.
// A disabled profiler (the examples without --profile) does nothing at all.
//
// NVTX (the CUDA toolkit's header-only nvtx3): when enabled (KILN_NVTX=1 at start-up, or
// set_nvtx_enabled), every phase, op and one-input module is an NVTX range, so Nsight Systems shows
// the steps' structure on its timeline. Off, or in a build without CUDA, a range costs one
// predictable branch.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"

namespace kiln::profile {

enum class Phase : int { DataWait, HostToDevice, Forward, Backward, Communication, Optimizer };
constexpr int kPhases = 6;
// "data", "h2d", "forward", "backward", "comm", "optimizer": the names reports and NVTX use.
const char* phase_name(Phase p);

// Mean times per step over `steps` steps, in milliseconds.
struct StepTimes {
  int64_t steps = 0;
  double step_ms = 0;                       // from a step's first phase to its end_step()
  std::array<double, kPhases> phase_ms{};  // each phase's total within a step
  double other_ms() const;                  // step_ms less the phases
  // Folds in `more` (means over more.steps other steps): the means over both sets of steps.
  void add(const StepTimes& more);
  // One line: "step 12.3 ms: data 0.1 (1%), forward 4.0 (33%), ..., other 0.2 (2%)", phases that
  // took no time left out; "no steps" when steps == 0.
  std::string str() const;
};

class StepProfiler {
 public:
  // `device`: where the steps run (events on its current stream for a CUDA device; a DeviceError
  // when CUDA is not available).
  explicit StepProfiler(Device device, bool enabled = true);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  bool enabled() const { return enabled_; }
  // Ends the running phase, if any, and starts `p` (a step starts with its first phase).
  void begin(Phase p);
  // Ends the running phase (a no-op when none runs).
  void end();
  // Ends the running phase and the step.
  void end_step();
  // Forgets the open step (a loop that began waiting for data and got none): the time since the
  // last step ended counts nowhere.
  void abandon_step();
  // The means over the steps ended since the last report, which it forgets. Waits for the device
  // on a GPU. A step still open is left for the next report.
  StepTimes report();

 private:
  // A point on the timeline where `phase` starts (-1: none does), or a step ends.
  struct Mark {
    int phase = -1;
    bool step_end = false;
    double cpu_ms = 0;  // the CPU's clock
    int event = -1;     // a GPU's: index into the event pool
  };
  void mark(int phase, bool step_end);
  void fold();  // turns the pending steps' marks into totals
  void close_range();  // the running phase's NVTX range, if it opened one

  Device device_;
  bool enabled_;
  int running_ = -1;  // the phase running, -1: none
  bool range_open_ = false;  // whether the running phase opened an NVTX range (NVTX was on then)
  bool in_step_ = false;
  std::vector<Mark> marks_;  // the open step's and the unreported steps' marks, in order
  struct Events;
  std::unique_ptr<Events> events_;  // a GPU's event pool
  StepTimes totals_;                // sums (not means) of the folded steps
};

// begin(p) now and end() when the scope closes (null or disabled profiler: nothing).
class PhaseScope {
 public:
  PhaseScope(StepProfiler* profiler, Phase p);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  StepProfiler* profiler_;
};

// NVTX ranges (see above). nvtx_enabled() starts as KILN_NVTX=1 says; in a build without CUDA it
// stays false and set_nvtx_enabled(true) is ignored.
bool nvtx_enabled();
void set_nvtx_enabled(bool on);
void nvtx_push(const char* name);  // no-op unless enabled
void nvtx_pop();

// An NVTX range for a scope, if NVTX was enabled when it opened (it then closes whatever happens to
// the switch meanwhile). Ops (ops::KernelScope) and one-input modules (nn::UnaryModule) open one,
// named after the op or the module's type.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  bool open_;
};

}  // namespace kiln::profile
