// Adadelta, Rprop and ASGD, composed of tensor ops as nn/optim/composed.h's optimizers are, and as
// torch.optim computes them (same arguments, defaults, option and state names). Each step is a
// few tensor ops per parameter in the state's dtype, reads the learning rate and the step count
// on the device, changes nothing on a gradient scaler's inf/NaN step, and never reads the host.
#pragma once

#include <utility>

#include "nn/optim/optimizer.h"

namespace kiln::nn::optim {

// Adadelta (Zeiler, "ADADELTA: An Adaptive Learning Rate Method"): each element's step is the
// gradient scaled by the ratio of two running RMS values, of past updates and of past gradients,
// so the step has the parameter's units and lr (1.0 by default) only scales it.
class Adadelta : public Optimizer {
 public:
  // One group of `params`; the arguments in torch.optim.Adadelta's order and with its defaults.
  explicit Adadelta(const TensorList& params, double lr = 1.0, double rho = 0.9, double eps = 1e-6,
                    double weight_decay = 0.0, bool maximize = false);
  // Groups carry their own lr and weight_decay; options "rho", "eps" and "maximize" override the
  // defaults given here.
  explicit Adadelta(std::vector<ParamGroup> groups, double rho = 0.9, double eps = 1e-6, bool maximize = false);

  void step() override;
  std::vector<std::string> option_names() const override { return {"rho", "eps", "maximize"}; }
  // "square_avg" and "acc_delta": the running mean squares of the gradients and of the updates.
  std::vector<std::string> state_names() const override { return {"square_avg", "acc_delta"}; }

 private:
  void validate_options() override;
  double rho_, eps_;
  bool maximize_;
};

// Rprop (Riedmiller and Braun, "A Direct Adaptive Method for Faster Backpropagation Learning"):
// only the gradient's sign is used. Each element has its own step size, multiplied by etaplus
// while the sign holds and by etaminus when it flips (and then that element rests one step),
// kept within [step_size_min, step_size_max]. Meant for full-batch training: minibatch noise
// flips the signs. Rprop has no weight decay; a group with one is refused.
class Rprop : public Optimizer {
 public:
  // One group of `params`; the arguments in torch.optim.Rprop's order and with its defaults:
  // etas = (etaminus, etaplus), step_sizes = (min, max). The step sizes start at the lr.
  explicit Rprop(const TensorList& params, double lr = 1e-2, std::pair<double, double> etas = {0.5, 1.2},
                 std::pair<double, double> step_sizes = {1e-6, 50.0}, bool maximize = false);
  // Groups carry their own lr; options "etaminus", "etaplus", "step_size_min", "step_size_max"
  // and "maximize" override the defaults given here.
  explicit Rprop(std::vector<ParamGroup> groups, std::pair<double, double> etas = {0.5, 1.2},
                 std::pair<double, double> step_sizes = {1e-6, 50.0}, bool maximize = false);

  void step() override;
  std::vector<std::string> option_names() const override {
    return {"etaminus", "etaplus", "step_size_min", "step_size_max", "maximize"};
  }
  // "prev": the last gradient (zero where its sign flipped); "step_size": each element's step.
  std::vector<std::string> state_names() const override { return {"prev", "step_size"}; }

 private:
  void validate_options() override;
  double etaminus_, etaplus_, step_size_min_, step_size_max_;
  bool maximize_;
};

// ASGD (Polyak and Juditsky, "Acceleration of Stochastic Approximation by Averaging"): SGD with a
// decaying step eta_t = lr / (1 + lambd lr t)^alpha, which also keeps "ax", the running average of
// the parameter from step t0 on (before it, ax follows the parameter). The average is what the
// method returns: read it from state_dict()["state.<i>.ax"] to evaluate with it. "eta" and "mu"
// (the averaging weight 1 / max(1, t - t0)) are per-parameter scalar states.
class ASGD : public Optimizer {
 public:
  // One group of `params`; the arguments in torch.optim.ASGD's order and with its defaults.
  explicit ASGD(const TensorList& params, double lr = 1e-2, double lambd = 1e-4, double alpha = 0.75, double t0 = 1e6,
                double weight_decay = 0.0, bool maximize = false);
  // Groups carry their own lr and weight_decay; options "lambd", "alpha", "t0" and "maximize"
  // override the defaults given here.
  explicit ASGD(std::vector<ParamGroup> groups, double lambd = 1e-4, double alpha = 0.75, double t0 = 1e6,
                bool maximize = false);

  void step() override;
  std::vector<std::string> option_names() const override { return {"lambd", "alpha", "t0", "maximize"}; }
  std::vector<std::string> state_names() const override { return {"eta", "mu", "ax"}; }
  std::vector<std::string> scalar_state_names() const override { return {"eta", "mu"}; }

 private:
  void validate_options() override;
  double lambd_, alpha_, t0_;
  bool maximize_;
};

}  // namespace kiln::nn::optim
