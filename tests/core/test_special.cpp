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
#include "tests/core/pointwise_grads.h"
#include "tests/core/same_values.h"

using namespace kiln;
using test::grads;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");
constexpr double kPi = std::numbers::pi;
constexpr double kEuler = std::numbers::egamma;
constexpr double kZeta3 = 1.2020569031595942854;  // Apery's constant

bool same(const std::vector<double>& a, const std::vector<double>& b) { return test::same_values(a, b, true); }

Tensor doubles(std::vector<double> v) { return tensor(v); }

double value(const Tensor& t) { return t.to(DType::Float64).item<double>(); }

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

TEST_CASE("special: the Bessel functions i0, i1, i0e and i1e at known values, both signs", "[special]") {
  // The values to 20 digits, around the series' split at 20 and far out.
  struct Known {
    double x, i0, i1, i0e, i1e;
  };
  const std::vector<Known> known = {
      {1.0, 1.2660658777520083356, 0.56515910399248502721, 0.4657596075936404365, 0.20791041534970844887},
      {10.0, 2815.7166284662544715, 2670.9883037012546543, 0.12783333716342860732, 0.12126268138445551872},
      {19.5, 26760525.339838766027, 26065069.264457165694, 0.090939432095156483305, 0.088576086094314852457},
      {20.5, 70922869.834317006649, 69170831.679184372867, 0.088664429015745248147, 0.086474113494087245571},
      {30.0, 781672297823.97748972, 768532038938.95699949, 0.073145946482237293929, 0.071916330598647554706},
      {700.0, 1.5295933476718737363e+302, 1.5285003902339006881e+302, 0.015081295651531357587, 0.015070519444716846949},
  };
  for (const Known& k : known) {
    INFO("x = " << k.x);
    for (double sign : {1.0, -1.0}) {
      const Tensor x = doubles({sign * k.x});
      // The functions' condition number is about |x|: the input's own rounding, magnified.
      const double eps = 4e-16 * std::max(1.0, k.x);
      CHECK(value(i0(x)) == Approx(k.i0).epsilon(eps));
      CHECK(value(i1(x)) == Approx(sign * k.i1).epsilon(eps));
      CHECK(value(i0e(x)) == Approx(k.i0e).epsilon(eps));
      CHECK(value(i1e(x)) == Approx(sign * k.i1e).epsilon(eps));
    }
    // float32: computed in float32, to its rounding times the same condition number.
    if (k.x < 80) {
      const Tensor x = doubles({k.x}).to(DType::Float32);
      CHECK(i0(x).dtype() == DType::Float32);
      CHECK(value(i0(x)) == Approx(k.i0).epsilon(2e-7 * k.x + 1e-6));
      CHECK(value(i1e(x)) == Approx(k.i1e).epsilon(2e-7 * k.x + 1e-6));
    }
  }
  // Integers give float32.
  CHECK(i0(tensor<int64_t>({1})).dtype() == DType::Float32);
  CHECK(value(i0(tensor<int64_t>({1}))) == Approx(1.2660658777520083356).epsilon(1e-6));
}

TEST_CASE("special: the Bessel functions are continuous where the asymptotic series takes over", "[special]") {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    INFO(dtype_name(dtype));
    // 20 and the next value of the dtype: the last input of the power series and the first of the
    // asymptotic one.
    const double next =
        dtype == DType::Float64 ? std::nextafter(20.0, 21.0) : static_cast<double>(std::nextafter(20.0f, 21.0f));
    const double step = (next - 20.0) / 20.0, eps = dtype == DType::Float64 ? 1e-14 : 2e-6;
    const Tensor below = doubles({20.0}).to(dtype), above = doubles({next}).to(dtype);
    for (auto* f : {&i0, &i1, &i0e, &i1e}) {
      const double a = value((*f)(below)), b = value((*f)(above));
      // The functions change by at most about 20 steps of the relative spacing there (their
      // condition number), and the two series agree to the dtype's rounding.
      CHECK(std::fabs(b - a) <= std::fabs(a) * (20 * step + eps));
    }
  }
}

