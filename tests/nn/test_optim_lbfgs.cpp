// LBFGS: fixed steps against the two-loop recursion and torch's step-size rule written out in
// plain double arithmetic (history carried across steps and trimmed to history_size); the strong
// Wolfe line search to Rosenbrock's minimum in float64 and float32; the stopping tests and the
// evaluation budget; a resume bit for bit from the state dict; the errors; and a fitted regression.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/optim/lbfgs.h"
#include "tests/bitwise.h"
#include "tests/nn/optim_checks.h"

using namespace kiln;
using namespace kiln::nn::optim;

namespace {

using kiln::test::param;
using kiln::test::require_values;
using kiln::test::rosenbrock;
using kiln::test::Vec;

// f(x) = 0.5 x'Ax - b'x with A symmetric positive definite (3x3), gradient Ax - b.
const double kA[3][3] = {{4, 1, 0.5}, {1, 3, -0.5}, {0.5, -0.5, 2}};
const Vec kB = {1, -2, 0.5};

Vec quad_grad(const Vec& x) {
  Vec g(3);
  for (int i = 0; i < 3; ++i) g[i] = kA[i][0] * x[0] + kA[i][1] * x[1] + kA[i][2] * x[2] - kB[i];
  return g;
}
double quad_loss(const Vec& x) {
  double f = 0;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) f += 0.5 * x[i] * kA[i][j] * x[j];
    f -= kB[i] * x[i];
  }
  return f;
}

// The same loss through kiln ops, its backward into x.
Tensor quad_closure(Optimizer& opt, const Tensor& x) {
  opt.zero_grad();
  const Tensor a = tensor(std::vector<double>{4, 1, 0.5, 1, 3, -0.5, 0.5, -0.5, 2}).reshape({3, 3}).to(x.dtype());
  const Tensor b = tensor(kB).to(x.dtype());
  Tensor loss = sub(mul(sum(mul(x, matmul(a, x))), 0.5), sum(mul(b, x)));
  loss.backward();
  return loss;
}

double dotv(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// torch.optim.LBFGS without a line search, in double: `steps` calls of max_iter iterations.
struct FixedStepLbfgs {
  double lr;
  int max_iter;
  size_t history;
  Vec d, prev_g;
  std::deque<Vec> ys, ss;
  std::deque<double> ro;
  double t = 0, h = 1;
  int n_iter = 0;

  void step(Vec& x) {
    Vec g = quad_grad(x);
    double loss = quad_loss(x);
    for (int iter = 1; iter <= max_iter; ++iter) {
      ++n_iter;
      if (n_iter == 1) {
        d = g;
        for (double& v : d) v = -v;
      } else {
        Vec y(3), s(3);
        for (int i = 0; i < 3; ++i) y[i] = g[i] - prev_g[i], s[i] = d[i] * t;
        const double yts = dotv(y, s);
        if (yts > 1e-10) {
          if (ys.size() == history) ys.pop_front(), ss.pop_front(), ro.pop_front();
          ys.push_back(y), ss.push_back(s), ro.push_back(1 / yts);
          h = yts / dotv(y, y);
        }
        Vec q = g;
        for (double& v : q) v = -v;
        std::vector<double> al(ys.size());
        for (size_t i = ys.size(); i-- > 0;) {
          al[i] = dotv(ss[i], q) * ro[i];
          for (int j = 0; j < 3; ++j) q[j] -= al[i] * ys[i][j];
        }
        for (double& v : q) v *= h;
        for (size_t i = 0; i < ys.size(); ++i) {
          const double be = dotv(ys[i], q) * ro[i];
          for (int j = 0; j < 3; ++j) q[j] += ss[i][j] * (al[i] - be);
        }
        d = q;
      }
      prev_g = g;
      const double prev_loss = loss;
      double l1 = 0;
      for (double v : g) l1 += std::abs(v);
      t = n_iter == 1 ? std::min(1.0, 1.0 / l1) * lr : lr;
      if (dotv(g, d) > -1e-9) break;
      for (int j = 0; j < 3; ++j) x[j] += t * d[j];
      if (iter == max_iter) break;
      g = quad_grad(x);
      loss = quad_loss(x);
      double gmax = 0, dmax = 0;
      for (int j = 0; j < 3; ++j) gmax = std::max(gmax, std::abs(g[j])), dmax = std::max(dmax, std::abs(d[j]));
      if (gmax <= 1e-7 || dmax * t <= 1e-9 || std::abs(loss - prev_loss) < 1e-9) break;
    }
  }
};

}  // namespace

