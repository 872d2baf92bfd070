// SGD with momentum, dampening, Nesterov, L2 weight decay and maximize (gradient ascent), as
// torch.optim.SGD computes it, in
// one multi-tensor update per group and dtype. A parameter's momentum buffer starts as its first
// update itself; "first" is read from the parameter's device step count, never from the host.
#pragma once

#include "nn/optim/optimizer.h"

namespace kiln::nn::optim {

class SGD : public Optimizer {
 public:
  // One group of `params`.
  SGD(const TensorList& params, double lr, double momentum = 0.0, double dampening = 0.0, double weight_decay = 0.0,
      bool nesterov = false, bool maximize = false);
  // Groups carry their own lr and weight_decay; options "momentum", "dampening", "nesterov" and
  // "maximize" (the last two: non-zero is on) override the defaults given here.
  explicit SGD(std::vector<ParamGroup> groups, double momentum = 0.0, double dampening = 0.0, bool nesterov = false,
               bool maximize = false);

  void step() override;
  std::vector<std::string> option_names() const override { return {"momentum", "dampening", "nesterov", "maximize"}; }

 protected:
  std::vector<std::string> state_names() const override;
  std::vector<std::string> group_state_names(size_t group) const override;

 private:
  void validate_options() override;
  double momentum_, dampening_;
  bool nesterov_, maximize_;
};

}  // namespace kiln::nn::optim