TEST_CASE("special: the Bessel functions at 0, the infinities, NaN and where i0 overflows", "[special]") {
  const Tensor x = doubles({0.0, -0.0, kInf, -kInf, kNaN});
  CHECK(same(i0(x).to_vector_double(), {1.0, 1.0, kInf, kInf, kNaN}));
  // The odd ones as PyTorch's: negated for x < 0, so i1(-0) is +0 and i1e(-inf) is -0.
  CHECK(same(i1(x).to_vector_double(), {0.0, 0.0, kInf, -kInf, kNaN}));
  CHECK(same(i0e(x).to_vector_double(), {1.0, 1.0, 0.0, 0.0, kNaN}));
  CHECK(same(i1e(x).to_vector_double(), {0.0, 0.0, 0.0, -0.0, kNaN}));
  // i0 passes float64's largest value between 713.9 and 714, float32's between 91.9 and 92.
  CHECK(std::isfinite(value(i0(doubles({713.9})))));
  CHECK(std::isinf(value(i0(doubles({714.0})))));
  CHECK(value(i0(doubles({91.9}).to(DType::Float32))) == Approx(3.400236806e+38).epsilon(1e-5));
  CHECK(std::isinf(value(i0(doubles({92.0}).to(DType::Float32)))));
  // Up to the largest finite inputs: i0 and i1 are inf there, the scaled ones 1 / sqrt(2 pi x).
  for (double huge : {1e308, std::numeric_limits<double>::max()}) {
    INFO("x = " << huge);
    CHECK(same(i0(doubles({huge, -huge})).to_vector_double(), {kInf, kInf}));
    CHECK(same(i1(doubles({huge, -huge})).to_vector_double(), {kInf, -kInf}));
    const double scaled = 1 / std::sqrt(2 * kPi) / std::sqrt(huge);  // 2 pi x would overflow
    CHECK(value(i0e(doubles({huge}))) == Approx(scaled).epsilon(1e-15));
    CHECK(value(i1e(doubles({-huge}))) == Approx(-scaled).epsilon(1e-15));
  }
  const Tensor huge32 = doubles({1e38}).to(DType::Float32);
  CHECK(std::isinf(value(i0(huge32))));
  CHECK(value(i0e(huge32)) == Approx(1 / std::sqrt(2 * kPi * value(huge32))).epsilon(1e-6));
  // The scaled ones stay finite and follow 1 / sqrt(2 pi x) far out.
  const double far = 1e12;
  CHECK(value(i0e(doubles({far}))) == Approx(1 / std::sqrt(2 * kPi * far)).epsilon(1e-12));
  CHECK(value(i1e(doubles({-far}).to(DType::Float32))) == Approx(-1 / std::sqrt(2 * kPi * far)).epsilon(1e-6));
}

TEST_CASE("special: the Bessel functions' gradients, by their identities and at 0", "[special]") {
  const std::vector<double> at = {-25.0, -3.0, -0.5, 0.0, 0.25, 2.0, 19.0, 21.0};
  const Tensor x = doubles(at);
  const std::vector<double> v0 = i0(x).to_vector_double(), v1 = i1(x).to_vector_double();
  const std::vector<double> e0 = i0e(x).to_vector_double(), e1 = i1e(x).to_vector_double();
  const std::vector<double> g0 = grads(i0, at), g1 = grads(i1, at), ge0 = grads(i0e, at), ge1 = grads(i1e, at);
  for (size_t k = 0; k < at.size(); ++k) {
    INFO("x = " << at[k]);
    const double s = at[k] > 0 ? 1.0 : at[k] < 0 ? -1.0 : 0.0;
    CHECK(g0[k] == Approx(v1[k]).epsilon(1e-13));
    CHECK(ge0[k] == Approx(e1[k] - s * e0[k]).epsilon(1e-13).margin(1e-16));
    if (at[k] == 0.0) {
      CHECK(g1[k] == 0.5);
      CHECK(ge1[k] == 0.5);
    } else {
      CHECK(g1[k] == Approx(v0[k] - v1[k] / at[k]).epsilon(1e-13));
      CHECK(ge1[k] == Approx(e0[k] - e1[k] * (s + 1 / at[k])).epsilon(1e-13));
    }
  }
  // And by central differences, on both sides of the split and across it. The two series meet to
  // about 1e-15 (relative), which a difference over 2h magnifies by 1 / 2h: h is not smaller.
  const double h = 1e-4;
  for (auto* f : {&i0, &i1, &i0e, &i1e}) {
    for (double x0 : {-7.0, 0.3, 5.0, 19.99995, 40.0}) {
      INFO("x = " << x0);
      const double diff = (value((*f)(doubles({x0 + h}))) - value((*f)(doubles({x0 - h})))) / (2 * h);
      CHECK(diff == Approx(grads(*f, {x0})[0]).epsilon(1e-8));
    }
  }
  // I1(x) / x is its series over 2 near 0, never a quotient: exact for subnormal x too.
  for (double tiny : {5e-324, 1e-310, -1e-310}) {
    CHECK(grads(i1, {tiny})[0] == 0.5);
    CHECK(grads(i1e, {tiny})[0] == Approx(0.5).epsilon(1e-15));
  }
  CHECK(grads([](const Tensor& v) { return i1(v.to(DType::Float32)); }, {1e-45})[0] == 0.5);
}

