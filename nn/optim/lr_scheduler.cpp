// Schedules and the scheduler. Steps before 0 count as step 0, so a schedule never returns a
// negative or growing-backwards rate.
#include "nn/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
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

double constant_lr(int64_t step, double base_lr, double factor, int64_t total_iters) {
  check_base("constant_lr", base_lr);
  if (!(factor >= 0.0 && factor <= 1.0)) {
    throw Error("constant_lr: factor must be in [0, 1], got " + num_str(factor));
  }
  if (total_iters < 0) throw Error("constant_lr: total_iters must be >= 0, got " + std::to_string(total_iters));
  return step < total_iters ? base_lr * factor : base_lr;
}

double polynomial_lr(int64_t step, double base_lr, int64_t total_iters, double power) {
  check_base("polynomial_lr", base_lr);
  if (total_iters <= 0) throw Error("polynomial_lr: total_iters must be positive, got " + std::to_string(total_iters));
  if (!(power >= 0.0) || !std::isfinite(power)) {
    throw Error("polynomial_lr: power must be a finite number >= 0, got " + num_str(power));
  }
  const int64_t t = std::clamp<int64_t>(step, 0, total_iters);
  if (t == total_iters) return power == 0.0 ? base_lr : 0.0;  // 0^0 is 1, as Python's
  return base_lr * std::pow(1.0 - static_cast<double>(t) / static_cast<double>(total_iters), power);
}

double cosine_warm_restarts_lr(int64_t step, double base_lr, int64_t t_0, int64_t t_mult, double eta_min) {
  check_base("cosine_warm_restarts_lr", base_lr);
  if (!(eta_min >= 0.0) || !std::isfinite(eta_min)) {
    throw Error("cosine_warm_restarts_lr: eta_min must be a finite number >= 0, got " + num_str(eta_min));
  }
  if (t_0 <= 0 || t_mult < 1) {
    throw Error("cosine_warm_restarts_lr: needs t_0 > 0 and t_mult >= 1, got t_0=" + std::to_string(t_0) +
                " t_mult=" + std::to_string(t_mult));
  }
  // The cycle `step` falls in, in integers (PyTorch's step() subtracts each finished cycle): with
  // t_mult 1 a remainder, else at most 63 cycles before a length passes any int64 step.
  int64_t t_cur = std::max<int64_t>(step, 0), t_i = t_0;
  if (t_mult == 1) {
    t_cur %= t_0;
  } else {
    while (t_cur >= t_i) {
      t_cur -= t_i;
      // The next cycle would outlast any step.
      if (t_i > std::numeric_limits<int64_t>::max() / t_mult) break;
      t_i *= t_mult;
    }
  }
  const double c = std::cos(std::numbers::pi * (static_cast<double>(t_cur) / static_cast<double>(t_i)));
  return eta_min + (base_lr - eta_min) * (1.0 + c) / 2.0;
}

