// The composed optimizers (RMSprop, Adagrad, Adamax, RAdam, NAdam) against torch.optim's update
// formulas written out in plain double arithmetic (never kiln ops), with every option; their state
// resumes bit for bit, a gradient scaler's inf step changes nothing, and each trains a small
// regression.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/optim/composed.h"
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

struct RmsConfig {
  const char* name;
  double alpha, wd, momentum;
  bool centered, maximize;
};

// torch.optim.RMSprop's single-tensor loop on one tensor, in double.
void rmsprop_expected(Vec& p, const Vec& g_in, Vec& sq, Vec& buf, Vec& avg, double lr, double eps, const RmsConfig& c) {
  sq.resize(p.size(), 0.0);
  buf.resize(p.size(), 0.0);
  avg.resize(p.size(), 0.0);
  for (size_t i = 0; i < p.size(); ++i) {
    double g = c.maximize ? -g_in[i] : g_in[i];
    g += c.wd * p[i];
    sq[i] = c.alpha * sq[i] + (1 - c.alpha) * g * g;
    double denom;
    if (c.centered) {
      avg[i] = c.alpha * avg[i] + (1 - c.alpha) * g;
      denom = std::sqrt(sq[i] - avg[i] * avg[i]) + eps;
    } else {
      denom = std::sqrt(sq[i]) + eps;
    }
    if (c.momentum > 0) {
      buf[i] = c.momentum * buf[i] + g / denom;
      p[i] -= lr * buf[i];
    } else {
      p[i] -= lr * g / denom;
    }
  }
}

// torch.optim.Adagrad's single-tensor loop on one tensor, in double, at 1-based step t.
void adagrad_expected(Vec& p, const Vec& g_in, Vec& sum, int t, double lr, double lr_decay, double wd, double init,
                      double eps, bool maximize) {
  sum.resize(p.size(), init);
  const double clr = lr / (1 + (t - 1) * lr_decay);
  for (size_t i = 0; i < p.size(); ++i) {
    double g = maximize ? -g_in[i] : g_in[i];
    g += wd * p[i];
    sum[i] += g * g;
    p[i] -= clr * g / (std::sqrt(sum[i]) + eps);
  }
}

// torch.optim.Adamax's single-tensor loop on one tensor, in double, at 1-based step t.
void adamax_expected(Vec& p, const Vec& g_in, Vec& m, Vec& u, int t, double lr, double b1, double b2, double eps,
                     double wd, bool maximize) {
  m.resize(p.size(), 0.0);
  u.resize(p.size(), 0.0);
  for (size_t i = 0; i < p.size(); ++i) {
    const double g = (maximize ? -g_in[i] : g_in[i]) + wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * g;
    u[i] = std::max(b2 * u[i], std::fabs(g) + eps);
    p[i] -= lr / (1 - std::pow(b1, t)) * m[i] / u[i];
  }
}

// torch.optim.RAdam's single-tensor loop on one tensor, in double, at 1-based step t.
void radam_expected(Vec& p, const Vec& g_in, Vec& m, Vec& v, int t, double lr, double b1, double b2, double eps,
                    double wd, bool decoupled, bool maximize) {
  m.resize(p.size(), 0.0);
  v.resize(p.size(), 0.0);
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  const double rho_inf = 2 / (1 - b2) - 1, rho_t = rho_inf - 2 * t * std::pow(b2, t) / bc2;
  for (size_t i = 0; i < p.size(); ++i) {
    double g = maximize ? -g_in[i] : g_in[i];
    if (decoupled) {
      p[i] *= 1 - lr * wd;
    } else {
      g += wd * p[i];
    }
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    const double m_hat = m[i] / bc1;
    if (rho_t > 5) {
      const double rect = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
      p[i] -= lr * m_hat * rect * std::sqrt(bc2) / (std::sqrt(v[i]) + eps);
    } else {
      p[i] -= lr * m_hat;
    }
  }
}

struct NadamConfig {
  double b1, b2, eps, wd, psi;
  bool decoupled, maximize;
};

