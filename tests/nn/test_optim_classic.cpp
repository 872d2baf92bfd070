// Adadelta, Rprop and ASGD against torch.optim's update formulas written out in plain double
// arithmetic (never kiln ops), with every option; ASGD's scalar states ("eta", "mu") in the state
// dict and refused in the wrong shape; resumes bit for bit; a gradient scaler's inf step changes
// nothing; and each trains a small regression.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/optim/classic.h"
#include "tests/bitwise.h"
#include "tests/nn/optim_checks.h"

using namespace kiln;
using namespace kiln::nn::optim;

namespace {

using kiln::test::param;
using kiln::test::require_close;
using kiln::test::require_values;
using kiln::test::set_grad;
using kiln::test::Vec;

// torch.optim.Adadelta's single-tensor loop on one tensor, in double.
void adadelta_expected(Vec& p, const Vec& g_in, Vec& sq, Vec& acc, double lr, double rho, double eps, double wd,
                       bool maximize) {
  sq.resize(p.size(), 0.0);
  acc.resize(p.size(), 0.0);
  for (size_t i = 0; i < p.size(); ++i) {
    const double g = (maximize ? -g_in[i] : g_in[i]) + wd * p[i];
    sq[i] = rho * sq[i] + (1 - rho) * g * g;
    const double delta = std::sqrt(acc[i] + eps) / std::sqrt(sq[i] + eps) * g;
    acc[i] = rho * acc[i] + (1 - rho) * delta * delta;
    p[i] -= lr * delta;
  }
}

struct RpropConfig {
  double lr, minus, plus, lo, hi;
  bool maximize;
};

// torch.optim.Rprop's single-tensor loop on one tensor, in double.
void rprop_expected(Vec& p, const Vec& g_in, Vec& prev, Vec& size, const RpropConfig& c) {
  prev.resize(p.size(), 0.0);
  size.resize(p.size(), c.lr);
  for (size_t i = 0; i < p.size(); ++i) {
    double g = c.maximize ? -g_in[i] : g_in[i];
    const double agree = g * prev[i];
    if (agree > 0) {
      size[i] *= c.plus;
    } else if (agree < 0) {
      size[i] *= c.minus;
      g = 0;
    }
    size[i] = std::min(std::max(size[i], c.lo), c.hi);
    p[i] -= (g > 0 ? 1.0 : g < 0 ? -1.0 : 0.0) * size[i];
    prev[i] = g;
  }
}

struct AsgdConfig {
  double lr, lambd, alpha, t0, wd;
  bool maximize;
};

// torch.optim.ASGD's single-tensor loop on one tensor, in double, at 1-based step t; eta and mu
// are the scalar states (eta starts at lr, mu at 1).
void asgd_expected(Vec& p, const Vec& g_in, Vec& ax, double& eta, double& mu, int t, const AsgdConfig& c) {
  ax.resize(p.size(), 0.0);
  for (size_t i = 0; i < p.size(); ++i) {
    const double g = (c.maximize ? -g_in[i] : g_in[i]) + c.wd * p[i];
    p[i] = p[i] * (1 - c.lambd * eta) - eta * g;
    ax[i] = mu == 1 ? p[i] : ax[i] + (p[i] - ax[i]) * mu;
  }
  eta = c.lr / std::pow(1 + c.lambd * c.lr * t, c.alpha);
  mu = 1 / std::max(1.0, t - c.t0);
}

const std::vector<Vec> kGrads = {{0.5, -1.0, 2.0}, {-0.25, 0.75, 1.5}, {1.0, 0.5, -3.0}, {0.125, -2.0, 0.25}};

}  // namespace

TEST_CASE("Adadelta matches torch.optim's formulas: rho, eps, weight decay, maximize", "[optim]") {
  struct Config {
    double lr, rho, eps, wd;
    bool maximize;
  };
  for (const Config& c :
       {Config{1.0, 0.9, 1e-6, 0.0, false}, Config{0.5, 0.5, 1e-2, 0.1, false}, Config{2.0, 0.75, 1e-3, 0.05, true}}) {
    INFO("lr " << c.lr << ", rho " << c.rho << ", eps " << c.eps << ", wd " << c.wd << ", maximize " << c.maximize);
    for (DType dtype : {DType::Float32, DType::Float64}) {
      Tensor p = param({1.0, -2.0, 0.5}, dtype);
      Adadelta opt({p}, c.lr, c.rho, c.eps, c.wd, c.maximize);
      Vec expected = {1.0, -2.0, 0.5}, sq, acc;
      for (int s = 0; s < 6; ++s) {
        const Vec& g = kGrads[static_cast<size_t>(s) % kGrads.size()];
        set_grad(p, g);
        opt.step();
        adadelta_expected(expected, g, sq, acc, c.lr, c.rho, c.eps, c.wd, c.maximize);
        require_close(p, expected);
      }
      const auto state = opt.state_dict();
      require_values(state.at("state.0.square_avg"), sq, 1e-5, 1e-9);
      require_values(state.at("state.0.acc_delta"), acc, 1e-5, 1e-9);
    }
  }
  CHECK_THROWS_WITH(Adadelta({param({1.0})}, 1.0, 1.5), Catch::Contains("Adadelta") && Catch::Contains("rho"));
  CHECK_THROWS_WITH(Adadelta({param({1.0})}, 1.0, 0.9, -1e-6), Catch::Contains("Adadelta") && Catch::Contains("eps"));
}

