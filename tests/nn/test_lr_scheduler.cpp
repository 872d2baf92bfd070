// Learning-rate schedules and schedulers: the closed forms at key steps, PyTorch's step-by-step
// definitions (written out below in plain double arithmetic, never from kiln) at every step, the
// schedulers driving an optimizer's groups and options, and ReduceLROnPlateau's state.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <vector>

#include "core/kiln.h"
#include "nn/optim/adam.h"
#include "nn/optim/composed.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/reduce_on_plateau.h"
#include "nn/optim/sgd.h"
#include "tests/nn/optim_checks.h"

using namespace kiln;
using namespace kiln::nn::optim;

namespace {

using kiln::test::param;
using kiln::test::set_grad;
using kiln::test::Vec;

// PyTorch's CosineAnnealingWarmRestarts.step() without an epoch, repeated `step` times.
double sgdr_by_steps(int64_t step, double base, int64_t t_0, int64_t t_mult, double eta_min) {
  double t_cur = 0, t_i = static_cast<double>(t_0);
  for (int64_t s = 0; s < step; ++s) {
    t_cur += 1;
    if (t_cur >= t_i) {
      t_cur -= t_i;
      t_i *= static_cast<double>(t_mult);
    }
  }
  return eta_min + (base - eta_min) * (1 + std::cos(std::numbers::pi * t_cur / t_i)) / 2;
}

// PyTorch's OneCycleLR.get_lr, two phases, for the lr (momentum: lo and hi swapped in).
double one_cycle_two_phase(int64_t step, double start, double peak, double end, int64_t total, double pct_start,
                           bool cos) {
  const double up = pct_start * static_cast<double>(total) - 1, last = static_cast<double>(total) - 1;
  const double s = static_cast<double>(step);
  auto anneal = [&](double a, double b, double pct) {
    return cos ? b + (a - b) / 2 * (std::cos(std::numbers::pi * pct) + 1) : (b - a) * pct + a;
  };
  if (s <= up) return anneal(start, peak, s / up);
  return anneal(peak, end, (s - up) / (last - up));
}

}  // namespace

