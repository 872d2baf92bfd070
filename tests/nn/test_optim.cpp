// Optimizers, schedules and clipping. Expected values come from the update formulas written out in
// plain double arithmetic below (never from kiln ops); learning rates are mostly powers of two so
// float32 parameters see them exactly, and float32 updates match to ~1e-6 relative.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <vector>

#include "core/kiln.h"
#include "nn/optim/adam.h"
#include "nn/optim/adamw.h"
#include "nn/optim/clip.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/sgd.h"
#include "tests/bitwise.h"
#include "tests/nn/optim_checks.h"

using namespace kiln;
using namespace kiln::nn::optim;

namespace {

using kiln::test::param;
using kiln::test::require_values;
using kiln::test::set_grad;
using kiln::test::Vec;

// torch.optim.SGD on one tensor, in double. `first`: the momentum buffer starts as d.
void sgd_expected(Vec& p, const Vec& g, Vec& buf, bool first, double lr, double momentum, double dampening, double wd,
                  bool nesterov, bool maximize = false) {
  if (buf.empty()) buf.assign(p.size(), 0.0);
  for (size_t i = 0; i < p.size(); ++i) {
    double d = (maximize ? -g[i] : g[i]) + wd * p[i];
    if (momentum != 0) {
      buf[i] = first ? d : momentum * buf[i] + (1 - dampening) * d;
      d = nesterov ? d + momentum * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

// torch.optim.AdamW on one tensor, in double, at 1-based step t.
void adamw_expected(Vec& p, const Vec& g, Vec& m, Vec& v, int t, double lr, double b1, double b2, double eps,
                    double wd) {
  if (m.empty()) m.assign(p.size(), 0.0);
  if (v.empty()) v.assign(p.size(), 0.0);
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] *= 1 - lr * wd;
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
  }
}

// torch.optim.Adam (decoupled false) or AdamW (true) with amsgrad and maximize, on one tensor, in
// double, at 1-based step t, as torch.optim's single-tensor loop computes it.
struct AdamConfig {
  const char* name;
  bool decoupled;
  double b2, wd;
  bool amsgrad, maximize;
};
void adam_expected(Vec& p, const Vec& g_in, Vec& m, Vec& v, Vec& vmax, int t, double lr, double b1, double eps,
                   const AdamConfig& c) {
  if (m.empty()) m.assign(p.size(), 0.0);
  if (v.empty()) v.assign(p.size(), 0.0);
  if (vmax.empty()) vmax.assign(p.size(), 0.0);
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(c.b2, t);
  for (size_t i = 0; i < p.size(); ++i) {
    double g = c.maximize ? -g_in[i] : g_in[i];
    if (c.decoupled) {
      p[i] *= 1 - lr * c.wd;
    } else {
      g += c.wd * p[i];
    }
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = c.b2 * v[i] + (1 - c.b2) * g * g;
    vmax[i] = std::max(vmax[i], v[i]);
    const double second = c.amsgrad ? vmax[i] : v[i];
    p[i] -= lr / bc1 * m[i] / (std::sqrt(second) / std::sqrt(bc2) + eps);
  }
}

const std::vector<Vec> kGrads = {{0.5, -1.0, 2.0}, {-0.25, 0.75, 1.5}, {1.0, 0.5, -3.0}};

bool same_bits(const Tensor& a, const Tensor& b) { return kiln::test::bitwise_equal(a, b); }

}  // namespace

TEST_CASE("SGD steps match the formulas", "[optim]") {
  struct Config {
    const char* name;
    double momentum, dampening, wd;
    bool nesterov, maximize = false;
  };
  const std::vector<Config> configs = {{"plain", 0, 0, 0, false},
                                       {"momentum", 0.9, 0, 0, false},
                                       {"momentum with dampening", 0.9, 0.5, 0, false},
                                       {"nesterov", 0.9, 0, 0, true},
                                       {"weight decay", 0, 0, 0.1, false},
                                       {"nesterov with weight decay", 0.8, 0, 0.05, true},
                                       {"maximize", 0, 0, 0, false, true},
                                       {"maximize with momentum and weight decay", 0.9, 0.1, 0.1, false, true}};
  for (const Config& c : configs) {
    INFO(c.name);
    Tensor p = param({1.0, -2.0, 0.5});
    SGD opt({p}, 0.5, c.momentum, c.dampening, c.wd, c.nesterov, c.maximize);
    Vec expected = {1.0, -2.0, 0.5}, buf;
    for (size_t s = 0; s < kGrads.size(); ++s) {
      set_grad(p, kGrads[s]);
      opt.step();
      sgd_expected(expected, kGrads[s], buf, s == 0, 0.5, c.momentum, c.dampening, c.wd, c.nesterov, c.maximize);
      require_values(p, expected);
    }
    REQUIRE(opt.step_count() == 3);
  }
}

TEST_CASE("AdamW steps match the formulas", "[optim]") {
  const double lr = 0.0625, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
  Tensor p = param({1.0, -2.0, 0.5});
  AdamW opt({p}, lr, {b1, b2}, eps, wd);
  Vec expected = {1.0, -2.0, 0.5}, m, v;
  for (size_t s = 0; s < kGrads.size(); ++s) {
    set_grad(p, kGrads[s]);
    opt.step();
    adamw_expected(expected, kGrads[s], m, v, static_cast<int>(s) + 1, lr, b1, b2, eps, wd);
    require_values(p, expected, 1e-5, 1e-6);
  }
  // The first step of Adam moves each weight by about lr (plus the decay): a sanity anchor.
  Tensor q = param({0.0});
  AdamW opt2({q}, lr, {b1, b2}, eps, 0.0);
  set_grad(q, {123.0});
  opt2.step();
  REQUIRE(q.item<double>() == Approx(-lr).epsilon(1e-6));

  // The defaults are PyTorch's.
  Tensor r = param({2.0});
  AdamW opt3({r});
  set_grad(r, {1.0});
  opt3.step();
  Vec er = {2.0}, mr, vr;
  adamw_expected(er, {1.0}, mr, vr, 1, 1e-3, 0.9, 0.999, 1e-8, 1e-2);
  require_values(r, er, 1e-6, 1e-7);
}

TEST_CASE("Adam and AdamW with L2 decay, amsgrad and maximize match torch.optim's formulas", "[optim]") {
  const double lr = 0.0625, b1 = 0.9, eps = 1e-8;
  // beta2 = 0.5 lets the second moment fall between steps (kGrads' squares shrink), so amsgrad's
  // maximum differs from it.
  const std::vector<AdamConfig> configs = {{"Adam", false, 0.99, 0.0, false, false},
                                           {"Adam with L2 weight decay", false, 0.99, 0.1, false, false},
                                           {"Adam amsgrad", false, 0.5, 0.0, true, false},
                                           {"Adam maximize", false, 0.99, 0.0, false, true},
                                           {"Adam with everything", false, 0.5, 0.1, true, true},
                                           {"AdamW amsgrad", true, 0.5, 0.1, true, false},
                                           {"AdamW maximize", true, 0.99, 0.1, false, true}};
  for (const AdamConfig& c : configs) {
    INFO(c.name);
    Tensor p = param({1.0, -2.0, 0.5});
    std::unique_ptr<Optimizer> opt;
    if (c.decoupled) {
      opt = std::make_unique<AdamW>(TensorList{p}, lr, std::make_pair(b1, c.b2), eps, c.wd, c.amsgrad, c.maximize);
    } else {
      opt = std::make_unique<Adam>(TensorList{p}, lr, std::make_pair(b1, c.b2), eps, c.wd, c.amsgrad, c.maximize);
    }
    Vec expected = {1.0, -2.0, 0.5}, m, v, vmax;
    bool max_differs = false;
    for (size_t s = 0; s < kGrads.size(); ++s) {
      set_grad(p, kGrads[s]);
      opt->step();
      adam_expected(expected, kGrads[s], m, v, vmax, static_cast<int>(s) + 1, lr, b1, eps, c);
      require_values(p, expected, 1e-5, 1e-6);
      for (size_t i = 0; i < v.size(); ++i) max_differs |= vmax[i] > v[i] * (1 + 1e-3);
    }
    // The configurations with amsgrad exercise it: its maximum left the second moment behind.
    if (c.amsgrad) CHECK(max_differs);
    const auto state = opt->state_dict();
    CHECK(state.count("state.0.max_exp_avg_sq") == (c.amsgrad ? 1u : 0u));
    if (c.amsgrad) require_values(state.at("state.0.max_exp_avg_sq"), vmax, 1e-5, 1e-9);
  }

  // Maximize climbs: the first step moves each weight by about +lr along its gradient.
  Tensor q = param({0.0});
  Adam up({q}, lr, {b1, 0.999}, eps, 0.0, false, true);
  set_grad(q, {123.0});
  up.step();
  REQUIRE(q.item<double>() == Approx(lr).epsilon(1e-6));

  // The defaults are PyTorch's: Adam has no weight decay, AdamW 1e-2.
  Tensor r = param({2.0}), w = param({2.0});
  Adam adam({r});
  AdamW adamw({w});
  set_grad(r, {1.0});
  set_grad(w, {1.0});
  adam.step();
  adamw.step();
  Vec er = {2.0}, ew = {2.0}, m1, v1, x1, m2, v2, x2;
  adam_expected(er, {1.0}, m1, v1, x1, 1, 1e-3, 0.9, 1e-8, {"", false, 0.999, 0.0, false, false});
  adam_expected(ew, {1.0}, m2, v2, x2, 1, 1e-3, 0.9, 1e-8, {"", true, 0.999, 1e-2, false, false});
  require_values(r, er, 1e-6, 1e-7);
  require_values(w, ew, 1e-6, 1e-7);
  REQUIRE(r.item<double>() != w.item<double>());
}

TEST_CASE("amsgrad and maximize per parameter group", "[optim]") {
  Tensor a = param({1.0, -2.0}), b = param({0.5});
  ParamGroup ga{{a}, 0.0625, 0.0, {{"amsgrad", 1.0}}}, gb{{b}, 0.0625, 0.0, {{"maximize", 1.0}}};
  Adam opt({ga, gb}, {0.9, 0.5});
  Vec ea = {1.0, -2.0}, eb = {0.5}, ma, va, xa, mb, vb, xb;
  const std::vector<Vec> ga_grads = {{0.5, -1.0}, {-0.25, 0.75}, {1.0, 0.5}}, gb_grads = {{2.0}, {1.5}, {-3.0}};
  for (size_t s = 0; s < 3; ++s) {
    set_grad(a, ga_grads[s]);
    set_grad(b, gb_grads[s]);
    opt.step();
    const int t = static_cast<int>(s) + 1;
    adam_expected(ea, ga_grads[s], ma, va, xa, t, 0.0625, 0.9, 1e-8, {"", false, 0.5, 0.0, true, false});
    adam_expected(eb, gb_grads[s], mb, vb, xb, t, 0.0625, 0.9, 1e-8, {"", false, 0.5, 0.0, false, true});
    require_values(a, ea, 1e-5, 1e-6);
    require_values(b, eb, 1e-5, 1e-6);
  }
  // Only the amsgrad group keeps a running maximum, and a state says so.
  const auto state = opt.state_dict();
  CHECK(state.count("state.0.max_exp_avg_sq") == 1);
  CHECK(state.count("state.1.max_exp_avg_sq") == 0);
  CHECK(opt.group_state_names(1) == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  Tensor c = param({1.0, 1.0}), d = param({1.0});
  Adam same({ParamGroup{{c}, 0.0625, 0.0, {{"amsgrad", 1.0}}}, ParamGroup{{d}, 0.0625, 0.0, {}}}, {0.9, 0.5});
  same.load_state_dict(state);  // the same split of the state: accepted
  Adam other({ParamGroup{{c}, 0.0625, 0.0, {}}, ParamGroup{{d}, 0.0625, 0.0, {{"amsgrad", 1.0}}}}, {0.9, 0.5});
  CHECK_THROWS_WITH(other.load_state_dict(state),
                    Catch::Contains("state.0.max_exp_avg_sq") && Catch::Contains("for the parameters of group 0"));
  CHECK_THROWS_WITH(SGD({ParamGroup{{c}, 0.1, 0.0, {{"amsgrad", 1.0}}}}), Catch::Contains("amsgrad"));
}

TEST_CASE("an amsgrad state resumes only into amsgrad", "[optim]") {
  Tensor a = param({1.0, 2.0});
  Adam ams({a}, 0.125, {0.9, 0.999}, 1e-8, 0.0, true);
  set_grad(a, {1.0, -1.0});
  ams.step();
  const auto with_max = ams.state_dict();
  REQUIRE(with_max.count("state.0.max_exp_avg_sq") == 1);
  Tensor b = param({1.0, 2.0});
  Adam plain({b}, 0.125);
  CHECK_THROWS_WITH(plain.load_state_dict(with_max), Catch::Contains("max_exp_avg_sq"));
  set_grad(b, {1.0, -1.0});
  plain.step();
  Tensor c = param({1.0, 2.0});
  Adam ams2({c}, 0.125, {0.9, 0.999}, 1e-8, 0.0, true);
  CHECK_THROWS_WITH(ams2.load_state_dict(plain.state_dict()), Catch::Contains("only part of its state (2 of 3"));
  ams2.load_state_dict(with_max);
  CHECK(ams2.step_count() == 1);
}

TEST_CASE("optimizers skip parameters without a gradient", "[optim]") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  AdamW opt({a, b}, 0.125);
  set_grad(a, {1.0, -1.0});
  opt.step();
  REQUIRE(b.item<double>() == 3.0);
  const auto sd = opt.state_dict();
  REQUIRE(sd.count("state.0.exp_avg") == 1);
  REQUIRE(sd.count("state.1.exp_avg") == 0);

  REQUIRE(sd.at("state.0.step").item<double>() == 1.0);
  REQUIRE(sd.count("state.1.step") == 0);

  // A parameter without a gradient gets no step count, in its own group or another's.
  ParamGroup g0{{a}, 0.125, 0.0, {}}, g1{{b}, 0.125, 0.0, {}};
  SGD sgd(std::vector<ParamGroup>{g0, g1}, 0.9);
  set_grad(a, {1.0, 1.0});
  b.set_grad(Tensor());
  sgd.step();
  sgd.step();
  const auto s2 = sgd.state_dict();
  REQUIRE(s2.at("state.0.step").item<double>() == 2.0);
  REQUIRE(s2.count("state.1.step") == 0);
  REQUIRE(s2.at("step").item<int64_t>() == 2);
}

TEST_CASE("optimizers take frozen parameters: skipped while frozen, trained once unfrozen, as torch.optim", "[optim]") {
  // A model's whole parameter list with a frozen layer in it (fine-tuning): the frozen tensor gets
  // no gradient from backward, so weight decay and momentum leave it alone; unfrozen, its first
  // step is a first step (AdamW's bias corrections at t = 1).
  const double lr = 0.125, wd = 0.25;
  Tensor a = param({1.0, 2.0}), f = tensor({-0.5, 0.25});
  REQUIRE_FALSE(f.requires_grad());
  AdamW opt({a, f}, lr, {0.9, 0.999}, 1e-8, wd);
  const Tensor x = tensor({0.5, -1.0});
  Vec ef = {-0.5, 0.25}, m, v;
  for (int s = 1; s <= 3; ++s) {
    opt.zero_grad();
    if (s == 3) f.set_requires_grad(true);
    (sum(a * x) + sum(f * x)).backward();
    REQUIRE(f.grad().defined() == (s == 3));
    if (s == 3) adamw_expected(ef, {0.5, -1.0}, m, v, 1, lr, 0.9, 0.999, 1e-8, wd);
    opt.step();
    require_values(f, ef);
  }
  const auto sd = opt.state_dict();
  REQUIRE(sd.at("state.0.step").item<double>() == 3.0);
  REQUIRE(sd.at("state.1.step").item<double>() == 1.0);
  // A tensor computed from a parameter is still refused: its gradient is never kept.
  REQUIRE_THROWS_WITH(SGD({a * 2.0}, 0.1), Catch::Contains("is not a leaf tensor"));
}

TEST_CASE("each parameter counts its own steps: a late first gradient starts afresh, as in torch.optim", "[optim]") {
  // a has gradients from step 1, b from step 3 only. b's updates must be those of an optimizer that
  // meets b at its first step: AdamW's bias corrections at t = 1, 2 (not 3, 4), and SGD's momentum
  // buffer starting as b's first update (not (1 - dampening) times it).
  const double lr = 0.125, wd = 0.0625;
  auto grads_of_b = [](int s) { return Vec{0.25 * s, -0.125}; };
  SECTION("AdamW") {
    Tensor a = param({1.0, 2.0}), b = param({-0.5, 0.25});
    AdamW opt({a, b}, lr, {0.9, 0.999}, 1e-8, wd);
    Vec eb = {-0.5, 0.25}, m, v;
    for (int s = 1; s <= 4; ++s) {
      set_grad(a, {0.5, -1.0});
      if (s >= 3) {
        set_grad(b, grads_of_b(s));
        adamw_expected(eb, grads_of_b(s), m, v, s - 2, lr, 0.9, 0.999, 1e-8, wd);
      } else {
        b.set_grad(Tensor());
      }
      opt.step();
      if (s == 3) require_values(b, eb);  // b's first step moves it by about lr, as a first step does
    }
    require_values(b, eb);
    const auto sd = opt.state_dict();
    REQUIRE(sd.at("state.0.step").item<double>() == 4.0);
    REQUIRE(sd.at("state.1.step").item<double>() == 2.0);
  }
  SECTION("SGD with momentum and dampening, in a second group") {
    Tensor a = param({1.0, 2.0}), b = param({-0.5, 0.25});
    ParamGroup ga{{a}, lr, wd, {}}, gb{{b}, lr, wd, {}};
    SGD opt(std::vector<ParamGroup>{ga, gb}, 0.5, 0.25);
    Vec eb = {-0.5, 0.25}, buf;
    for (int s = 1; s <= 4; ++s) {
      set_grad(a, {0.5, -1.0});
      if (s >= 3) {
        set_grad(b, grads_of_b(s));
        sgd_expected(eb, grads_of_b(s), buf, s == 3, lr, 0.5, 0.25, wd, false);
      } else {
        b.set_grad(Tensor());
      }
      opt.step();
    }
    require_values(b, eb);
    REQUIRE(opt.state_dict().at("state.1.step").item<double>() == 2.0);
  }
}

TEST_CASE("a state with per-group step counts (older kiln) gives each parameter with state its group's", "[optim]") {
  Tensor a = param({1.0, 2.0}), b = param({3.0}), c = param({4.0});
  ParamGroup g0{{a, b}, 0.125, 0.0, {}}, g1{{c}, 0.125, 0.0, {}};
  AdamW opt(std::vector<ParamGroup>{g0, g1});
  set_grad(a, {1.0, -1.0});
  set_grad(c, {0.5});
  opt.step();
  opt.step();
  std::map<std::string, Tensor> older = opt.state_dict();
  older.erase("state.0.step");
  older.erase("state.2.step");
  older["group.0.step"] = full({}, 2.0);
  older["group.1.step"] = full({}, 2.0);
  AdamW loaded(std::vector<ParamGroup>{ParamGroup{{param({1.0, 2.0}), param({3.0})}, 0.5, 0.0, {}},
                                       ParamGroup{{param({4.0})}, 0.5, 0.0, {}}});
  loaded.load_state_dict(older);
  const auto sd = loaded.state_dict();
  CHECK(sd.at("state.0.step").item<double>() == 2.0);
  CHECK(sd.count("state.1.step") == 0);  // b never had state, so no count: its first step is its first
  CHECK(sd.at("state.2.step").item<double>() == 2.0);
  CHECK(sd.count("group.0.step") == 0);
}

TEST_CASE("parameter groups: own lr, options, and no decay on 1-d parameters", "[optim]") {
  SECTION("SGD groups with their own lr and momentum") {
    Tensor a = param({1.0}), b = param({1.0});
    ParamGroup ga{{a}, 0.5, 0.0, {}}, gb{{b}, 0.25, 0.0, {{"momentum", 0.5}}};
    SGD opt(std::vector<ParamGroup>{ga, gb});
    Vec ea = {1.0}, eb = {1.0}, bufa, bufb;
    for (int s = 0; s < 2; ++s) {
      set_grad(a, {1.0});
      set_grad(b, {1.0});
      opt.step();
      sgd_expected(ea, {1.0}, bufa, s == 0, 0.5, 0, 0, 0, false);
      sgd_expected(eb, {1.0}, bufb, s == 0, 0.25, 0.5, 0, 0, false);
    }
    require_values(a, ea);
    require_values(b, eb);
    REQUIRE(opt.lr(0) == 0.5);
    REQUIRE(opt.lr(1) == 0.25);
  }
  SECTION("decay_groups + AdamW") {
    Tensor w = tensor(Vec{1.0, -1.0, 2.0, 0.5}, {2, 2}).to(DType::Float32);
    w.set_requires_grad(true);
    Tensor bias = param({0.5, -0.5});
    Tensor frozen = tensor({1.0, 2.0}).view({1, 2});  // requires no grad: left out
    std::vector<std::pair<std::string, Tensor>> named = {{"w", w}, {"bias", bias}, {"frozen", frozen}};
    std::vector<ParamGroup> groups = decay_groups(named, 0.0625, 0.5);
    REQUIRE(groups.size() == 2);
    REQUIRE(groups[0].params.size() == 1);
    REQUIRE(groups[0].params[0].is_same(w));
    REQUIRE(groups[0].weight_decay == 0.5);
    REQUIRE(groups[1].params.size() == 1);
    REQUIRE(groups[1].params[0].is_same(bias));
    REQUIRE(groups[1].weight_decay == 0.0);
    groups[1].options["beta2"] = 0.9;
    AdamW opt(groups, {0.9, 0.99}, 1e-8);
    Vec ew = {1.0, -1.0, 2.0, 0.5}, eb = {0.5, -0.5}, mw, vw, mb, vb;
    for (int s = 1; s <= 2; ++s) {
      w.set_grad(tensor(Vec{0.1, 0.2, -0.3, 0.4}, {2, 2}).to(DType::Float32));
      set_grad(bias, {1.0, -2.0});
      opt.step();
      adamw_expected(ew, {0.1, 0.2, -0.3, 0.4}, mw, vw, s, 0.0625, 0.9, 0.99, 1e-8, 0.5);
      adamw_expected(eb, {1.0, -2.0}, mb, vb, s, 0.0625, 0.9, 0.9, 1e-8, 0.0);
    }
    require_values(w, ew, 1e-5, 1e-6);
    require_values(bias, eb, 1e-5, 1e-6);
  }
}

TEST_CASE("float64 parameters step by their exact learning rate, as set at construction or by set_lr", "[optim]") {
  // 0.1 and 0.3 are not float32 numbers: through a float32 scalar the updates would be ~1e-9 off.
  const Vec start = {1.0, -2.0, 0.5};
  Tensor p = param(start, DType::Float64);
  SGD sgd({p}, 0.1);
  Vec expected = start, buf;
  for (size_t s = 0; s < kGrads.size(); ++s) {
    const double lr = s == 0 ? 0.1 : 0.3;
    if (s == 1) sgd.set_lr(lr);
    set_grad(p, kGrads[s]);
    sgd.step();
    sgd_expected(expected, kGrads[s], buf, s == 0, lr, 0, 0, 0, false);
    REQUIRE(same_bits(p, tensor(expected).to(DType::Float64)));
  }

  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  Tensor q = param(start, DType::Float64);
  AdamW adamw({q}, lr, {b1, b2}, eps, wd);
  Vec eq = start, m, v;
  for (size_t s = 0; s < kGrads.size(); ++s) {
    set_grad(q, kGrads[s]);
    adamw.step();
    adamw_expected(eq, kGrads[s], m, v, static_cast<int>(s) + 1, lr, b1, b2, eps, wd);
    require_values(q, eq, 1e-14, 0.0);
  }
}

TEST_CASE("set_lr takes effect at the next step", "[optim]") {
  Tensor a = param({1.0}), b = param({1.0});
  ParamGroup ga{{a}, 0.5, 0.0, {}}, gb{{b}, 0.5, 0.0, {}};
  SGD opt(std::vector<ParamGroup>{ga, gb});
  set_grad(a, {1.0});
  set_grad(b, {1.0});
  opt.step();  // both: 1 - 0.5
  opt.set_lr(0.25);
  opt.step();  // both: - 0.25
  opt.set_lr(1, 0.125);
  opt.step();  // a: - 0.25, b: - 0.125
  REQUIRE(a.item<double>() == 0.0);
  REQUIRE(b.item<double>() == 0.125);
  REQUIRE(opt.lr(0) == 0.25);
  REQUIRE(opt.lr(1) == 0.125);
  REQUIRE_THROWS_AS(opt.set_lr(-1.0), Error);
}

TEST_CASE("zero_grad clears or zeroes gradients", "[optim]") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  SGD opt({a, b}, 0.5);
  set_grad(a, {1.0, 1.0});
  set_grad(b, {2.0});
  Tensor ga = a.grad();
  opt.zero_grad(false);
  REQUIRE(a.grad().is_same(ga));  // kept, zeroed in place
  REQUIRE(a.grad().to_vector_double() == Vec{0.0, 0.0});
  REQUIRE(b.grad().to_vector_double() == Vec{0.0});
  opt.zero_grad();
  REQUIRE_FALSE(a.grad().defined());
  REQUIRE_FALSE(b.grad().defined());
}

