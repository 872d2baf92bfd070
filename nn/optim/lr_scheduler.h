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

 protected:
  LRScheduler(Optimizer& optimizer, double base_lr) : optimizer_(optimizer), reference_lr_(base_lr) {}
  // Called at the end of subclass constructors (lr_at is virtual).
  void apply();

 private:
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

}  // namespace kiln::nn::optim