TEST_CASE("special: the K Bessel functions at known values, in each of their three pieces", "[special]") {
  struct Known {
    double x, k0, k1, k0e, k1e;
  };
  const std::vector<Known> known = {
      {0.001, 7.0236888005623813228, 999.99623815608555346, 7.0307160023782514978, 1000.9967345590684316},
      {0.5, 0.92441907122766586178, 1.6564411200033008937, 1.52410938577390953, 2.7310097082117857054},
      {1.0, 0.42102443824070833334, 0.60190723019723457474, 1.1444630798068950147, 1.6361534862632582465},
      {2.0, 0.11389387274953343565, 0.13986588181652242728, 0.84156821507077141792, 1.0334768470686885732},
      {10.0, 1.7780062316167651811e-5, 1.8648773453825584597e-5, 0.39163193443659866573, 0.41076657059578875113},
      {19.5, 9.5848240093128286566e-10, 9.8275877543638105883e-10, 0.28205028321567020271, 0.28919403285359758594},
      {20.5, 3.4400085817085980501e-10, 3.5229344787112481407e-10, 0.27516703550431326396, 0.28180029606246619342},
      {50.0, 3.4101677497894955139e-23, 3.4441022267175556126e-23, 0.17680715585742933811, 0.1785665585588155746},
      {700.0, 4.669776431685376881e-306, 4.6731107967079661091e-306, 0.047362369454613572112, 0.047396187653494544137},
  };
  for (const Known& k : known) {
    INFO("x = " << k.x);
    const Tensor x = doubles({k.x});
    const double eps = 4e-16 * std::max(2.0, k.x);  // the condition number grows as x
    CHECK(value(modified_bessel_k0(x)) == Approx(k.k0).epsilon(eps));
    CHECK(value(modified_bessel_k1(x)) == Approx(k.k1).epsilon(eps));
    CHECK(value(scaled_modified_bessel_k0(x)) == Approx(k.k0e).epsilon(eps));
    CHECK(value(scaled_modified_bessel_k1(x)) == Approx(k.k1e).epsilon(eps));
    if (k.x < 80) {
      const Tensor x32 = x.to(DType::Float32);
      CHECK(modified_bessel_k0(x32).dtype() == DType::Float32);
      CHECK(value(modified_bessel_k0(x32)) == Approx(k.k0).epsilon(2e-7 * k.x + 1e-6));
      CHECK(value(scaled_modified_bessel_k1(x32)) == Approx(k.k1e).epsilon(2e-7 * k.x + 1e-6));
    }
  }
  CHECK(same(modified_bessel_i0(doubles({3.0})).to_vector_double(), i0(doubles({3.0})).to_vector_double()));
  CHECK(same(modified_bessel_i1(doubles({-3.0})).to_vector_double(), i1(doubles({-3.0})).to_vector_double()));
}

TEST_CASE("special: I and K satisfy their Wronskian across all the pieces", "[special]") {
  // I0(x) K1(x) + I1(x) K0(x) = 1 / x ties the two kinds together; in the scaled forms the
  // exponentials cancel, so it holds from 1e-3 to 1e4 without overflow.
  std::vector<double> xs;
  for (double v = 1e-3; v < 1e4; v *= 1.37) xs.push_back(v);
  for (double v : {0.999, 1.0, 1.001, 19.999, 20.0, 20.001}) xs.push_back(v);
  const Tensor x = doubles(xs);
  const Tensor lhs = add(mul(i0e(x), scaled_modified_bessel_k1(x)), mul(i1e(x), scaled_modified_bessel_k0(x)));
  const std::vector<double> got = mul(lhs, x).to_vector_double();
  for (size_t k = 0; k < xs.size(); ++k) {
    INFO("x = " << xs[k]);
    CHECK(got[k] == Approx(1.0).epsilon(4e-15));
  }
}