TEST_CASE("state_dict and load_state_dict resume bit for bit", "[optim]") {
  manual_seed(17);
  const std::vector<Shape> shapes = {{4, 3}, {3}, {70000}};
  const int before = 3, after = 4;
  std::vector<TensorList> grads;
  for (int s = 0; s < before + after; ++s) {
    TensorList g;
    for (const Shape& sh : shapes) g.push_back(randn(sh));
    grads.push_back(g);
  }
  auto make_params = [&]() {
    manual_seed(1);
    TensorList ps;
    for (const Shape& sh : shapes) {
      Tensor p = randn(sh);
      p.set_requires_grad(true);
      ps.push_back(p);
    }
    return ps;
  };
  // Parameter 1 has no gradient in the first two steps: at the snapshot the parameters' step counts
  // differ (3 and 1), and the resumed run must keep each.
  auto apply_grads = [](TensorList& ps, const TensorList& g, int step) {
    for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(i == 1 && step < 2 ? Tensor() : g[i].clone());
  };
  auto check = [&](auto make_opt) {
    // Uninterrupted run.
    TensorList p = make_params();
    auto opt = make_opt(p);
    std::map<std::string, Tensor> snapshot;
    TensorList p_snapshot;
    for (int s = 0; s < before + after; ++s) {
      if (s == before) {
        snapshot = opt->state_dict();
        for (const Tensor& t : p) p_snapshot.push_back(t.detach().clone());
      }
      apply_grads(p, grads[static_cast<size_t>(s)], s);
      opt->step();
      if (s == 1) opt->set_lr(opt->lr() * 0.5);
    }
    // Resumed run: fresh parameters from the snapshot, a fresh optimizer, the saved state.
    TensorList q;
    for (const Tensor& t : p_snapshot) {
      Tensor c = t.clone();
      c.set_requires_grad(true);
      q.push_back(c);
    }
    auto resumed = make_opt(q);
    resumed->load_state_dict(snapshot);
    REQUIRE(resumed->step_count() == before);
    REQUIRE(snapshot.at("state.0.step").item<double>() == before);
    REQUIRE(snapshot.at("state.1.step").item<double>() == before - 2);
    REQUIRE(resumed->lr() == opt->lr());
    for (int s = before; s < before + after; ++s) {
      apply_grads(q, grads[static_cast<size_t>(s)], s);
      resumed->step();
    }
    for (size_t i = 0; i < p.size(); ++i) REQUIRE(same_bits(p[i], q[i]));
    REQUIRE(resumed->step_count() == opt->step_count());
  };
  SECTION("AdamW") {
    check([](const TensorList& ps) { return std::make_unique<AdamW>(ps, 0.01, std::make_pair(0.9, 0.95), 1e-8, 0.1); });
  }
  SECTION("Adam with amsgrad, L2 decay and maximize") {
    check([](const TensorList& ps) {
      return std::make_unique<Adam>(ps, 0.01, std::make_pair(0.9, 0.6), 1e-8, 0.1, true, true);
    });
  }
  SECTION("SGD with momentum") {
    check([](const TensorList& ps) { return std::make_unique<SGD>(ps, 0.05, 0.9, 0.1, 1e-3, false); });
  }
}

