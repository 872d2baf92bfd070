// RMSprop and Adagrad, as torch.optim computes them (weight decay added to the gradient, maximize,
// RMSprop's momentum and centered variant, Adagrad's learning-rate decay and initial accumulator).
// Unlike SGD and Adam they have no fused kernels: each step is a few tensor ops per parameter
// (docs/optimizers.md), in the state's dtype (float32, or float64 for float64 parameters). They
// keep the base's contract all the same: the learning rate and step count are read on the
// device, an inf/NaN step of a gradient scaler changes nothing, and no step reads the host.
#pragma once

#include "nn/optim/optimizer.h"

namespace kiln::nn::optim {

class RMSprop : public Optimizer {
 public:
  // One group of `params`; the arguments in torch.optim.RMSprop's order and with its defaults.
  explicit RMSprop(const TensorList& params, double lr = 1e-2, double alpha = 0.99, double eps = 1e-8,
                   double weight_decay = 0.0, double momentum = 0.0, bool centered = false, bool maximize = false);
  // Groups carry their own lr and weight_decay; options "alpha", "eps", "momentum", "centered" and
  // "maximize" (the last two: non-zero is on) override the defaults given here.
  explicit RMSprop(std::vector<ParamGroup> groups, double alpha = 0.99, double eps = 1e-8, double momentum = 0.0,
                   bool centered = false, bool maximize = false);

  void step() override;
  std::vector<std::string> option_names() const override {
    return {"alpha", "eps", "momentum", "centered", "maximize"};
  }
  // "square_avg", and "momentum_buffer" and "grad_avg" where a group uses momentum or centered.
  std::vector<std::string> state_names() const override;
  std::vector<std::string> group_state_names(size_t group) const override;

 private:
  void validate_options() override;
  double alpha_, eps_, momentum_;
  bool centered_, maximize_;
};

class Adagrad : public Optimizer {
 public:
  // One group of `params`; the arguments in torch.optim.Adagrad's order and with its defaults.
  explicit Adagrad(const TensorList& params, double lr = 1e-2, double lr_decay = 0.0, double weight_decay = 0.0,
                   double initial_accumulator_value = 0.0, double eps = 1e-10, bool maximize = false);
  // Groups carry their own lr and weight_decay; options "lr_decay", "eps",
  // "initial_accumulator_value" and "maximize" override the defaults given here.
  explicit Adagrad(std::vector<ParamGroup> groups, double lr_decay = 0.0, double initial_accumulator_value = 0.0,
                   double eps = 1e-10, bool maximize = false);

  void step() override;
  std::vector<std::string> option_names() const override {
    return {"lr_decay", "eps", "initial_accumulator_value", "maximize"};
  }
  // "sum": the running sum of squared gradients.
  std::vector<std::string> state_names() const override { return {"sum"}; }

 private:
  void validate_options() override;
  double lr_decay_, initial_accumulator_value_, eps_;
  bool maximize_;
};

}  // namespace kiln::nn::optim
