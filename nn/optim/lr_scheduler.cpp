// Schedules and the scheduler. Steps before 0 count as step 0, so a schedule never returns a
// negative or growing-backwards rate.
#include "nn/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>
#include <string>

#include "kernels/error.h"

namespace kiln::nn::optim {

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
  if (!(gamma > 0.0) || !std::isfinite(gamma)) {
    throw Error("step_lr: gamma must be a finite number > 0, got " + num_str(gamma));
  }
  if (!(base_lr >= 0.0) || !std::isfinite(base_lr)) {
    throw Error("step_lr: base_lr must be a finite number >= 0, got " + num_str(base_lr));
  }
  if (step < 0) step = 0;
  return base_lr * std::pow(gamma, static_cast<double>(step / step_size));
}

void LRScheduler::apply() {
  const double lr = lr_at(step_);
  for (size_t g = 0; g < optimizer_.num_groups(); ++g) {
    // The ratio first, so that a group made at base_lr gets lr exactly.
    optimizer_.set_lr(g, reference_lr_ > 0.0 ? lr * (optimizer_.initial_lr(g) / reference_lr_) : lr);
  }
}

void LRScheduler::step() {
  ++step_;
  apply();
}

void LRScheduler::set_step(int64_t step) {
  if (step < 0) throw Error("LRScheduler::set_step: step must be >= 0, got " + std::to_string(step));
  step_ = step;
  apply();
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

}  // namespace kiln::nn::optim
