// Schedules and the scheduler. Steps before 0 count as step 0, so a schedule never returns a
// negative or growing-backwards rate.
#include "nn/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <utility>

#include "kernels/error.h"

namespace kiln::nn::optim {

namespace {

void check_base(const char* op, double base_lr) {
  if (!(base_lr >= 0.0) || !std::isfinite(base_lr)) {
    throw Error(std::string(op) + ": base_lr must be a finite number >= 0, got " + num_str(base_lr));
  }
}

void check_gamma(const char* op, double gamma) {
  if (!(gamma > 0.0) || !std::isfinite(gamma)) {
    throw Error(std::string(op) + ": gamma must be a finite number > 0, got " + num_str(gamma));
  }
}

}  // namespace

double warmup_cosine_lr(int64_t step, double base_lr, int64_t warmup_steps, int64_t total_steps, double min_lr) {
  if (!(base_lr >= 0.0) || !(min_lr >= 0.0) || !std::isfinite(base_lr) || !std::isfinite(min_lr)) {
    throw Error("warmup_cosine_lr: base_lr and min_lr must be finite numbers >= 0, got base_lr=" + num_str(base_lr) +
                " min_lr=" + num_str(min_lr));
  }
  if (warmup_steps < 0 || total_steps < warmup_steps) {
    throw Error("warmup_cosine_lr: needs 0 <= warmup_steps <= total_steps, got warmup_steps=" +
                std::to_string(warmup_steps) + " total_steps=" + std::to_string(total_steps));
  }
  if (step < 0) step = 0;
  if (step < warmup_steps) {
    // The fraction first: base_lr * (step + 1) overflows to infinity for rates near DBL_MAX.
    return base_lr * (static_cast<double>(step + 1) / static_cast<double>(warmup_steps + 1));
  }
  if (step >= total_steps) return min_lr;
  const double ratio = static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return min_lr + coeff * (base_lr - min_lr);
}

double step_lr(int64_t step, double base_lr, int64_t step_size, double gamma) {
  if (step_size <= 0) throw Error("step_lr: step_size must be positive, got " + std::to_string(step_size));
  check_gamma("step_lr", gamma);
  check_base("step_lr", base_lr);
  if (step < 0) step = 0;
  return base_lr * std::pow(gamma, static_cast<double>(step / step_size));
}

double multistep_lr(int64_t step, double base_lr, const std::vector<int64_t>& milestones, double gamma) {
  check_base("multistep_lr", base_lr);
  check_gamma("multistep_lr", gamma);
  int64_t passed = 0;
  for (size_t i = 0; i < milestones.size(); ++i) {
    if (milestones[i] < 0) {
      throw Error("multistep_lr: milestones must be >= 0, got " + std::to_string(milestones[i]) + " at position " +
                  std::to_string(i));
    }
    passed += milestones[i] <= std::max<int64_t>(step, 0);
  }
  return base_lr * std::pow(gamma, static_cast<double>(passed));
}

double exponential_lr(int64_t step, double base_lr, double gamma) {
  check_base("exponential_lr", base_lr);
  check_gamma("exponential_lr", gamma);
  return base_lr * std::pow(gamma, static_cast<double>(std::max<int64_t>(step, 0)));
}

double cosine_annealing_lr(int64_t step, double base_lr, int64_t t_max, double eta_min) {
  check_base("cosine_annealing_lr", base_lr);
  if (!(eta_min >= 0.0) || !std::isfinite(eta_min)) {
    throw Error("cosine_annealing_lr: eta_min must be a finite number >= 0, got " + num_str(eta_min));
  }
  if (t_max <= 0) throw Error("cosine_annealing_lr: t_max must be positive, got " + std::to_string(t_max));
  // The step in half-periods of t_max, in integers (exact at every multiple of t_max): an odd half
  // is the rising one, cos(pi + x) = -cos(x).
  const int64_t s = std::max<int64_t>(step, 0), half = s / t_max, within = s % t_max;
  const double c = std::cos(std::numbers::pi * (static_cast<double>(within) / static_cast<double>(t_max)));
  const double coeff = 0.5 * (1.0 + (half % 2 == 0 ? c : -c));
  return eta_min + coeff * (base_lr - eta_min);
}

double linear_lr(int64_t step, double base_lr, double start_factor, double end_factor, int64_t total_iters) {
  check_base("linear_lr", base_lr);
  if (!(start_factor > 0.0 && start_factor <= 1.0) || !(end_factor >= 0.0 && end_factor <= 1.0)) {
    throw Error("linear_lr: start_factor must be in (0, 1] and end_factor in [0, 1], got " + num_str(start_factor) +
                " and " + num_str(end_factor));
  }
  if (total_iters <= 0) throw Error("linear_lr: total_iters must be positive, got " + std::to_string(total_iters));
  const int64_t t = std::clamp<int64_t>(step, 0, total_iters);
  const double f =
      start_factor + (end_factor - start_factor) * (static_cast<double>(t) / static_cast<double>(total_iters));
  return base_lr * (t == total_iters ? end_factor : f);
}

void LRScheduler::apply() { apply_at(step_); }

void LRScheduler::apply_at(int64_t step) {
  const double lr = lr_at(step);  // may throw (LambdaLR): nothing is set then
  for (size_t g = 0; g < optimizer_.num_groups(); ++g) {
    // The ratio first, so that a group made at base_lr gets lr exactly.
    optimizer_.set_lr(g, reference_lr_ > 0.0 ? lr * (optimizer_.initial_lr(g) / reference_lr_) : lr);
  }
}

void LRScheduler::step() {
  apply_at(step_ + 1);
  ++step_;
}

void LRScheduler::set_step(int64_t step) {
  if (step < 0) throw Error("LRScheduler::set_step: step must be >= 0, got " + std::to_string(step));
  apply_at(step);
  step_ = step;
}

WarmupCosine::WarmupCosine(Optimizer& optimizer, double base_lr, int64_t warmup_steps, int64_t total_steps,
                           double min_lr)
    : LRScheduler(optimizer, base_lr),
      base_lr_(base_lr),
      warmup_steps_(warmup_steps),
      total_steps_(total_steps),
      min_lr_(min_lr) {
  if (!(base_lr >= 0.0) || !(min_lr >= 0.0)) {
    throw Error("WarmupCosine: base_lr and min_lr must be >= 0, got " + num_str(base_lr) + " and " + num_str(min_lr));
  }
  warmup_cosine_lr(0, base_lr, warmup_steps, total_steps, min_lr);  // checks the steps
  apply();
}

StepLR::StepLR(Optimizer& optimizer, double base_lr, int64_t step_size, double gamma)
    : LRScheduler(optimizer, base_lr), base_lr_(base_lr), step_size_(step_size), gamma_(gamma) {
  if (!(base_lr >= 0.0) || !(gamma > 0.0)) {
    throw Error("StepLR: base_lr must be >= 0 and gamma > 0, got " + num_str(base_lr) + " and " + num_str(gamma));
  }
  step_lr(0, base_lr, step_size, gamma);  // checks step_size
  apply();
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, double base_lr, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer, base_lr), base_lr_(base_lr), milestones_(std::move(milestones)), gamma_(gamma) {
  multistep_lr(0, base_lr, milestones_, gamma);  // checks the arguments
  apply();
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double base_lr, double gamma)
    : LRScheduler(optimizer, base_lr), base_lr_(base_lr), gamma_(gamma) {
  exponential_lr(0, base_lr, gamma);
  apply();
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, double base_lr, int64_t t_max, double eta_min)
    : LRScheduler(optimizer, base_lr), base_lr_(base_lr), t_max_(t_max), eta_min_(eta_min) {
  cosine_annealing_lr(0, base_lr, t_max, eta_min);
  apply();
}

LinearLR::LinearLR(Optimizer& optimizer, double base_lr, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer, base_lr),
      base_lr_(base_lr),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  linear_lr(0, base_lr, start_factor, end_factor, total_iters);
  apply();
}

LambdaLR::LambdaLR(Optimizer& optimizer, double base_lr, std::function<double(int64_t)> factor)
    : LRScheduler(optimizer, base_lr), base_lr_(base_lr), factor_(std::move(factor)) {
  check_base("LambdaLR", base_lr);
  if (!factor_) throw Error("LambdaLR: the factor function is empty");
  apply();
}

double LambdaLR::lr_at(int64_t step) const {
  const double f = factor_(step);
  if (!(f >= 0.0) || !std::isfinite(f)) {
    throw Error("LambdaLR: the factor at step " + std::to_string(step) + " must be a finite number >= 0, got " +
                num_str(f));
  }
  return base_lr_ * f;
}

}  // namespace kiln::nn::optim