TEST_CASE("special: the K Bessel functions at 0, below it, at inf and NaN, and their gradients", "[special]") {
  const Tensor x = doubles({0.0, -0.0, -1.0, -kInf, kInf, kNaN});
  CHECK(same(modified_bessel_k0(x).to_vector_double(), {kInf, kInf, kNaN, kNaN, 0.0, kNaN}));
  CHECK(same(modified_bessel_k1(x).to_vector_double(), {kInf, kInf, kNaN, kNaN, 0.0, kNaN}));
  CHECK(same(scaled_modified_bessel_k0(x).to_vector_double(), {kInf, kInf, kNaN, kNaN, 0.0, kNaN}));
  CHECK(same(scaled_modified_bessel_k1(x).to_vector_double(), {kInf, kInf, kNaN, kNaN, 0.0, kNaN}));
  // K0 underflows to 0 near 745, as the true value does.
  CHECK(value(modified_bessel_k0(doubles({760.0}))) == 0.0);
  CHECK(value(modified_bessel_k0(doubles({740.0}))) > 0.0);

  const std::vector<double> at = {0.01, 0.7, 1.0, 1.3, 5.0, 19.9, 20.1, 60.0};
  const Tensor p = doubles(at);
  const std::vector<double> k0 = modified_bessel_k0(p).to_vector_double(),
                            k1 = modified_bessel_k1(p).to_vector_double();
  const std::vector<double> e0 = scaled_modified_bessel_k0(p).to_vector_double();
  const std::vector<double> e1 = scaled_modified_bessel_k1(p).to_vector_double();
  const std::vector<double> g0 = grads(modified_bessel_k0, at), g1 = grads(modified_bessel_k1, at);
  const std::vector<double> ge0 = grads(scaled_modified_bessel_k0, at), ge1 = grads(scaled_modified_bessel_k1, at);
  for (size_t k = 0; k < at.size(); ++k) {
    INFO("x = " << at[k]);
    CHECK(g0[k] == Approx(-k1[k]).epsilon(1e-13));
    CHECK(g1[k] == Approx(-k0[k] - k1[k] / at[k]).epsilon(1e-13));
    CHECK(ge0[k] == Approx(e0[k] - e1[k]).epsilon(1e-12));
    CHECK(ge1[k] == Approx(e1[k] * (1 - 1 / at[k]) - e0[k]).epsilon(1e-12));
    // And by central differences, across the pieces' seams.
    const double h = 1e-6 * at[k];
    const std::vector<std::pair<Tensor (*)(const Tensor&), double>> checks = {{&modified_bessel_k0, g0[k]},
                                                                              {&modified_bessel_k1, g1[k]},
                                                                              {&scaled_modified_bessel_k0, ge0[k]},
                                                                              {&scaled_modified_bessel_k1, ge1[k]}};
    for (const auto& [f, g] : checks) {
      const double diff = (value(f(doubles({at[k] + h}))) - value(f(doubles({at[k] - h})))) / (2 * h);
      CHECK(diff == Approx(g).epsilon(1e-7));
    }
  }
  // Huge finite inputs: K underflows to 0, the scaled ones follow sqrt(pi / (2x)).
  CHECK(value(modified_bessel_k1(doubles({1e308}))) == 0.0);
  CHECK(value(scaled_modified_bessel_k0(doubles({1e308}))) ==
        Approx(std::sqrt(kPi / 2) / std::sqrt(1e308)).epsilon(1e-15));
}

