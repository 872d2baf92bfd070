// Hand tests of core/ops/special.h beyond the op table's rows: known constants, the poles and
// infinities PyTorch defines, the recurrences across the reflection's boundary, the far tails
// (erfinv next to 1, ndtri of 1e-300, log_ndtr at -40, erfcx at 1e3) and the gradients defined by
// convention (logit outside its clamp, sinc and xlog1py at 0, entr at 0).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "core/kiln.h"
#include "tests/core/same_values.h"

using namespace kiln;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");
constexpr double kPi = std::numbers::pi;
constexpr double kEuler = std::numbers::egamma;
constexpr double kZeta3 = 1.2020569031595942854;  // Apery's constant

bool same(const std::vector<double>& a, const std::vector<double>& b) { return test::same_values(a, b, true); }

Tensor doubles(std::vector<double> v) { return tensor(v); }

double value(const Tensor& t) { return t.to(DType::Float64).item<double>(); }

// The gradient of sum(f(x)) at each of `at`.
std::vector<double> grads(const std::function<Tensor(const Tensor&)>& f, std::vector<double> at) {
  Tensor x = doubles(std::move(at));
  x.set_requires_grad(true);
  f(x).sum().backward();
  return x.grad().to_vector_double();
}
}  // namespace

TEST_CASE("special: the gamma family at known constants, in float64 and float32", "[special]") {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    INFO(dtype_name(dtype));
    // float32 is also held to an absolute 1e-6 where a value near a root is the difference of two
    // larger terms (digamma(-0.5), lgamma(2)).
    const double tol = dtype == DType::Float64 ? 1e-14 : 2e-6, margin = dtype == DType::Float64 ? 1e-14 : 1e-6;
    auto at = [dtype](double x) { return full({}, x, dtype); };
    CHECK(value(lgamma(at(0.5))) == Approx(0.5 * std::log(kPi)).epsilon(tol));
    CHECK(value(lgamma(at(-0.5))) == Approx(std::log(2 * std::sqrt(kPi))).epsilon(tol));
    CHECK(value(lgamma(at(11.0))) == Approx(std::log(3628800.0)).epsilon(tol));  // 10!
    CHECK(std::fabs(value(lgamma(at(1.0)))) < margin);
    CHECK(std::fabs(value(lgamma(at(2.0)))) < margin);
    CHECK(value(digamma(at(1.0))) == Approx(-kEuler).epsilon(tol));
    CHECK(value(digamma(at(0.5))) == Approx(-kEuler - 2 * std::log(2.0)).epsilon(tol));
    CHECK(value(digamma(at(-0.5))) == Approx(2 - kEuler - 2 * std::log(2.0)).epsilon(tol).margin(margin));
    CHECK(value(polygamma(1, at(1.0))) == Approx(kPi * kPi / 6).epsilon(tol));
    CHECK(value(polygamma(1, at(0.5))) == Approx(kPi * kPi / 2).epsilon(tol));
    CHECK(value(polygamma(2, at(1.0))) == Approx(-2 * kZeta3).epsilon(tol));
    CHECK(value(polygamma(3, at(1.0))) == Approx(std::pow(kPi, 4) / 15).epsilon(tol));  // 6 zeta(4)
    CHECK(value(polygamma(0, at(1.0))) == Approx(-kEuler).epsilon(tol));
    CHECK(value(mvlgamma(at(2.5), 2)) ==
          Approx(0.5 * std::log(kPi) + std::lgamma(2.5) + std::lgamma(2.0)).epsilon(tol).margin(margin));
  }
}

TEST_CASE("special: psi_n(x + 1) - psi_n(x) = (-1)^n n! / x^(n+1) across the reflection", "[special]") {
  // x and x + 1 on either side of 0.5 take the reflection and the upper recurrence.
  const std::vector<double> xs = {-3.7, -1.2, -0.4, 0.3, 2.2, -20.25};
  for (int n = 0; n <= 3; ++n) {
    const std::vector<double> low = polygamma(n, doubles(xs)).to_vector_double();
    const std::vector<double> high = polygamma(n, add(doubles(xs), 1.0)).to_vector_double();
    for (size_t i = 0; i < xs.size(); ++i) {
      INFO("n " << n << ", x " << xs[i]);
      const double step = (n % 2 == 0 ? 1 : -1) * std::tgamma(n + 1.0) / std::pow(xs[i], n + 1);
      CHECK(high[i] - low[i] == Approx(step).epsilon(1e-11).margin(1e-11));
    }
  }
  // lgamma's recurrence, log|Gamma(x + 1)| = log|x| + log|Gamma(x)|.
  const std::vector<double> l0 = lgamma(doubles(xs)).to_vector_double();
  const std::vector<double> l1 = lgamma(add(doubles(xs), 1.0)).to_vector_double();
  for (size_t i = 0; i < xs.size(); ++i) CHECK(l1[i] - l0[i] == Approx(std::log(std::fabs(xs[i]))).epsilon(1e-12));
}

