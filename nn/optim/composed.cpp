// The composed optimizers' steps (RMSprop, Adagrad, Adamax, RAdam, NAdam): per group, each
// parameter that has a gradient is updated by tensor ops (the formulas of torch.optim, written as
// comments beside them), its state and the parameter committed unless the gradient scaler found
// inf/NaN; then the group's step counts advance.
#include "nn/optim/composed.h"

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "kernels/error.h"
#include "nn/optim/composed_helpers.h"

namespace kiln::nn::optim {
using detail::check_adam_like;
using detail::check_non_negative;
using detail::flag;
using detail::group_note;
using detail::step_number;

// --- RMSprop --------------------------------------------------------------------------------

RMSprop::RMSprop(const TensorList& params, double lr, double alpha, double eps, double weight_decay, double momentum,
                 bool centered, bool maximize)
    : RMSprop(one_group(params, lr, weight_decay), alpha, eps, momentum, centered, maximize) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, double alpha, double eps, double momentum, bool centered,
                 bool maximize)
    : Optimizer(std::move(groups)),
      alpha_(alpha),
      eps_(eps),
      momentum_(momentum),
      centered_(centered),
      maximize_(maximize) {
  validate_options();
}

void RMSprop::validate_options() {
  check_options("RMSprop");
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string where = group_note(groups_.size(), g);
    const double alpha = option(g, "alpha", alpha_);
    if (!(alpha >= 0.0 && alpha <= 1.0)) throw Error("RMSprop: alpha must be in [0, 1], got " + num_str(alpha) + where);
    check_non_negative("RMSprop", "eps", option(g, "eps", eps_), where);
    check_non_negative("RMSprop", "momentum", option(g, "momentum", momentum_), where);
    check_non_negative("RMSprop", "weight_decay", groups_[g].weight_decay, where);
  }
}

std::vector<std::string> RMSprop::state_names() const {
  std::vector<std::string> names{"square_avg"};
  bool momentum = false, centered = false;
  for (size_t g = 0; g < groups_.size(); ++g) {
    momentum = momentum || option(g, "momentum", momentum_) != 0.0;
    centered = centered || flag(option(g, "centered", centered_ ? 1.0 : 0.0));
  }
  if (momentum) names.push_back("momentum_buffer");
  if (centered) names.push_back("grad_avg");
  return names;
}

std::vector<std::string> RMSprop::group_state_names(size_t group) const {
  std::vector<std::string> names{"square_avg"};
  if (option(group, "momentum", momentum_) != 0.0) names.push_back("momentum_buffer");
  if (flag(option(group, "centered", centered_ ? 1.0 : 0.0))) names.push_back("grad_avg");
  return names;
}

void RMSprop::step() {
  NoGradGuard no_grad;
  TensorList stepped;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Batch b = collect(g);
    if (b.params.empty()) continue;
    const double alpha = option(g, "alpha", alpha_), eps = option(g, "eps", eps_);
    const double momentum = option(g, "momentum", momentum_);
    const bool centered = flag(option(g, "centered", centered_ ? 1.0 : 0.0));
    const bool maximize = flag(option(g, "maximize", maximize_ ? 1.0 : 0.0));
    const TensorList sq = state_for("square_avg", b);
    const TensorList bufs = momentum != 0.0 ? state_for("momentum_buffer", b) : TensorList();
    const TensorList avgs = centered ? state_for("grad_avg", b) : TensorList();
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = b.params[k];
      const Tensor grad = composed_grad(p, b.grads[k], groups_[g].weight_decay, maximize);
      const Tensor lr = lr_tensor(g).to(grad.dtype());
      // square_avg = alpha square_avg + (1 - alpha) g^2
      const Tensor square_avg = sq[k] * alpha + grad * grad * (1.0 - alpha);
      Tensor denom;
      if (centered) {
        // grad_avg = alpha grad_avg + (1 - alpha) g; denom = sqrt(square_avg - grad_avg^2) + eps
        const Tensor grad_avg = avgs[k] * alpha + grad * (1.0 - alpha);
        denom = sqrt(square_avg - grad_avg * grad_avg) + eps;
        commit(avgs[k], grad_avg);
      } else {
        denom = sqrt(square_avg) + eps;  // denom = sqrt(square_avg) + eps
      }
      commit(sq[k], square_avg);
      if (momentum != 0.0) {
        // buf = momentum buf + g / denom; param -= lr buf
        const Tensor buf = bufs[k] * momentum + grad / denom;
        commit(bufs[k], buf);
        commit(p, p.to(grad.dtype()) - lr * buf);
      } else {
        commit(p, p.to(grad.dtype()) - lr * grad / denom);  // param -= lr g / denom
      }
    }
    const TensorList steps = steps_for(b);
    stepped.insert(stepped.end(), steps.begin(), steps.end());
  }
  finish_step(stepped);
}

