// SGD::step: per group, the parameters that have gradients go through foreach_sgd_ (momentum
// buffers and step counts created at zero on first use), then their step counts advance once. No
// host sync.
#include "nn/optim/sgd.h"

#include <cmath>

#include "core/ops/foreach.h"
#include "kernels/error.h"

namespace kiln::nn::optim {
SGD::SGD(const TensorList& params, double lr, double momentum, double dampening, double weight_decay, bool nesterov,
         bool maximize)
    : SGD(one_group(params, lr, weight_decay), momentum, dampening, nesterov, maximize) {}

SGD::SGD(std::vector<ParamGroup> groups, double momentum, double dampening, bool nesterov, bool maximize)
    : Optimizer(std::move(groups)),
      momentum_(momentum),
      dampening_(dampening),
      nesterov_(nesterov),
      maximize_(maximize) {
  validate_options();
}

void SGD::validate_options() {
  check_options("SGD");
  for (size_t g = 0; g < groups_.size(); ++g) {
    const double momentum = option(g, "momentum", momentum_);
    const double dampening = option(g, "dampening", dampening_);
    const bool nesterov = option(g, "nesterov", nesterov_ ? 1.0 : 0.0) != 0.0;
    const std::string where = groups_.size() > 1 ? " (group " + std::to_string(g) + ")" : "";
    if (!(momentum >= 0.0) || !std::isfinite(momentum)) {
      throw Error("SGD: momentum must be a finite number >= 0, got " + num_str(momentum) + where);
    }
    if (!std::isfinite(dampening)) {
      throw Error("SGD: dampening must be finite, got " + num_str(dampening) + where);
    }
    if (nesterov && (momentum <= 0.0 || dampening != 0.0)) {
      throw Error("SGD: Nesterov momentum needs momentum > 0 and dampening == 0, got momentum=" + num_str(momentum) +
                  " dampening=" + num_str(dampening) + where);
    }
  }
}

std::vector<std::string> SGD::state_names() const {
  // Momentum buffers exist only where some group uses momentum; a state_dict has none otherwise.
  for (size_t g = 0; g < groups_.size(); ++g)
    if (option(g, "momentum", momentum_) != 0.0) return {"momentum_buffer"};
  return {};
}

std::vector<std::string> SGD::group_state_names(size_t group) const {
  if (option(group, "momentum", momentum_) != 0.0) return {"momentum_buffer"};
  return {};
}

void SGD::step() {
  NoGradGuard no_grad;
  TensorList stepped;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Batch b = collect(g);
    if (b.params.empty()) continue;
    const double momentum = option(g, "momentum", momentum_);
    const double dampening = option(g, "dampening", dampening_);
    const bool nesterov = option(g, "nesterov", nesterov_ ? 1.0 : 0.0) != 0.0;
    const bool maximize = option(g, "maximize", maximize_ ? 1.0 : 0.0) != 0.0;
    const TensorList bufs = momentum != 0.0 ? state_for("momentum_buffer", b) : TensorList();
    const TensorList steps = steps_for(b);
    foreach_sgd_(b.params, b.grads, bufs, lr_tensor(g), momentum, dampening, nesterov, groups_[g].weight_decay, steps,
                 found_inf(), grad_scale(), maximize);
    stepped.insert(stepped.end(), steps.begin(), steps.end());
  }
  finish_step(stepped);
}

}  // namespace kiln::nn::optim