TEST_CASE("special: J and Y at 1, at their first roots, and their Wronskian across |x| = 25", "[special]") {
  const Tensor one = doubles({1.0});
  CHECK(value(bessel_j0(one)) == Approx(0.76519768655796655145).epsilon(4e-16));
  CHECK(value(bessel_j1(one)) == Approx(0.44005058574493351596).epsilon(4e-16));
  // Y0(1) is small: its few 1e-16 of absolute error are 4e-15 of it.
  CHECK(value(bessel_y0(one)) == Approx(0.08825696421567695798).epsilon(4e-15));
  CHECK(value(bessel_y1(one)) == Approx(-0.7812128213002887165).epsilon(4e-16));
  // The first roots of J0, J1, Y0 and Y1 (rounded to float64; the functions' slopes there are below
  // 1, so their values are at most a few rounding units).
  CHECK(std::fabs(value(bessel_j0(doubles({2.404825557695773})))) <= 1e-15);
  CHECK(std::fabs(value(bessel_j1(doubles({3.8317059702075125})))) <= 1e-15);
  CHECK(std::fabs(value(bessel_y0(doubles({0.8935769662791675})))) <= 1e-15);
  CHECK(std::fabs(value(bessel_y1(doubles({2.197141326031017})))) <= 1e-15);
  // J1 Y0 - J0 Y1 = 2 / (pi x) ties the two kinds together, from 1e-3 to 1e4 and at the seam. It
  // does not see a multiple of J added to both Y0 and Y1 (a wrong gamma, log or 2 / pi in Neumann's
  // series): Y0(1) and Y1(1) above and the op table's rows do.
  std::vector<double> xs;
  for (double v = 1e-3; v < 1e4; v *= 1.37) xs.push_back(v);
  for (double v : {24.999, 25.0, 25.001}) xs.push_back(v);
  const Tensor x = doubles(xs);
  const Tensor lhs = sub(mul(bessel_j1(x), bessel_y0(x)), mul(bessel_j0(x), bessel_y1(x)));
  const std::vector<double> got = mul(lhs, mul(x, kPi / 2)).to_vector_double();
  for (size_t k = 0; k < xs.size(); ++k) {
    INFO("x = " << xs[k]);
    CHECK(got[k] == Approx(1.0).epsilon(4e-15));
  }
  // float32: the same values to float32's rounding.
  const Tensor x32 = doubles({0.3, 7.0, 24.9, 25.1, 40.0}).to(DType::Float32);
  const Tensor x64 = x32.to(DType::Float64);
  for (auto* f : {&bessel_j0, &bessel_j1, &bessel_y0, &bessel_y1}) {
    const Tensor got32 = (*f)(x32);
    CHECK(got32.dtype() == DType::Float32);
    const std::vector<double> a = got32.to_vector_double(), b = (*f)(x64).to_vector_double();
    for (size_t k = 0; k < a.size(); ++k) CHECK(a[k] == Approx(b[k]).margin(1e-6));
  }
}

TEST_CASE("special: J and Y are continuous where Hankel's expansions take over", "[special]") {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    INFO(dtype_name(dtype));
    // 25's predecessor and 25 itself: the last input of the node sums and the first of Hankel's.
    const double before =
        dtype == DType::Float64 ? std::nextafter(25.0, 24.0) : static_cast<double>(std::nextafter(25.0f, 24.0f));
    const double eps = dtype == DType::Float64 ? 1e-15 : 1e-6;
    const Tensor below = doubles({before}).to(dtype), at = doubles({25.0}).to(dtype);
    for (auto* f : {&bessel_j0, &bessel_j1, &bessel_y0, &bessel_y1}) {
      // The functions' slopes are below 1 there: a step of 25 - before moves them by less.
      CHECK(std::fabs(value((*f)(at)) - value((*f)(below))) <= (25.0 - before) + eps);
    }
    const Tensor neg_below = doubles({-before}).to(dtype), neg_at = doubles({-25.0}).to(dtype);
    CHECK(std::fabs(value(bessel_j1(neg_at)) - value(bessel_j1(neg_below))) <= (25.0 - before) + eps);
  }
}