TEST_CASE("Rprop matches torch.optim's formulas: growth and shrink by sign, the clamp, resting after a flip",
          "[optim]") {
  // The gradients' signs per element: + - + +, - + + -, + + - +: each element flips and keeps.
  // With lr 0.01 the sizes reach the 0.015 ceiling after three kept signs, and the 0.004 floor
  // after two flips.
  for (const RpropConfig& c :
       {RpropConfig{0.01, 0.5, 1.2, 1e-6, 50.0, false}, RpropConfig{0.01, 0.5, 1.2, 0.004, 0.015, false},
        RpropConfig{0.05, 0.25, 2.0, 0.004, 0.015, true}}) {
    INFO("lr " << c.lr << ", etas (" << c.minus << ", " << c.plus << "), sizes (" << c.lo << ", " << c.hi
               << "), maximize " << c.maximize);
    for (DType dtype : {DType::Float32, DType::Float64}) {
      Tensor p = param({1.0, -2.0, 0.5}, dtype);
      Rprop opt({p}, c.lr, {c.minus, c.plus}, {c.lo, c.hi}, c.maximize);
      Vec expected = {1.0, -2.0, 0.5}, prev, size;
      for (int s = 0; s < 9; ++s) {
        // Every third step repeats the last gradient: the signs hold, and the sizes grow.
        const Vec& g = kGrads[static_cast<size_t>(s - s / 3) % kGrads.size()];
        set_grad(p, g);
        opt.step();
        rprop_expected(expected, g, prev, size, c);
        require_close(p, expected);
      }
      const auto state = opt.state_dict();
      require_values(state.at("state.0.step_size"), size, 1e-6, 0);
      require_values(state.at("state.0.prev"), prev, 0, 0);
    }
  }
  CHECK_THROWS_WITH(Rprop({param({1.0})}, 0.01, {1.5, 2.0}),
                    Catch::Contains("Rprop") && Catch::Contains("etaminus") && Catch::Contains("1.5"));
  CHECK_THROWS_WITH(Rprop({param({1.0})}, 0.01, {0.5, 1.2}, {1.0, 0.5}),
                    Catch::Contains("Rprop") && Catch::Contains("step_sizes"));
  // torch.optim.Rprop takes no weight decay: a group that sets one is refused, not ignored.
  CHECK_THROWS_WITH(Rprop(std::vector<ParamGroup>{{{param({1.0})}, 0.01, 0.1, {}}}),
                    Catch::Contains("Rprop") && Catch::Contains("weight decay"));
}