TEST_CASE("load_state_dict fills the state tensors the optimizer already holds", "[optim]") {
  // A CUDA graph captured before the load keeps reading and writing them by address.
  TensorList pa{full({3}, 1.0), full({2, 2}, -1.0)}, pb{full({3}, 1.0), full({2, 2}, -1.0)};
  for (Tensor& t : pa) t.set_requires_grad(true);
  for (Tensor& t : pb) t.set_requires_grad(true);
  struct Exposed : AdamW {  // state() is for subclasses
    using AdamW::AdamW;
    using Optimizer::state;
  };
  Exposed a(pa, 0.01), b(pb, 0.01);
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < pa.size(); ++i) pa[i].set_grad(full(pa[i].sizes(), 0.5 + s));
    a.step();
  }
  for (size_t i = 0; i < pb.size(); ++i) pb[i].set_grad(full(pb[i].sizes(), -2.0));
  b.step();
  std::map<std::string, std::vector<const void*>> addresses;
  for (const auto& [name, list] : b.state())
    for (const Tensor& t : list) addresses[name].push_back(t.data_ptr());
  b.load_state_dict(a.state_dict());
  REQUIRE(b.state().size() == a.state().size());
  for (const auto& [name, list] : b.state()) {
    for (size_t i = 0; i < list.size(); ++i) {
      INFO(name << " of parameter " << i);
      CHECK(list[i].data_ptr() == addresses.at(name).at(i));
      CHECK(list[i].to_vector<float>() == a.state().at(name).at(i).to_vector<float>());
    }
  }
  CHECK(b.step_count() == 3);
}