// torch.optim.NAdam's single-tensor loop on one tensor, in double, at 1-based step t; mu_product
// is its scalar state (starting at 1).
void nadam_expected(Vec& p, const Vec& g_in, Vec& m, Vec& v, double& mu_product, int t, double lr,
                    const NadamConfig& c) {
  m.resize(p.size(), 0.0);
  v.resize(p.size(), 0.0);
  const double mu = c.b1 * (1 - 0.5 * std::pow(0.96, t * c.psi));
  const double mu_next = c.b1 * (1 - 0.5 * std::pow(0.96, (t + 1) * c.psi));
  mu_product *= mu;
  const double bc2 = 1 - std::pow(c.b2, t);
  for (size_t i = 0; i < p.size(); ++i) {
    double g = c.maximize ? -g_in[i] : g_in[i];
    if (c.decoupled) {
      p[i] *= 1 - lr * c.wd;
    } else {
      g += c.wd * p[i];
    }
    m[i] = c.b1 * m[i] + (1 - c.b1) * g;
    v[i] = c.b2 * v[i] + (1 - c.b2) * g * g;
    const double denom = std::sqrt(v[i] / bc2) + c.eps;
    p[i] -= lr * (1 - mu) / (1 - mu_product) * g / denom;
    p[i] -= lr * mu_next / (1 - mu_product * mu_next) * m[i] / denom;
  }
}

const std::vector<Vec> kGrads = {{0.5, -1.0, 2.0}, {-0.25, 0.75, 1.5}, {1.0, 0.5, -3.0}, {0.125, -2.0, 0.25}};

}  // namespace

TEST_CASE("RMSprop matches torch.optim's formulas: momentum, centered, weight decay, maximize", "[optim]") {
  const double lr = 0.0625, eps = 1e-8;
  const std::vector<RmsConfig> configs = {{"plain", 0.99, 0.0, 0.0, false, false},
                                          {"alpha 0.5, weight decay", 0.5, 0.1, 0.0, false, false},
                                          {"momentum", 0.9, 0.0, 0.5, false, false},
                                          {"centered", 0.75, 0.0, 0.0, true, false},
                                          {"everything", 0.75, 0.05, 0.5, true, true}};
  for (const RmsConfig& c : configs) {
    INFO(c.name);
    for (DType dtype : {DType::Float32, DType::Float64}) {
      Tensor p = param({1.0, -2.0, 0.5}, dtype);
      RMSprop opt({p}, lr, c.alpha, eps, c.wd, c.momentum, c.centered, c.maximize);
      Vec expected = {1.0, -2.0, 0.5}, sq, buf, avg;
      for (const Vec& g : kGrads) {
        set_grad(p, g);
        opt.step();
        rmsprop_expected(expected, g, sq, buf, avg, lr, eps, c);
        if (dtype == DType::Float64) {
          require_values(p, expected, 1e-13, 1e-14);
        } else {
          require_values(p, expected, 1e-5, 1e-6);
        }
      }
      const auto state = opt.state_dict();
      CHECK(state.count("state.0.momentum_buffer") == (c.momentum > 0 ? 1u : 0u));
      CHECK(state.count("state.0.grad_avg") == (c.centered ? 1u : 0u));
      require_values(state.at("state.0.square_avg"), sq, 1e-5, 1e-9);
      CHECK(state.at("state.0.step").item<double>() == 4.0);
    }
  }
  CHECK_THROWS_WITH(RMSprop({param({1.0})}, 0.1, 1.5), Catch::Contains("RMSprop") && Catch::Contains("alpha"));
  CHECK_THROWS_WITH(RMSprop({param({1.0})}, 0.1, 0.9, 1e-8, 0.0, -0.5),
                    Catch::Contains("RMSprop") && Catch::Contains("momentum") && Catch::Contains("-0.5"));
}

