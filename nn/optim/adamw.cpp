// AdamW::step: per group, the parameters that have gradients go through foreach_adamw_ (moments
// and step counts created at zero on first use, moments float32 for float16/bfloat16 parameters),
// then their step counts advance once, after every update has read them. No host sync.
#include "nn/optim/adamw.h"

#include <cmath>

#include "core/ops/foreach.h"
#include "kernels/error.h"

namespace kiln::nn::optim {
AdamW::AdamW(const TensorList& params, double lr, std::pair<double, double> betas, double eps, double weight_decay)
    : Optimizer(one_group(params, lr, weight_decay)), beta1_(betas.first), beta2_(betas.second), eps_(eps) {
  validate();
}

AdamW::AdamW(std::vector<ParamGroup> groups, std::pair<double, double> betas, double eps)
    : Optimizer(std::move(groups)), beta1_(betas.first), beta2_(betas.second), eps_(eps) {
  validate();
}

void AdamW::validate() {
  check_options("AdamW");
  for (size_t g = 0; g < groups_.size(); ++g) {
    const double b1 = option(g, "beta1", beta1_), b2 = option(g, "beta2", beta2_), eps = option(g, "eps", eps_);
    const std::string where = groups_.size() > 1 ? " (group " + std::to_string(g) + ")" : "";
    if (!(b1 >= 0.0 && b1 < 1.0) || !(b2 >= 0.0 && b2 < 1.0)) {
      throw Error("AdamW: betas must be in [0, 1), got (" + num_str(b1) + ", " + num_str(b2) + ")" + where);
    }
    if (!(eps >= 0.0) || !std::isfinite(eps)) {
      throw Error("AdamW: eps must be a finite number >= 0, got " + num_str(eps) + where);
    }
  }
}

void AdamW::step() {
  NoGradGuard no_grad;
  TensorList stepped;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Batch b = collect(g);
    if (b.params.empty()) continue;
    const TensorList m = state_for("exp_avg", b), v = state_for("exp_avg_sq", b), steps = steps_for(b);
    foreach_adamw_(b.params, b.grads, m, v, lr_tensor(g), steps, option(g, "beta1", beta1_),
                   option(g, "beta2", beta2_), option(g, "eps", eps_), groups_[g].weight_decay, found_inf(),
                   grad_scale());
    stepped.insert(stepped.end(), steps.begin(), steps.end());
  }
  finish_step(stepped);
}

}  // namespace kiln::nn::optim