TEST_CASE("load_state_dict refuses mismatched state and leaves the optimizer as it was", "[optim]") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  AdamW opt({a, b}, 0.125);
  set_grad(a, {1.0, 1.0});
  set_grad(b, {1.0});
  opt.step();
  const auto good = opt.state_dict();
  REQUIRE(good.at("state.0.exp_avg").dtype() == DType::Float32);
  REQUIRE(good.at("group.0.lr").item<double>() == 0.125);

  AdamW other({param({1.0, 2.0}), param({3.0})}, 0.5);
  auto bad = good;
  bad["state.0.exp_avg"] = zeros({3});
  REQUIRE_THROWS_AS(other.load_state_dict(bad), Error);
  bad = good;
  bad["state.5.exp_avg"] = zeros({2});
  REQUIRE_THROWS_AS(other.load_state_dict(bad), Error);
  bad = good;
  bad["state.0.momentum_buffer"] = zeros({2});
  REQUIRE_THROWS_AS(other.load_state_dict(bad), Error);
  bad = good;
  bad.erase("state.1.exp_avg_sq");  // half of a parameter's state
  REQUIRE_THROWS_AS(other.load_state_dict(bad), Error);
  bad = good;
  bad.erase("group.0.lr");
  REQUIRE_THROWS_AS(other.load_state_dict(bad), Error);
  bad = good;
  bad["state.0.exp_avg"] = zeros({2}, DType::Float64);
  REQUIRE_THROWS_AS(other.load_state_dict(bad), Error);
  // Step counts that are no count: bias corrections would divide by zero or worse (also in the
  // per-group counts of older states).
  for (const double step : {-1.0, 0.5, static_cast<double>(NAN)}) {
    bad = good;
    bad["state.1.step"] = full({}, step);
    REQUIRE_THROWS_WITH(other.load_state_dict(bad), Catch::Contains("\"state.1.step\" must be a whole number >= 0"));
    bad = good;
    bad["group.0.step"] = full({}, step);
    REQUIRE_THROWS_WITH(other.load_state_dict(bad), Catch::Contains("\"group.0.step\" must be a whole number >= 0"));
  }
  bad = good;
  bad["state.1.step"] = full({1}, 1.0, TensorOptions(DType::Float64));
  REQUIRE_THROWS_WITH(other.load_state_dict(bad), Catch::Contains("\"state.1.step\" must be a one-element float32"));
  // A parameter's state without its step count, or a step count without the state.
  bad = good;
  bad.erase("state.1.step");
  REQUIRE_THROWS_WITH(other.load_state_dict(bad), Catch::Contains("parameter 1 has state but no step count"));
  bad = good;
  bad.erase("state.1.exp_avg");
  bad.erase("state.1.exp_avg_sq");
  REQUIRE_THROWS_WITH(other.load_state_dict(bad),
                      Catch::Contains("parameter 1 has a step count but none of its state"));
  bad = good;
  bad["step"] = full({}, -7.0, TensorOptions(DType::Int64));
  REQUIRE_THROWS_WITH(other.load_state_dict(bad), Catch::Contains("\"step\" must be >= 0"));
  // A second spelling of an index would be a key nothing reads.
  bad = good;
  bad["group.00.lr"] = full({}, 5.0, TensorOptions(DType::Float64));
  REQUIRE_THROWS_WITH(other.load_state_dict(bad), Catch::Contains("unexpected key \"group.00.lr\""));
  bad = good;
  bad["state.00.exp_avg"] = zeros({2});
  REQUIRE_THROWS_AS(other.load_state_dict(bad), Error);
  // Another split of the parameters into groups, or another number of them.
  ParamGroup first_group, second_group;
  first_group.params = {param({1.0, 2.0})};
  second_group.params = {param({3.0})};
  AdamW regrouped({first_group, second_group});
  AdamW fewer({param({1.0, 2.0})}, 0.5);
  AdamW one_group({param({1.0, 2.0}), param({3.0})}, 0.5);
  REQUIRE_THROWS_WITH(one_group.load_state_dict(regrouped.state_dict()),
                      Catch::Contains("group 0 of the state has 1 parameters, this optimizer's 2"));
  REQUIRE_THROWS_WITH(fewer.load_state_dict(good), Catch::Contains("group 0 of the state has 2 parameters, this "
                                                                   "optimizer's 1"));
  REQUIRE(other.lr() == 0.5);
  REQUIRE(other.state_dict().size() == 3);  // still no per-parameter state (step, group lr, size)
  other.load_state_dict(good);
  REQUIRE(other.lr() == 0.125);
}

