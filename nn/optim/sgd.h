// SGD with momentum, dampening, Nesterov and L2 weight decay, as torch.optim.SGD computes it, in
// one multi-tensor update per group and dtype. The momentum buffer of the first step is the
// update itself; "first" is read from the group's device step counter, never from the host. So a
// parameter whose first gradient comes after the group's first step starts from a zero buffer,
// (1 - dampening) times the update, where torch.optim.SGD starts it at the update: the same
// without dampening, the default.
#pragma once

#include "nn/optim/optimizer.h"

namespace kiln::nn::optim {

class SGD : public Optimizer {
 public:
  // One group of `params`.
  SGD(const TensorList& params, double lr, double momentum = 0.0, double dampening = 0.0, double weight_decay = 0.0,
      bool nesterov = false);
  // Groups carry their own lr and weight_decay; options "momentum", "dampening" and "nesterov"
  // (non-zero: on) override the defaults given here.
  explicit SGD(std::vector<ParamGroup> groups, double momentum = 0.0, double dampening = 0.0, bool nesterov = false);

  void step() override;

 protected:
  std::vector<std::string> state_names() const override;
  std::vector<std::string> option_names() const override { return {"momentum", "dampening", "nesterov"}; }

 private:
  void validate();
  double momentum_, dampening_;
  bool nesterov_;
};

}  // namespace kiln::nn::optim