namespace {

// OneCycleLR's phases as PyTorch builds them: each ends at a (fractional) step and goes from one
// rate and momentum to another; a phase starts where the previous one ended.
struct CyclePhase {
  double end_step, start_lr, end_lr, start_momentum, end_momentum;
};

std::vector<CyclePhase> cycle_phases(double max_lr, int64_t total_steps, const OneCycleOptions& o) {
  const char* op = "OneCycleLR";
  if (!(max_lr >= 0.0) || !std::isfinite(max_lr)) {
    throw Error(std::string(op) + ": max_lr must be a finite number >= 0, got " + num_str(max_lr));
  }
  if (total_steps <= 0)
    throw Error(std::string(op) + ": total_steps must be positive, got " + std::to_string(total_steps));
  if (!(o.pct_start > 0.0 && o.pct_start < 1.0)) {
    throw Error(std::string(op) + ": pct_start must be in (0, 1), got " + num_str(o.pct_start));
  }
  if (!(o.div_factor > 0.0) || !std::isfinite(o.div_factor) || !(o.final_div_factor > 0.0) ||
      !std::isfinite(o.final_div_factor)) {
    throw Error(std::string(op) + ": div_factor and final_div_factor must be finite numbers > 0, got " +
                num_str(o.div_factor) + " and " + num_str(o.final_div_factor));
  }
  if (o.cycle_momentum &&
      (!(o.base_momentum >= 0.0 && o.base_momentum < 1.0) || !(o.max_momentum >= 0.0 && o.max_momentum < 1.0))) {
    throw Error(std::string(op) + ": base_momentum and max_momentum must be in [0, 1), got " +
                num_str(o.base_momentum) + " and " + num_str(o.max_momentum));
  }
  const double initial = max_lr / o.div_factor, min_lr = initial / o.final_div_factor;
  const double total = static_cast<double>(total_steps), rise = o.pct_start * total;
  const double lo = o.base_momentum, hi = o.max_momentum;
  std::vector<CyclePhase> phases;
  if (o.three_phase) {
    phases = {{rise - 1.0, initial, max_lr, hi, lo},
              {2.0 * rise - 2.0, max_lr, initial, lo, hi},
              {total - 1.0, initial, min_lr, hi, hi}};
  } else {
    phases = {{rise - 1.0, initial, max_lr, hi, lo}, {total - 1.0, max_lr, min_lr, lo, hi}};
  }
  double start = 0.0;
  for (size_t i = 0; i < phases.size(); ++i) {
    if (!(phases[i].end_step > start)) {
      throw Error(std::string(op) + ": phase " + std::to_string(i + 1) + " of " + std::to_string(phases.size()) +
                  " spans no step (it ends at step " + num_str(phases[i].end_step) + ", its start " + num_str(start) +
                  "); raise total_steps (" + std::to_string(total_steps) + ") or change pct_start (" +
                  num_str(o.pct_start) + ")");
    }
    start = phases[i].end_step;
  }
  return phases;
}

// The phase `step` is in and how far through it (PyTorch's get_lr: the last phase takes any step
// past its end).
std::pair<const CyclePhase*, double> cycle_point(const std::vector<CyclePhase>& phases, int64_t step,
                                                 int64_t total_steps) {
  if (step > total_steps) {
    throw Error("OneCycleLR: step " + std::to_string(step) + " is past total_steps (" + std::to_string(total_steps) +
                "); the schedule has no rate there");
  }
  const double s = static_cast<double>(std::max<int64_t>(step, 0));
  double start = 0.0;
  for (size_t i = 0; i < phases.size(); ++i) {
    if (s <= phases[i].end_step || i + 1 == phases.size()) {
      return {&phases[i], (s - start) / (phases[i].end_step - start)};
    }
    start = phases[i].end_step;
  }
  return {&phases.back(), 1.0};  // not reached: the last phase takes every step
}

double anneal(double from, double to, double pct, bool cos) {
  if (cos) return to + (from - to) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
  return (to - from) * pct + from;
}

}  // namespace

double one_cycle_lr(int64_t step, double max_lr, int64_t total_steps, const OneCycleOptions& options) {
  const std::vector<CyclePhase> phases = cycle_phases(max_lr, total_steps, options);
  const auto [phase, pct] = cycle_point(phases, step, total_steps);
  return anneal(phase->start_lr, phase->end_lr, pct, options.cos_anneal);
}

double one_cycle_momentum(int64_t step, int64_t total_steps, const OneCycleOptions& options) {
  const std::vector<CyclePhase> phases = cycle_phases(0.0, total_steps, options);
  const auto [phase, pct] = cycle_point(phases, step, total_steps);
  return anneal(phase->start_momentum, phase->end_momentum, pct, options.cos_anneal);
}