TEST_CASE("schedules at key steps", "[optim]") {
  SECTION("warmup then cosine (nanoGPT's warmup: (it + 1) / (warmup + 1))") {
    const double base = 1.0, min_lr = 0.1;
    REQUIRE(warmup_cosine_lr(0, base, 10, 110, min_lr) == Approx(1.0 / 11));
    REQUIRE(warmup_cosine_lr(9, base, 10, 110, min_lr) == Approx(10.0 / 11));
    REQUIRE(warmup_cosine_lr(10, base, 10, 110, min_lr) == Approx(1.0));
    REQUIRE(warmup_cosine_lr(60, base, 10, 110, min_lr) == Approx(0.55));  // halfway: the mean
    REQUIRE(warmup_cosine_lr(35, base, 10, 110, min_lr) ==
            Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 4))));
    REQUIRE(warmup_cosine_lr(110, base, 10, 110, min_lr) == Approx(0.1));
    REQUIRE(warmup_cosine_lr(5000, base, 10, 110, min_lr) == Approx(0.1));
    REQUIRE(warmup_cosine_lr(0, base, 0, 100, 0.0) == Approx(1.0));  // no warmup
    REQUIRE_THROWS_AS(warmup_cosine_lr(0, base, 20, 10, 0.0), Error);
    // Every rate up to DBL_MAX warms up without overflowing: the last warmup step is 10/11 of it.
    const double huge = std::numeric_limits<double>::max();
    REQUIRE(warmup_cosine_lr(9, huge, 10, 110, 0.0) == Approx(huge / 11 * 10));
    REQUIRE(std::isfinite(warmup_cosine_lr(9, huge, 10, 110, 0.0)));
  }
  SECTION("step decay") {
    REQUIRE(step_lr(0, 0.5, 10, 0.1) == Approx(0.5));
    REQUIRE(step_lr(9, 0.5, 10, 0.1) == Approx(0.5));
    REQUIRE(step_lr(10, 0.5, 10, 0.1) == Approx(0.05));
    REQUIRE(step_lr(25, 0.5, 10, 0.1) == Approx(0.005));
    REQUIRE_THROWS_AS(step_lr(0, 0.5, 0, 0.1), Error);
  }
  SECTION("multi-step, exponential, cosine annealing, linear and lambda (PyTorch's closed forms)") {
    // Milestones in any order; one listed twice decays twice.
    const std::vector<int64_t> ms{30, 10, 30};
    REQUIRE(multistep_lr(9, 1.0, ms, 0.5) == 1.0);
    REQUIRE(multistep_lr(10, 1.0, ms, 0.5) == 0.5);
    REQUIRE(multistep_lr(29, 1.0, ms, 0.5) == 0.5);
    REQUIRE(multistep_lr(30, 1.0, ms, 0.5) == 0.125);
    REQUIRE(multistep_lr(0, 1.0, {0}, 0.5) == 0.5);  // a milestone at 0 applies from the start
    REQUIRE_THROWS_WITH(multistep_lr(0, 1.0, {5, -1}, 0.5), Catch::Contains("milestones") && Catch::Contains("-1"));
    REQUIRE(exponential_lr(0, 2.0, 0.5) == 2.0);
    REQUIRE(exponential_lr(3, 2.0, 0.5) == 0.25);
    // Cosine annealing: base at 0, the mean halfway, eta_min at t_max, rising back to base at
    // 2 * t_max, exactly at the multiples.
    REQUIRE(cosine_annealing_lr(0, 1.0, 10, 0.2) == 1.0);
    REQUIRE(cosine_annealing_lr(5, 1.0, 10, 0.2) == Approx(0.6));
    REQUIRE(cosine_annealing_lr(10, 1.0, 10, 0.2) == 0.2);
    REQUIRE(cosine_annealing_lr(15, 1.0, 10, 0.2) == Approx(0.6));
    REQUIRE(cosine_annealing_lr(20, 1.0, 10, 0.2) == 1.0);
    REQUIRE(cosine_annealing_lr(13, 1.0, 10, 0.2) == Approx(cosine_annealing_lr(7, 1.0, 10, 0.2)));
    REQUIRE(cosine_annealing_lr(3, 1.0, 10, 0.2) == Approx(0.2 + 0.8 * 0.5 * (1 + std::cos(0.3 * std::numbers::pi))));
    const int64_t big = std::numeric_limits<int64_t>::max() / 2 + 1;  // 2 * t_max would overflow
    REQUIRE(cosine_annealing_lr(big, 1.0, big, 0.0) == 0.0);
    REQUIRE_THROWS_WITH(cosine_annealing_lr(0, 1.0, 0, 0.0), Catch::Contains("t_max"));
    // Linear: start_factor at 0 to end_factor at total_iters, then held.
    REQUIRE(linear_lr(0, 0.3, 0.5, 1.0, 4) == 0.15);
    REQUIRE(linear_lr(2, 0.3, 0.5, 1.0, 4) == Approx(0.225));
    REQUIRE(linear_lr(4, 0.3, 0.5, 1.0, 4) == 0.3);
    REQUIRE(linear_lr(100, 0.3, 1.0, 0.0, 4) == 0.0);
    REQUIRE_THROWS_WITH(linear_lr(0, 0.3, 0.0, 1.0, 4), Catch::Contains("start_factor"));
    REQUIRE_THROWS_WITH(linear_lr(0, 0.3, 0.5, 1.5, 4), Catch::Contains("end_factor") && Catch::Contains("1.5"));
    REQUIRE_THROWS_WITH(exponential_lr(0, 1.0, 0.0), Catch::Contains("exponential_lr") && Catch::Contains("gamma"));

    Tensor p = param({1.0});
    SGD opt({p}, 0.5);
    MultiStepLR multi(opt, 0.5, {2, 4}, 0.1);
    multi.set_step(4);
    REQUIRE(opt.lr() == Approx(0.005));
    ExponentialLR expo(opt, 0.5, 0.5);
    expo.step();
    REQUIRE(opt.lr() == 0.25);
    CosineAnnealingLR cosine(opt, 0.5, 4);
    cosine.set_step(4);
    REQUIRE(opt.lr() == 0.0);
    LinearLR linear(opt, 0.5);  // PyTorch's defaults: a third of the rate, to the whole in 5 steps
    REQUIRE(opt.lr() == Approx(0.5 / 3));
    linear.set_step(5);
    REQUIRE(opt.lr() == 0.5);
    LambdaLR lambda(opt, 0.5, [](int64_t s) { return 1.0 / static_cast<double>(s + 1); });
    REQUIRE(opt.lr() == 0.5);
    lambda.step();
    REQUIRE(opt.lr() == 0.25);
    REQUIRE_THROWS_WITH(LambdaLR(opt, 0.5, [](int64_t s) { return s == 0 ? -0.5 : 1.0; }),
                        Catch::Contains("LambdaLR") && Catch::Contains("step 0") && Catch::Contains("-0.5"));
    LambdaLR nan_later(opt, 0.5, [](int64_t s) { return s < 3 ? 1.0 : std::nan(""); });
    nan_later.set_step(2);
    REQUIRE_THROWS_WITH(nan_later.set_step(3), Catch::Contains("step 3") && Catch::Contains("nan"));
    REQUIRE_THROWS_WITH(nan_later.step(), Catch::Contains("step 3"));
    REQUIRE(nan_later.last_step() == 2);  // a refused step changes nothing
    REQUIRE(opt.lr() == 0.5);
    REQUIRE_THROWS_WITH(LambdaLR(opt, 0.5, nullptr), Catch::Contains("empty"));
  }
  SECTION("schedulers drive the optimizer and save their step") {
    Tensor p = param({1.0});
    SGD opt({p}, 1.0);
    WarmupCosine sched(opt, 1.0, 3, 13, 0.0);
    REQUIRE(opt.lr() == Approx(0.25));  // construction applies step 0
    REQUIRE(sched.last_step() == 0);
    sched.step();
    sched.step();
    REQUIRE(sched.last_step() == 2);
    REQUIRE(opt.lr() == Approx(0.75));
    sched.step();
    REQUIRE(opt.lr() == Approx(1.0));
    // The step is the whole state: a new scheduler set to it gives the same lr.
    WarmupCosine again(opt, 1.0, 3, 13, 0.0);
    again.set_step(sched.last_step());
    REQUIRE(opt.lr() == sched.current_lr());

    StepLR steps(opt, 1.0, 2, 0.5);
    REQUIRE(opt.lr() == 1.0);
    steps.step();
    steps.step();
    REQUIRE(opt.lr() == 0.5);
    // The device scalar follows: one SGD step with gradient 1 moves the weight by lr.
    const double before = p.item<double>();
    set_grad(p, {1.0});
    opt.step();
    REQUIRE(p.item<double>() == before - 0.5);
  }
  SECTION("every group follows the schedule in proportion to the lr it was made with") {
    // As PyTorch's schedulers scale each group's initial_lr: a backbone at a tenth of the head's
    // rate stays at a tenth through warmup and decay, and a group made at 0 stays frozen.
    Tensor head = param({1.0}), body = param({1.0}), frozen = param({1.0});
    ParamGroup g0{{head}, 0.4, 0.0, {}}, g1{{body}, 0.04, 0.0, {}}, g2{{frozen}, 0.0, 0.0, {}};
    SGD opt(std::vector<ParamGroup>{g0, g1, g2}, 0.0);
    WarmupCosine sched(opt, 0.4, 3, 13, 0.04);
    for (int64_t s = 0; s < 16; ++s) {
      const double want = warmup_cosine_lr(s, 0.4, 3, 13, 0.04);
      REQUIRE(opt.lr(0) == want);
      REQUIRE(opt.lr(1) == Approx(want * 0.1).epsilon(1e-15));
      REQUIRE(opt.lr(2) == 0.0);
      sched.step();
    }
    // The device scalars the step reads follow: gradient 1 moves each weight by its group's lr.
    for (Tensor p : {head, body, frozen}) set_grad(p, {1.0});
    opt.step();
    REQUIRE(head.item<float>() == static_cast<float>(1.0 - opt.lr(0)));  // float32 weights
    REQUIRE(body.item<float>() == static_cast<float>(1.0 - opt.lr(1)));
    REQUIRE(frozen.item<double>() == 1.0);
    REQUIRE(opt.initial_lr(1) == 0.04);
    // A scheduler made after the lrs moved (or after a checkpoint restored them) scales the lrs the
    // optimizer was made with, not the moved ones.
    StepLR steps(opt, 0.4, 2, 0.5);
    REQUIRE(opt.lr(0) == 0.4);
    REQUIRE(opt.lr(1) == Approx(0.04).epsilon(1e-15));
    steps.set_step(4);
    REQUIRE(opt.lr(0) == 0.1);
    REQUIRE(opt.lr(1) == Approx(0.01).epsilon(1e-15));
    // A schedule written for base_lr 0 sets every group to its rate.
    StepLR zero(opt, 0.0, 2, 0.5);
    for (size_t g = 0; g < 3; ++g) REQUIRE(opt.lr(g) == 0.0);
    REQUIRE_THROWS_AS(opt.initial_lr(3), IndexError);
  }
}