TEST_CASE("special: J, Y and spherical j0 at 0, below it, next to it, at the infinities, NaN and far out",
          "[special]") {
  const Tensor x = doubles({0.0, -0.0, -1.0, kInf, -kInf, kNaN});
  CHECK(same(bessel_j0(x).to_vector_double(), {1.0, 1.0, value(bessel_j0(doubles({1.0}))), 0.0, 0.0, kNaN}));
  CHECK(same(bessel_j1(x).to_vector_double(), {0.0, -0.0, -value(bessel_j1(doubles({1.0}))), 0.0, -0.0, kNaN}));
  CHECK(same(bessel_y0(x).to_vector_double(), {-kInf, -kInf, kNaN, 0.0, kNaN, kNaN}));
  CHECK(same(bessel_y1(x).to_vector_double(), {-kInf, -kInf, kNaN, 0.0, kNaN, kNaN}));
  CHECK(same(spherical_bessel_j0(x).to_vector_double(), {1.0, 1.0, std::sin(1.0), 0.0, 0.0, kNaN}));
  // Far out, Hankel's first terms: J0 = sqrt(2 / (pi x)) (P cos c - Q sin c), c = x - pi / 4,
  // P = 1 - 9 / (128 x^2), Q = -1 / (8 x); the next terms are below 1e-17 of them at 1e6.
  const double far = 1e6 + 0.5;
  const double cos_c = (std::cos(far) + std::sin(far)) / std::sqrt(2.0);
  const double sin_c = (std::sin(far) - std::cos(far)) / std::sqrt(2.0);
  const double hankel = std::sqrt(2 / (kPi * far)) * ((1 - 9 / (128 * far * far)) * cos_c + sin_c / (8 * far));
  CHECK(value(bessel_j0(doubles({far}))) == Approx(hankel).margin(1e-17));
  // J0^2 + Y0^2 = 2 / (pi x) (P^2 + Q^2) -> 2 / (pi x): up to float64's largest inputs, where
  // pi x would overflow, and float32's.
  for (double huge : {1e300, 1e308, std::numeric_limits<double>::max()}) {
    INFO("x = " << huge);
    const Tensor h = doubles({huge});
    const double root = std::sqrt(huge);
    const double j = value(bessel_j0(h)) * root, y = value(bessel_y0(h)) * root;
    CHECK(j * j + y * y == Approx(2 / kPi).epsilon(1e-14));
    const double j1 = value(bessel_j1(h)) * root, y1 = value(bessel_y1(h)) * root;
    CHECK(j1 * j1 + y1 * y1 == Approx(2 / kPi).epsilon(1e-14));
  }
  const Tensor h32 = doubles({3e38}).to(DType::Float32);
  const double root32 = std::sqrt(value(h32));
  const double j32 = value(bessel_j0(h32)) * root32, y32 = value(bessel_y0(h32)) * root32;
  CHECK(j32 * j32 + y32 * y32 == Approx(2 / kPi).epsilon(1e-5));
  // Next to 0: Y0 = 2 / pi (log(x / 2) + gamma) J0 + O(x^2), finite down to the smallest
  // subnormals of both dtypes (half of one rounds to 0: log(x / 2) is not formed); K0 likewise.
  for (double tiny : {5e-324, 1e-310, 1e-200}) {
    INFO("x = " << tiny);
    const double log_term = std::log(tiny) - std::log(2.0) + kEuler;
    CHECK(value(bessel_y0(doubles({tiny}))) == Approx(2 / kPi * log_term).epsilon(1e-15));
    CHECK(value(modified_bessel_k0(doubles({tiny}))) == Approx(-log_term).epsilon(1e-15));
  }
  const Tensor tiny32 = doubles({1.4e-45}).to(DType::Float32);
  CHECK(value(bessel_y0(tiny32)) == Approx(2 / kPi * (std::log(value(tiny32)) - std::log(2.0) + kEuler)).epsilon(1e-6));
  // Integer inputs give float32.
  CHECK(bessel_j0(tensor<int64_t>({1, 2})).dtype() == DType::Float32);
}

TEST_CASE("special: the gradients of J, Y and spherical j0, by their identities, at 0 and across the seams",
          "[special]") {
  const std::vector<double> at = {-30.0, -3.0, -0.5, 0.0, 0.25, 2.0, 24.9, 26.0};
  const Tensor x = doubles(at);
  const std::vector<double> j0 = bessel_j0(x).to_vector_double(), j1 = bessel_j1(x).to_vector_double();
  const std::vector<double> g0 = grads(bessel_j0, at), g1 = grads(bessel_j1, at);
  for (size_t k = 0; k < at.size(); ++k) {
    INFO("x = " << at[k]);
    CHECK(g0[k] == Approx(-j1[k]).epsilon(1e-14).margin(1e-300));
    if (at[k] == 0.0) {
      CHECK(g1[k] == 0.5);
    } else {
      CHECK(g1[k] == Approx(j0[k] - j1[k] / at[k]).epsilon(1e-13).margin(1e-15));
    }
  }
  const std::vector<double> pos = {0.01, 0.9, 5.0, 24.9, 26.0, 100.0};
  const Tensor p = doubles(pos);
  const std::vector<double> y0 = bessel_y0(p).to_vector_double(), y1 = bessel_y1(p).to_vector_double();
  const std::vector<double> gy0 = grads(bessel_y0, pos), gy1 = grads(bessel_y1, pos);
  for (size_t k = 0; k < pos.size(); ++k) {
    INFO("x = " << pos[k]);
    CHECK(gy0[k] == Approx(-y1[k]).epsilon(1e-14));
    CHECK(gy1[k] == Approx(y0[k] - y1[k] / pos[k]).epsilon(1e-13));
  }
  CHECK(grads(bessel_y1, {0.0})[0] == kInf);
  // J1(x) / x is its series near 0, never a quotient: 1/2 for subnormal x too.
  for (double tiny : {5e-324, 1e-310, -1e-310, 1e-9}) CHECK(grads(bessel_j1, {tiny})[0] == 0.5);
  // By central differences, on both sides of |x| = 25 and of spherical j0's |x| = 0.5. Their error
  // is h^2 f''' / 6 (Y1 at 0.3: about 8e-9, 1.2e-9 of the slope) plus the values' rounding over 2h
  // (about 1e-11).
  const double h = 1e-5;
  for (auto* f : {&bessel_j0, &bessel_j1, &bessel_y0, &bessel_y1, &spherical_bessel_j0}) {
    for (double x0 : {0.3, 0.49999, 0.50001, 3.0, 24.99999, 25.00001, 40.0}) {
      INFO("x = " << x0);
      const double diff = (value((*f)(doubles({x0 + h}))) - value((*f)(doubles({x0 - h})))) / (2 * h);
      CHECK(diff == Approx(grads(*f, {x0})[0]).epsilon(5e-9).margin(1e-10));
    }
  }
  // spherical j0's gradient: 0 at 0, -x / 3 next to it, its closed form beyond 0.5.
  CHECK(grads(spherical_bessel_j0, {0.0})[0] == 0.0);
  CHECK(grads(spherical_bessel_j0, {1e-8})[0] == Approx(-1e-8 / 3).epsilon(1e-15));
  for (double v : {-0.4, 0.6, 7.0}) {
    INFO("x = " << v);
    CHECK(grads(spherical_bessel_j0, {v})[0] == Approx((std::cos(v) - std::sin(v) / v) / v).epsilon(1e-13));
  }
}