TEST_CASE("special: the gamma family's poles and infinities", "[special]") {
  CHECK(same(lgamma(doubles({0.0, -3.0, kInf, -kInf, kNaN})).to_vector_double(), {kInf, kInf, kInf, kInf, kNaN}));
  // PyTorch's digamma: -inf at +0, +inf at -0, NaN at the negative integers.
  CHECK(same(digamma(doubles({0.0, -0.0, -2.0, kInf, kNaN})).to_vector_double(), {-kInf, kInf, kNaN, kInf, kNaN}));
  // Odd orders go to +inf from both sides of a pole; even ones change sign there.
  CHECK(same(polygamma(1, doubles({0.0, -2.0, kInf})).to_vector_double(), {kInf, kInf, 0.0}));
  CHECK(same(polygamma(2, doubles({0.0, -2.0})).to_vector_double(), {kNaN, kNaN}));
  // Integer inputs give float32; the gradient of lgamma is digamma, at a negative point too.
  CHECK(lgamma(tensor<int64_t>({1, 2, 3})).dtype() == DType::Float32);
  const std::vector<double> g = grads([](const Tensor& x) { return lgamma(x); }, {-2.5, 3.0});
  CHECK(g[0] == Approx(digamma(full({}, -2.5, DType::Float64)).item<double>()).epsilon(1e-14));
  CHECK(g[1] == Approx(1.5 - kEuler).epsilon(1e-14));  // psi(3) = 1 + 1/2 - gamma
}

TEST_CASE("special: erfinv and ndtri keep their digits in the tails", "[special]") {
  // 1 - 2^-50 and 1 - 2^-52 in float64: erfc of the inverse gives back the complement.
  for (double t : {std::ldexp(1.0, -50), std::ldexp(1.0, -52), 1e-3}) {
    const double z = value(erfinv(full({}, 1.0 - t, DType::Float64)));
    CHECK(std::erfc(z) == Approx(t).epsilon(1e-12));
    CHECK(value(erfinv(full({}, t - 1.0, DType::Float64))) == -z);
  }
  CHECK(same(erfinv(doubles({1.0, -1.0, 1.5, 0.0, kNaN})).to_vector_double(), {kInf, -kInf, kNaN, 0.0, kNaN}));
  // ndtri of 1e-300 and of a denormal-free float32 1e-30: ndtr gives back p.
  for (double p : {1e-300, 1e-100, 1e-10, 0.3}) {
    const double z = value(ndtri(full({}, p, DType::Float64)));
    CHECK(std::erfc(-z / std::numbers::sqrt2) / 2 == Approx(p).epsilon(1e-12));
    // 1 - p is exact for p = 0.3; for 1e-10 it carries a relative error near 1e-7 of p.
    if (p > 1e-15) CHECK(value(ndtri(full({}, 1.0 - p, DType::Float64))) == Approx(-z).epsilon(1e-6));
  }
  const double z32 = value(ndtri(full({}, 1e-30, DType::Float32)));
  CHECK(std::erfc(-z32 / std::numbers::sqrt2) / 2 == Approx(1e-30).epsilon(1e-4));
  CHECK(same(ndtri(doubles({0.0, 1.0, 0.5, -0.1, 1.1})).to_vector_double(), {-kInf, kInf, 0.0, kNaN, kNaN}));
}

TEST_CASE("special: erfcx and log_ndtr far out, where erfc underflows", "[special]") {
  const long double x30 = 30;
  CHECK(value(erfcx(full({}, 30.0, DType::Float64))) ==
        Approx(static_cast<double>(std::exp(x30 * x30) * std::erfc(x30))).epsilon(1e-13));
  CHECK(value(erfcx(full({}, 1e3, DType::Float64))) == Approx((1 - 0.5e-6) / (1e3 * std::sqrt(kPi))).epsilon(1e-12));
  CHECK(value(erfcx(full({}, 12.0, DType::Float32))) ==
        Approx(static_cast<double>(std::exp(144.0L) * std::erfc(12.0L))).epsilon(1e-6));
  CHECK(same(erfcx(doubles({-30.0, kInf})).to_vector_double(), {kInf, 0.0}));
  // log ndtr(-40) = log(erfc(40 / sqrt 2) / 2), about -804.6, in long double.
  const long double arg = 40 / std::numbers::sqrt2_v<long double>;
  CHECK(value(log_ndtr(full({}, -40.0, DType::Float64))) ==
        Approx(static_cast<double>(std::log(std::erfc(arg) / 2))).epsilon(1e-13));
  CHECK(value(log_ndtr(full({}, -30.0, DType::Float32))) ==
        Approx(static_cast<double>(std::log(std::erfc(30 / std::numbers::sqrt2_v<long double>) / 2))).epsilon(1e-6));
  // Far right, log1p of the tiny complement: not rounded to 0.
  CHECK(value(log_ndtr(full({}, 10.0, DType::Float64))) ==
        Approx(-std::erfc(10 / std::numbers::sqrt2) / 2).epsilon(1e-12));
  // The gradient pdf / cdf: about -x far left, 0 far right.
  const std::vector<double> g = grads([](const Tensor& x) { return log_ndtr(x); }, {-40.0, 40.0});
  CHECK(g[0] == Approx(40.025).epsilon(1e-3));
  CHECK(g[1] == 0.0);
}