// --- Adagrad --------------------------------------------------------------------------------

Adagrad::Adagrad(const TensorList& params, double lr, double lr_decay, double weight_decay,
                 double initial_accumulator_value, double eps, bool maximize)
    : Adagrad(one_group(params, lr, weight_decay), lr_decay, initial_accumulator_value, eps, maximize) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, double lr_decay, double initial_accumulator_value, double eps,
                 bool maximize)
    : Optimizer(std::move(groups)),
      lr_decay_(lr_decay),
      initial_accumulator_value_(initial_accumulator_value),
      eps_(eps),
      maximize_(maximize) {
  validate_options();
}

void Adagrad::validate_options() {
  check_options("Adagrad");
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string where = group_note(groups_.size(), g);
    check_non_negative("Adagrad", "lr_decay", option(g, "lr_decay", lr_decay_), where);
    check_non_negative("Adagrad", "initial_accumulator_value",
                       option(g, "initial_accumulator_value", initial_accumulator_value_), where);
    check_non_negative("Adagrad", "eps", option(g, "eps", eps_), where);
    check_non_negative("Adagrad", "weight_decay", groups_[g].weight_decay, where);
  }
}

void Adagrad::step() {
  NoGradGuard no_grad;
  TensorList stepped;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Batch b = collect(g);
    if (b.params.empty()) continue;
    const double lr_decay = option(g, "lr_decay", lr_decay_), eps = option(g, "eps", eps_);
    const bool maximize = flag(option(g, "maximize", maximize_ ? 1.0 : 0.0));
    const TensorList sums = state_for("sum", b, option(g, "initial_accumulator_value", initial_accumulator_value_));
    const TensorList steps = steps_for(b);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = b.params[k];
      const Tensor grad = composed_grad(p, b.grads[k], groups_[g].weight_decay, maximize);
      // clr = lr / (1 + (step - 1) lr_decay), step counting this one (the device count before it)
      const Tensor clr = lr_tensor(g).to(grad.dtype()) / (steps[k].to(grad.dtype()) * lr_decay + 1.0);
      const Tensor sum = sums[k] + grad * grad;  // sum += g^2
      commit(sums[k], sum);
      commit(p, p.to(grad.dtype()) - clr * grad / (sqrt(sum) + eps));  // param -= clr g / (sqrt(sum) + eps)
    }
    stepped.insert(stepped.end(), steps.begin(), steps.end());
  }
  finish_step(stepped);
}

// --- Adamax ---------------------------------------------------------------------------------

Adamax::Adamax(const TensorList& params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
               bool maximize)
    : Adamax(one_group(params, lr, weight_decay), betas, eps, maximize) {}

Adamax::Adamax(std::vector<ParamGroup> groups, std::pair<double, double> betas, double eps, bool maximize)
    : Optimizer(std::move(groups)), beta1_(betas.first), beta2_(betas.second), eps_(eps), maximize_(maximize) {
  validate_options();
}

void Adamax::validate_options() {
  check_options("Adamax");
  check_adam_like(*this, "Adamax", beta1_, beta2_, eps_);
}