TEST_CASE("special: zeta at known constants, next to x = 1, far out in q and with q < 0", "[special]") {
  auto z = [](double x, double q) { return value(zeta(full({}, x, DType::Float64), full({}, q, DType::Float64))); };
  CHECK(z(2, 1) == Approx(kPi * kPi / 6).epsilon(1e-15));
  CHECK(z(3, 1) == Approx(kZeta3).epsilon(1e-15));
  CHECK(z(4, 1) == Approx(std::pow(kPi, 4) / 90).epsilon(1e-15));
  CHECK(z(1.5, 1) == Approx(2.6123753486854883433).epsilon(1e-15));  // zeta(3/2)
  CHECK(z(2, 0.5) == Approx(kPi * kPi / 2).epsilon(1e-15));          // (2^2 - 1) zeta(2)
  CHECK(z(2, 2) == Approx(kPi * kPi / 6 - 1).epsilon(1e-15));
  CHECK(z(40, 1) == Approx(1 + std::pow(2.0, -40)).epsilon(1e-15));
  // zeta(1 + e, 1) = 1 / e + Euler's gamma + O(e); zeta(2, q) = 1 / q + 1 / (2 q^2) + ... far out.
  const double x = 1 + 1e-8;
  CHECK(z(x, 1) == Approx(1 / (x - 1) + kEuler).epsilon(1e-14));
  CHECK(z(2, 1e10) == Approx(1e-10 + 0.5e-20).epsilon(1e-14));
  CHECK(z(2, 1e200) == Approx(1e-200).epsilon(1e-14));
  // The tail is scaled by y^(1 - x), which underflows only with it: trigamma and polygamma(2, x)
  // far out in float32, where y^-x is already 0.
  CHECK(value(polygamma(1, full({}, 1e30, DType::Float32))) == Approx(1e-30).epsilon(1e-5));
  CHECK(value(polygamma(2, full({}, 1e13, DType::Float32))) == Approx(-1e-26).epsilon(1e-5));
  // q < 0 off the integers, integer x, at any distance below 0: zeta(2, -1000.5) = 2 zeta(2, 1/2)
  // - zeta(2, 1001.5) (the terms at -1000.5 ... -0.5 are those at 0.5 ... 1000.5).
  CHECK(z(2, -0.5) == Approx(4 + kPi * kPi / 2).epsilon(1e-15));
  const double a = 1001.5;
  CHECK(z(2, -1000.5) == Approx(kPi * kPi - (1 / a + 1 / (2 * a * a) + 1 / (6 * a * a * a))).epsilon(1e-14));
  // zeta(4, 1/4) + zeta(4, 3/4) = (4^4 - 2^4) zeta(4); the far terms add 1e-27.
  CHECK(z(4, -7e8 - 0.25) == Approx(240 * std::pow(kPi, 4) / 90).epsilon(1e-14));
  // (the terms cancel: -0.3 - 8 + 8.4 leaves 0.12, so the relative bound is 70 times looser).
  CHECK(z(3, -1.5) == Approx(std::pow(-1.5, -3) + std::pow(-0.5, -3) + 7 * kZeta3).epsilon(1e-13));
  // PyTorch's domain: inf at x = 1 and at the poles of q, NaN for x < 1 and for q < 0 with x off
  // the integers; the limits at infinite x and q.
  CHECK(z(1, 2) == kInf);
  CHECK(z(3, 0) == kInf);
  CHECK(z(2.5, -2) == kInf);
  CHECK(std::isnan(z(0.5, 1)));
  CHECK(std::isnan(z(2.5, -0.5)));
  CHECK(z(kInf, 1) == 1.0);
  CHECK(z(kInf, 2) == 0.0);
  CHECK(z(2, kInf) == 0.0);
  CHECK(std::isnan(z(kNaN, 1)));
  CHECK(std::isnan(z(2, kNaN)));
  // The one-q form is the tensor form; float32 and integer inputs.
  const Tensor xs = doubles({1.2, 2.0, 3.5, 7.0});
  CHECK(same(zeta(xs, 0.75).to_vector_double(), zeta(xs, full({}, 0.75, DType::Float64)).to_vector_double()));
  CHECK(same(zeta(xs, -1.25).to_vector_double(), zeta(xs, full({}, -1.25, DType::Float64)).to_vector_double()));
  CHECK(zeta(full({2}, 2.0, DType::Float32), 1.0).dtype() == DType::Float32);
  CHECK(value(zeta(full({}, 2.0, DType::Float32), 1.0)) == Approx(kPi * kPi / 6).epsilon(1e-6));
  CHECK(zeta(tensor<int64_t>({2, 3}), tensor<int64_t>({1, 1})).dtype() == DType::Float32);
  // One x for every q.
  const std::vector<double> at_two = zeta(2.0, doubles({1.0, 2.0, -0.5})).to_vector_double();
  CHECK(at_two[0] == Approx(kPi * kPi / 6).epsilon(1e-15));
  CHECK(at_two[1] == Approx(kPi * kPi / 6 - 1).epsilon(1e-15));
  CHECK(at_two[2] == Approx(4 + kPi * kPi / 2).epsilon(1e-15));
  CHECK(zeta(2.0, tensor<int64_t>({1, 2})).dtype() == DType::Float32);
  CHECK_THROWS_WITH(zeta(2.0, Tensor()), Catch::Contains("zeta") && Catch::Contains("undefined"));
  CHECK_THROWS_WITH(zeta(zeros({2, 3}), zeros({4})), Catch::Contains("zeta") && Catch::Contains("[4]"));
}