TEST_CASE("constant, polynomial and warm-restart schedules (PyTorch's ConstantLR, PolynomialLR, SGDR)", "[optim]") {
  REQUIRE(constant_lr(0, 0.6, 0.5, 3) == 0.3);
  REQUIRE(constant_lr(2, 0.6, 0.5, 3) == 0.3);
  REQUIRE(constant_lr(3, 0.6, 0.5, 3) == 0.6);
  REQUIRE(constant_lr(0, 0.6, 0.5, 0) == 0.6);  // no steps at the factor
  REQUIRE_THROWS_WITH(constant_lr(0, 0.6, 1.5, 3), Catch::Contains("constant_lr") && Catch::Contains("1.5"));
  REQUIRE_THROWS_WITH(constant_lr(0, 0.6, 0.5, -1), Catch::Contains("total_iters"));

  REQUIRE(polynomial_lr(0, 2.0, 4, 2.0) == 2.0);
  REQUIRE(polynomial_lr(1, 2.0, 4, 2.0) == 2.0 * 0.75 * 0.75);
  REQUIRE(polynomial_lr(2, 2.0, 4, 1.0) == 1.0);
  REQUIRE(polynomial_lr(4, 2.0, 4, 1.0) == 0.0);
  REQUIRE(polynomial_lr(9, 2.0, 4, 1.0) == 0.0);
  REQUIRE(polynomial_lr(9, 2.0, 4, 0.0) == 2.0);  // power 0: (0)^0 is 1
  REQUIRE_THROWS_WITH(polynomial_lr(0, 2.0, 0, 1.0), Catch::Contains("total_iters"));
  REQUIRE_THROWS_WITH(polynomial_lr(0, 2.0, 4, -1.0), Catch::Contains("power"));

  // Restarts at 0, t_0, t_0 (1 + t_mult), ...: base_lr there, the mean halfway through each cycle.
  REQUIRE(cosine_warm_restarts_lr(0, 1.0, 10, 1, 0.2) == 1.0);
  REQUIRE(cosine_warm_restarts_lr(5, 1.0, 10, 1, 0.2) == Approx(0.6));
  REQUIRE(cosine_warm_restarts_lr(10, 1.0, 10, 1, 0.2) == 1.0);
  REQUIRE(cosine_warm_restarts_lr(20, 1.0, 10, 2, 0.2) == Approx(0.6));  // cycle 2: steps 10 to 29
  REQUIRE(cosine_warm_restarts_lr(30, 1.0, 10, 2, 0.2) == 1.0);
  REQUIRE(cosine_warm_restarts_lr(50, 1.0, 10, 2, 0.2) == Approx(0.6));  // cycle 3: steps 30 to 69
  for (const int64_t t_mult : {1, 2, 3}) {
    for (int64_t s = 0; s < 400; ++s) {
      INFO("t_mult " << t_mult << ", step " << s);
      REQUIRE(cosine_warm_restarts_lr(s, 0.5, 7, t_mult, 0.01) == Approx(sgdr_by_steps(s, 0.5, 7, t_mult, 0.01)));
    }
  }
  // Far steps stay defined: the cycle lengths stop growing once one outlasts any step.
  const double far = cosine_warm_restarts_lr(std::numeric_limits<int64_t>::max(), 1.0, 3, 7, 0.0);
  REQUIRE((far >= 0.0 && far <= 1.0));
  REQUIRE_THROWS_WITH(cosine_warm_restarts_lr(0, 1.0, 0, 1, 0.0), Catch::Contains("t_0"));
  REQUIRE_THROWS_WITH(cosine_warm_restarts_lr(0, 1.0, 5, 0, 0.0), Catch::Contains("t_mult"));

  Tensor p = param({1.0});
  SGD opt({p}, 0.5);
  ConstantLR constant(opt, 0.5);  // PyTorch's defaults: a third for 5 steps
  REQUIRE(opt.lr() == Approx(0.5 / 3));
  constant.set_step(5);
  REQUIRE(opt.lr() == 0.5);
  PolynomialLR poly(opt, 0.5, 4, 1.0);
  poly.step();
  REQUIRE(opt.lr() == 0.375);
  CosineAnnealingWarmRestarts sgdr(opt, 0.5, 4, 2);
  sgdr.set_step(4);  // the first restart
  REQUIRE(opt.lr() == 0.5);
}

