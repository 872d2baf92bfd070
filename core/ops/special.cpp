// torch.special's functions composed of elementwise ops. Every value is computed off the tape in a
// compute dtype (float64 for float64, float32 otherwise) and rounded once; every gradient is one
// node with the derivative's closed form.
#include "core/ops/special.h"

#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/math.h"
#include "core/ops/reduce.h"
#include "kernels/error.h"

namespace kiln {

namespace {

using ops::float_result;
constexpr double kPi = std::numbers::pi;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

DType compute_dtype(DType out) { return out == DType::Float64 ? DType::Float64 : DType::Float32; }

// The values of a function on x (already in the compute dtype, off the tape), and its derivative at
// x given the value y there.
using ValuesFn = std::function<Tensor(const Tensor& x)>;
using SlopeFn = std::function<Tensor(const Tensor& x, const Tensor& y)>;

// A unary special function: float_result(x)'s dtype out, computed in its compute dtype (or in
// `compute` when given), with dy/dx = slope(x, y) on the tape.
Tensor special_unary(const char* name, const Tensor& x, const ValuesFn& values, const SlopeFn& slope,
                     std::optional<DType> compute = std::nullopt) {
  ops::check_defined(name, x, "input");
  const DType out = float_result(x.dtype());
  const DType work = compute.value_or(compute_dtype(out));
  const Tensor xc = x.detach().to(work);
  Tensor yc;
  {
    NoGradGuard no_grad;
    yc = values(xc);
  }
  Tensor y = yc.to(out);
  if (needs_grad({&x})) {
    const DType in = x.dtype();
    record_function(name, {x}, {y}, {xc, yc}, [slope, work, in](const FunctionNode::Context& ctx) {
      return TensorList{mul(ctx.grads[0].to(work), slope(ctx.saved_at(0), ctx.saved_at(1))).to(in)};
    });
  }
  return y;
}

// A function of two tensors (already in the compute dtype, off the tape): a binary special
// function's values, or one of its partial derivatives.
using BinaryFn = std::function<Tensor(const Tensor& x, const Tensor& y)>;

// A binary special function of x and y, broadcast: float_result of their promoted dtype, computed
// in its compute dtype, with d/dx = dx(x, y) and d/dy = dy(x, y) on the tape (each only when
// needed).
Tensor special_binary(const char* name, const Tensor& x, const Tensor& y, const BinaryFn& values, const BinaryFn& dx,
                      const BinaryFn& dy) {
  ops::check_defined(name, x, "first operand");
  ops::check_defined(name, y, "second operand");
  broadcast_shapes(x.sizes(), y.sizes(), name);
  ops::common_device(name, {&x, &y});
  const DType out = float_result(result_type(x, y));
  const DType work = compute_dtype(out);
  const Tensor xc = x.detach().to(work), yc = y.detach().to(work);
  Tensor result;
  {
    NoGradGuard no_grad;
    result = values(xc, yc).to(out);
  }
  if (needs_grad({&x, &y})) {
    const Shape xs = x.sizes(), ys = y.sizes();
    const DType xt = x.dtype(), yt = y.dtype();
    record_function(name, {x, y}, {result}, {xc, yc}, [=](const FunctionNode::Context& ctx) {
      const Tensor g = ctx.grads[0].to(work);
      const Tensor &xv = ctx.saved_at(0), &yv = ctx.saved_at(1);
      TensorList r(2);
      if (ctx.needs_input_grad[0]) r[0] = sum_to(mul(g, dx(xv, yv)), xs).to(xt);
      if (ctx.needs_input_grad[1]) r[1] = sum_to(mul(g, dy(xv, yv)), ys).to(yt);
      return r;
    });
  }
  return result;
}

// c[0] + c[1] u + c[2] u^2 + ..., by Horner's rule.
Tensor horner(const Tensor& u, const std::vector<double>& c) {
  Tensor p = full_like(u, c.back());
  for (size_t i = c.size() - 1; i-- > 0;) p = add(mul(p, u), c[i]);
  return p;
}

// The Bernoulli numbers B_2, B_4, ..., B_16 of the Stirling and digamma asymptotic series.
const std::vector<double>& bernoulli() {
  static const std::vector<double> b = {1.0 / 6,  -1.0 / 30,     1.0 / 42, -1.0 / 30,
                                        5.0 / 66, -691.0 / 2730, 7.0 / 6,  -3617.0 / 510};
  return b;
}

// How far the recurrences shift x up before the asymptotic series take over: with eight terms, at
// x + 8 and above they are exact to float64's rounding, at x + 3 to float32's (digamma, lgamma;
// polygamma shifts further). The shift is no further than needed: its sums are the larger terms
// that cancel where a value is near a root (lgamma(2) is lgamma(10) - log(2 * 3 * ... * 9)).
int shift_for(const Tensor& x) { return x.dtype() == DType::Float64 ? 8 : 3; }

// x - round(x) in [-0.5, 0.5], exact: sin(pi x) and cot(pi x) from it keep their digits near the
// integers, where pi * x itself has lost them.
Tensor reduced(const Tensor& x) { return sub(x, round(x)); }

// Non-positive integers: the poles of the gamma family.
Tensor at_pole(const Tensor& x) { return logical_and(le(x, 0.0), eq(x, round(x))); }

// lgamma for x >= 0.5 (other entries give unused values): below the shift s, lgamma(x + s) - log(x
// (x + 1) ... (x + s - 1)); from there Stirling's series (y - 1/2) log y - y + log(2 pi) / 2 + sum
// B_2k / (2k (2k - 1) y^(2k - 1)).
Tensor lgamma_upper(const Tensor& x) {
  const int shift = shift_for(x);
  const Tensor small = lt(x, static_cast<double>(shift));
  Tensor product = x;
  for (int k = 1; k < shift; ++k) product = mul(product, add(x, static_cast<double>(k)));
  const Tensor y = where(small, add(x, static_cast<double>(shift)), x);
  std::vector<double> c;
  for (size_t k = 1; k <= bernoulli().size(); ++k) c.push_back(bernoulli()[k - 1] / (2.0 * k * (2.0 * k - 1)));
  const Tensor series = div(horner(div(1.0, mul(y, y)), c), y);
  const Tensor stirling = add(sub(mul(sub(y, 0.5), log(y)), y), add(series, 0.5 * std::log(2 * kPi)));
  return sub(stirling, where(small, log(product), 0.0));
}

Tensor lgamma_values(const Tensor& x) {
  // Reflection: lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x); inf at the poles, where the sine
  // is 0.
  const Tensor reflect = lt(x, 0.5);
  const Tensor upper = lgamma_upper(where(reflect, sub(1.0, x), x));
  const Tensor reflected = sub(log(div(kPi, abs(sin(mul(reduced(x), kPi))))), upper);
  return where(isinf(x), kInf, where(reflect, reflected, upper));
}

// digamma for x >= 0.5: psi(x + s) - sum_(k<s) 1 / (x + k), psi(y) = log y - 1 / (2y) - sum B_2k /
// (2k y^2k).
Tensor digamma_upper(const Tensor& x) {
  Tensor terms = div(1.0, x);
  const int shift = shift_for(x);
  for (int k = 1; k < shift; ++k) terms = add(terms, div(1.0, add(x, static_cast<double>(k))));
  const Tensor y = add(x, static_cast<double>(shift));
  const Tensor u = div(1.0, mul(y, y));
  std::vector<double> c;
  for (size_t k = 1; k <= bernoulli().size(); ++k) c.push_back(bernoulli()[k - 1] / (2.0 * k));
  const Tensor asymptotic = sub(sub(log(y), div(0.5, y)), mul(u, horner(u, c)));
  return sub(asymptotic, terms);
}

// cot(pi x), from x's reduced form.
Tensor cot_pi(const Tensor& x) {
  const Tensor angle = mul(reduced(x), kPi);
  return div(cos(angle), sin(angle));
}

Tensor digamma_values(const Tensor& x) {
  // Reflection: psi(x) = psi(1 - x) - pi cot(pi x). At 0 the sign of zero picks -inf or +inf
  // (PyTorch's); the negative integers give NaN.
  const Tensor reflect = lt(x, 0.5);
  const Tensor upper = digamma_upper(where(reflect, sub(1.0, x), x));
  const Tensor value = where(reflect, sub(upper, mul(cot_pi(x), kPi)), upper);
  const Tensor at_zero = where(signbit(x), full_like(x, kInf), -kInf);
  return where(eq(x, 0.0), at_zero, where(at_pole(x), kNaN, value));
}

double factorial(int64_t n) { return std::tgamma(static_cast<double>(n) + 1); }

// The coefficients (in c = cot(pi x)) of d^n/dx^n cot(pi x) / pi^n: P_0 = c, P_(k+1) = -(1 + c^2)
// P_k'(c).
std::vector<double> cot_derivative(int64_t n) {
  std::vector<double> p = {0.0, 1.0};
  for (int64_t k = 0; k < n; ++k) {
    std::vector<double> next(p.size() + 1, 0.0);
    for (size_t j = 1; j < p.size(); ++j) {  // -(1 + c^2) j p_j c^(j-1)
      next[j - 1] -= static_cast<double>(j) * p[j];
      next[j + 1] -= static_cast<double>(j) * p[j];
    }
    p = std::move(next);
  }
  return p;
}

// How many terms of the Hurwitz zeta function zeta's sum takes directly before its tail: the
// tail's expansion at y = q + 9 >= 9, eight Bernoulli terms, is within float64's rounding for every
// x > 1 (its terms shrink by about ((x + 2j) / (2 pi y))^2 each, and where that is not small, the
// tail's y^(1 - x) is negligible beside q^-x).
constexpr int kZetaShift = 9;

// The Hurwitz zeta function sum_(k>=0) (q + k)^-x for x > 1 and q > 0 (other entries give unused
// values), or, with `slope`, its derivative in x: the first `shift` terms directly, then the
// Euler-Maclaurin tail at y = q + shift, y^(1 - x) [1 / (x - 1) + 1 / (2y) + sum_j B_2j / (2j)! x
// (x + 1) ... (x + 2j - 2) y^-2j] (differentiated factor by factor, the rising product by the sum
// of 1 / (x + i) over its factors). y^(1 - x) underflows only with the tail itself (y^-x would
// first: the tail of trigamma at x = 1e200 is 1e-200); where it does, the tail is 0 (its bracket
// may overflow).
Tensor hurwitz_zeta_upper(const Tensor& x, const Tensor& q, int64_t shift, bool slope) {
  const Tensor minus_x = neg(x);
  Tensor direct;
  for (int64_t i = 0; i < shift; ++i) {
    const Tensor base = i == 0 ? q : add(q, static_cast<double>(i));
    Tensor term = pow(base, minus_x);
    if (slope) term = neg(mul(term, log(base)));
    direct = i == 0 ? term : add(direct, term);
  }
  const Tensor y = add(q, static_cast<double>(shift));
  const Tensor inv_y2 = div(1.0, mul(y, y));
  Tensor rising = mul(x, inv_y2);  // x (x + 1) ... (x + 2j - 2) y^-2j
  Tensor harmonic = div(1.0, x);   // 1 / x + 1 / (x + 1) + ... + 1 / (x + 2j - 2)
  double factorial_2j = 2;
  Tensor series = mul(rising, bernoulli()[0] / factorial_2j);
  Tensor series_slope = slope ? mul(series, harmonic) : Tensor();
  for (size_t j = 2; j <= bernoulli().size(); ++j) {
    const double a = 2.0 * static_cast<double>(j) - 3, b = a + 1;
    rising = mul(rising, mul(mul(add(x, a), add(x, b)), inv_y2));
    factorial_2j *= (b + 1) * (b + 2);
    const Tensor term = mul(rising, bernoulli()[j - 1] / factorial_2j);
    series = add(series, term);
    if (slope) {
      harmonic = add(harmonic, add(div(1.0, add(x, a)), div(1.0, add(x, b))));
      series_slope = add(series_slope, mul(term, harmonic));
    }
  }
  const Tensor scale = pow(y, sub(1.0, x));
  const Tensor x_minus_1 = sub(x, 1.0);
  const Tensor bracket = add(add(div(1.0, x_minus_1), div(0.5, y)), series);
  // d/dx (y^(1 - x) bracket) = y^(1 - x) (bracket' - log(y) bracket), bracket' = series' - 1 / (x -
  // 1)^2.
  const Tensor tail =
      slope ? mul(scale, sub(sub(series_slope, div(1.0, mul(x_minus_1, x_minus_1))), mul(log(y), bracket)))
            : mul(scale, bracket);
  return add(direct, where(eq(scale, 0.0), 0.0, tail));
}

// polygamma(n >= 1) for x >= 0.5: (-1)^(n+1) n! zeta(n + 1, x), with m = s + 2n terms taken
// directly (the rising products of the tail grow with n).
Tensor polygamma_upper(int64_t n, const Tensor& x) {
  const double sign = n % 2 == 1 ? 1.0 : -1.0;
  const Tensor order = full_like(x, static_cast<double>(n + 1));
  return mul(hurwitz_zeta_upper(order, x, shift_for(x) + 2 * n, false), sign * factorial(n));
}

Tensor polygamma_values(int64_t n, const Tensor& x) {
  if (n == 0) return digamma_values(x);
  // Reflection, differentiated n times: psi_n(x) = (-1)^n psi_n(1 - x) - pi^(n+1) P_n(cot(pi x)).
  const Tensor reflect = lt(x, 0.5);
  const Tensor upper = polygamma_upper(n, where(reflect, sub(1.0, x), x));
  const Tensor reflected = sub(mul(upper, n % 2 == 0 ? 1.0 : -1.0),
                               mul(horner(cot_pi(x), cot_derivative(n)), std::pow(kPi, static_cast<double>(n + 1))));
  return where(at_pole(x), n % 2 == 1 ? kInf : kNaN, where(reflect, reflected, upper));
}

// The closed-form first guess of z >= 0 with erfc(z) = t, from L = log(1 - (1 - t)^2) (Winitzki's
// approximation of erf, inverted; relative error below 3e-3): Newton's method takes it from there.
Tensor erf_inverse_guess(const Tensor& log_one_minus_square) {
  constexpr double a = 0.147;
  const Tensor half_log = mul(log_one_minus_square, 0.5);
  const Tensor t = add(half_log, 2.0 / (kPi * a));
  const Tensor inner = sub(sqrt(sub(mul(t, t), div(log_one_minus_square, a))), t);
  return sqrt(clamp(inner, 0.0, std::nullopt));
}

// Three Newton steps: enough from the guess above for float64's digits (the error squares each
// step: 3e-3, 3e-6, 3e-12, below rounding).
constexpr int kNewtonSteps = 3;

// z >= 0 with erfc(z) = t for t in (0, 1]: Newton's method on log erfc(z) = log t, whose slope
// -2 / sqrt(pi) exp(-z^2 - log erfc z) neither overflows nor underflows in the far tail.
Tensor erfc_inverse_values(const Tensor& t) {
  const Tensor log_t = log(t);
  Tensor z = erf_inverse_guess(add(log_t, log(sub(2.0, t))));
  for (int i = 0; i < kNewtonSteps; ++i) {
    const Tensor log_e = log(erfc(z));
    const Tensor slope = mul(exp(sub(neg(mul(z, z)), log_e)), -2.0 * std::numbers::inv_sqrtpi);
    z = sub(z, div(sub(log_e, log_t), slope));
  }
  return z;
}

Tensor erfinv_values(const Tensor& x) {
  // |x| < 0.5: Newton on erf(z) = |x| (1 - |x| would lose |x|'s low digits); beyond, on erfc(z) =
  // 1 - |x|, exact there. +-1 give +-inf; |x| > 1 makes the logs NaN.
  const Tensor a = abs(x);
  Tensor z = erf_inverse_guess(log1p(neg(mul(a, a))));
  for (int i = 0; i < kNewtonSteps; ++i) {
    const Tensor slope = mul(exp(neg(mul(z, z))), 2.0 * std::numbers::inv_sqrtpi);
    z = sub(z, div(sub(erf(z), a), slope));
  }
  const Tensor tail = erfc_inverse_values(sub(1.0, a));
  const Tensor magnitude = where(eq(a, 1.0), kInf, where(lt(a, 0.5), z, tail));
  return where(lt(x, 0.0), neg(magnitude), magnitude);
}

// The asymptotic series erfcx(x) ~ 1 / (x sqrt(pi)) sum_k (-1)^k (2k - 1)!! / (2 x^2)^k, sixteen
// terms: at x >= 8 the last is below float64's rounding.
Tensor erfcx_values(const Tensor& x) {
  std::vector<double> c = {1.0};
  for (int k = 1; k < 16; ++k) c.push_back(-c.back() * (2 * k - 1));
  const Tensor series = div(horner(div(0.5, mul(x, x)), c), mul(x, std::sqrt(kPi)));
  const Tensor direct = mul(exp(mul(x, x)), erfc(x));
  return where(ge(x, 8.0), series, direct);
}

constexpr double kSqrt2 = std::numbers::sqrt2;
constexpr double kInvSqrt2Pi = std::numbers::inv_sqrtpi / kSqrt2;

Tensor ndtr_values(const Tensor& x) { return mul(erfc(mul(x, -1.0 / kSqrt2)), 0.5); }

Tensor log_ndtr_values(const Tensor& x) {
  // Left of -1 ndtr(x) = erfcx(-x / sqrt 2) exp(-x^2 / 2) / 2 keeps the log finite; to the right,
  // log1p of the small complement.
  const Tensor left = sub(log(mul(erfcx_values(mul(x, -1.0 / kSqrt2)), 0.5)), mul(mul(x, x), 0.5));
  const Tensor right = log1p(mul(erfc(mul(x, 1.0 / kSqrt2)), -0.5));
  return where(lt(x, -1.0), left, right);
}

Tensor ndtri_values(const Tensor& p) {
  // p < 0.5: -sqrt 2 erfcinv(2p); otherwise sqrt 2 erfcinv(2 (1 - p)), 1 - p exact there.
  const Tensor lower = lt(p, 0.5);
  const Tensor t = where(lower, mul(p, 2.0), mul(sub(1.0, p), 2.0));
  const Tensor z = mul(erfc_inverse_values(t), kSqrt2);
  const Tensor value = where(lower, neg(z), z);
  return where(eq(p, 0.0), -kInf, where(eq(p, 1.0), kInf, value));
}

// The modified Bessel functions I0 and I1: below kBesselSplit the power series in u = (x /
// kBesselSplit)^2, beyond it the asymptotic series in v = kBesselSplit / |x|. Both variables stay
// in [0, 1] and the coefficients are scaled to match (c_k T^k and a_k / A^k), so float32 evaluates
// them without its range cutting off the late ones. At 20 the power series needs 34 terms and the
// asymptotic one 26: its error, about its first term left out, is then below float64's rounding
// (its terms shrink only up to about the 2x-th, 40 at x = 20, so it could not go much further).
constexpr double kBesselSplit = 20.0;
constexpr int kBesselSeriesTerms = 34;
constexpr int kBesselAsymptoticTerms = 26;

// sum_k T^k / (k! (k + n)!) u^k with T = kBesselSplit^2 / 4: I_n(x) / (x / 2)^n at u = (x / 20)^2.
const std::vector<double>& bessel_series(int n) {
  static const auto make = [](int order) {
    const double t = kBesselSplit * kBesselSplit / 4;
    std::vector<double> c = {1.0};
    for (int k = 1; k < kBesselSeriesTerms; ++k) c.push_back(c.back() * t / (k * (k + order)));
    return c;
  };
  static const std::vector<double> c0 = make(0), c1 = make(1);
  return n == 0 ? c0 : c1;
}

// Hankel's expansion I_n(x) e^-x sqrt(2 pi x) ~ sum_k (-1)^k prod_(j<=k) (4n^2 - (2j - 1)^2) / (k!
// (8x)^k), in v = kBesselSplit / x.
const std::vector<double>& bessel_asymptotic(int n) {
  static const auto make = [](int order) {
    const double mu = 4.0 * order * order;
    std::vector<double> c = {1.0};
    for (int k = 1; k < kBesselAsymptoticTerms; ++k) {
      const double odd = 2.0 * k - 1;
      c.push_back(c.back() * -(mu - odd * odd) / (8.0 * k * kBesselSplit));
    }
    return c;
  };
  static const std::vector<double> c0 = make(0), c1 = make(1);
  return n == 0 ? c0 : c1;
}

// The power series of I_n(x) / (x / 2)^n at |x| = near <= kBesselSplit.
Tensor bessel_i_series(int n, const Tensor& near) {
  return horner(div(mul(near, near), kBesselSplit * kBesselSplit), bessel_series(n));
}

// e^-|x| I_n(|x|) at |x| = far >= kBesselSplit: the asymptotic series over sqrt(2 pi |x|), divided
// by the root of |x| and then by that of 2 pi, so that no finite |x| overflows it.
Tensor bessel_i_tail(int n, const Tensor& far) {
  return mul(div(horner(div(kBesselSplit, far), bessel_asymptotic(n)), sqrt(far)), 1 / std::sqrt(2 * kPi));
}

// I_n(x) for n = 0 or 1, times exp(-|x|) when scaled.
Tensor bessel_i_values(int n, const Tensor& x, bool scaled) {
  const Tensor a = abs(x);
  const Tensor small = le(a, kBesselSplit);
  // Each series on its own side's inputs; the others get the split point, where both are finite.
  const Tensor near = clamp(a, std::nullopt, kBesselSplit);
  Tensor series = bessel_i_series(n, near);
  if (n == 1) series = mul(series, mul(near, 0.5));
  const Tensor far = clamp(a, kBesselSplit, std::nullopt);
  const Tensor tail = bessel_i_tail(n, far);
  Tensor value;
  if (scaled) {
    value = where(small, mul(series, exp(neg(a))), tail);
  } else {
    // e^|x| as (e^(|x| / 2))^2, applied one factor at a time: the value stays finite as long as the
    // function does. At inf the tail is 0 and the factor inf: the value is set.
    const Tensor half = exp(mul(far, 0.5));
    value = where(small, series, where(isinf(a), kInf, mul(half, mul(half, tail))));
  }
  return n == 1 ? where(lt(x, 0.0), neg(value), value) : value;
}

// d/dx I1(x) = I0(x) - I1(x) / x, and for the scaled ones, whose exp(-|x|) adds -sign(x) i1e,
// i0e - i1e / x - sign(x) i1e; y is I1(x) or i1e(x). Up to kBesselSplit I1(x) / x is the series
// over 2, never a quotient: 1/2 at 0, and exact for subnormal x, where y has lost digits.
Tensor bessel_i1_slope(const Tensor& x, const Tensor& y, bool scaled) {
  const Tensor a = abs(x);
  const Tensor near = clamp(a, std::nullopt, kBesselSplit);
  Tensor over_x = mul(bessel_i_series(1, near), 0.5);
  if (scaled) over_x = mul(over_x, exp(neg(near)));
  const Tensor ratio = where(le(a, kBesselSplit), over_x, div(y, x));
  return scaled ? sub(bessel_i_values(0, x, true), add(ratio, mul(sign(x), y)))
                : sub(bessel_i_values(0, x, false), ratio);
}

// The modified Bessel functions of the second kind K0 and K1 for x > 0, in three pieces:
// - x <= 1: their series, K0 = -(log(x / 2) + gamma) I0 + sum t^k H_k / k!^2 and
//   K1 = 1 / x + log(x / 2) I1 - x / 4 sum t^k (psi(k + 1) + psi(k + 2)) / (k! (k + 1)!), with
//   t = x^2 / 4 <= 1/4 and H_k the harmonic numbers; 14 terms;
// - 1 < x <= 20: e^x K_n(x) = int_0^inf exp(-x (cosh s - 1)) cosh(n s) ds by the trapezoidal rule,
//   31 nodes 0.15 apart: the integrand is analytic in a strip, so the rule's error falls as
//   exp(-pi^2 / 0.15 + x), below float64's rounding up to 20; the last node, s = 4.5, is where the
//   integrand falls below rounding for every x >= 1;
// - beyond 20: Hankel's expansion, I's coefficients with alternating signs.
constexpr double kBesselKSeriesEnd = 1.0;
constexpr int kBesselKSeriesTerms = 14;
constexpr double kBesselKStep = 0.15;
constexpr int kBesselKNodes = 31;

// The two series of K_n for x <= 1 (n = 0, 1): the plain I_n series' coefficients and the ones
// that multiply the log's partner sum.
struct BesselKSeries {
  std::vector<double> i, rest;
};
const BesselKSeries& bessel_k_series(int n) {
  static const auto make = [](int order) {
    BesselKSeries c;
    double inverse = 1.0, harmonic = 0;  // 1 / (k! (k + n)!) and H_k
    for (int k = 0; k < kBesselKSeriesTerms; ++k) {
      if (k > 0) {
        inverse /= k * (k + order);
        harmonic += 1.0 / k;
      }
      c.i.push_back(inverse);
      // psi(k + 1) + psi(k + 2) = 2 H_k + 1 / (k + 1) - 2 gamma, for K1.
      c.rest.push_back(order == 0 ? inverse * harmonic
                                  : inverse * (2 * harmonic + 1.0 / (k + 1) - 2 * std::numbers::egamma));
    }
    return c;
  };
  static const BesselKSeries c0 = make(0), c1 = make(1);
  return n == 0 ? c0 : c1;
}

// K_n(x) for x in (0, 1] (other entries: unused values).
Tensor bessel_k_series_values(int n, const Tensor& x) {
  const BesselKSeries& c = bessel_k_series(n);
  const Tensor t = mul(mul(x, x), 0.25);
  // log(x / 2) as log x - log 2: half of the smallest subnormal x would round to 0
  const Tensor log_half = sub(log(x), std::numbers::ln2);
  if (n == 0) return sub(horner(t, c.rest), mul(add(log_half, std::numbers::egamma), horner(t, c.i)));
  const Tensor i1 = mul(horner(t, c.i), mul(x, 0.5));
  return sub(add(div(1.0, x), mul(log_half, i1)), mul(horner(t, c.rest), mul(x, 0.25)));
}

// e^x K_n(x) for x in [1, 20], by the trapezoidal rule.
Tensor bessel_k_integral_values(int n, const Tensor& x) {
  Tensor sum = zeros_like(x);
  for (int j = 0; j < kBesselKNodes; ++j) {
    const double s = j * kBesselKStep;
    const double weight = (j == 0 ? 0.5 : 1.0) * kBesselKStep * (n == 0 ? 1.0 : std::cosh(s));
    sum = add(sum, mul(exp(mul(x, 1.0 - std::cosh(s))), weight));
  }
  return sum;
}

// K_n(x) for n = 0 or 1, times e^x when scaled: inf at 0, NaN below, 0 at inf.
Tensor bessel_k_values(int n, const Tensor& x, bool scaled) {
  const Tensor near = clamp(x, std::nullopt, kBesselKSeriesEnd);
  const Tensor series = bessel_k_series_values(n, near);
  const Tensor middle = bessel_k_integral_values(n, clamp(x, kBesselKSeriesEnd, kBesselSplit));
  const Tensor far = clamp(x, kBesselSplit, std::nullopt);
  std::vector<double> hankel = bessel_asymptotic(n);
  for (size_t k = 1; k < hankel.size(); k += 2) hankel[k] = -hankel[k];
  const Tensor tail = mul(div(horner(div(kBesselSplit, far), hankel), sqrt(far)), std::sqrt(kPi / 2));
  Tensor value;
  if (scaled) {
    value = where(le(x, kBesselKSeriesEnd), mul(series, exp(near)), where(le(x, kBesselSplit), middle, tail));
  } else {
    // e^-x as (e^(-x / 2))^2, one factor at a time: the value underflows no earlier than it must.
    const Tensor half = exp(mul(far, -0.5));
    value = where(le(x, kBesselKSeriesEnd), series,
                  where(le(x, kBesselSplit), mul(middle, exp(neg(x))), mul(half, mul(half, tail))));
  }
  return where(eq(x, 0.0), kInf, where(logical_or(lt(x, 0.0), isnan(x)), kNaN, value));
}

// The Bessel functions of the first and second kinds, J and Y, of orders 0 and 1, in two pieces:
// - |x| < 25: J_m(x) = 1/(2 pi) int_0^(2 pi) cos(m s - x sin s) ds by the trapezoidal rule on 160
//   nodes. For this periodic integrand the rule's error is the aliased orders J_(160 - m), ...,
//   below 1e-30 here. The nodes' sin s take 41 values |t_j| in [0, 1] (sin s = sin(pi - s), and
//   the integrands are even in t), so J0 = sum_j w_j cos(x t_j) and J1 = sum_j w_j t_j sin(x t_j)
//   with w_j the nodes' multiplicities over 160. Every term is at most w_j, so the rounding error
//   is absolute, a few 1e-16 at any x (relative only away from the roots). Y0 is Neumann's series,
//   Y0 = 2/pi (log(x / 2) + gamma) J0 - 4/pi sum_k (-1)^k J_2k / k, whose J_2k (k <= 40; J_80 <
//   1e-29 at 25) are sums over the same nodes, so the whole sum is one more set of weights a_j on
//   cos(x t_j); Y1 = -Y0' differentiates it term by term.
// - beyond: Hankel's expansions, J_n = sqrt(2 / (pi x)) (P cos c - Q sin c) and
//   Y_n = sqrt(2 / (pi x)) (P sin c + Q cos c), c = x - (2n + 1) pi / 4, with P and Q the even and
//   odd terms, alternating, of sum a_k / x^k (I's coefficients), to k = 23: at 25 the first term
//   left out is below 2e-19 of the first. cos c and sin c are sums of cos x and sin x over sqrt 2:
//   no angle is formed past x itself.
constexpr double kBesselJSplit = 25.0;
constexpr int kBesselJNodes = 160;
constexpr int kBesselJTerms = 24;
constexpr int kBesselNeumannTerms = 40;

// The folded nodes t_j = sin(2 pi j / 160), j = 0..40, their weights w_j and Neumann's a_j.
struct BesselJNodes {
  std::vector<double> t, w, a;
};
const BesselJNodes& bessel_j_nodes() {
  static const BesselJNodes nodes = [] {
    BesselJNodes c;
    const int quarter = kBesselJNodes / 4;
    for (int j = 0; j <= quarter; ++j) {
      const double s = 2 * kPi * j / kBesselJNodes;
      // s, pi - s, pi + s and 2 pi - s share |sin s|; 0 and pi / 2 have one partner only.
      const double w = (j == 0 || j == quarter ? 2.0 : 4.0) / kBesselJNodes;
      double neumann = 0;
      for (int k = kBesselNeumannTerms; k >= 1; --k) neumann += (k % 2 == 0 ? 1.0 : -1.0) * std::cos(2 * k * s) / k;
      c.t.push_back(j == quarter ? 1.0 : std::sin(s));
      c.w.push_back(w);
      c.a.push_back(-4 / kPi * w * neumann);
    }
    return c;
  }();
  return nodes;
}

// Hankel's P and Q of order n as polynomials in u = v^2, v = kBesselJSplit / x: P from the even
// powers of v, Q / v from the odd ones, each with the alternating sign of its pair.
struct HankelPQ {
  std::vector<double> p, q;
};
const HankelPQ& hankel_pq(int n) {
  static const auto make = [](int order) {
    const double mu = 4.0 * order * order;
    HankelPQ c;
    double a = 1.0;  // a_k / kBesselJSplit^k
    for (int k = 0; k < kBesselJTerms; ++k) {
      if (k > 0) {
        const double odd = 2.0 * k - 1;
        a *= (mu - odd * odd) / (8.0 * k * kBesselJSplit);
      }
      const double sign = (k / 2) % 2 == 0 ? 1.0 : -1.0;
      (k % 2 == 0 ? c.p : c.q).push_back(sign * a);
    }
    return c;
  };
  static const HankelPQ c0 = make(0), c1 = make(1);
  return n == 0 ? c0 : c1;
}

// J_n (first) or Y_n (second kind) at far >= kBesselJSplit by Hankel's expansions.
Tensor hankel_values(int n, const Tensor& far, bool second) {
  const HankelPQ& c = hankel_pq(n);
  const Tensor v = div(kBesselJSplit, far);
  const Tensor u = mul(v, v);
  const Tensor p = horner(u, c.p), q = mul(horner(u, c.q), v);
  // n = 0: c = x - pi / 4, cos c = (cos x + sin x) / sqrt 2, sin c = (sin x - cos x) / sqrt 2;
  // n = 1: c = x - 3 pi / 4, cos c = (sin x - cos x) / sqrt 2, sin c = -(sin x + cos x) / sqrt 2.
  const Tensor cx = cos(far), sx = sin(far);
  const Tensor plus = add(sx, cx), minus = sub(sx, cx);
  const Tensor cos_c = n == 0 ? plus : minus, sin_c = n == 0 ? minus : neg(plus);
  const Tensor sum = second ? add(mul(p, sin_c), mul(q, cos_c)) : sub(mul(p, cos_c), mul(q, sin_c));
  // sqrt(2 / (pi x)) / sqrt 2 = 1 / sqrt(pi x), the roots taken apart: pi x overflows past 5.7e307.
  return mul(div(sum, sqrt(far)), 1 / std::sqrt(kPi));
}

// The node sums at |x| < kBesselJSplit: sum_j w_j cos(x t_j) (J0), sum_j w_j t_j sin(x t_j) (J1)
// and, for Y, the same with Neumann's weights a_j. Only the sums asked for are formed.
struct NodeSums {
  Tensor j0, j1, a0, a1;
};
NodeSums bessel_node_sums(const Tensor& x, bool need_cos, bool need_sin, bool neumann) {
  const BesselJNodes& c = bessel_j_nodes();
  NodeSums s;
  const auto accumulate = [](Tensor& sum, const Tensor& term, double weight) {
    sum = sum.defined() ? add(sum, mul(term, weight)) : mul(term, weight);
  };
  for (size_t j = 0; j < c.t.size(); ++j) {
    const Tensor xt = mul(x, c.t[j]);
    if (need_cos) {
      const Tensor cj = cos(xt);
      accumulate(s.j0, cj, c.w[j]);
      if (neumann) accumulate(s.a0, cj, c.a[j]);
    }
    if (need_sin) {
      const Tensor sj = sin(xt);
      accumulate(s.j1, sj, c.w[j] * c.t[j]);
      if (neumann) accumulate(s.a1, sj, c.a[j] * c.t[j]);
    }
  }
  return s;
}

// Below |x| = kBesselJSmall, J0 and J1 / x are their series' first two terms, 1 - x^2 / 4 and
// 1/2 - x^2 / 16 (the third, x^4 / 64 or / 384, is below float64's rounding there): J0(0) is
// exactly 1, J1 keeps the sign of a zero (as PyTorch's), and J1 / x loses no digits at a tiny or
// subnormal x, as a quotient would.
constexpr double kBesselJSmall = 1e-4;
Tensor bessel_j1_over_x_series(const Tensor& x) { return sub(0.5, mul(mul(x, x), 1.0 / 16)); }

// J_n(x), n = 0 (even) or 1 (odd): 0 at +-inf.
Tensor bessel_j_values(int n, const Tensor& x) {
  const Tensor a = abs(x);
  const Tensor near = clamp(a, std::nullopt, kBesselJSplit);
  const NodeSums s = bessel_node_sums(near, n == 0, n == 1, false);
  const Tensor far = clamp(a, kBesselJSplit, std::nullopt);
  Tensor value = where(lt(a, kBesselJSplit), n == 0 ? s.j0 : s.j1, hankel_values(n, far, false));
  value = where(isinf(a), 0.0, value);
  if (n == 1) value = where(lt(x, 0.0), neg(value), value);
  const Tensor small = n == 0 ? sub(1.0, mul(mul(x, x), 0.25)) : mul(x, bessel_j1_over_x_series(x));
  return where(lt(a, kBesselJSmall), small, value);
}

// Y_n(x) for x > 0: -inf at 0, NaN below (as PyTorch's), 0 at inf.
Tensor bessel_y_values(int n, const Tensor& x) {
  const Tensor near = clamp(x, 0.0, kBesselJSplit);
  const NodeSums s = bessel_node_sums(near, true, n == 1, true);
  // 2/pi (log(x / 2) + gamma), as log x + gamma - log 2 (half a subnormal x would round to 0); -inf
  // at 0, where Y1's product of it with J1 = 0 is set below.
  const Tensor l = mul(add(log(near), std::numbers::egamma - std::numbers::ln2), 2 / kPi);
  const Tensor series = n == 0 ? add(mul(l, s.j0), s.a0) : add(sub(mul(l, s.j1), div(mul(s.j0, 2 / kPi), near)), s.a1);
  const Tensor far = clamp(x, kBesselJSplit, std::nullopt);
  const Tensor value = where(lt(x, kBesselJSplit), series, where(isinf(x), 0.0, hankel_values(n, far, true)));
  return where(eq(x, 0.0), -kInf, where(logical_or(lt(x, 0.0), isnan(x)), kNaN, value));
}

// J1(x) / x given J1(x), 1/2 at 0 (its series near 0).
Tensor bessel_j1_over_x(const Tensor& x, const Tensor& j1) {
  return where(lt(abs(x), kBesselJSmall), bessel_j1_over_x_series(x), div(j1, x));
}

// sin(x) / x, 1 at 0 and 0 at +-inf.
Tensor spherical_j0_values(const Tensor& x) { return where(eq(x, 0.0), 1.0, where(isinf(x), 0.0, div(sin(x), x))); }

// d/dx sin(x) / x = (cos x - sin(x) / x) / x: below |x| = 0.5, where the difference cancels, its
// series sum_k (-1)^k 2k x^(2k - 1) / (2k + 1)!, 9 terms (the 10th is below 1e-22 there).
Tensor spherical_j0_slope(const Tensor& x, const Tensor& y) {
  static const std::vector<double> series = [] {
    std::vector<double> c;  // in u = x^2, times x
    double factorial = 6;   // (2k + 1)!
    for (int k = 1; k <= 9; ++k) {
      if (k > 1) factorial *= (2.0 * k) * (2.0 * k + 1);
      c.push_back((k % 2 == 0 ? 1.0 : -1.0) * 2 * k / factorial);
    }
    return c;
  }();
  const Tensor near = clamp(x, -0.5, 0.5);
  const Tensor small = mul(horner(mul(near, near), series), near);
  return where(lt(abs(x), 0.5), small, where(isinf(x), 0.0, div(sub(cos(x), y), x)));
}
}  // namespace

Tensor lgamma(const Tensor& x) {
  return special_unary("lgamma", x, lgamma_values, [](const Tensor& v, const Tensor&) { return digamma_values(v); });
}

Tensor digamma(const Tensor& x) {
  return special_unary("digamma", x, digamma_values,
                       [](const Tensor& v, const Tensor&) { return polygamma_values(1, v); });
}

Tensor polygamma(int64_t n, const Tensor& x) {
  if (n < 0) throw Error("polygamma: the order n must be >= 0, got " + std::to_string(n));
  // Past order 8 the factorials and powers of the series leave float32's range: computed in
  // float64.
  const std::optional<DType> compute = n > 8 ? std::optional<DType>(DType::Float64) : std::nullopt;
  return special_unary(
      "polygamma", x, [n](const Tensor& v) { return polygamma_values(n, v); },
      [n](const Tensor& v, const Tensor&) { return polygamma_values(n + 1, v); }, compute);
}

Tensor mvlgamma(const Tensor& x, int64_t p) {
  const char* op = "mvlgamma";
  ops::check_defined(op, x, "input");
  if (p < 1) throw Error("mvlgamma: the dimension p must be >= 1, got " + std::to_string(p));
  const double bound = (static_cast<double>(p) - 1) / 2;
  if (x.device().is_cpu() && x.numel() > 0) {
    const double smallest = amin(x.detach().to(DType::Float64), {}).item<double>();
    if (!(smallest > bound)) {
      throw Error(std::string(op) + ": every element must exceed (p - 1) / 2 = " + num_str(bound) + " for p = " +
                  std::to_string(p) + ", got " + num_str(smallest) + " (input " + shape_str(x.sizes()) + ")");
    }
  }
  const Tensor xf = x.is_floating_point() ? x : x.to(float_result(x.dtype()));
  Tensor sum = lgamma(xf);
  for (int64_t i = 1; i < p; ++i) sum = add(sum, lgamma(sub(xf, 0.5 * static_cast<double>(i))));
  return add(sum, static_cast<double>(p) * static_cast<double>(p - 1) / 4 * std::log(kPi));
}

Tensor erfinv(const Tensor& x) {
  if (std::optional<TensorList> c = autocast::cast_inputs("erfinv", {&x})) return erfinv((*c)[0]);
  return special_unary("erfinv", x, erfinv_values,
                       [](const Tensor&, const Tensor& y) { return mul(exp(mul(y, y)), std::sqrt(kPi) / 2); });
}

Tensor erfcx(const Tensor& x) {
  return special_unary("erfcx", x, erfcx_values, [](const Tensor& v, const Tensor& y) {
    return sub(mul(mul(v, y), 2.0), 2.0 * std::numbers::inv_sqrtpi);
  });
}

Tensor ndtr(const Tensor& x) {
  return special_unary("ndtr", x, ndtr_values,
                       [](const Tensor& v, const Tensor&) { return mul(exp(mul(mul(v, v), -0.5)), kInvSqrt2Pi); });
}

Tensor log_ndtr(const Tensor& x) {
  // pdf / cdf = sqrt(2 / pi) / erfcx(-x / sqrt 2): 0 far right, where erfcx overflows to inf.
  return special_unary("log_ndtr", x, log_ndtr_values, [](const Tensor& v, const Tensor&) {
    return div(kSqrt2 * std::numbers::inv_sqrtpi, erfcx_values(mul(v, -1.0 / kSqrt2)));
  });
}

Tensor ndtri(const Tensor& p) {
  return special_unary("ndtri", p, ndtri_values,
                       [](const Tensor&, const Tensor& y) { return div(exp(mul(mul(y, y), 0.5)), kInvSqrt2Pi); });
}

Tensor logit(const Tensor& x, std::optional<double> eps) {
  if (eps && !(*eps >= 0.0 && *eps <= 0.5)) {
    throw Error("logit: eps must be in [0, 0.5], got " + num_str(*eps));
  }
  const auto values = [eps](const Tensor& v) {
    const Tensor c = eps ? clamp(v, *eps, 1.0 - *eps) : v;
    return log(div(c, sub(1.0, c)));
  };
  const auto slope = [eps](const Tensor& v, const Tensor&) {
    const Tensor inside = div(1.0, mul(v, sub(1.0, v)));
    const double lo = eps.value_or(0.0), hi = 1.0 - eps.value_or(0.0);
    return where(logical_or(lt(v, lo), gt(v, hi)), eps ? 0.0 : kNaN, inside);
  };
  return special_unary("logit", x, values, slope);
}

Tensor sinc(const Tensor& x) {
  const auto values = [](const Tensor& v) {
    const Tensor angle = mul(v, kPi);
    return where(eq(v, 0.0), 1.0, div(sin(angle), angle));
  };
  const auto slope = [](const Tensor& v, const Tensor& y) {
    return where(eq(v, 0.0), 0.0, div(sub(cos(mul(v, kPi)), y), v));
  };
  return special_unary("sinc", x, values, slope);
}

Tensor entr(const Tensor& x) {
  const auto values = [](const Tensor& v) {
    const Tensor positive = neg(mul(v, log(v)));
    return where(isnan(v), v, where(gt(v, 0.0), positive, where(eq(v, 0.0), zeros_like(v), -kInf)));
  };
  return special_unary("entr", x, values, [](const Tensor& v, const Tensor&) { return neg(add(log(v), 1.0)); });
}

Tensor i0(const Tensor& x) {
  return special_unary(
      "i0", x, [](const Tensor& v) { return bessel_i_values(0, v, false); },
      [](const Tensor& v, const Tensor&) { return bessel_i_values(1, v, false); });
}

Tensor i1(const Tensor& x) {
  return special_unary(
      "i1", x, [](const Tensor& v) { return bessel_i_values(1, v, false); },
      [](const Tensor& v, const Tensor& y) { return bessel_i1_slope(v, y, false); });
}

Tensor i0e(const Tensor& x) {
  return special_unary(
      "i0e", x, [](const Tensor& v) { return bessel_i_values(0, v, true); },
      [](const Tensor& v, const Tensor& y) { return sub(bessel_i_values(1, v, true), mul(sign(v), y)); });
}

Tensor i1e(const Tensor& x) {
  return special_unary(
      "i1e", x, [](const Tensor& v) { return bessel_i_values(1, v, true); },
      [](const Tensor& v, const Tensor& y) { return bessel_i1_slope(v, y, true); });
}

Tensor modified_bessel_k0(const Tensor& x) {
  return special_unary(
      "modified_bessel_k0", x, [](const Tensor& v) { return bessel_k_values(0, v, false); },
      [](const Tensor& v, const Tensor&) { return neg(bessel_k_values(1, v, false)); });
}

Tensor modified_bessel_k1(const Tensor& x) {
  return special_unary(
      "modified_bessel_k1", x, [](const Tensor& v) { return bessel_k_values(1, v, false); },
      [](const Tensor& v, const Tensor& y) { return neg(add(bessel_k_values(0, v, false), div(y, v))); });
}

Tensor scaled_modified_bessel_k0(const Tensor& x) {
  return special_unary(
      "scaled_modified_bessel_k0", x, [](const Tensor& v) { return bessel_k_values(0, v, true); },
      [](const Tensor& v, const Tensor& y) { return sub(y, bessel_k_values(1, v, true)); });
}

Tensor scaled_modified_bessel_k1(const Tensor& x) {
  return special_unary(
      "scaled_modified_bessel_k1", x, [](const Tensor& v) { return bessel_k_values(1, v, true); },
      [](const Tensor& v, const Tensor& y) { return sub(mul(y, sub(1.0, div(1.0, v))), bessel_k_values(0, v, true)); });
}

Tensor bessel_j0(const Tensor& x) {
  return special_unary(
      "bessel_j0", x, [](const Tensor& v) { return bessel_j_values(0, v); },
      [](const Tensor& v, const Tensor&) { return neg(bessel_j_values(1, v)); });
}

Tensor bessel_j1(const Tensor& x) {
  return special_unary(
      "bessel_j1", x, [](const Tensor& v) { return bessel_j_values(1, v); },
      [](const Tensor& v, const Tensor& y) { return sub(bessel_j_values(0, v), bessel_j1_over_x(v, y)); });
}

Tensor bessel_y0(const Tensor& x) {
  return special_unary(
      "bessel_y0", x, [](const Tensor& v) { return bessel_y_values(0, v); },
      [](const Tensor& v, const Tensor&) { return neg(bessel_y_values(1, v)); });
}

Tensor bessel_y1(const Tensor& x) {
  return special_unary(
      "bessel_y1", x, [](const Tensor& v) { return bessel_y_values(1, v); },
      [](const Tensor& v, const Tensor& y) {
        // +inf at 0, where Y1 ~ -2 / (pi x)
        return where(eq(v, 0.0), kInf, sub(bessel_y_values(0, v), div(y, v)));
      });
}

Tensor spherical_bessel_j0(const Tensor& x) {
  return special_unary("spherical_bessel_j0", x, spherical_j0_values, spherical_j0_slope);
}

namespace {
// zeta(x, q), or with `slope` its derivative in x, with PyTorch's domain: inf at x = 1 and at the
// poles q = 0, -1, -2, ...; NaN for x < 1 and for q < 0 with x off the integers, where (q + k)^-x
// is not real. The slope is NaN there too, and wherever q < 0 (x is an integer there, so it has no
// derivative in x). With `negative` (some q may be < 0), an integer x = n and a q < 0 off the
// integers take three values at positive arguments: with K = ceil(-q) and r = 1 - (q + K) in (0,
// 1), the terms k < K are (-1)^n (r + j)^-n for j < K, so zeta(n, q) = (-1)^n [zeta(n, r) - zeta(n,
// 1 - q)] + zeta(n, q + K), at the same cost for any q.
Tensor zeta_values(const Tensor& x, const Tensor& q, bool negative, bool slope) {
  const Tensor pole = logical_or(eq(x, 1.0), logical_and(le(q, 0.0), eq(q, floor(q))));
  const Tensor undefined = logical_or(lt(x, 1.0), logical_and(lt(q, 0.0), ne(x, floor(x))));
  if (slope) {
    const Tensor v = hurwitz_zeta_upper(x, q, kZetaShift, true);
    return where(logical_or(logical_or(pole, undefined), lt(q, 0.0)), kNaN, v);
  }
  Tensor v;
  if (!negative) {
    v = hurwitz_zeta_upper(x, q, kZetaShift, false);
  } else {
    const Tensor below = lt(q, 0.0);
    const Tensor lifted = add(q, ceil(neg(q)));
    const Tensor main = hurwitz_zeta_upper(x, where(below, lifted, q), kZetaShift, false);
    const Tensor head = sub(hurwitz_zeta_upper(x, where(below, sub(1.0, lifted), 1.0), kZetaShift, false),
                            hurwitz_zeta_upper(x, where(below, sub(1.0, q), 1.0), kZetaShift, false));
    const Tensor signed_head = where(ne(fmod(x, 2.0), 0.0), neg(head), head);
    v = where(below, add(signed_head, main), main);
  }
  return where(lt(x, 1.0), kNaN, where(pole, kInf, where(undefined, kNaN, v)));
}

// zeta of x and q; `negative`: whether some q < 0 off the integers.
Tensor zeta_of(const Tensor& x, const Tensor& q, bool negative) {
  return special_binary(
      "zeta", x, q, [negative](const Tensor& v, const Tensor& w) { return zeta_values(v, w, negative, false); },
      // d/dx = -sum log(q + k) (q + k)^-x
      [negative](const Tensor& v, const Tensor& w) { return zeta_values(v, w, negative, true); },
      // d/dq = -x zeta(x + 1, q)
      [negative](const Tensor& v, const Tensor& w) {
        return mul(neg(v), zeta_values(add(v, 1.0), w, negative, false));
      });
}

// x log1p(y), 0 where x is 0 and y is not NaN.
Tensor xlog1py_values(const Tensor& x, const Tensor& y) {
  const Tensor product = mul(x, log1p(y));
  return where(logical_and(eq(x, 0.0), logical_not(isnan(y))), 0.0, product);
}
}  // namespace

Tensor zeta(const Tensor& x, const Tensor& q) {
  ops::check_defined("zeta", x, "first operand");
  ops::check_defined("zeta", q, "second operand");
  bool negative = false;
  if (q.numel() > 0 && q.is_floating_point()) {
    NoGradGuard no_grad;
    const Tensor qd = q.detach();
    negative = min(where(logical_and(isfinite(qd), ne(qd, floor(qd))), qd, 0.0)).item<double>() < 0;
  }
  return zeta_of(x, q, negative);
}

Tensor zeta(const Tensor& x, double q) {
  ops::check_defined("zeta", x, "first operand");
  const Tensor qt = full({}, q, TensorOptions(float_result(x.dtype()), x.device()));
  return zeta_of(x, qt, std::isfinite(q) && q < 0 && q != std::floor(q));
}

Tensor zeta(double x, const Tensor& q) {
  ops::check_defined("zeta", q, "second operand");
  return zeta(full({}, x, TensorOptions(float_result(q.dtype()), q.device())), q);
}

Tensor xlog1py(const Tensor& x, const Tensor& y) {
  return special_binary(
      "xlog1py", x, y, xlog1py_values,
      // d/dx = log1p(y), 0 where x is 0
      [](const Tensor& v, const Tensor& w) { return xlog1py_values(ne(v, 0.0).to(v.dtype()), w); },
      // d/dy = x / (1 + y)
      [](const Tensor& v, const Tensor& w) { return div(v, add(w, 1.0)); });
}

}  // namespace kiln