TEST_CASE("special: zeta's gradients in q and in x at known derivatives", "[special]") {
  Tensor x = doubles({2.0, 3.0, 2.0});
  Tensor q = doubles({1.0, 1.0, 0.5});
  x.set_requires_grad(true);
  q.set_requires_grad(true);
  zeta(x, q).sum().backward();
  const std::vector<double> gx = x.grad().to_vector_double(), gq = q.grad().to_vector_double();
  // d/dx zeta(x, 1) is zeta'(x): zeta'(2) and zeta'(3); zeta(x, 1/2) = (2^x - 1) zeta(x), so its
  // slope at 2 is 4 log(2) zeta(2) + 3 zeta'(2).
  const double zeta_prime_2 = -0.93754825431584375370, zeta_prime_3 = -0.19812624288563685333;
  CHECK(gx[0] == Approx(zeta_prime_2).epsilon(1e-14));
  CHECK(gx[1] == Approx(zeta_prime_3).epsilon(1e-14));
  CHECK(gx[2] == Approx(4 * std::log(2.0) * kPi * kPi / 6 + 3 * zeta_prime_2).epsilon(1e-14));
  // d/dq zeta(x, q) = -x zeta(x + 1, q).
  CHECK(gq[0] == Approx(-2 * kZeta3).epsilon(1e-14));
  CHECK(gq[1] == Approx(-3 * std::pow(kPi, 4) / 90).epsilon(1e-14));
  CHECK(gq[2] == Approx(-2 * 7 * kZeta3).epsilon(1e-14));
  // q < 0: a slope in q, none in x (NaN: x is an integer there).
  Tensor xn = doubles({2.0});
  Tensor qn = doubles({-0.5});
  xn.set_requires_grad(true);
  qn.set_requires_grad(true);
  zeta(xn, qn).sum().backward();
  CHECK(std::isnan(xn.grad().item<double>()));
  // (-8 + 7 zeta(3) cancels to 0.41: a bound 20 times looser)
  CHECK(qn.grad().item<double>() == Approx(-2 * (std::pow(-0.5, -3) + 7 * kZeta3)).epsilon(1e-13));
}