TEST_CASE("one-cycle schedule: PyTorch's phases at every step, both anneals, three phases", "[optim]") {
  // Key values: max_lr 1 over 100 steps rises from 1/25 at step 0 to 1 at step 29, and falls to
  // 1/25/1e4 at step 99; momentum goes the other way.
  REQUIRE(one_cycle_lr(0, 1.0, 100) == Approx(0.04));
  REQUIRE(one_cycle_lr(29, 1.0, 100) == Approx(1.0));
  REQUIRE(one_cycle_lr(64, 1.0, 100) == Approx((1.0 + 4e-6) / 2));  // halfway down
  REQUIRE(one_cycle_lr(99, 1.0, 100) == Approx(4e-6));
  REQUIRE(one_cycle_momentum(0, 100) == Approx(0.95));
  REQUIRE(one_cycle_momentum(29, 100) == Approx(0.85));
  REQUIRE(one_cycle_momentum(99, 100) == Approx(0.95));
  for (const bool cos : {true, false}) {
    OneCycleOptions o;
    o.cos_anneal = cos;
    o.pct_start = 0.25;
    for (int64_t s = 0; s <= 40; ++s) {
      INFO((cos ? "cos" : "linear") << ", step " << s);
      REQUIRE(one_cycle_lr(s, 0.2, 40, o) ==
              Approx(one_cycle_two_phase(s, 0.2 / 25, 0.2, 0.2 / 25 / 1e4, 40, 0.25, cos)));
      REQUIRE(one_cycle_momentum(s, 40, o) == Approx(one_cycle_two_phase(s, 0.95, 0.85, 0.95, 40, 0.25, cos)));
    }
  }
  // Three phases: up over pct_start, back down to the initial rate over as many steps, then to the
  // minimum; momentum down, up, and held.
  OneCycleOptions three;
  three.three_phase = true;
  three.cos_anneal = false;
  three.pct_start = 0.2;
  REQUIRE(one_cycle_lr(19, 1.0, 100, three) == Approx(1.0));   // ends at 0.2 * 100 - 1
  REQUIRE(one_cycle_lr(38, 1.0, 100, three) == Approx(0.04));  // ends at 2 * 20 - 2
  REQUIRE(one_cycle_lr(28, 1.0, 100, three) == Approx(1.0 + (0.04 - 1.0) * 9.0 / 19.0));
  REQUIRE(one_cycle_lr(99, 1.0, 100, three) == Approx(4e-6));
  REQUIRE(one_cycle_momentum(19, 100, three) == Approx(0.85));
  REQUIRE(one_cycle_momentum(38, 100, three) == Approx(0.95));
  REQUIRE(one_cycle_momentum(70, 100, three) == Approx(0.95));
  // A step past total_steps has no rate, as in PyTorch; a phase of no step is refused up front.
  REQUIRE_NOTHROW(one_cycle_lr(100, 1.0, 100));
  REQUIRE_THROWS_WITH(one_cycle_lr(101, 1.0, 100), Catch::Contains("OneCycleLR") && Catch::Contains("101"));
  OneCycleOptions short_rise;
  short_rise.pct_start = 0.1;
  REQUIRE_THROWS_WITH(one_cycle_lr(0, 1.0, 10, short_rise), Catch::Contains("phase 1") && Catch::Contains("spans"));
  OneCycleOptions bad;
  bad.pct_start = 1.0;
  REQUIRE_THROWS_WITH(one_cycle_lr(0, 1.0, 10, bad), Catch::Contains("pct_start"));
}

