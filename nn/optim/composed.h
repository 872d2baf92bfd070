// The optimizers composed of tensor ops: RMSprop, Adagrad, Adamax, RAdam and NAdam, as torch.optim
// computes them (weight decay added to the gradient, maximize, RMSprop's momentum and centered
// variant, Adagrad's learning-rate decay and initial accumulator, RAdam's and NAdam's decoupled
// decay; nn/optim/classic.h has Adadelta, Rprop and ASGD). Unlike
// SGD and Adam they have no fused kernels: each step is a few tensor ops per parameter
// (docs/optimizers.md), in the state's dtype (float32, or float64 for float64 parameters). They
// keep the base's contract all the same: the learning rate and step count are read on the
// device, an inf/NaN step of a gradient scaler changes nothing, and no step reads the host.
#pragma once

#include <utility>

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

class Adamax : public Optimizer {
 public:
  // One group of `params`; the arguments in torch.optim.Adamax's order and with its defaults.
  explicit Adamax(const TensorList& params, double lr = 2e-3, std::pair<double, double> betas = {0.9, 0.999},
                  double eps = 1e-8, double weight_decay = 0.0, bool maximize = false);
  // Groups carry their own lr and weight_decay; options "beta1", "beta2", "eps" and "maximize"
  // override the defaults given here.
  explicit Adamax(std::vector<ParamGroup> groups, std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
                  bool maximize = false);

  void step() override;
  std::vector<std::string> option_names() const override { return {"beta1", "beta2", "eps", "maximize"}; }
  // "exp_avg" and "exp_inf": the first moment and the decaying infinity norm of the gradients.
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_inf"}; }

 private:
  void validate_options() override;
  double beta1_, beta2_, eps_;
  bool maximize_;
};

// RAdam (Liu et al., "On the Variance of the Adaptive Learning Rate and Beyond"): Adam whose
// adaptive step is scaled by a rectification term once the second moment's variance is tractable
// (rho_t > 5), and plain momentum SGD on the bias-corrected first moment before that.
class RAdam : public Optimizer {
 public:
  // One group of `params`; the arguments in torch.optim.RAdam's order and with its defaults.
  explicit RAdam(const TensorList& params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
                 double eps = 1e-8, double weight_decay = 0.0, bool decoupled_weight_decay = false,
                 bool maximize = false);
  // Groups carry their own lr and weight_decay; options "beta1", "beta2", "eps",
  // "decoupled_weight_decay" and "maximize" override the defaults given here.
  explicit RAdam(std::vector<ParamGroup> groups, std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
                 bool decoupled_weight_decay = false, bool maximize = false);

  void step() override;
  std::vector<std::string> option_names() const override {
    return {"beta1", "beta2", "eps", "decoupled_weight_decay", "maximize"};
  }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  void validate_options() override;
  double beta1_, beta2_, eps_;
  bool decoupled_, maximize_;
};

// NAdam (Dozat, "Incorporating Nesterov Momentum into Adam"): Adam whose step looks ahead with
// the next step's momentum, with a momentum that warms up over the first few thousand steps
// (mu_t = beta1 (1 - 0.96^(t momentum_decay) / 2)). The running product of those momenta is a
// per-parameter scalar state, "mu_product".
class NAdam : public Optimizer {
 public:
  // One group of `params`; the arguments in torch.optim.NAdam's order and with its defaults.
  explicit NAdam(const TensorList& params, double lr = 2e-3, std::pair<double, double> betas = {0.9, 0.999},
                 double eps = 1e-8, double weight_decay = 0.0, double momentum_decay = 4e-3,
                 bool decoupled_weight_decay = false, bool maximize = false);
  // Groups carry their own lr and weight_decay; options "beta1", "beta2", "eps", "momentum_decay",
  // "decoupled_weight_decay" and "maximize" override the defaults given here.
  explicit NAdam(std::vector<ParamGroup> groups, std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
                 double momentum_decay = 4e-3, bool decoupled_weight_decay = false, bool maximize = false);

  void step() override;
  std::vector<std::string> option_names() const override {
    return {"beta1", "beta2", "eps", "momentum_decay", "decoupled_weight_decay", "maximize"};
  }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq", "mu_product"}; }
  std::vector<std::string> scalar_state_names() const override { return {"mu_product"}; }

 private:
  void validate_options() override;
  double beta1_, beta2_, eps_, momentum_decay_;
  bool decoupled_, maximize_;
};

}  // namespace kiln::nn::optim
