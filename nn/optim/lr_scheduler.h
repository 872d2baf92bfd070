// Learning-rate schedules as pure functions of the step (PyTorch's closed forms), and a scheduler
// that applies one to an optimizer through set_lr (a device fill, no sync). Warmup follows nanoGPT:
// step it of the warmup gets base_lr * (it + 1) / (warmup_steps + 1), so the first step already
// moves the weights. A schedule is written for base_lr; every parameter group follows it in
// proportion to the lr the group was made with, as PyTorch's schedulers scale each group's
// initial_lr: a group made at base_lr gets the schedule's rate itself, a group made at a tenth of
// it a tenth of that rate.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/optim/optimizer.h"

namespace kiln::nn::optim {

// Linear warmup for steps [0, warmup_steps), then a cosine from base_lr down to min_lr at
// total_steps, and min_lr from then on. Needs 0 <= warmup_steps <= total_steps.
double warmup_cosine_lr(int64_t step, double base_lr, int64_t warmup_steps, int64_t total_steps, double min_lr);
// base_lr * gamma^(step / step_size) (integer division).
double step_lr(int64_t step, double base_lr, int64_t step_size, double gamma);
// base_lr * gamma^(the number of milestones <= step); a milestone listed twice counts twice, as
// PyTorch's MultiStepLR counts them. Milestones must be >= 0, in any order.
double multistep_lr(int64_t step, double base_lr, const std::vector<int64_t>& milestones, double gamma);
// base_lr * gamma^step.
double exponential_lr(int64_t step, double base_lr, double gamma);
// eta_min + (base_lr - eta_min) * (1 + cos(pi * step / t_max)) / 2: base_lr at step 0, eta_min at
// t_max, and on past t_max as a cosine of period 2 * t_max (PyTorch's CosineAnnealingLR rises
// again after t_max too; WarmupCosine holds its minimum instead).
double cosine_annealing_lr(int64_t step, double base_lr, int64_t t_max, double eta_min);
// base_lr times a factor going linearly from start_factor at step 0 to end_factor at total_iters,
// and end_factor after (PyTorch's LinearLR): start_factor in (0, 1], end_factor in [0, 1].
double linear_lr(int64_t step, double base_lr, double start_factor, double end_factor, int64_t total_iters);

// base_lr * factor for steps [0, total_iters), base_lr from then on (PyTorch's ConstantLR):
// factor in [0, 1], total_iters >= 0.
double constant_lr(int64_t step, double base_lr, double factor, int64_t total_iters);
// base_lr * (1 - min(step, total_iters) / total_iters)^power (PyTorch's PolynomialLR): 0 from
// total_iters on. total_iters > 0, power a finite number >= 0.
double polynomial_lr(int64_t step, double base_lr, int64_t total_iters, double power);
// SGDR (Loshchilov and Hutter), PyTorch's CosineAnnealingWarmRestarts stepped once per step: a
// cosine from base_lr to eta_min over t_0 steps, then restarts at base_lr, each cycle t_mult times
// longer than the last: eta_min + (base_lr - eta_min) * (1 + cos(pi * t_cur / t_i)) / 2, with t_cur
// the steps since the last restart and t_i the current cycle's length. t_0 > 0, t_mult >= 1.
double cosine_warm_restarts_lr(int64_t step, double base_lr, int64_t t_0, int64_t t_mult, double eta_min);

// PyTorch's OneCycleLR (Smith and Topin, "Super-Convergence"): the lr rises from
// max_lr / div_factor to max_lr over the first pct_start of total_steps, then anneals to
// max_lr / (div_factor * final_div_factor) at step total_steps - 1; with three_phase it first comes
// back down to max_lr / div_factor over as many steps, then anneals. Momentum (SGD's "momentum",
// Adam's "beta1") cycles the other way, from max_momentum down to base_momentum and back.
struct OneCycleOptions {
  double pct_start = 0.3;  // the rising part of the cycle, in (0, 1)
  bool cos_anneal = true;  // anneal_strategy "cos"; false: "linear"
  double div_factor = 25.0, final_div_factor = 1e4;
  bool three_phase = false;
  bool cycle_momentum = true;
  double base_momentum = 0.85, max_momentum = 0.95;
};
// The schedule at `step`, in [0, total_steps] (as PyTorch, which refuses a step past total_steps:
// a kiln::Error). Each phase must span at least one step (pct_start * total_steps > 1, and for the
// later phases likewise), or the interpolation would divide by zero: a kiln::Error.
double one_cycle_lr(int64_t step, double max_lr, int64_t total_steps, const OneCycleOptions& options = {});
double one_cycle_momentum(int64_t step, int64_t total_steps, const OneCycleOptions& options = {});

// PyTorch's CyclicLR (Smith, "Cyclical Learning Rates for Training Neural Networks"): the lr goes
// from base_lr up to max_lr over step_size_up steps and back over step_size_down, again and again;
// the amplitude (max_lr - base_lr) is scaled by 1 (Triangular), halved each cycle (Triangular2), or
// by gamma^step (ExpRange). Momentum cycles the other way, from max_momentum down to base_momentum
// (the same scaled amplitude) and back.
enum class CyclicMode : uint8_t { Triangular, Triangular2, ExpRange };
struct CyclicOptions {
  int64_t step_size_up = 2000;
  int64_t step_size_down = 0;  // 0: step_size_up, as PyTorch's None
  CyclicMode mode = CyclicMode::Triangular;
  double gamma = 1.0;  // ExpRange only
  bool cycle_momentum = true;
  double base_momentum = 0.8, max_momentum = 0.9;
};
// The schedule at `step` >= 0. base_lr <= max_lr, both finite and >= 0; step sizes > 0 (down may
// be 0: up's); gamma in (0, 1] for ExpRange; base_momentum <= max_momentum.
double cyclic_lr(int64_t step, double base_lr, double max_lr, const CyclicOptions& options = {});
double cyclic_momentum(int64_t step, const CyclicOptions& options = {});

// Sets group g's lr to lr_at(step) * optimizer.initial_lr(g) / base_lr (with base_lr 0, to
// lr_at(step) itself). Construction applies step 0; call step() after each optimizer.step() to
// move to the next. The step is the scheduler's whole state: save step() and restore it with
// set_step(), which applies that step's lr. The optimizer's initial lrs are its construction's, so
// a scheduler made after another changed the lrs (or after a checkpoint restored them) scales the
// same bases.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  virtual double lr_at(int64_t step) const = 0;
  void step();
  int64_t last_step() const { return step_; }
  void set_step(int64_t step);
  // The schedule's rate at the current step: the lr of a group made at base_lr.
  double current_lr() const { return lr_at(step_); }
  Optimizer& optimizer() const { return optimizer_; }
  // The base_lr the schedule is written for (0: every group gets the schedule's rate itself).
  double reference_lr() const { return reference_lr_; }