TEST_CASE("OneCycleLR sets every group's rate and cycles momentum or beta1 through set_option", "[optim]") {
  Tensor a = param({1.0}), b = param({1.0});
  ParamGroup ga{{a}, 0.5, 0.0, {}}, gb{{b}, 0.05, 0.0, {}};
  SGD sgd(std::vector<ParamGroup>{ga, gb}, 0.9);
  OneCycleLR cycle(sgd, 2.0, 50);
  for (int64_t s = 0; s <= 50; ++s) {
    INFO("step " << s);
    for (size_t g = 0; g < 2; ++g) {
      REQUIRE(sgd.lr(g) == one_cycle_lr(s, 2.0, 50));  // the same rate in both groups, as PyTorch
      REQUIRE(sgd.group(g).options.at("momentum") == one_cycle_momentum(s, 50));
    }
    if (s < 50) cycle.step();
  }
  // Past the end: refused, and nothing moves.
  REQUIRE_THROWS_WITH(cycle.step(), Catch::Contains("past total_steps"));
  REQUIRE(cycle.last_step() == 50);
  REQUIRE(sgd.lr(0) == one_cycle_lr(50, 2.0, 50));

  Tensor c = param({1.0});
  Adam adam({c}, 1e-3);
  OneCycleLR on_adam(adam, 1e-2, 10);
  REQUIRE(adam.group(0).options.at("beta1") == Approx(0.95));
  on_adam.set_step(2);  // the top of the rise: 0.3 * 10 - 1
  REQUIRE(adam.group(0).options.at("beta1") == Approx(0.85));
  REQUIRE(adam.lr() == Approx(1e-2));
  OneCycleOptions still;
  still.cycle_momentum = false;
  Tensor d = param({1.0});
  SGD plain({d}, 0.1, 0.5);
  OneCycleLR no_momentum(plain, 1.0, 10, still);
  REQUIRE(plain.group(0).options.count("momentum") == 0);
}