namespace {

// Where `step` is in its cycle, as a fraction of the full amplitude (0 at base_lr, 1 at max_lr),
// times the mode's scale; checks the options.
double cyclic_scale(int64_t step, const CyclicOptions& o) {
  const int64_t up = o.step_size_up, down = o.step_size_down == 0 ? o.step_size_up : o.step_size_down;
  if (up <= 0 || down < 0) {
    throw Error("CyclicLR: step_size_up must be > 0 and step_size_down >= 0, got " + std::to_string(up) + " and " +
                std::to_string(o.step_size_down));
  }
  if (o.mode == CyclicMode::ExpRange && !(o.gamma > 0.0 && o.gamma <= 1.0)) {
    throw Error("CyclicLR: gamma must be in (0, 1] for ExpRange, got " + num_str(o.gamma));
  }
  if (step < 0) throw Error("CyclicLR: the step must be >= 0, got " + std::to_string(step));
  // PyTorch's get_lr: cycle = floor(1 + step / total), x = 1 + step / total - cycle.
  const double total = static_cast<double>(up + down), ratio = static_cast<double>(up) / total;
  const double cycle = std::floor(1.0 + static_cast<double>(step) / total);
  const double x = 1.0 + static_cast<double>(step) / total - cycle;
  const double position = x <= ratio ? x / ratio : (x - 1.0) / (ratio - 1.0);
  switch (o.mode) {
    case CyclicMode::Triangular: return position;
    case CyclicMode::Triangular2: return position / std::pow(2.0, cycle - 1.0);
    case CyclicMode::ExpRange: return position * std::pow(o.gamma, static_cast<double>(step));
  }
  throw Error("CyclicLR: unknown mode " + std::to_string(static_cast<int>(o.mode)));
}

// The optimizer option a momentum-cycling scheduler sets: "beta1" (Adam's family) or "momentum"
// (SGD, RMSprop); an optimizer with neither is refused, naming the scheduler and its switch.
std::string momentum_option(const Optimizer& optimizer, const char* scheduler, const char* off_switch) {
  const std::vector<std::string> names = optimizer.option_names();
  for (const char* name : {"beta1", "momentum"}) {
    if (std::find(names.begin(), names.end(), name) != names.end()) return name;
  }
  throw Error(std::string(scheduler) +
              ": cycle_momentum needs an optimizer with a \"momentum\" or \"beta1\" option; "
              "set " +
              off_switch + " to false");
}

}  // namespace

double cyclic_lr(int64_t step, double base_lr, double max_lr, const CyclicOptions& options) {
  if (!(base_lr >= 0.0) || !std::isfinite(max_lr) || !(max_lr >= base_lr)) {
    throw Error("CyclicLR: needs finite 0 <= base_lr <= max_lr, got " + num_str(base_lr) + " and " + num_str(max_lr));
  }
  return base_lr + (max_lr - base_lr) * cyclic_scale(step, options);
}

double cyclic_momentum(int64_t step, const CyclicOptions& options) {
  if (!(options.base_momentum <= options.max_momentum) || !std::isfinite(options.base_momentum) ||
      !std::isfinite(options.max_momentum)) {
    throw Error("CyclicLR: needs finite base_momentum <= max_momentum, got " + num_str(options.base_momentum) +
                " and " + num_str(options.max_momentum));
  }
  return options.max_momentum - (options.max_momentum - options.base_momentum) * cyclic_scale(step, options);
}

void LRScheduler::apply() { apply_at(step_); }

