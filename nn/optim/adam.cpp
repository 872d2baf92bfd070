// Adam::step: per group, the parameters that have gradients go through foreach_adam_ (moments and
// step counts created at zero on first use, moments float32 for float16/bfloat16 parameters), then
// their step counts advance once, after every update has read them. No host sync.
#include "nn/optim/adam.h"

#include <cmath>

#include "core/ops/foreach.h"
#include "kernels/error.h"
#include "nn/optim/adamw.h"

namespace kiln::nn::optim {

Adam::Adam(const TensorList& params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
           bool amsgrad, bool maximize)
    : Adam(one_group(params, lr, weight_decay), betas, eps, amsgrad, maximize, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, std::pair<double, double> betas, double eps, bool amsgrad, bool maximize)
    : Adam(std::move(groups), betas, eps, amsgrad, maximize, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, std::pair<double, double> betas, double eps, bool amsgrad, bool maximize,
           bool decoupled, const char* name)
    : Optimizer(std::move(groups)),
      beta1_(betas.first),
      beta2_(betas.second),
      eps_(eps),
      amsgrad_(amsgrad),
      maximize_(maximize),
      decoupled_(decoupled),
      name_(name) {
  validate_options();
}

AdamW::AdamW(const TensorList& params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
             bool amsgrad, bool maximize)
    : Adam(one_group(params, lr, weight_decay), betas, eps, amsgrad, maximize, true, "AdamW") {}

AdamW::AdamW(std::vector<ParamGroup> groups, std::pair<double, double> betas, double eps, bool amsgrad, bool maximize)
    : Adam(std::move(groups), betas, eps, amsgrad, maximize, true, "AdamW") {}

void Adam::validate_options() {
  check_options(name_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const double b1 = option(g, "beta1", beta1_), b2 = option(g, "beta2", beta2_), eps = option(g, "eps", eps_);
    const std::string where = groups_.size() > 1 ? " (group " + std::to_string(g) + ")" : "";
    if (!(b1 >= 0.0 && b1 < 1.0) || !(b2 >= 0.0 && b2 < 1.0)) {
      throw Error(std::string(name_) + ": betas must be in [0, 1), got (" + num_str(b1) + ", " + num_str(b2) + ")" +
                  where);
    }
    if (!(eps >= 0.0) || !std::isfinite(eps)) {
      throw Error(std::string(name_) + ": eps must be a finite number >= 0, got " + num_str(eps) + where);
    }
  }
}

std::vector<std::string> Adam::state_names() const {
  for (size_t g = 0; g < groups_.size(); ++g)
    if (amsgrad(g)) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

std::vector<std::string> Adam::group_state_names(size_t group) const {
  if (amsgrad(group)) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::step() {
  NoGradGuard no_grad;
  TensorList stepped;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Batch b = collect(g);
    if (b.params.empty()) continue;
    AdamHyper o;
    o.beta1 = option(g, "beta1", beta1_);
    o.beta2 = option(g, "beta2", beta2_);
    o.eps = option(g, "eps", eps_);
    o.weight_decay = groups_[g].weight_decay;
    o.decoupled_weight_decay = decoupled_;
    o.amsgrad = amsgrad(g);
    o.maximize = option(g, "maximize", maximize_ ? 1.0 : 0.0) != 0.0;
    const TensorList m = state_for("exp_avg", b), v = state_for("exp_avg_sq", b), steps = steps_for(b);
    const TensorList vmax = o.amsgrad ? state_for("max_exp_avg_sq", b) : TensorList();
    foreach_adam_(b.params, b.grads, m, v, vmax, lr_tensor(g), steps, o, found_inf(), grad_scale());
    stepped.insert(stepped.end(), steps.begin(), steps.end());
  }
  finish_step(stepped);
}

}  // namespace kiln::nn::optim