TEST_CASE("special: logit, sinc, entr and xlog1py at their edges", "[special]") {
  // Without eps the gradient is NaN outside [0, 1]; with eps it is 0 outside [eps, 1 - eps].
  const std::vector<double> free = grads([](const Tensor& x) { return logit(x); }, {1.5, 0.5});
  CHECK(std::isnan(free[0]));
  CHECK(free[1] == Approx(4.0));
  const std::vector<double> clamped = grads([](const Tensor& x) { return logit(x, 0.1); }, {0.05, 0.95, 0.5});
  CHECK(same(clamped, {0.0, 0.0, 4.0}));
  CHECK(value(logit(full({}, 0.05, DType::Float64), 0.1)) == Approx(std::log(0.1 / 0.9)));
  CHECK(same(logit(doubles({0.0, 1.0})).to_vector_double(), {-kInf, kInf}));
  // sinc: 1 at 0 with gradient 0; the zeros at the nonzero integers.
  CHECK(value(sinc(full({}, 0.0, DType::Float64))) == 1.0);
  CHECK(same(grads([](const Tensor& x) { return sinc(x); }, {0.0}), {0.0}));
  CHECK(std::fabs(value(sinc(full({}, 3.0, DType::Float64)))) < 1e-15);
  CHECK(grads([](const Tensor& x) { return sinc(x); }, {1.0})[0] == Approx(-1.0));  // cos(pi) / 1
  // entr: 0 at 0, -inf left of it, NaN kept; its gradient -(1 + log x) is +inf at 0.
  CHECK(same(entr(doubles({0.0, -1.0, kNaN})).to_vector_double(), {0.0, -kInf, kNaN}));
  CHECK(value(entr(full({}, 1.0, DType::Float64))) == 0.0);
  CHECK(same(grads([](const Tensor& x) { return entr(x); }, {0.0, 1.0}), {kInf, -1.0}));
  // xlog1py: 0 where x is 0 (even at y = -1, log1p's pole), NaN y kept; x's gradient 0 there.
  CHECK(same(xlog1py(doubles({0.0, 0.0, 2.0}), doubles({-1.0, kNaN, std::expm1(1.0)})).to_vector_double(),
             {0.0, kNaN, 2.0}));
  Tensor x = doubles({0.0, 2.0}), y = doubles({-1.0, 1.0});
  x.set_requires_grad(true);
  y.set_requires_grad(true);
  xlog1py(x, y).sum().backward();
  CHECK(same(x.grad().to_vector_double(), {0.0, std::log(2.0)}));
  CHECK(same(y.grad().to_vector_double(), {kNaN, 1.0}));  // x / (1 + y), 0 / 0 at y = -1 as PyTorch
}

TEST_CASE("special: half dtypes are computed in float32 and rounded once", "[special]") {
  // bfloat16 holds 100 and 1e-3 exactly enough; the result is the float64 value rounded once.
  const Tensor x = doubles({100.0, 0.75}).to(DType::BFloat16);
  const std::vector<double> xs = x.to_vector_double();
  const Tensor want = doubles({std::lgamma(xs[0]), std::lgamma(xs[1])}).to(DType::BFloat16);
  CHECK(lgamma(x).dtype() == DType::BFloat16);
  CHECK(same(lgamma(x).to_vector_double(), want.to_vector_double()));
  const Tensor h = doubles({0.999}).to(DType::Float16);
  CHECK(erfinv(h).dtype() == DType::Float16);
  CHECK(value(erfinv(h)) == Approx(value(erfinv(h.to(DType::Float64)))).epsilon(1e-3));
}

TEST_CASE("special: bad arguments name the op and the value", "[special]") {
  CHECK_THROWS_WITH(polygamma(-2, zeros({2})), Catch::Contains("polygamma") && Catch::Contains("-2"));
  CHECK_THROWS_WITH(mvlgamma(zeros({2}), 0), Catch::Contains("mvlgamma") && Catch::Contains("p must be >= 1"));
  CHECK_THROWS_WITH(mvlgamma(doubles({2.0, 0.4}), 2),
                    Catch::Contains("mvlgamma") && Catch::Contains("0.5") && Catch::Contains("got 0.4"));
  CHECK_THROWS_WITH(logit(zeros({2}), 0.6), Catch::Contains("logit") && Catch::Contains("0.6"));
  CHECK_THROWS_WITH(xlog1py(zeros({2}), zeros({3})), Catch::Contains("xlog1py") && Catch::Contains("[3]"));
}