void LRScheduler::apply_at(int64_t step) {
  const double lr = lr_at(step);  // may throw (LambdaLR): nothing is set then
  apply_options(step);
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

namespace kiln::nn::optim {

ConstantLR::ConstantLR(Optimizer& optimizer, double base_lr, double factor, int64_t total_iters)
    : LRScheduler(optimizer, base_lr), base_lr_(base_lr), factor_(factor), total_iters_(total_iters) {
  constant_lr(0, base_lr, factor, total_iters);  // checks the arguments
  apply();
}

PolynomialLR::PolynomialLR(Optimizer& optimizer, double base_lr, int64_t total_iters, double power)
    : LRScheduler(optimizer, base_lr), base_lr_(base_lr), total_iters_(total_iters), power_(power) {
  polynomial_lr(0, base_lr, total_iters, power);
  apply();
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer, double base_lr, int64_t t_0,
                                                         int64_t t_mult, double eta_min)
    : LRScheduler(optimizer, base_lr), base_lr_(base_lr), t_0_(t_0), t_mult_(t_mult), eta_min_(eta_min) {
  cosine_warm_restarts_lr(0, base_lr, t_0, t_mult, eta_min);
  apply();
}

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleOptions options)
    : LRScheduler(optimizer, 0.0), max_lr_(max_lr), total_steps_(total_steps), options_(options) {
  cycle_phases(max_lr, total_steps, options_);  // checks the arguments
  if (options_.cycle_momentum)
    momentum_name_ = momentum_option(optimizer, "OneCycleLR", "OneCycleOptions::cycle_momentum");
  apply();
}

void OneCycleLR::apply_options(int64_t step) {
  if (momentum_name_.empty()) return;
  const double m = one_cycle_momentum(step, total_steps_, options_);
  for (size_t g = 0; g < optimizer().num_groups(); ++g) optimizer().set_option(g, momentum_name_, m);
}

CyclicLR::CyclicLR(Optimizer& optimizer, double base_lr, double max_lr, CyclicOptions options)
    : LRScheduler(optimizer, 0.0), base_lr_(base_lr), max_lr_(max_lr), options_(options) {
  cyclic_lr(0, base_lr, max_lr, options_);  // checks the arguments
  if (options_.cycle_momentum) {
    cyclic_momentum(0, options_);
    momentum_name_ = momentum_option(optimizer, "CyclicLR", "CyclicOptions::cycle_momentum");
  }
  apply();
}

void CyclicLR::apply_options(int64_t step) {
  if (momentum_name_.empty()) return;
  const double m = cyclic_momentum(step, options_);
  for (size_t g = 0; g < optimizer().num_groups(); ++g) optimizer().set_option(g, momentum_name_, m);
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::unique_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer, schedulers.empty() || !schedulers[0] ? 0.0 : schedulers[0]->reference_lr()),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  const char* op = "SequentialLR";
  if (schedulers_.empty()) throw Error(std::string(op) + ": needs at least one scheduler");
  if (milestones_.size() + 1 != schedulers_.size()) {
    throw Error(std::string(op) + ": expected " + std::to_string(schedulers_.size() - 1) + " milestones for " +
                std::to_string(schedulers_.size()) + " schedulers, got " + std::to_string(milestones_.size()));
  }
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    const std::string which = "scheduler " + std::to_string(i);
    if (!schedulers_[i]) throw Error(std::string(op) + ": " + which + " is null");
    if (&schedulers_[i]->optimizer() != &optimizer) {
      throw Error(std::string(op) + ": " + which + " drives another optimizer than this one");
    }
    if (schedulers_[i]->reference_lr() != reference_lr()) {
      throw Error(std::string(op) + ": " + which + " is written for base_lr " +
                  num_str(schedulers_[i]->reference_lr()) + ", scheduler 0 for " + num_str(reference_lr()) +
                  "; the groups would jump between their scales");
    }
  }
  for (size_t i = 0; i < milestones_.size(); ++i) {
    if (milestones_[i] <= (i == 0 ? 0 : milestones_[i - 1])) {
      throw Error(std::string(op) + ": milestones must be increasing and > 0, got " + std::to_string(milestones_[i]) +
                  " at position " + std::to_string(i));
    }
  }
  apply();
}

std::pair<LRScheduler*, int64_t> SequentialLR::at(int64_t step) const {
  const auto next = std::upper_bound(milestones_.begin(), milestones_.end(), step);
  const size_t i = static_cast<size_t>(next - milestones_.begin());
  return {schedulers_[i].get(), i == 0 ? step : step - milestones_[i - 1]};
}

double SequentialLR::lr_at(int64_t step) const {
  const auto [scheduler, own] = at(step);
  return scheduler->lr_at(own);
}

void SequentialLR::apply_options(int64_t step) {
  const auto [scheduler, own] = at(step);
  scheduler->apply_options(own);
}

}  // namespace kiln::nn::optim