TEST_CASE("found_inf set through set_grad_scaling skips the step on the device", "[optim]") {
  Tensor p = param({1.0, -1.0});
  AdamW opt({p}, 0.125);
  Tensor found_inf = zeros({}), scale = full({}, 4.0);
  opt.set_grad_scaling(found_inf, scale);
  found_inf.fill_(1.0);
  set_grad(p, {4.0, 8.0});
  opt.step();
  require_values(p, {1.0, -1.0}, 0, 0);
  REQUIRE(opt.state_dict().at("state.0.step").item<double>() == 0.0);
  REQUIRE(opt.step_count() == 1);  // the host counts calls; it does not know the step was skipped

  found_inf.fill_(0.0);
  opt.step();  // gradients divided by 4: as the first step with {1, 2}
  Vec e = {1.0, -1.0}, m, v;
  adamw_expected(e, {1.0, 2.0}, m, v, 1, 0.125, 0.9, 0.999, 1e-8, 1e-2);
  require_values(p, e, 1e-6, 1e-7);
  REQUIRE(opt.state_dict().at("state.0.step").item<double>() == 1.0);
  REQUIRE_THROWS_AS(opt.set_grad_scaling(zeros({2})), DTypeError);
}

TEST_CASE("optimizer arguments are checked", "[optim]") {
  Tensor p = param({1.0});
  REQUIRE_THROWS_AS(SGD({p}, 0.1, 0.0, 0.0, 0.0, true), Error);  // nesterov without momentum
  REQUIRE_THROWS_AS(SGD({p}, 0.1, 0.9, 0.1, 0.0, true), Error);  // nesterov with dampening
  REQUIRE_NOTHROW(SGD({p}, 0.1, 0.9, 0.0, 0.0, true));
  REQUIRE_THROWS_AS(SGD(TensorList{}, 0.1), Error);
  REQUIRE_THROWS_AS(SGD({p, p}, 0.1), Error);  // a parameter twice
  REQUIRE_THROWS_AS(SGD({p}, -0.1), Error);
  REQUIRE_THROWS_AS(AdamW({p}, 1e-3, {1.0, 0.999}), Error);
  ParamGroup g{{p}, 0.1, 0.0, {{"momentun", 0.9}}};  // a typo is refused, not ignored
  REQUIRE_THROWS_AS(SGD(std::vector<ParamGroup>{g}), Error);
  ParamGroup n{{p}, 0.1, 0.0, {{"nesterov", 1.0}}};
  REQUIRE_THROWS_AS(SGD(std::vector<ParamGroup>{n}), Error);
}

