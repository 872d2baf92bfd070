// Dynamic loss scaling for float16 training, as torch.amp.GradScaler. Non-obvious decision: the
// scale, the growth tracker and the found-inf flags live on the device and are only ever read
// there (by the check-and-unscale kernel, the optimizer's update and the scale update), so a
// training step with a scaler never waits on the host and can be captured as a CUDA graph.
// get_scale() is the one call that reads a value back. docs/loss-scaling.md explains the design.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/tensor.h"
#include "nn/optim/optimizer.h"

namespace kiln::nn::amp {

class GradScaler {
 public:
  struct Options {
    double init_scale = 65536.0;     // 2^16
    double growth_factor = 2.0;      // > 1
    double backoff_factor = 0.5;     // in (0, 1)
    int64_t growth_interval = 2000;  // clean steps in a row before the scale grows; in [1, 2^31 - 1]
    // A disabled scaler passes everything through: scale() returns the loss, step() just steps.
    bool enabled = true;
  };

  // Options out of range are a kiln::Error naming the option and its value.
  GradScaler();
  explicit GradScaler(Options options);
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  // loss * scale, differentiable, in the loss's dtype (any shape, floating). The scale is a 0-d
  // float32 tensor made on the device of the first loss scaled (after construction, or after a
  // load_state_dict into a scaler that had scaled none); a loss on another device later is a
  // DeviceError. A scaler that has scaled a loss keeps its tensors through load_state_dict, which
  // copies the loaded values into them: a captured CUDA graph may read their memory.
  Tensor scale(const Tensor& loss);

  // Divides the optimizer's gradients by the scale in place, in one multi-tensor pass that also
  // records on the device whether any of them holds inf or NaN. Call it before anything that
  // reads gradient values (clipping); calling it twice for one optimizer before update() is a
  // kiln::Error. Gradients must be on the scale's device.
  void unscale_(optim::Optimizer& optimizer);

  // optimizer.step(), made a no-op on the device when the gradients held inf or NaN (parameters,
  // state and device step counters stay as they were). Without an unscale_ this step, the
  // gradients are only checked (one read pass) and the optimizer divides them by the scale inside
  // its update: they stay scaled in .grad. The optimizer's own grad-scaling tensors are restored
  // afterwards. When optimizer.step() throws, the exception passes through and the optimizer may
  // be stepped again: its check's flag is dropped (its unscale_, if any, still counts).
  void step(optim::Optimizer& optimizer);

  // The end of a step, on the device: after inf or NaN in any stepped optimizer's gradients the
  // scale is multiplied by backoff_factor, after growth_interval clean steps in a row by
  // growth_factor. Then every optimizer may be unscaled and stepped again. A kiln::Error when no
  // optimizer was unscaled or stepped since the last update().
  void update();
  // Sets the scale to new_scale (finite, > 0) instead; the growth tracker is left as it is.
  void update(double new_scale);

  // Sharded training (ZeRO) checks on each rank only that rank's shard of the gradients, so ranks
  // would disagree on whether a step had inf or NaN. A reducer set here is called with each
  // optimizer's found-inf flag (a 0-d float32 tensor on the scale's device, 0 or 1) right after the
  // check and must replace it, in place, by its maximum over the ranks; then every rank skips the
  // same steps and keeps the same scale. kiln::dist::ZeroRedundancyOptimizer::step(GradScaler&)
  // sets one. An empty function removes it. When the reducer throws, the exception reaches the
  // caller of unscale_ or step and that optimizer's step is over (its gradients may be unscaled,
  // its flag is not the ranks' maximum): unscale_ and step on it are a kiln::Error until update(),
  // which then leaves the scale and growth tracker as they were and starts the next step.
  void set_found_inf_reducer(std::function<void(Tensor& found_inf)> reducer) { reducer_ = std::move(reducer); }

  // The current scale, read back to the host: this waits for the device (a sync). 1 when disabled.
  double get_scale() const;
  // Clean steps since the scale last changed, read back to the host (a sync as well).
  int64_t get_growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  const Options& options() const { return options_; }

  // "scale" (float32) and "growth_tracker" (int32), copies made without a sync on the scaler's
  // device, and the options "growth_factor", "backoff_factor" (float64) and "growth_interval"
  // (int64) on the CPU: everything a resume needs to continue bit for bit. Empty when disabled.
  std::map<std::string, Tensor> state_dict() const;
  // Throws what load_state_dict would throw for `state`, changing nothing: a missing or
  // unexpected key, a dtype other than state_dict's, a tensor of more than one element (one of any
  // shape loads as state_dict's 0-d), or a value out of range is a kiln::Error naming the key; an
  // empty state (saved from a disabled scaler) is refused too.
  void check_state_dict(const std::map<std::string, Tensor>& state) const;
  // Restores scale, growth tracker and the three options (a disabled scaler ignores the call).
  // Reads the values on the host to check them (a sync when they are on a device).
  void load_state_dict(const std::map<std::string, Tensor>& state);

 private:
  // Failed: the reducer threw during this optimizer's unscale_ or step (see set_found_inf_reducer).
  enum class Stage { Ready, Unscaled, Stepped, Failed };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    Tensor found_inf;  // 0-d float32 on the scale's device, 0 at the start of every step
  };

  // Moves the scale and tracker to `device` on first use; a later use on another device is a
  // DeviceError naming `op`.
  void place(Device device, const char* op);
  // A kiln::Error naming `op` when no loss was scaled yet (since construction, or since a
  // load_state_dict before any).
  void require_placed(const char* op) const;
  PerOptimizer& state_of(const optim::Optimizer& optimizer);
  // One check (and unscale, when `unscale`) pass over the optimizer's gradients into st.found_inf.
  void check_grads(const optim::Optimizer& optimizer, PerOptimizer& st, bool unscale, const char* op);
  // A kiln::Error naming `op` when st's reducer failed this step.
  static void require_not_failed(const PerOptimizer& st, const char* op);
  // found_inf back to 0 and every optimizer Ready, for the next step.
  void reset_step();

  Options options_;
  Tensor scale_;           // 0-d float32
  Tensor growth_tracker_;  // 0-d int32
  bool placed_ = false;
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
  std::function<void(Tensor&)> reducer_;
};

}  // namespace kiln::nn::amp
