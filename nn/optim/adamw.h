// AdamW (decoupled weight decay), the same formula as torch.optim.AdamW without amsgrad: one
// multi-tensor update per group and dtype. Bias corrections use each parameter's device step
// count, so they are computed on the device and the host never reads a step.
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
