// Adadelta's, Rprop's and ASGD's steps: per group, each parameter that has a gradient is updated by
// tensor ops (torch.optim's formulas, written as comments beside them), its state and the parameter
// committed unless the gradient scaler found inf/NaN; then the group's step counts advance.
#include "nn/optim/classic.h"

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "kernels/error.h"
#include "nn/optim/composed_helpers.h"

namespace kiln::nn::optim {

using detail::check_non_negative;
using detail::flag;
using detail::group_note;
using detail::step_number;

// --- Adadelta -------------------------------------------------------------------------------

Adadelta::Adadelta(const TensorList& params, double lr, double rho, double eps, double weight_decay, bool maximize)
    : Adadelta(one_group(params, lr, weight_decay), rho, eps, maximize) {}

Adadelta::Adadelta(std::vector<ParamGroup> groups, double rho, double eps, bool maximize)
    : Optimizer(std::move(groups)), rho_(rho), eps_(eps), maximize_(maximize) {
  validate_options();
}

void Adadelta::validate_options() {
  check_options("Adadelta");
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string where = group_note(groups_.size(), g);
    const double rho = option(g, "rho", rho_);
    if (!(rho >= 0.0 && rho <= 1.0)) throw Error("Adadelta: rho must be in [0, 1], got " + num_str(rho) + where);
    check_non_negative("Adadelta", "eps", option(g, "eps", eps_), where);
    check_non_negative("Adadelta", "weight_decay", groups_[g].weight_decay, where);
  }
}

void Adadelta::step() {
  NoGradGuard no_grad;
  TensorList stepped;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Batch b = collect(g);
    if (b.params.empty()) continue;
    const double rho = option(g, "rho", rho_), eps = option(g, "eps", eps_);
    const bool maximize = flag(option(g, "maximize", maximize_ ? 1.0 : 0.0));
    const TensorList sq = state_for("square_avg", b), acc = state_for("acc_delta", b);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = b.params[k];
      const Tensor grad = composed_grad(p, b.grads[k], groups_[g].weight_decay, maximize);
      // square_avg = rho square_avg + (1 - rho) g^2
      const Tensor square_avg = sq[k] * rho + grad * grad * (1.0 - rho);
      // delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) g, with acc_delta before this step
      const Tensor delta = sqrt(acc[k] + eps) / sqrt(square_avg + eps) * grad;
      // acc_delta = rho acc_delta + (1 - rho) delta^2; param -= lr delta
      const Tensor acc_delta = acc[k] * rho + delta * delta * (1.0 - rho);
      commit(sq[k], square_avg);
      commit(acc[k], acc_delta);
      commit(p, p.to(grad.dtype()) - lr_tensor(g).to(grad.dtype()) * delta);
    }
    const TensorList steps = steps_for(b);
    stepped.insert(stepped.end(), steps.begin(), steps.end());
  }
  finish_step(stepped);
}

// --- Rprop ----------------------------------------------------------------------------------

Rprop::Rprop(const TensorList& params, double lr, std::pair<double, double> etas, std::pair<double, double> step_sizes,
             bool maximize)
    : Rprop(one_group(params, lr, 0.0), etas, step_sizes, maximize) {}

Rprop::Rprop(std::vector<ParamGroup> groups, std::pair<double, double> etas, std::pair<double, double> step_sizes,
             bool maximize)
    : Optimizer(std::move(groups)),
      etaminus_(etas.first),
      etaplus_(etas.second),
      step_size_min_(step_sizes.first),
      step_size_max_(step_sizes.second),
      maximize_(maximize) {
  validate_options();
}

void Rprop::validate_options() {
  check_options("Rprop");
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string where = group_note(groups_.size(), g);
    const double minus = option(g, "etaminus", etaminus_), plus = option(g, "etaplus", etaplus_);
    if (!(minus > 0.0 && minus < 1.0 && plus > 1.0 && std::isfinite(plus))) {
      throw Error("Rprop: etas must satisfy 0 < etaminus < 1 < etaplus, got (" + num_str(minus) + ", " + num_str(plus) +
                  ")" + where);
    }
    const double lo = option(g, "step_size_min", step_size_min_), hi = option(g, "step_size_max", step_size_max_);
    if (!(lo >= 0.0 && lo <= hi && std::isfinite(hi))) {
      throw Error("Rprop: step_sizes must satisfy 0 <= min <= max, both finite, got (" + num_str(lo) + ", " +
                  num_str(hi) + ")" + where);
    }
    if (groups_[g].weight_decay != 0.0) {
      throw Error("Rprop: has no weight decay, got weight_decay " + num_str(groups_[g].weight_decay) + where);
    }
  }
}