TEST_CASE("set_option: a group's option for the next step, checked like the constructor's", "[optim]") {
  // SGD with momentum 0.9 set to 0.5 after construction steps as SGD made with 0.5.
  Tensor p = param({1.0, -2.0}), q = param({1.0, -2.0});
  SGD changed({p}, 0.25, 0.9), made({q}, 0.25, 0.5);
  changed.set_option(0, "momentum", 0.5);
  for (const Vec& g : {Vec{0.5, 1.0}, Vec{-1.0, 2.0}, Vec{0.25, -0.5}}) {
    set_grad(p, g);
    set_grad(q, g);
    changed.step();
    made.step();
  }
  REQUIRE(p.to_vector<float>() == q.to_vector<float>());
  REQUIRE_THROWS_WITH(changed.set_option(0, "beta1", 0.9),
                      Catch::Contains("set_option") && Catch::Contains("beta1") && Catch::Contains("momentum"));
  REQUIRE_THROWS_WITH(changed.set_option(0, "momentum", -1.0), Catch::Contains("momentum") && Catch::Contains("-1"));
  // A refused value leaves the option as it was.
  REQUIRE(changed.group(0).options.at("momentum") == 0.5);
  SGD nesterov({param({1.0})}, 0.1, 0.9, 0.0, 0.0, true);
  REQUIRE_THROWS_WITH(nesterov.set_option(0, "momentum", 0.0), Catch::Contains("Nesterov"));
  REQUIRE(nesterov.group(0).options.count("momentum") == 0);  // not even a new entry
  REQUIRE_THROWS_AS(nesterov.set_option(3, "momentum", 0.5), IndexError);
  Adam adam({param({1.0})});
  REQUIRE_THROWS_WITH(adam.set_option(0, "beta2", 1.0), Catch::Contains("Adam") && Catch::Contains("betas"));
}

TEST_CASE("SequentialLR: each scheduler from its own step 0 at its milestone", "[optim]") {
  Tensor p = param({1.0});
  SGD opt({p}, 1.0);
  std::vector<std::unique_ptr<LRScheduler>> parts;
  parts.push_back(std::make_unique<LinearLR>(opt, 1.0, 0.1, 1.0, 5));
  parts.push_back(std::make_unique<CosineAnnealingLR>(opt, 1.0, 10, 0.01));
  SequentialLR warm_then_cosine(opt, std::move(parts), {5});
  for (int64_t s = 0; s <= 20; ++s) {
    INFO("step " << s);
    REQUIRE(opt.lr() == (s < 5 ? linear_lr(s, 1.0, 0.1, 1.0, 5) : cosine_annealing_lr(s - 5, 1.0, 10, 0.01)));
    warm_then_cosine.step();
  }
  warm_then_cosine.set_step(7);  // the step is still the whole state
  REQUIRE(opt.lr() == cosine_annealing_lr(2, 1.0, 10, 0.01));

  // A one-cycle part cycles the momentum while it is in charge.
  SGD sgd({param({1.0})}, 1.0, 0.9);
  std::vector<std::unique_ptr<LRScheduler>> cycle;
  cycle.push_back(std::make_unique<OneCycleLR>(sgd, 1.0, 10));
  cycle.push_back(std::make_unique<OneCycleLR>(sgd, 0.1, 20));
  SequentialLR two_cycles(sgd, std::move(cycle), {10});
  two_cycles.set_step(12);
  REQUIRE(sgd.lr() == one_cycle_lr(2, 0.1, 20));
  REQUIRE(sgd.group(0).options.at("momentum") == one_cycle_momentum(2, 20));

  auto two = [&](Optimizer& other, double base) {
    std::vector<std::unique_ptr<LRScheduler>> v;
    v.push_back(std::make_unique<ConstantLR>(opt, 1.0));
    v.push_back(std::make_unique<ExponentialLR>(other, base, 0.5));
    return v;
  };
  REQUIRE_THROWS_WITH(SequentialLR(opt, two(opt, 1.0), {}), Catch::Contains("expected 1 milestones"));
  REQUIRE_THROWS_WITH(SequentialLR(opt, two(opt, 1.0), {0}), Catch::Contains("increasing and > 0"));
  REQUIRE_THROWS_WITH(SequentialLR(opt, two(sgd, 1.0), {3}), Catch::Contains("another optimizer"));
  REQUIRE_THROWS_WITH(SequentialLR(opt, two(opt, 0.5), {3}), Catch::Contains("base_lr 0.5"));
}