TEST_CASE("optimizers keep float32 state for low-precision parameters", "[optim]") {
  Tensor p = param({1.0, -1.0, 0.5}, DType::BFloat16);
  AdamW opt({p}, 0.0625, {0.9, 0.99}, 1e-8, 0.0);
  set_grad(p, {0.5, -1.0, 2.0});
  opt.step();
  REQUIRE(p.dtype() == DType::BFloat16);
  REQUIRE(opt.state_dict().at("state.0.exp_avg_sq").dtype() == DType::Float32);
  Vec e = {1.0, -1.0, 0.5}, m, v;
  adamw_expected(e, {0.5, -1.0, 2.0}, m, v, 1, 0.0625, 0.9, 0.99, 1e-8, 0.0);
  // One bfloat16 rounding of the result: 2^-8 relative.
  require_values(p, e, 1.0 / 256, 0);
}

TEST_CASE("clip_grad_norm_ returns the total norm and scales the gradients", "[optim]") {
  Tensor a = param({0.0, 0.0}), b = param({0.0}), c = param({5.0});
  set_grad(a, {3.0, 4.0});
  set_grad(b, {12.0});  // total norm 13; c has no gradient
  Tensor norm = clip_grad_norm_({a, b, c}, 6.5);
  REQUIRE(norm.dim() == 0);
  REQUIRE(norm.dtype() == DType::Float32);
  REQUIRE(norm.item<double>() == Approx(13.0).epsilon(1e-7));
  const double coef = 6.5 / (13.0 + 1e-6);
  require_values(a.grad(), {3.0 * coef, 4.0 * coef});
  require_values(b.grad(), {12.0 * coef});

  // Below max_norm: the factor is clamped to 1 and the gradients keep their values.
  set_grad(a, {3.0, 4.0});
  set_grad(b, {12.0});
  Tensor n2 = clip_grad_norm_({a, b}, 100.0);
  REQUIRE(n2.item<double>() == Approx(13.0).epsilon(1e-7));
  require_values(a.grad(), {3.0, 4.0}, 0, 0);

  // Other norms; no gradients at all gives 0.
  set_grad(a, {3.0, -4.0});
  set_grad(b, {12.0});
  REQUIRE(clip_grad_norm_({a, b}, 1e9, 1.0).item<double>() == Approx(19.0));
  REQUIRE(clip_grad_norm_({a, b}, 1e9, std::numeric_limits<double>::infinity()).item<double>() == Approx(12.0));
  REQUIRE(clip_grad_norm_({c}, 1.0).item<double>() == 0.0);
}