 protected:
  LRScheduler(Optimizer& optimizer, double base_lr) : optimizer_(optimizer), reference_lr_(base_lr) {}
  // Called at the end of subclass constructors (lr_at is virtual).
  void apply();
  // What a schedule sets besides the lrs at `step` (OneCycleLR: the momentum), after lr_at(step)
  // has returned and before the lrs are set.
  virtual void apply_options(int64_t step) {}

 private:
  friend class SequentialLR;  // applies its schedulers' options
  // Sets every group's lr for `step`; an lr_at that throws leaves the lrs (and the step) as they were.
  void apply_at(int64_t step);

  Optimizer& optimizer_;
  double reference_lr_;  // the base_lr the schedule is written for
  int64_t step_ = 0;
};

class WarmupCosine : public LRScheduler {
 public:
  WarmupCosine(Optimizer& optimizer, double base_lr, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);
  double lr_at(int64_t step) const override {
    return warmup_cosine_lr(step, base_lr_, warmup_steps_, total_steps_, min_lr_);
  }

 private:
  double base_lr_;
  int64_t warmup_steps_, total_steps_;
  double min_lr_;
};

class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, double base_lr, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step) const override { return step_lr(step, base_lr_, step_size_, gamma_); }

 private:
  double base_lr_;
  int64_t step_size_;
  double gamma_;
};

class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, double base_lr, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(int64_t step) const override { return multistep_lr(step, base_lr_, milestones_, gamma_); }

 private:
  double base_lr_;
  std::vector<int64_t> milestones_;
  double gamma_;
};

class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double base_lr, double gamma);
  double lr_at(int64_t step) const override { return exponential_lr(step, base_lr_, gamma_); }

 private:
  double base_lr_, gamma_;
};