TEST_CASE("ASGD matches torch.optim's formulas: the decaying step, the average from t0 on, eta and mu as scalar state",
          "[optim]") {
  // t0 2: ax follows the parameter for three steps, then averages with mu = 1/2, 1/3, ...
  for (const AsgdConfig& c :
       {AsgdConfig{0.1, 0.5, 0.75, 2.0, 0.0, false}, AsgdConfig{0.05, 1e-4, 0.75, 1e6, 0.1, false},
        AsgdConfig{0.2, 0.25, 0.5, 3.0, 0.05, true}}) {
    INFO("lr " << c.lr << ", lambd " << c.lambd << ", alpha " << c.alpha << ", t0 " << c.t0 << ", wd " << c.wd
               << ", maximize " << c.maximize);
    for (DType dtype : {DType::Float32, DType::Float64}) {
      Tensor p = param({1.0, -2.0, 0.5}, dtype);
      ASGD opt({p}, c.lr, c.lambd, c.alpha, c.t0, c.wd, c.maximize);
      Vec expected = {1.0, -2.0, 0.5}, ax;
      double eta = c.lr, mu = 1.0;
      for (int t = 1; t <= 8; ++t) {
        const Vec& g = kGrads[static_cast<size_t>(t - 1) % kGrads.size()];
        set_grad(p, g);
        opt.step();
        asgd_expected(expected, g, ax, eta, mu, t, c);
        require_close(p, expected);
      }
      const auto state = opt.state_dict();
      require_close(state.at("state.0.ax"), ax);
      // One number each per parameter, in the state's dtype.
      for (const char* name : {"state.0.eta", "state.0.mu"}) {
        INFO(name);
        CHECK(state.at(name).sizes() == Shape{});
        CHECK(state.at(name).dtype() == Optimizer::state_dtype(p));
      }
      require_close(state.at("state.0.eta"), {eta});
      require_close(state.at("state.0.mu"), {mu});
    }
  }
  CHECK_THROWS_WITH(ASGD({param({1.0})}, 0.01, -1.0), Catch::Contains("ASGD") && Catch::Contains("lambd"));

  // A scalar state is loaded as one: another shape is refused, naming the key and the shape wanted.
  Tensor p = param({1.0, 2.0});
  ASGD opt({p}, 0.1);
  set_grad(p, {1.0, 1.0});
  opt.step();
  auto state = opt.state_dict();
  ASGD other({param({1.0, 2.0})}, 0.1);
  state["state.0.eta"] = full({1}, 0.1);
  CHECK_THROWS_WITH(other.load_state_dict(state), Catch::Contains("state.0.eta") && Catch::Contains("expected []"));
  state["state.0.eta"] = full({2}, 0.1);
  CHECK_THROWS_WITH(other.load_state_dict(state), Catch::Contains("state.0.eta"));
}

TEST_CASE("Adadelta, Rprop and ASGD: a skipped inf step, an exact resume, and a trained regression", "[optim]") {
  auto make = [](const std::string& which, const TensorList& params) -> std::unique_ptr<Optimizer> {
    if (which == "Adadelta") return std::make_unique<Adadelta>(params, 1.0, 0.9, 1e-6, 0.01);
    if (which == "Rprop") return std::make_unique<Rprop>(params, 0.01, std::make_pair(0.5, 1.2));
    return std::make_unique<ASGD>(params, 0.05, 0.1, 0.75, 3.0, 0.01);  // averaging from step 4
  };
  for (const char* name : {"Adadelta", "Rprop", "ASGD"}) {
    INFO(name);
    // A gradient scaler's inf step changes nothing: parameters, every state (ASGD's scalars too),
    // the step count.
    Tensor q = param({1.0, -1.0});
    auto opt = make(name, {q});
    set_grad(q, {0.5, -0.25});
    opt->step();
    const auto before = opt->state_dict();
    const Tensor q_before = q.detach().clone();
    Tensor found_inf = full({1}, 1.0), scale = full({1}, 4.0);
    opt->set_grad_scaling(found_inf, scale);
    set_grad(q, {4.0, 8.0});
    opt->step();
    CHECK(kiln::test::bitwise_equal(q, q_before));
    for (const auto& [key, t] : before) {
      INFO(key);
      if (key.rfind("state.", 0) == 0) CHECK(kiln::test::bitwise_equal(opt->state_dict().at(key), t));
    }

    // state_dict / load_state_dict: a copy resumed from the state steps bit for bit as the original
    // (ASGD's resume crosses t0).
    Tensor x = param({0.5, -0.25, 1.5}), y = param({0.5, -0.25, 1.5});
    auto first = make(name, {x});
    for (size_t s = 0; s < 2; ++s) {
      set_grad(x, kGrads[s]);
      first->step();
    }
    {
      NoGradGuard no_grad;
      y.copy_(x);
    }
    auto second = make(name, {y});
    second->load_state_dict(first->state_dict());
    for (size_t s = 2; s < 9; ++s) {
      set_grad(x, kGrads[s % kGrads.size()]);
      set_grad(y, kGrads[s % kGrads.size()]);
      first->step();
      second->step();
    }
    CHECK(kiln::test::bitwise_equal(x, y));
    for (const auto& [key, t] : first->state_dict()) {
      INFO(key);
      if (key.rfind("state.", 0) == 0) CHECK(kiln::test::bitwise_equal(second->state_dict().at(key), t));
    }
  }

  // Each trains a linear regression (Rprop full-batch, as it is meant to be used).
  CHECK(kiln::test::regression_loss_ratio(
            [](const TensorList& p) { return std::make_unique<Adadelta>(p, 5.0, 0.95); }) < 1e-3);
  CHECK(kiln::test::regression_loss_ratio([](const TensorList& p) { return std::make_unique<Rprop>(p, 0.01); }) < 1e-3);
  CHECK(kiln::test::regression_loss_ratio([](const TensorList& p) { return std::make_unique<ASGD>(p, 0.1); }) < 1e-3);
}