TEST_CASE("LBFGS: fixed steps follow the two-loop recursion written out in double", "[optim][lbfgs]") {
  // history_size 2 over 3 steps of 4 iterations: pairs are dropped from the front, and the history
  // and the last direction carry over from one step to the next.
  Tensor x = param({0.3, -0.7, 1.1}, DType::Float64);
  LBFGS opt({x}, 0.5, 4, -1, 1e-7, 1e-9, 2);
  FixedStepLbfgs ref{0.5, 4, 2, {}, {}, {}, {}, {}};
  Vec expected = {0.3, -0.7, 1.1};
  for (int s = 0; s < 3; ++s) {
    INFO("step " << s);
    const Tensor loss = opt.step([&] { return quad_closure(opt, x); });
    ref.step(expected);
    require_values(x, expected, 1e-12, 1e-13);
    CHECK(opt.iterations() == ref.n_iter);
  }
  CHECK(opt.state_dict().at("lbfgs.old_dirs").size(0) == 2);
  // 3 steps of 4 iterations, each evaluating the loss at its start and after all but its last
  // iteration.
  CHECK(opt.evaluations() == 12);
}

TEST_CASE("LBFGS: the strong Wolfe line search reaches Rosenbrock's minimum", "[optim][lbfgs]") {
  for (const DType dtype : {DType::Float64, DType::Float32}) {
    INFO(dtype_name(dtype));
    Tensor x = param({-1.5, 2.0}, dtype);
    LBFGS opt({x}, 1.0, 50, -1, 1e-10, 1e-12, 10, LineSearch::StrongWolfe);
    double previous = INFINITY;
    for (int s = 0; s < 10; ++s) {
      const double loss = opt.step([&] { return rosenbrock(opt, x); }).item<double>();
      CHECK(loss <= previous);  // every accepted step decreases the loss
      previous = loss;
    }
    // Near the minimum the slope along the direction falls below tolerance_change and the steps
    // stop: about 1e-7 from it in float64.
    const double tol = dtype == DType::Float64 ? 1e-6 : 1e-3;
    require_values(x, {1.0, 1.0}, 0, tol);
  }
}

TEST_CASE("LBFGS: without a line search a well-conditioned quadratic converges too", "[optim][lbfgs]") {
  Tensor x = param({0, 0, 0}, DType::Float64);
  LBFGS opt({x}, 1.0, 30);
  for (int s = 0; s < 3; ++s) opt.step([&] { return quad_closure(opt, x); });
  // The solution of Ax = b.
  const Vec g = quad_grad(x.to_vector<double>());
  for (double v : g) CHECK(std::abs(v) < 1e-6);
}

TEST_CASE("LBFGS: a zero gradient stops at once, and max_eval bounds the evaluations", "[optim][lbfgs]") {
  Tensor x = param({1.0, 1.0}, DType::Float64);  // Rosenbrock's minimum
  LBFGS opt({x}, 1.0, 20, -1, 1e-7, 1e-9, 100, LineSearch::StrongWolfe);
  const Tensor loss = opt.step([&] { return rosenbrock(opt, x); });
  CHECK(loss.item<double>() == 0.0);
  CHECK(opt.evaluations() == 1);
  CHECK(opt.iterations() == 0);
  require_values(x, {1.0, 1.0}, 0, 0);

  // Fixed steps evaluate once per iteration: a budget of 4 is the first evaluation and 3 of
  // max_iter's 10 iterations.
  Tensor y = param({-1.5, 2.0}, DType::Float64);
  LBFGS budget({y}, 1e-3, 10, 4);
  budget.step([&] { return rosenbrock(budget, y); });
  CHECK(budget.evaluations() == 4);
  CHECK(budget.iterations() == 3);
}

TEST_CASE("LBFGS: resumes bit for bit from its state dict", "[optim][lbfgs]") {
  const auto make = [](const Tensor& p) {
    // max_eval 20: the default (max_iter * 5 / 4) would end each step after its first line search.
    return std::make_unique<LBFGS>(TensorList{p}, 1.0, 3, 20, 1e-10, 1e-12, 3, LineSearch::StrongWolfe);
  };
  Tensor a = param({-1.5, 2.0}, DType::Float64);
  auto straight = make(a);
  for (int s = 0; s < 3; ++s) straight->step([&] { return rosenbrock(*straight, a); });

  Tensor b = param({-1.5, 2.0}, DType::Float64);
  auto first = make(b);
  first->step([&] { return rosenbrock(*first, b); });
  const auto state = first->state_dict();
  CHECK(state.at("lbfgs.n_iter").item<int64_t>() == 3);
  CHECK(state.at("lbfgs.ro").numel() == 2);  // the history a resume must bring back
  Tensor c = param(b.to_vector<double>(), DType::Float64);
  auto resumed = make(c);
  resumed->load_state_dict(state);
  for (int s = 0; s < 2; ++s) resumed->step([&] { return rosenbrock(*resumed, c); });
  CHECK(kiln::test::bitwise_equal(a, c));
  CHECK(resumed->iterations() == straight->iterations());
  CHECK(resumed->evaluations() == straight->evaluations());
}

