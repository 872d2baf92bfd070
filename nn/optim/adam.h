// Adam (Kingma and Ba), with torch.optim.Adam's options: L2 weight decay added to the gradient,
// amsgrad (divide by the running maximum of the second moment) and maximize (gradient ascent); one
// multi-tensor update per group and dtype, as torch.optim's fused=True. AdamW (nn/optim/adamw.h) is
// the same optimizer with the weight decay decoupled from the gradient. Bias corrections use each
// parameter's device step count, so they are computed on the device and the host never reads a
// step (docs/optimizers.md).
#pragma once

#include <utility>

#include "nn/optim/optimizer.h"

namespace kiln::nn::optim {

class Adam : public Optimizer {
 public:
  // One group of `params`; the arguments in torch.optim.Adam's order and with its defaults.
  explicit Adam(const TensorList& params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
                double eps = 1e-8, double weight_decay = 0.0, bool amsgrad = false, bool maximize = false);
  // Groups carry their own lr and weight_decay; options "beta1", "beta2", "eps", "amsgrad" and
  // "maximize" (the last two: non-zero is on) override the defaults given here.
  explicit Adam(std::vector<ParamGroup> groups, std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
                bool amsgrad = false, bool maximize = false);

  void step() override;

  // "exp_avg" and "exp_avg_sq", and "max_exp_avg_sq" where a group uses amsgrad (PyTorch's names).
  std::vector<std::string> state_names() const override;
  std::vector<std::string> group_state_names(size_t group) const override;
  std::vector<std::string> option_names() const override { return {"beta1", "beta2", "eps", "amsgrad", "maximize"}; }

 protected:
  // AdamW's constructor: `decoupled` weight decay, and `name` in the errors.
  Adam(std::vector<ParamGroup> groups, std::pair<double, double> betas, double eps, bool amsgrad, bool maximize,
       bool decoupled, const char* name);

 private:
  void validate_options() override;
  bool amsgrad(size_t group) const { return option(group, "amsgrad", amsgrad_ ? 1.0 : 0.0) != 0.0; }
  double beta1_, beta2_, eps_;
  bool amsgrad_, maximize_, decoupled_;
  const char* name_;
};

}  // namespace kiln::nn::optim