TEST_CASE("clip_grad_norm_ with error_if_nonfinite refuses an inf or NaN norm and leaves the gradients", "[optim]") {
  for (const double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    INFO("bad " << bad);
    Tensor a = param({0.0, 0.0}), b = param({0.0});
    set_grad(a, {3.0, bad});
    set_grad(b, {12.0});
    CHECK_THROWS_WITH(clip_grad_norm_({a, b}, 1.0, 2.0, true),
                      Catch::Contains("clip_grad_norm_") && Catch::Contains(std::isnan(bad) ? "is nan" : "is inf") &&
                          Catch::Contains("error_if_nonfinite"));
    CHECK(a.grad().select(0, 0).item<double>() == 3.0);
    CHECK(b.grad().item<double>() == 12.0);
    // Without the flag the factor is 0 (inf) or NaN, taken without a sync.
    CHECK_FALSE(std::isfinite(clip_grad_norm_({a, b}, 1.0).item<double>()));
    const double scaled = b.grad().item<double>();
    CHECK((std::isnan(bad) ? std::isnan(scaled) : scaled == 0.0));
  }
  // A finite norm with the flag clips as without it.
  Tensor a = param({0.0, 0.0});
  set_grad(a, {3.0, 4.0});
  CHECK(clip_grad_norm_({a}, 2.5, 2.0, true).item<double>() == Approx(5.0));
  require_values(a.grad(), {3.0 * 2.5 / (5.0 + 1e-6), 4.0 * 2.5 / (5.0 + 1e-6)});
}