TEST_CASE("ReduceLROnPlateau: patience, cooldown, thresholds, min_lr and its state", "[optim]") {
  Tensor a = param({1.0}), b = param({1.0});
  ParamGroup ga{{a}, 1.0, 0.0, {}}, gb{{b}, 0.1, 0.0, {}};
  SGD opt(std::vector<ParamGroup>{ga, gb}, 0.0);
  PlateauOptions o;
  o.patience = 2;
  o.factor = 0.5;
  o.min_lr = {0.3, 0.0};
  ReduceLROnPlateau plateau(opt, o);
  // 10 and 9 improve; the next three do not, and the third of them (more than patience) reduces.
  REQUIRE(!plateau.step(10.0));
  REQUIRE(!plateau.step(9.0));
  REQUIRE(!plateau.step(9.0));
  REQUIRE(!plateau.step(8.9995));  // better, but by less than the relative threshold 1e-4
  REQUIRE(plateau.num_bad_epochs() == 2);
  REQUIRE(plateau.step(std::nan("")));  // NaN is never better
  REQUIRE(opt.lr(0) == 0.5);
  REQUIRE(opt.lr(1) == 0.05);
  REQUIRE(plateau.best() == 9.0);
  for (int i = 0; i < 3; ++i) plateau.step(9.5);
  REQUIRE(opt.lr(0) == 0.3);  // max(0.25, min_lr 0.3)
  REQUIRE(opt.lr(1) == 0.025);
  REQUIRE(plateau.last_step() == 8);

  // The state resumes: a second scheduler loaded from it reduces when the first does.
  const auto saved = plateau.state_dict();
  ReduceLROnPlateau resumed(opt, o);
  resumed.load_state_dict(saved);
  REQUIRE(resumed.best() == 9.0);
  REQUIRE(resumed.last_step() == 8);
  REQUIRE(!resumed.step(9.0));
  REQUIRE(!resumed.step(9.0));
  REQUIRE(resumed.step(9.0));
  REQUIRE(opt.lr(1) == 0.0125);
  REQUIRE(opt.lr(0) == 0.3);  // at its floor: no change smaller than eps is made

  // Mode max, absolute threshold, cooldown: bad calls in the cooldown do not count.
  Tensor c = param({1.0});
  SGD acc({c}, 1.0);
  PlateauOptions m;
  m.maximize = true;
  m.relative = false;
  m.threshold = 0.01;
  m.patience = 0;
  m.cooldown = 2;
  ReduceLROnPlateau up(acc, m);
  REQUIRE(!up.step(0.5));
  REQUIRE(up.step(0.505));  // not 0.01 better: bad, and patience 0
  REQUIRE(acc.lr() == Approx(0.1));
  REQUIRE(!up.step(0.4));  // cooldown
  REQUIRE(!up.step(0.4));  // cooldown
  REQUIRE(up.cooldown_counter() == 0);
  REQUIRE(up.step(0.4));
  REQUIRE(acc.lr() == Approx(0.01));

  REQUIRE_THROWS_WITH(ReduceLROnPlateau(acc, PlateauOptions{.factor = 1.0}), Catch::Contains("factor"));
  PlateauOptions three;
  three.min_lr = {0.1, 0.2, 0.3};
  REQUIRE_THROWS_WITH(ReduceLROnPlateau(opt, three), Catch::Contains("min_lr") && Catch::Contains("(2)"));
  auto broken = saved;
  broken.erase("best");
  REQUIRE_THROWS_WITH(resumed.load_state_dict(broken), Catch::Contains("missing key \"best\""));
  broken = saved;
  broken["num_bad_epochs"] = full({}, -1.0, TensorOptions(DType::Int64));
  REQUIRE_THROWS_WITH(resumed.load_state_dict(broken), Catch::Contains("num_bad_epochs") && Catch::Contains("-1"));
  broken = saved;
  broken["extra"] = zeros({});
  REQUIRE_THROWS_WITH(resumed.load_state_dict(broken), Catch::Contains("unexpected key \"extra\""));
  REQUIRE(resumed.last_step() == 11);  // refused loads changed nothing
}

