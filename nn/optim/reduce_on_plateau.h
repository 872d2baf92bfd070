// PyTorch's ReduceLROnPlateau: multiplies every group's lr by `factor` once a metric (a validation
// loss, an accuracy) has not improved for more than `patience` calls of step(metric), then waits
// `cooldown` calls before counting again, never going below a group's min_lr. Unlike the schedules
// of nn/optim/lr_scheduler.h its lr is not a function of the step but of the metrics seen, so it
// keeps a state of its own (the best metric, the calls without improvement, the cooldown left),
// which state_dict saves. The metric is a host number: reading a device loss for it synchronizes,
// as .item() does in PyTorch, so call it at evaluation, not every step.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nn/optim/optimizer.h"

namespace kiln::nn::optim {

struct PlateauOptions {
  bool maximize = false;         // mode "max": a larger metric is better (accuracy); else "min"
  double factor = 0.1;           // new lr = lr * factor, in [0, 1)
  int64_t patience = 10;         // calls without improvement tolerated; the next one reduces
  double threshold = 1e-4;       // how much better counts as better
  bool relative = true;          // threshold_mode "rel": best * (1 -/+ threshold); false: "abs"
  int64_t cooldown = 0;          // calls after a reduction before bad ones count again
  std::vector<double> min_lr{};  // per group, or one for all; empty: 0
  double eps = 1e-8;             // a reduction smaller than this is not made
};

class ReduceLROnPlateau : public Checkpointable {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options = {});

  // One evaluation's metric. Returns whether some group's lr was reduced. A NaN metric is never an
  // improvement (it counts as a bad call), as in PyTorch.
  bool step(double metric);

  double best() const { return best_; }
  int64_t num_bad_epochs() const { return bad_; }
  int64_t cooldown_counter() const { return cooldown_left_; }
  int64_t last_step() const { return last_step_; }

  // "best" (float64), "num_bad_epochs", "cooldown_counter" and "last_epoch" (int64), CPU tensors;
  // the lrs themselves are in the optimizer's state_dict.
  std::map<std::string, Tensor> state_dict() const override;
  // Restores a state_dict of a ReduceLROnPlateau: missing keys, other dtypes or negative counters
  // are a kiln::Error that changes nothing.
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

 private:
  bool improves(double metric) const;

  Optimizer& optimizer_;
  PlateauOptions options_;
  double best_;
  int64_t bad_ = 0, cooldown_left_ = 0, last_step_ = 0;
};

}  // namespace kiln::nn::optim