void Adamax::step() {
  NoGradGuard no_grad;
  TensorList stepped;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Batch b = collect(g);
    if (b.params.empty()) continue;
    const double beta1 = option(g, "beta1", beta1_), beta2 = option(g, "beta2", beta2_), eps = option(g, "eps", eps_);
    const bool maximize = flag(option(g, "maximize", maximize_ ? 1.0 : 0.0));
    const TensorList m = state_for("exp_avg", b), u = state_for("exp_inf", b), steps = steps_for(b);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = b.params[k];
      const Tensor grad = composed_grad(p, b.grads[k], groups_[g].weight_decay, maximize);
      const Tensor exp_avg = m[k] * beta1 + grad * (1.0 - beta1);     // m = b1 m + (1 - b1) g
      const Tensor exp_inf = maximum(u[k] * beta2, abs(grad) + eps);  // u = max(b2 u, |g| + eps)
      // param -= lr / (1 - b1^t) m / u
      const Tensor clr = lr_tensor(g).to(grad.dtype()) / (1.0 - pow(beta1, step_number(steps[k], grad.dtype())));
      commit(m[k], exp_avg);
      commit(u[k], exp_inf);
      commit(p, p.to(grad.dtype()) - clr * exp_avg / exp_inf);
    }
    stepped.insert(stepped.end(), steps.begin(), steps.end());
  }
  finish_step(stepped);
}

// --- RAdam ----------------------------------------------------------------------------------

RAdam::RAdam(const TensorList& params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
             bool decoupled_weight_decay, bool maximize)
    : RAdam(one_group(params, lr, weight_decay), betas, eps, decoupled_weight_decay, maximize) {}

RAdam::RAdam(std::vector<ParamGroup> groups, std::pair<double, double> betas, double eps, bool decoupled_weight_decay,
             bool maximize)
    : Optimizer(std::move(groups)),
      beta1_(betas.first),
      beta2_(betas.second),
      eps_(eps),
      decoupled_(decoupled_weight_decay),
      maximize_(maximize) {
  validate_options();
}

void RAdam::validate_options() {
  check_options("RAdam");
  check_adam_like(*this, "RAdam", beta1_, beta2_, eps_);
}

void RAdam::step() {
  NoGradGuard no_grad;
  TensorList stepped;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Batch b = collect(g);
    if (b.params.empty()) continue;
    const double beta1 = option(g, "beta1", beta1_), beta2 = option(g, "beta2", beta2_), eps = option(g, "eps", eps_);
    const bool decoupled = flag(option(g, "decoupled_weight_decay", decoupled_ ? 1.0 : 0.0));
    const bool maximize = flag(option(g, "maximize", maximize_ ? 1.0 : 0.0));
    const double wd = groups_[g].weight_decay;
    // rho_inf: the largest length of the approximated simple moving average.
    const double rho_inf = 2.0 / (1.0 - beta2) - 1.0;
    const TensorList m = state_for("exp_avg", b), v = state_for("exp_avg_sq", b), steps = steps_for(b);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = b.params[k];
      const Tensor grad = composed_grad(p, b.grads[k], decoupled ? 0.0 : wd, maximize);
      const DType dt = grad.dtype();
      const Tensor lr = lr_tensor(g).to(dt);
      // Decoupled decay: param *= 1 - lr wd, before the update.
      const Tensor base = decoupled && wd != 0.0 ? p.to(dt) * (1.0 - lr * wd) : p.to(dt);
      const Tensor exp_avg = m[k] * beta1 + grad * (1.0 - beta1);
      const Tensor exp_avg_sq = v[k] * beta2 + grad * grad * (1.0 - beta2);
      const Tensor t = step_number(steps[k], dt);
      const Tensor beta2_t = pow(beta2, t), bc2 = 1.0 - beta2_t;
      const Tensor corrected = exp_avg / (1.0 - pow(beta1, t));  // m / (1 - b1^t)
      // rho_t = rho_inf - 2 t b2^t / (1 - b2^t); past 5 the step is rectified and adaptive:
      // m_hat rect sqrt(1 - b2^t) / (sqrt(v) + eps), with
      // rect = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t)).
      const Tensor rho_t = rho_inf - t * beta2_t * 2.0 / bc2;
      const Tensor rect = sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / (rho_t * ((rho_inf - 4.0) * (rho_inf - 2.0))));
      const Tensor adaptive = corrected * rect * sqrt(bc2) / (sqrt(exp_avg_sq) + eps);
      commit(m[k], exp_avg);
      commit(v[k], exp_avg_sq);
      commit(p, base - lr * where(gt(rho_t, 5.0), adaptive, corrected));
    }
    stepped.insert(stepped.end(), steps.begin(), steps.end());
  }
  finish_step(stepped);
}