TEST_CASE("LBFGS: bad arguments, closures and states are errors naming what is wrong", "[optim][lbfgs]") {
  Tensor x = param({1.0, 2.0}, DType::Float64);
  LBFGS opt({x});
  CHECK_THROWS_WITH(opt.step(), Catch::Contains("LBFGS") && Catch::Contains("closure"));
  CHECK_THROWS_WITH(opt.step([&] { return mul(x, 1.0); }), Catch::Contains("one-element") && Catch::Contains("[2]"));
  CHECK_THROWS_WITH(LBFGS({x}, 1.0, 20, -1, 1e-7, 1e-9, 0), Catch::Contains("history_size"));
  CHECK_THROWS_WITH(LBFGS({x}, -1.0), Catch::Contains("learning rate") && Catch::Contains("-1"));
  Tensor f = param({1.0}, DType::Float32);
  CHECK_THROWS_WITH(LBFGS({x, f}), Catch::Contains("float64") && Catch::Contains("float32"));

  opt.set_grad_scaling(zeros({1}), ones({1}));
  CHECK_THROWS_WITH(opt.step([&] { return rosenbrock(opt, x); }), Catch::Contains("GradScaler"));
  opt.set_grad_scaling(Tensor());

  opt.step([&] { return rosenbrock(opt, x); });
  auto state = opt.state_dict();
  LBFGS other({param({1.0, 2.0, 3.0}, DType::Float64)});
  CHECK_THROWS_WITH(other.load_state_dict(state), Catch::Contains("lbfgs.d") && Catch::Contains("[3]"));
  state.erase("lbfgs.t");
  CHECK_THROWS_WITH(opt.load_state_dict(state), Catch::Contains("lbfgs.t"));
}

TEST_CASE("LBFGS: fits a linear regression", "[optim][lbfgs]") {
  manual_seed(11);
  const Tensor inputs = randn({64, 3});
  const Tensor targets =
      add(matmul(inputs, tensor(std::vector<double>{1.5, -2.0, 0.5}).to(DType::Float32).reshape({3, 1})), 0.3);
  auto model = std::make_shared<nn::Linear>(3, 1);
  LBFGS opt(model->parameters(), 1.0, 20, -1, 1e-7, 1e-9, 100, LineSearch::StrongWolfe);
  const auto closure = [&] {
    opt.zero_grad();
    Tensor loss = mse_loss((*model)(inputs), targets);
    loss.backward();
    return loss;
  };
  const double first = opt.step(closure).item<double>();
  for (int s = 0; s < 4; ++s) opt.step(closure);
  const double last = closure().item<double>();
  CHECK(last < 1e-8 * first);
}

TEST_CASE("LBFGS: registers an image through affine_grid and grid_sample", "[optim][lbfgs]") {
  // The target is a smooth image under a known rotation, scale and shift; theta starts at the
  // identity and LBFGS fits it through both ops' gradients (a spatial transformer's).
  const int64_t h = 16, w = 16;
  const Tensor ys = linspace(-1.0, 1.0, h, TensorOptions(DType::Float64)).reshape({h, 1});
  const Tensor xs = linspace(-1.0, 1.0, w, TensorOptions(DType::Float64)).reshape({1, w});
  const Tensor image = add(sin(mul(xs, 2.0)), mul(cos(mul(ys, 1.5)), xs)).reshape({1, 1, h, w});
  const Tensor truth = tensor(std::vector<double>{0.9, -0.2, 0.1, 0.15, 0.95, -0.05}).reshape({1, 2, 3});
  const auto warp = [&](const Tensor& theta) {
    return grid_sample(image, affine_grid(theta, {1, 1, h, w}), GridSampleMode::Bilinear, GridPadding::Border);
  };
  const Tensor target = warp(truth);
  Tensor theta = tensor(std::vector<double>{1, 0, 0, 0, 1, 0}).reshape({1, 2, 3});
  theta.set_requires_grad(true);
  LBFGS opt({theta}, 1.0, 50, -1, 1e-12, 1e-14, 20, LineSearch::StrongWolfe);
  const auto closure = [&] {
    opt.zero_grad();
    const Tensor diff = sub(warp(theta), target);
    Tensor loss = mean(mul(diff, diff));
    loss.backward();
    return loss;
  };
  for (int s = 0; s < 4; ++s) opt.step(closure);
  CHECK(closure().item<double>() < 1e-12);
  require_values(theta, truth.to_vector<double>(), 0, 1e-4);
}