TEST_CASE("CyclicLR follows PyTorch's triangular, triangular2 and exp_range cycles, momentum the other way",
          "[optim]") {
  // Independent of the closed form: walk the cycles, position by position.
  auto expected = [](int64_t step, double lo, double hi, const CyclicOptions& o) {
    const int64_t up = o.step_size_up, down = o.step_size_down == 0 ? up : o.step_size_down;
    const int64_t cycle = step / (up + down), pos = step % (up + down);
    double frac = pos <= up ? static_cast<double>(pos) / static_cast<double>(up)
                            : 1.0 - static_cast<double>(pos - up) / static_cast<double>(down);
    if (o.mode == CyclicMode::Triangular2) frac /= std::pow(2.0, static_cast<double>(cycle));
    if (o.mode == CyclicMode::ExpRange) frac *= std::pow(o.gamma, static_cast<double>(step));
    return std::make_pair(lo + (hi - lo) * frac, o.max_momentum - (o.max_momentum - o.base_momentum) * frac);
  };
  CyclicOptions tri;
  tri.step_size_up = 4;
  tri.step_size_down = 6;
  CyclicOptions tri2 = tri;
  tri2.mode = CyclicMode::Triangular2;
  tri2.step_size_down = 0;  // as up: 4
  CyclicOptions exp = tri;
  exp.mode = CyclicMode::ExpRange;
  exp.gamma = 0.9;
  for (const CyclicOptions& o : {tri, tri2, exp}) {
    INFO("mode " << static_cast<int>(o.mode));
    for (int64_t s = 0; s < 35; ++s) {
      INFO("step " << s);
      const auto [lr, m] = expected(s, 0.1, 1.0, o);
      REQUIRE(cyclic_lr(s, 0.1, 1.0, o) == Approx(lr).epsilon(1e-12));
      REQUIRE(cyclic_momentum(s, o) == Approx(m).epsilon(1e-12));
    }
  }
  // The driven optimizer: every group gets the rate itself, and momentum (SGD) or beta1 (Adam).
  Tensor a = param({1.0}), b = param({1.0});
  SGD sgd(std::vector<ParamGroup>{{{a}, 0.5, 0.0, {}}, {{b}, 0.05, 0.0, {}}}, 0.9);
  CyclicLR cyc(sgd, 0.1, 1.0, tri2);
  for (int64_t s = 0; s < 20; ++s) {
    for (size_t g = 0; g < 2; ++g) {
      REQUIRE(sgd.lr(g) == cyclic_lr(s, 0.1, 1.0, tri2));
      REQUIRE(sgd.group(g).options.at("momentum") == cyclic_momentum(s, tri2));
    }
    cyc.step();
  }
  Tensor c = param({1.0});
  Adam adam({c});
  CyclicLR on_adam(adam, 1e-3, 1e-2, tri);
  REQUIRE(adam.group(0).options.at("beta1") == Approx(0.9));
  on_adam.set_step(4);  // the top of the first cycle
  REQUIRE(adam.lr() == Approx(1e-2));
  REQUIRE(adam.group(0).options.at("beta1") == Approx(0.8));
  Tensor d = param({1.0});
  Adagrad no_momentum({d});
  REQUIRE_THROWS_WITH(CyclicLR(no_momentum, 0.1, 1.0), Catch::Contains("CyclicLR") && Catch::Contains("momentum"));
  CyclicOptions still;
  still.cycle_momentum = false;
  REQUIRE_NOTHROW(CyclicLR(no_momentum, 0.1, 1.0, still));
  REQUIRE_THROWS_WITH(cyclic_lr(0, 1.0, 0.5), Catch::Contains("CyclicLR") && Catch::Contains("max_lr"));
  CyclicOptions bad = exp;
  bad.gamma = 1.5;
  REQUIRE_THROWS_WITH(cyclic_lr(0, 0.1, 1.0, bad), Catch::Contains("gamma"));
}