// --- NAdam ----------------------------------------------------------------------------------

NAdam::NAdam(const TensorList& params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
             double momentum_decay, bool decoupled_weight_decay, bool maximize)
    : NAdam(one_group(params, lr, weight_decay), betas, eps, momentum_decay, decoupled_weight_decay, maximize) {}

NAdam::NAdam(std::vector<ParamGroup> groups, std::pair<double, double> betas, double eps, double momentum_decay,
             bool decoupled_weight_decay, bool maximize)
    : Optimizer(std::move(groups)),
      beta1_(betas.first),
      beta2_(betas.second),
      eps_(eps),
      momentum_decay_(momentum_decay),
      decoupled_(decoupled_weight_decay),
      maximize_(maximize) {
  validate_options();
}

void NAdam::validate_options() {
  check_options("NAdam");
  check_adam_like(*this, "NAdam", beta1_, beta2_, eps_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    check_non_negative("NAdam", "momentum_decay", option(g, "momentum_decay", momentum_decay_),
                       group_note(groups_.size(), g));
  }
}

void NAdam::step() {
  NoGradGuard no_grad;
  TensorList stepped;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Batch b = collect(g);
    if (b.params.empty()) continue;
    const double beta1 = option(g, "beta1", beta1_), beta2 = option(g, "beta2", beta2_), eps = option(g, "eps", eps_);
    const double psi = option(g, "momentum_decay", momentum_decay_);
    const bool decoupled = flag(option(g, "decoupled_weight_decay", decoupled_ ? 1.0 : 0.0));
    const bool maximize = flag(option(g, "maximize", maximize_ ? 1.0 : 0.0));
    const double wd = groups_[g].weight_decay;
    const TensorList m = state_for("exp_avg", b), v = state_for("exp_avg_sq", b);
    const TensorList mu_products = state_for("mu_product", b, 1.0), steps = steps_for(b);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = b.params[k];
      const Tensor grad = composed_grad(p, b.grads[k], decoupled ? 0.0 : wd, maximize);
      const DType dt = grad.dtype();
      const Tensor lr = lr_tensor(g).to(dt);
      const Tensor base = decoupled && wd != 0.0 ? p.to(dt) * (1.0 - lr * wd) : p.to(dt);
      const Tensor t = step_number(steps[k], dt);
      // The momentum schedule (Dozat's warming momentum): mu_t = b1 (1 - 0.96^(t psi) / 2), and
      // the product of every mu so far, which stands where Adam has b1^t.
      const Tensor mu = (1.0 - pow(0.96, t * psi) * 0.5) * beta1;
      const Tensor mu_next = (1.0 - pow(0.96, (t + 1.0) * psi) * 0.5) * beta1;
      const Tensor mu_product = mu_products[k] * mu;
      const Tensor exp_avg = m[k] * beta1 + grad * (1.0 - beta1);
      const Tensor exp_avg_sq = v[k] * beta2 + grad * grad * (1.0 - beta2);
      // denom = sqrt(v / (1 - b2^t)) + eps; the step mixes the gradient and the first moment: param
      // -= lr (1 - mu) / (1 - prod mu) g / denom + lr mu_next / (1 - prod mu mu_next) m / denom
      const Tensor denom = sqrt(exp_avg_sq / (1.0 - pow(beta2, t))) + eps;
      const Tensor update =
          grad * ((1.0 - mu) / (1.0 - mu_product)) + exp_avg * (mu_next / (1.0 - mu_product * mu_next));
      commit(m[k], exp_avg);
      commit(v[k], exp_avg_sq);
      commit(mu_products[k], mu_product);
      commit(p, base - lr * update / denom);
    }
    stepped.insert(stepped.end(), steps.begin(), steps.end());
  }
  finish_step(stepped);
}

}  // namespace kiln::nn::optim
