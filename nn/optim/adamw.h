// AdamW (decoupled weight decay), the same formula as torch.optim.AdamW without amsgrad: one
// multi-tensor update per group and dtype. Bias corrections use the group's device step counter,
// so they are computed on the device and the host never reads the step. Where torch.optim.AdamW
// counts steps per parameter, the group's count is kiln's: a parameter whose first gradient comes
// after the group's first step (a branch unused at first, a layer unfrozen later) is corrected as if
// it had been there from the start, which moves its first updates by the ratio of the corrections
// (PyTorch's first step moves it by lr; kiln's, at group step t, by
// lr (1 - b1) sqrt(1 - b2^t) / ((1 - b1^t) sqrt(1 - b2)), 0.74 lr at t = 2 with the defaults).
#pragma once

#include <utility>

#include "nn/optim/optimizer.h"

namespace kiln::nn::optim {

class AdamW : public Optimizer {
 public:
  // One group of `params`.
  explicit AdamW(const TensorList& params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
                 double eps = 1e-8, double weight_decay = 1e-2);
  // Groups carry their own lr and weight_decay (see decay_groups); options "beta1", "beta2" and
  // "eps" override the defaults given here.
  explicit AdamW(std::vector<ParamGroup> groups, std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8);

  void step() override;

 protected:
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<std::string> option_names() const override { return {"beta1", "beta2", "eps"}; }

 private:
  void validate();
  double beta1_, beta2_, eps_;
};

}  // namespace kiln::nn::optim