TEST_CASE("Adagrad matches torch.optim's formulas: lr_decay, initial accumulator, weight decay, maximize", "[optim]") {
  const double lr = 0.25, eps = 1e-10;
  struct Config {
    const char* name;
    double lr_decay, wd, init;
    bool maximize;
  };
  for (const Config& c : {Config{"plain", 0.0, 0.0, 0.0, false}, Config{"lr_decay", 0.5, 0.0, 0.0, false},
                          Config{"initial accumulator 0.5, weight decay", 0.0, 0.1, 0.5, false},
                          Config{"everything", 0.25, 0.05, 0.125, true}}) {
    INFO(c.name);
    Tensor p = param({1.0, -2.0, 0.5});
    Adagrad opt({p}, lr, c.lr_decay, c.wd, c.init, eps, c.maximize);
    Vec expected = {1.0, -2.0, 0.5}, sum;
    for (size_t s = 0; s < kGrads.size(); ++s) {
      set_grad(p, kGrads[s]);
      opt.step();
      adagrad_expected(expected, kGrads[s], sum, static_cast<int>(s) + 1, lr, c.lr_decay, c.wd, c.init, eps,
                       c.maximize);
      require_values(p, expected, 1e-5, 1e-6);
    }
    require_values(opt.state_dict().at("state.0.sum"), sum, 1e-5, 1e-9);
  }
  CHECK_THROWS_WITH(Adagrad({param({1.0})}, 0.1, -1.0), Catch::Contains("Adagrad") && Catch::Contains("lr_decay"));
  ParamGroup typo{{param({1.0})}, 0.1, 0.0, {{"lr_decy", 0.1}}};
  CHECK_THROWS_WITH(Adagrad(std::vector<ParamGroup>{typo}), Catch::Contains("lr_decy"));
}

TEST_CASE("Adamax and RAdam match torch.optim's formulas, RAdam on both sides of its rectification", "[optim]") {
  const double lr = 0.0625, eps = 1e-8;
  for (const bool maximize : {false, true}) {
    for (const double wd : {0.0, 0.1}) {
      // A large eps with weight decay: it goes into the norm before the maximum, not after.
      const double ax_eps = wd == 0.0 ? eps : 0.125;
      INFO("maximize " << maximize << ", weight decay " << wd);
      Tensor p = param({1.0, -2.0, 0.5});
      Adamax opt({p}, lr, {0.9, 0.99}, ax_eps, wd, maximize);
      Vec expected = {1.0, -2.0, 0.5}, m, u;
      for (int t = 1; t <= 6; ++t) {
        const Vec& g = kGrads[static_cast<size_t>(t - 1) % kGrads.size()];
        set_grad(p, g);
        opt.step();
        adamax_expected(expected, g, m, u, t, lr, 0.9, 0.99, ax_eps, wd, maximize);
        require_values(p, expected, 1e-5, 1e-6);
      }
      require_values(opt.state_dict().at("state.0.exp_inf"), u, 1e-5, 1e-9);
    }
  }
  // beta2 0.9: rho_inf = 19 and rho_t passes 5 at step 6, so eight steps take both branches.
  for (const bool decoupled : {false, true}) {
    for (const bool maximize : {false, true}) {
      INFO("decoupled " << decoupled << ", maximize " << maximize);
      for (DType dtype : {DType::Float32, DType::Float64}) {
        Tensor p = param({1.0, -2.0, 0.5}, dtype);
        RAdam opt({p}, lr, {0.8, 0.9}, eps, 0.1, decoupled, maximize);
        Vec expected = {1.0, -2.0, 0.5}, m, v;
        for (int t = 1; t <= 8; ++t) {
          const Vec& g = kGrads[static_cast<size_t>(t - 1) % kGrads.size()];
          set_grad(p, g);
          opt.step();
          radam_expected(expected, g, m, v, t, lr, 0.8, 0.9, eps, 0.1, decoupled, maximize);
          require_close(p, expected);
        }
      }
    }
  }
  CHECK_THROWS_WITH(Adamax({param({1.0})}, 0.1, {1.0, 0.9}), Catch::Contains("Adamax") && Catch::Contains("betas"));
  CHECK_THROWS_WITH(RAdam({param({1.0})}, 0.1, {0.9, 0.999}, -1.0),
                    Catch::Contains("RAdam") && Catch::Contains("eps") && Catch::Contains("-1"));
}