class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, double base_lr, int64_t t_max, double eta_min = 0.0);
  double lr_at(int64_t step) const override { return cosine_annealing_lr(step, base_lr_, t_max_, eta_min_); }

 private:
  double base_lr_;
  int64_t t_max_;
  double eta_min_;
};

class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double base_lr, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
           int64_t total_iters = 5);
  double lr_at(int64_t step) const override {
    return linear_lr(step, base_lr_, start_factor_, end_factor_, total_iters_);
  }

 private:
  double base_lr_, start_factor_, end_factor_;
  int64_t total_iters_;
};

// base_lr * factor(step), as PyTorch's LambdaLR multiplies each group's initial lr by its lambda:
// any schedule as a function. factor must return a finite number >= 0 (a kiln::Error naming the
// step otherwise) and be a pure function of the step, since the step is all a checkpoint keeps.
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, double base_lr, std::function<double(int64_t step)> factor);
  double lr_at(int64_t step) const override;

 private:
  double base_lr_;
  std::function<double(int64_t)> factor_;
};

class ConstantLR : public LRScheduler {
 public:
  ConstantLR(Optimizer& optimizer, double base_lr, double factor = 1.0 / 3.0, int64_t total_iters = 5);
  double lr_at(int64_t step) const override { return constant_lr(step, base_lr_, factor_, total_iters_); }

 private:
  double base_lr_, factor_;
  int64_t total_iters_;
};

class PolynomialLR : public LRScheduler {
 public:
  PolynomialLR(Optimizer& optimizer, double base_lr, int64_t total_iters = 5, double power = 1.0);
  double lr_at(int64_t step) const override { return polynomial_lr(step, base_lr_, total_iters_, power_); }

 private:
  double base_lr_;
  int64_t total_iters_;
  double power_;
};

class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& optimizer, double base_lr, int64_t t_0, int64_t t_mult = 1,
                              double eta_min = 0.0);
  double lr_at(int64_t step) const override { return cosine_warm_restarts_lr(step, base_lr_, t_0_, t_mult_, eta_min_); }

 private:
  double base_lr_;
  int64_t t_0_, t_mult_;
  double eta_min_;
};

// Every group gets the one-cycle rate itself, as PyTorch's OneCycleLR with one max_lr (it replaces
// the groups' lrs rather than scaling them). With cycle_momentum, each step also sets every group's
// "beta1" (Adam, AdamW) or "momentum" (SGD) through Optimizer::set_option; an optimizer with
// neither is refused. A step past total_steps is a kiln::Error and changes nothing.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleOptions options = {});
  double lr_at(int64_t step) const override { return one_cycle_lr(step, max_lr_, total_steps_, options_); }

 protected:
  void apply_options(int64_t step) override;

 private:
  double max_lr_;
  int64_t total_steps_;
  OneCycleOptions options_;
  std::string momentum_name_;  // "beta1" or "momentum"; empty without cycle_momentum
};

// Every group gets the cyclic rate itself (PyTorch's CyclicLR with one base_lr and max_lr); with
// cycle_momentum, each step also sets every group's "beta1" or "momentum", as OneCycleLR does.
class CyclicLR : public LRScheduler {
 public:
  CyclicLR(Optimizer& optimizer, double base_lr, double max_lr, CyclicOptions options = {});
  double lr_at(int64_t step) const override { return cyclic_lr(step, base_lr_, max_lr_, options_); }

 protected:
  void apply_options(int64_t step) override;

 private:
  double base_lr_, max_lr_;
  CyclicOptions options_;
  std::string momentum_name_;  // "beta1" or "momentum"; empty without cycle_momentum
};

// PyTorch's SequentialLR: schedulers[0] until milestones[0], then schedulers[1] from its own
// step 0, and so on. Takes the schedulers (made on this optimizer with one base_lr, which scales
// the groups as theirs did); milestones: one fewer than the schedulers, increasing, > 0. A
// OneCycleLR among them cycles the momentum while it is in charge.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::unique_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  double lr_at(int64_t step) const override;

 protected:
  void apply_options(int64_t step) override;

 private:
  // The scheduler in charge at `step`, and its own step there.
  std::pair<LRScheduler*, int64_t> at(int64_t step) const;
  std::vector<std::unique_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace kiln::nn::optim