void Rprop::step() {
  NoGradGuard no_grad;
  TensorList stepped;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Batch b = collect(g);
    if (b.params.empty()) continue;
    const double minus = option(g, "etaminus", etaminus_), plus = option(g, "etaplus", etaplus_);
    const double lo = option(g, "step_size_min", step_size_min_), hi = option(g, "step_size_max", step_size_max_);
    const bool maximize = flag(option(g, "maximize", maximize_ ? 1.0 : 0.0));
    // The step sizes start at the group's learning rate when a parameter is first stepped.
    const TensorList prevs = state_for("prev", b), sizes = state_for("step_size", b, groups_[g].lr);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = b.params[k];
      const Tensor grad = composed_grad(p, b.grads[k], 0.0, maximize);
      // The sign of g prev: kept (> 0) grows the step by etaplus, flipped (< 0) shrinks it by
      // etaminus and zeroes this gradient, so the element rests and the next step takes it afresh.
      const Tensor agree = grad * prevs[k];
      const Tensor flipped = lt(agree, 0.0);
      const Tensor scaled = where(gt(agree, 0.0), sizes[k] * plus, where(flipped, sizes[k] * minus, sizes[k]));
      const Tensor step_size = clamp(scaled, lo, hi);
      const Tensor kept = where(flipped, 0.0, grad);
      commit(sizes[k], step_size);
      commit(prevs[k], kept);
      commit(p, p.to(grad.dtype()) - sign(kept) * step_size);  // param -= sign(g) step_size
    }
    const TensorList steps = steps_for(b);
    stepped.insert(stepped.end(), steps.begin(), steps.end());
  }
  finish_step(stepped);
}

// --- ASGD -----------------------------------------------------------------------------------

ASGD::ASGD(const TensorList& params, double lr, double lambd, double alpha, double t0, double weight_decay,
           bool maximize)
    : ASGD(one_group(params, lr, weight_decay), lambd, alpha, t0, maximize) {}

ASGD::ASGD(std::vector<ParamGroup> groups, double lambd, double alpha, double t0, bool maximize)
    : Optimizer(std::move(groups)), lambd_(lambd), alpha_(alpha), t0_(t0), maximize_(maximize) {
  validate_options();
}

void ASGD::validate_options() {
  check_options("ASGD");
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string where = group_note(groups_.size(), g);
    check_non_negative("ASGD", "lambd", option(g, "lambd", lambd_), where);
    check_non_negative("ASGD", "alpha", option(g, "alpha", alpha_), where);
    check_non_negative("ASGD", "t0", option(g, "t0", t0_), where);
    check_non_negative("ASGD", "weight_decay", groups_[g].weight_decay, where);
  }
}

void ASGD::step() {
  NoGradGuard no_grad;
  TensorList stepped;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Batch b = collect(g);
    if (b.params.empty()) continue;
    const double lambd = option(g, "lambd", lambd_), alpha = option(g, "alpha", alpha_), t0 = option(g, "t0", t0_);
    const bool maximize = flag(option(g, "maximize", maximize_ ? 1.0 : 0.0));
    // eta starts at the group's learning rate, mu at 1 (ax follows the parameter).
    const TensorList etas = state_for("eta", b, groups_[g].lr), mus = state_for("mu", b, 1.0);
    const TensorList axs = state_for("ax", b), steps = steps_for(b);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = b.params[k];
      const Tensor grad = composed_grad(p, b.grads[k], groups_[g].weight_decay, maximize);
      const DType dt = grad.dtype();
      // param = param (1 - lambd eta) - eta g, with the eta of the step before
      const Tensor param = p.to(dt) * (1.0 - etas[k] * lambd) - etas[k] * grad;
      // ax += mu (param - ax); at mu = 1 ax is the parameter itself
      const Tensor ax = where(eq(mus[k], 1.0), param, axs[k] + (param - axs[k]) * mus[k]);
      // For the next step: eta = lr / (1 + lambd lr t)^alpha, mu = 1 / max(1, t - t0), with t
      // this step's number and lr the group's now.
      const Tensor t = step_number(steps[k], DType::Float64), lr = lr_tensor(g);
      const Tensor eta = lr / pow(lr * t * lambd + 1.0, alpha);
      const Tensor mu = 1.0 / clamp(t - t0, 1.0, std::nullopt);
      commit(p, param);
      commit(axs[k], ax);
      commit(etas[k], eta);
      commit(mus[k], mu);
    }
    stepped.insert(stepped.end(), steps.begin(), steps.end());
  }
  finish_step(stepped);
}

}  // namespace kiln::nn::optim