TEST_CASE("NAdam matches torch.optim's formulas: the momentum schedule, L2 and decoupled decay, maximize", "[optim]") {
  const double lr = 0.0625;
  // momentum_decay 0.4 rather than 4e-3: the momenta then change from step to step, so mixing up
  // mu and mu_next, or the product's step, changes the result.
  for (const NadamConfig& c :
       {NadamConfig{0.9, 0.999, 1e-8, 0.0, 4e-3, false, false}, NadamConfig{0.8, 0.9, 1e-8, 0.1, 0.4, false, false},
        NadamConfig{0.8, 0.9, 1e-3, 0.1, 0.4, true, false}, NadamConfig{0.9, 0.99, 1e-8, 0.05, 0.4, true, true}}) {
    INFO("betas (" << c.b1 << ", " << c.b2 << "), eps " << c.eps << ", wd " << c.wd << ", momentum_decay " << c.psi
                   << ", decoupled " << c.decoupled << ", maximize " << c.maximize);
    for (DType dtype : {DType::Float32, DType::Float64}) {
      Tensor p = param({1.0, -2.0, 0.5}, dtype);
      NAdam opt({p}, lr, {c.b1, c.b2}, c.eps, c.wd, c.psi, c.decoupled, c.maximize);
      Vec expected = {1.0, -2.0, 0.5}, m, v;
      double mu_product = 1.0;
      for (int t = 1; t <= 6; ++t) {
        const Vec& g = kGrads[static_cast<size_t>(t - 1) % kGrads.size()];
        set_grad(p, g);
        opt.step();
        nadam_expected(expected, g, m, v, mu_product, t, lr, c);
        require_close(p, expected);
      }
      // mu_product: one number per parameter, in the state's dtype.
      const Tensor kept = opt.state_dict().at("state.0.mu_product");
      CHECK(kept.sizes() == Shape{});
      CHECK(kept.dtype() == Optimizer::state_dtype(p));
      require_values(kept, {mu_product}, 1e-6, 0);
    }
  }
  CHECK_THROWS_WITH(NAdam({param({1.0})}, 0.1, {0.9, 0.999}, 1e-8, 0.0, -1.0),
                    Catch::Contains("NAdam") && Catch::Contains("momentum_decay"));
}

TEST_CASE("a parameter cast to float64 between steps takes its scalar state along, as its other state", "[optim]") {
  // NAdam's mu_product (a scalar state) and exp_avg (a parameter-shaped one) after one float32
  // step, then a step of the parameter made float64 in place (set_data, as Module::to does).
  Tensor p = param({1.0, -2.0, 0.5});
  NAdam opt({p}, 0.0625, {0.9, 0.999}, 1e-8, 0.0, 0.4);
  set_grad(p, kGrads[0]);
  opt.step();
  const double mu_after_one = opt.state_dict().at("state.0.mu_product").item<double>();
  p.set_data(p.detach().to(DType::Float64));
  set_grad(p, kGrads[1]);
  opt.step();
  const std::map<std::string, Tensor> state = opt.state_dict();
  CHECK(state.at("state.0.exp_avg").dtype() == DType::Float64);
  CHECK(state.at("state.0.mu_product").dtype() == DType::Float64);
  // The product went on from its float32 value: one more factor, below the first.
  CHECK(state.at("state.0.mu_product").item<double>() < mu_after_one);
}