TEST_CASE("clip_grad_value_ clamps every gradient element into [-v, v]", "[optim]") {
  Tensor a = param({0.0, 0.0, 0.0, 0.0}), b = param({0.0}, DType::Float64), c = param({1.0});
  set_grad(a, {-3.0, 0.25, 2.0, -0.5});
  set_grad(b, {-1e300});  // c has no gradient
  clip_grad_value_({a, b, c}, 0.5);
  require_values(a.grad(), {-0.5, 0.25, 0.5, -0.5}, 0, 0);
  require_values(b.grad(), {-0.5}, 0, 0);
  CHECK_FALSE(c.grad().defined());
  set_grad(a, {std::numeric_limits<double>::quiet_NaN(), 1.0, -1.0, 0.0});
  clip_grad_value_({a}, 0.0);
  CHECK(std::isnan(a.grad().select(0, 0).item<double>()));
  require_values(a.grad().slice(0, 1, 4), {0.0, 0.0, 0.0}, 0, 0);
  CHECK_THROWS_WITH(clip_grad_value_({a}, -1e-9), Catch::Contains("clip_grad_value_") && Catch::Contains("-1e-09"));
  CHECK_THROWS_WITH(clip_grad_value_({a}, std::numeric_limits<double>::quiet_NaN()),
                    Catch::Contains("clip_value") && Catch::Contains("nan"));
}

// float64 gradients: a float64 norm and factor, as PyTorch's. Through float32, a norm past 1.8e19
// (its sum of squares past float32's range) was inf and the factor 0: every gradient zeroed; and a
// factor below float32's range (1e-101) was 0 too.
TEST_CASE("clip_grad_norm_ of float64 gradients: a float64 norm past float32's range", "[optim]") {
  for (const double scale : {1.0, 1e20, 1e100}) {
    INFO("scale " << scale);
    Tensor a = param({0.0, 0.0}, DType::Float64), b = param({0.0, 0.0}, DType::Float64);
    set_grad(a, {3.0 * scale, 4.0 * scale});
    // A strided gradient (every other element of four): scaled by an ordinary multiply.
    b.set_grad(tensor(std::vector<double>{12.0 * scale, 7.0, 0.0, 7.0}).slice(0, 0, 4, 2));
    const Tensor norm = clip_grad_norm_({a, b}, 1.0);
    REQUIRE(norm.dtype() == DType::Float64);
    CHECK(norm.item<double>() == Approx(13.0 * scale).epsilon(1e-15));
    const double coef = 1.0 / (13.0 * scale + 1e-6);
    require_values(a.grad(), {3.0 * scale * coef, 4.0 * scale * coef}, 1e-15, 0);
    require_values(b.grad(), {12.0 * scale * coef, 0.0}, 1e-15, 0);
  }
  // float32 and float64 gradients together: a float64 norm; each gradient keeps its dtype.
  Tensor a = param({0.0, 0.0}), b = param({0.0}, DType::Float64);
  set_grad(a, {3.0, 4.0});
  set_grad(b, {12.0});
  CHECK(clip_grad_norm_({a, b}, 6.5).item<double>() == Approx(13.0).epsilon(1e-7));
  CHECK(a.grad().dtype() == DType::Float32);
  require_values(a.grad(), {1.5, 2.0});
  require_values(b.grad(), {6.0});
}

// A strided gradient is scaled as the dense ones are (foreach_mul_: in float32, rounded once): a
// plain g.mul_(coef) takes the float32 0-d factor in the gradient's 16-bit dtype first (result_type).
TEST_CASE("clip_grad_norm_ scales strided 16-bit gradients as it scales dense ones", "[optim]") {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(dt));
    Vec g;
    for (int i = 0; i < 24; ++i) g.push_back(0.05 + 0.37 * i);
    Vec spread(2 * g.size(), 0.0);  // g at the even positions
    for (size_t i = 0; i < g.size(); ++i) spread[2 * i] = g[i];
    Tensor a = param(Vec(g.size(), 0.0), dt), b = param(Vec(g.size(), 0.0), dt);
    set_grad(a, g);
    b.set_grad(tensor(spread).to(dt).slice(0, 0, static_cast<int64_t>(spread.size()), 2));
    REQUIRE_FALSE(b.grad().is_contiguous());
    clip_grad_norm_({a, b}, 0.3);
    CHECK(a.grad().to_vector_double() == b.grad().to_vector_double());
    CHECK(a.grad().to_vector_double() != tensor(g).to(dt).to_vector_double());
  }
}

TEST_CASE("clip_grads_with_norm_ scales by a total norm given to it", "[optim]") {
  // The norm found elsewhere (as ZeRO's shards combine theirs), here 26 for gradients whose own is 13.
  Tensor a = param({0.0, 0.0}), b = param({0.0}), c = param({5.0});
  set_grad(a, {3.0, 4.0});
  set_grad(b, {12.0});
  clip_grads_with_norm_({a, b, c}, 6.5, full({}, 26.0));
  const double coef = 6.5 / (26.0 + 1e-6);
  require_values(a.grad(), {3.0 * coef, 4.0 * coef});
  require_values(b.grad(), {12.0 * coef});
  REQUIRE_FALSE(c.grad().defined());
  const Tensor before = a.grad().clone();
  clip_grads_with_norm_({a}, 100.0, full({}, 26.0));  // a factor above 1 is clamped to 1
  REQUIRE(max(abs(a.grad() - before)).item<double>() == 0.0);
}