TEST_CASE("RMSprop and Adagrad: per-group options, a skipped inf step, and an exact resume", "[optim]") {
  // Group 1 overrides momentum and centered; its parameter follows its own formula.
  Tensor a = param({1.0, 2.0, 3.0}), b = param({-1.0, 0.5, 2.0});
  RMSprop opt(
      std::vector<ParamGroup>{{{a}, 0.0625, 0.0, {}}, {{b}, 0.125, 0.0, {{"momentum", 0.5}, {"centered", 1.0}}}});
  Vec ea = {1.0, 2.0, 3.0}, eb = {-1.0, 0.5, 2.0}, sa, ba, va, sb, bb, vb;
  for (const Vec& g : kGrads) {
    set_grad(a, g);
    set_grad(b, g);
    opt.step();
    rmsprop_expected(ea, g, sa, ba, va, 0.0625, 1e-8, {"", 0.99, 0.0, 0.0, false, false});
    rmsprop_expected(eb, g, sb, bb, vb, 0.125, 1e-8, {"", 0.99, 0.0, 0.5, true, false});
  }
  require_values(a, ea, 1e-5, 1e-6);
  require_values(b, eb, 1e-5, 1e-6);
  CHECK(opt.state_dict().count("state.0.momentum_buffer") == 0);
  CHECK(opt.state_dict().count("state.1.momentum_buffer") == 1);

  // A gradient scaler's inf step changes nothing, state and step count included; a finite one
  // divides the gradients by the scale.
  Tensor p = param({1.0, -1.0});
  Adagrad ada({p}, 0.25, 0.5);
  Tensor found_inf = zeros({1}), scale = full({1}, 4.0);
  ada.set_grad_scaling(found_inf, scale);
  found_inf.fill_(1.0);
  set_grad(p, {4.0, 8.0});
  ada.step();
  require_values(p, {1.0, -1.0}, 0, 0);
  CHECK(ada.state_dict().at("state.0.step").item<double>() == 0.0);
  CHECK(ada.state_dict().at("state.0.sum").to_vector_double() == Vec{0.0, 0.0});
  found_inf.fill_(0.0);
  ada.step();
  Vec e = {1.0, -1.0}, sum;
  adagrad_expected(e, {1.0, 2.0}, sum, 1, 0.25, 0.5, 0.0, 0.0, 1e-10, false);
  require_values(p, e, 1e-6, 1e-7);

  // state_dict / load_state_dict: a copy resumed from the state steps bit for bit as the original.
  for (const char* name : {"RMSprop", "Adagrad", "Adamax", "RAdam", "NAdam"}) {
    INFO(name);
    Tensor x = param({0.5, -0.25, 1.5}), y = param({0.5, -0.25, 1.5});
    const std::string which = name;
    auto make = [which](Tensor& t) -> std::unique_ptr<Optimizer> {
      if (which == "RMSprop") return std::make_unique<RMSprop>(TensorList{t}, 0.01, 0.9, 1e-8, 0.01, 0.5, true);
      if (which == "Adagrad") return std::make_unique<Adagrad>(TensorList{t}, 0.1, 0.1, 0.01, 0.25);
      if (which == "Adamax") return std::make_unique<Adamax>(TensorList{t}, 0.01, std::make_pair(0.9, 0.99));
      if (which == "NAdam")
        return std::make_unique<NAdam>(TensorList{t}, 0.01, std::make_pair(0.9, 0.99), 1e-8, 0.01, 0.4);
      return std::make_unique<RAdam>(TensorList{t}, 0.01, std::make_pair(0.9, 0.9), 1e-8, 0.01, true);
    };
    auto first = make(x);
    // RAdam's rectification starts at step 6: the resume crosses it.
    for (size_t s = 0; s < 4; ++s) {
      set_grad(x, kGrads[s % kGrads.size()]);
      first->step();
    }
    {
      NoGradGuard no_grad;
      y.copy_(x);
    }
    auto second = make(y);
    second->load_state_dict(first->state_dict());
    for (size_t s = 4; s < 9; ++s) {
      set_grad(x, kGrads[s % kGrads.size()]);
      set_grad(y, kGrads[s % kGrads.size()]);
      first->step();
      second->step();
    }
    CHECK(kiln::test::bitwise_equal(x, y));
  }
}

TEST_CASE("the composed optimizers train a linear regression", "[optim]") {
  using Make = std::function<std::unique_ptr<Optimizer>(const TensorList&)>;
  const std::vector<std::pair<const char*, Make>> optimizers = {
      {"RMSprop", [](const TensorList& p) { return std::make_unique<RMSprop>(p, 0.01); }},
      {"Adagrad", [](const TensorList& p) { return std::make_unique<Adagrad>(p, 0.3); }},
      {"Adamax", [](const TensorList& p) { return std::make_unique<Adamax>(p, 0.05); }},
      {"RAdam", [](const TensorList& p) { return std::make_unique<RAdam>(p, 0.05); }},
      {"NAdam", [](const TensorList& p) { return std::make_unique<NAdam>(p, 0.05); }}};
  for (const auto& [name, make] : optimizers) {
    INFO(name);
    CHECK(kiln::test::regression_loss_ratio(make) < 1e-3);
  }
}
