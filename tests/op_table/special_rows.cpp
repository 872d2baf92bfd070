// Op table rows of the special family (core/ops/special.h): lgamma, digamma and polygamma on both
// sides of 0.5 (the upper recurrence and the reflection), mvlgamma, erfinv, erfcx on both sides of
// its series' start, ndtr, log_ndtr in both of its pieces, ndtri, logit with and without eps, sinc,
// entr, xlog1py, zeta (q > 0, q < 0 and q = 1), and the modified Bessel functions: i0, i1, i0e and
// i1e on both sides of |x| = 20, where their asymptotic series take over, the K ones across their
// three pieces, J0, J1, Y0 and Y1 on both sides of |x| = 25, and spherical_bessel_j0. The
// references are long double loops built otherwise than kiln's: std::lgamma, a digamma shifted to
// 30, zeta and polygamma as their defining sum to 2000 terms with a short Euler-Maclaurin tail,
// erfinv and ndtri by bisection on erf, erfc, the modified Bessel functions by their integrals, J
// and Y by the standard library's. Inputs stay 0.1 away from the poles.
#include <cmath>
#include <numbers>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

using Real = long double;
constexpr Real kPi = std::numbers::pi_v<Real>;

// digamma: shifted up past 30 by psi(x) = psi(x + 1) - 1 / x, then the asymptotic series; below 0.5
// the reflection psi(x) = psi(1 - x) - pi / tan(pi x).
Real digamma_ref(Real x) {
  if (x < 0.5L) return digamma_ref(1 - x) - kPi / std::tan(kPi * x);
  Real shift = 0;
  while (x < 30) shift -= 1 / x++;
  const Real u = 1 / (x * x);
  return shift + std::log(x) - 1 / (2 * x) - u * (1.0L / 12 - u * (1.0L / 120 - u * (1.0L / 252 - u / 240)));
}

// zeta(x > 1, q) = sum_k (q + k)^-x: 2000 terms (a q < 0 among them), then the tail's integral,
// half its first term and the first derivative correction.
Real zeta_ref(Real x, Real q) {
  Real sum = 0;
  constexpr int kTerms = 2000;
  for (int k = 0; k < kTerms; ++k) sum += std::pow(q + k, -x);
  const Real a = q + kTerms;
  return sum + std::pow(a, 1 - x) / (x - 1) + std::pow(a, -x) / 2 + x * std::pow(a, -x - 1) / 12;
}

// polygamma(n >= 1, x > 0) = (-1)^(n+1) n! zeta(n + 1, x).
Real polygamma_ref(int n, Real x) {
  return (n % 2 == 1 ? 1 : -1) * std::tgamma(static_cast<Real>(n + 1)) * zeta_ref(n + 1, x);
}

// The root of a decreasing-or-increasing f on [lo, hi] by bisection (f(lo) and f(hi) bracket 0).
template <typename F>
Real bisect(F f, Real lo, Real hi) {
  const bool rising = f(hi) > f(lo);
  for (int i = 0; i < 200; ++i) {
    const Real mid = (lo + hi) / 2;
    ((f(mid) > 0) == rising ? hi : lo) = mid;
  }
  return (lo + hi) / 2;
}

Real erfinv_ref(Real x) {
  const Real a = std::fabs(x);
  // Near 1 the complement 1 - a is matched with erfc, where it keeps its digits.
  const Real z = a < 0.5L ? bisect([a](Real t) { return std::erf(t) - a; }, 0, 10)
                          : bisect([a](Real t) { return std::erfc(t) - (1 - a); }, 0, 30);
  return x < 0 ? -z : z;
}

Real ndtr_ref(Real x) { return std::erfc(-x / std::numbers::sqrt2_v<Real>) / 2; }

Real ndtri_ref(Real p) {
  if (p < 0.5L) return bisect([p](Real t) { return std::log(ndtr_ref(t)) - std::log(p); }, -40, 0);
  return -bisect([q = 1 - p](Real t) { return std::log(ndtr_ref(t)) - std::log(q); }, -40, 0);
}

// I_n(x) = 1/pi int_0^pi e^(x cos t) cos(n t) dt (times e^-|x| when scaled), by the trapezoidal
// rule, which for this periodic integrand converges faster than any power of the step: 400 steps
// are exact to long double's rounding for |x| up to some 200.
Real bessel_i_ref(int n, Real x, bool scaled) {
  constexpr int kSteps = 400;
  const Real shift = scaled ? std::fabs(x) : 0;
  Real sum = 0;
  for (int j = 0; j <= kSteps; ++j) {
    const Real t = kPi * j / kSteps;
    const Real f = std::exp(x * std::cos(t) - shift) * std::cos(n * t);
    sum += (j == 0 || j == kSteps) ? f / 2 : f;
  }
  return sum / kSteps;
}

// e^x K_n(x) = int_0^inf exp(-x (cosh s - 1)) cosh(n s) ds by the trapezoidal rule, much finer and
// longer than kiln's (steps of 0.01 to 12, where the integrand is below rounding for x >= 0.05);
// times e^-x unless scaled.
Real bessel_k_ref(int n, Real x, bool scaled) {
  constexpr Real kStep = 0.01L;
  Real sum = 0;
  for (int j = 0; j <= 1200; ++j) {
    const Real s = j * kStep;
    sum += (j == 0 ? 0.5L : 1.0L) * std::exp(-x * (std::cosh(s) - 1)) * std::cosh(n * s);
  }
  return sum * kStep * (scaled ? 1 : std::exp(-x));
}

// J_n (n = 0, 1) of either sign through the standard library's (defined for x >= 0; J0 is even,
// J1 odd), and Y_n for x > 0. libstdc++ evaluates them by series and continued fractions (Steed's
// method) in long double: a method of its own, not kiln's integral and Neumann's series.
Real bessel_j_ref(int n, Real x) {
  const Real v = std::cyl_bessel_jl(static_cast<Real>(n), std::fabs(x));
  return n == 1 && x < 0 ? -v : v;
}
Real bessel_y_ref(int n, Real x) { return std::cyl_neumannl(static_cast<Real>(n), x); }

// The integers 0, -1, ..., -20: the gamma family's poles that normal draws reach.
Values poles() {
  Values v;
  for (int k = 0; k >= -20; --k) v.push_back(k);
  return v;
}

// Uniform values in [lo, hi] at least `margin` from every point of `kinks`.
Gen uniform_avoiding(double lo, double hi, Values kinks, double margin) {
  return [=](const Shape& s, DType t, Device d, uint64_t seed) {
    Values v = values(rnd_range(s, DType::Float64, Device::cpu(), seed, lo, hi));
    for (double& x : v) {
      for (double k : kinks) {
        if (std::fabs(x - k) < margin) x = x < k ? k - margin : k + margin;
      }
    }
    return from_values(v, s).to(t).to(d);
  };
}

DType float_or_default(DType t) { return is_floating(t) ? t : DType::Float32; }

struct Unary {
  std::string name;
  std::vector<DType> dtypes;
  Gen gen;
  std::function<Tensor(const Tensor&)> op;
  std::function<Real(Real)> ref;
  std::vector<ErrorCase> errors = {};  // besides the undefined input
};

// Magnitudes uniform in [lo, hi], every other one negated.
Gen both_signs(double lo, double hi) {
  return [=](const Shape& s, DType t, Device d, uint64_t seed) {
    Values v = values(rnd_range(s, DType::Float64, Device::cpu(), seed, lo, hi));
    for (size_t i = 0; i < v.size(); i += 2) v[i] = -v[i];
    return from_values(v, s).to(t).to(d);
  };
}

void add_unary_rows(std::vector<OpRow>& rows) {
  // Here, not at namespace scope: the table is built while other files' statics initialize.
  const std::vector<DType> bessel_floats{DType::Float32, DType::BFloat16, DType::Float64};
  const std::vector<Unary> unary = {
      {"lgamma", kAllNumeric, positive(0.1, 12.0), [](const Tensor& x) { return lgamma(x); },
       [](Real x) { return std::lgamma(x); }},
      {"lgamma x < 0.5", kFloatTypes, avoiding(poles(), 0.1, 5.0), [](const Tensor& x) { return lgamma(x); },
       [](Real x) { return std::lgamma(x); }},
      {"digamma", kAllNumeric, positive(0.1, 12.0), [](const Tensor& x) { return digamma(x); }, digamma_ref},
      {"digamma x < 0.5", kFloatTypes, avoiding(poles(), 0.1, 5.0), [](const Tensor& x) { return digamma(x); },
       digamma_ref},
      {"polygamma n=1",
       kAllNumeric,
       positive(0.3, 12.0),
       [](const Tensor& x) { return polygamma(1, x); },
       [](Real x) { return polygamma_ref(1, x); },
       {{"negative order", [] { polygamma(-1, zeros({2})); }, {"polygamma", "n", "-1"}}}},
      {"polygamma n=2", kFloatTypes, positive(0.3, 12.0), [](const Tensor& x) { return polygamma(2, x); },
       [](Real x) { return polygamma_ref(2, x); }},
      {"polygamma n=3", kFloatTypes, positive(0.5, 12.0), [](const Tensor& x) { return polygamma(3, x); },
       [](Real x) { return polygamma_ref(3, x); }},
      // Past order 8 the values are computed in float64 whatever the dtype. From 3 up: below, the
      // values reach 1e7 and the gradcheck's central differences of their sum lose the gradient.
      {"polygamma n=11",
       {DType::Float32, DType::Float64},
       positive(3.0, 6.0),
       [](const Tensor& x) { return polygamma(11, x); },
       [](Real x) { return polygamma_ref(11, x); }},
      {"erfinv", kFloatTypes, positive(-0.999, 0.999), [](const Tensor& x) { return erfinv(x); }, erfinv_ref},
      // Both sides of x = 8, where the asymptotic series takes over.
      {"erfcx", kAllNumeric, positive(-2.0, 14.0), [](const Tensor& x) { return erfcx(x); },
       [](Real x) { return std::exp(x * x) * std::erfc(x); }},
      {"ndtr", kAllNumeric, normal(3.0), [](const Tensor& x) { return ndtr(x); }, ndtr_ref},
      // Down to about -25: through erfcx left of -1, log1p of the complement to the right.
      {"log_ndtr", kFloatTypes, normal(8.0), [](const Tensor& x) { return log_ndtr(x); },
       [](Real x) { return std::log(ndtr_ref(x)); }},
      {"ndtri", kFloatTypes, positive(0.002, 0.998), [](const Tensor& x) { return ndtri(x); }, ndtri_ref},
      {"logit", kFloatTypes, positive(0.03, 0.97), [](const Tensor& x) { return logit(x); },
       [](Real x) { return std::log(x / (1 - x)); }},
      // Inputs on both sides of each clamp bound, away from it.
      {"logit eps=0.1",
       kFloatTypes,
       uniform_avoiding(0.0, 1.0, {0.1, 0.9}, 0.02),
       [](const Tensor& x) { return logit(x, 0.1); },
       [](Real x) {
         const Real c = std::clamp(x, 0.1L, 0.9L);
         return std::log(c / (1 - c));
       },
       {{"eps above 0.5", [] { logit(zeros({2}), 0.7); }, {"logit", "eps", "0.7"}},
        {"negative eps", [] { logit(zeros({2}), -0.1); }, {"logit", "eps", "-0.1"}}}},
      {"sinc", kAllNumeric, normal(2.0), [](const Tensor& x) { return sinc(x); },
       [](Real x) { return x == 0 ? 1 : std::sin(kPi * x) / (kPi * x); }},
      {"entr", kFloatTypes, positive(0.05, 3.0), [](const Tensor& x) { return entr(x); },
       [](Real x) { return -x * std::log(x); }},
      // i0 and i1 on each side of |x| = 20, where the asymptotic series takes over, in separate
      // rows: the gradcheck's central differences of a sum whose terms span 1 to 1e10 lose the
      // small gradients. They pass float16's largest value at 13.3: its rows stay within 12.
      {"i0", kAllNumeric, positive(-12.0, 12.0), [](const Tensor& x) { return i0(x); },
       [](Real x) { return bessel_i_ref(0, x, false); }},
      {"i0 |x| > 20", bessel_floats, both_signs(20.5, 24.0), [](const Tensor& x) { return i0(x); },
       [](Real x) { return bessel_i_ref(0, x, false); }},
      {"i1", kAllNumeric, positive(-12.0, 12.0), [](const Tensor& x) { return i1(x); },
       [](Real x) { return bessel_i_ref(1, x, false); }},
      {"i1 |x| > 20", bessel_floats, both_signs(20.5, 24.0), [](const Tensor& x) { return i1(x); },
       [](Real x) { return bessel_i_ref(1, x, false); }},
      // K on (0, 40]: all three of its pieces (the series to 1, the integral to 20, the asymptotic
      // series beyond). Integers give 1 .. 10.
      {"modified_bessel_k0", kAllNumeric, positive(0.05, 40.0), [](const Tensor& x) { return modified_bessel_k0(x); },
       [](Real x) { return bessel_k_ref(0, x, false); }},
      {"modified_bessel_k1", kAllNumeric, positive(0.05, 40.0), [](const Tensor& x) { return modified_bessel_k1(x); },
       [](Real x) { return bessel_k_ref(1, x, false); }},
      {"scaled_modified_bessel_k0", kAllNumeric, positive(0.05, 40.0),
       [](const Tensor& x) { return scaled_modified_bessel_k0(x); }, [](Real x) { return bessel_k_ref(0, x, true); }},
      {"scaled_modified_bessel_k1", kAllNumeric, positive(0.05, 40.0),
       [](const Tensor& x) { return scaled_modified_bessel_k1(x); }, [](Real x) { return bessel_k_ref(1, x, true); }},
      // J and Y on each side of |x| = 25, where Hankel's expansions take over; Y from 0.1, where
      // Y1 is about -6.5 (integer inputs give 1 .. 10).
      {"bessel_j0", kAllNumeric, positive(-24.5, 24.5), [](const Tensor& x) { return bessel_j0(x); },
       [](Real x) { return bessel_j_ref(0, x); }},
      {"bessel_j0 |x| > 25", bessel_floats, both_signs(25.5, 60.0), [](const Tensor& x) { return bessel_j0(x); },
       [](Real x) { return bessel_j_ref(0, x); }},
      {"bessel_j1", kAllNumeric, positive(-24.5, 24.5), [](const Tensor& x) { return bessel_j1(x); },
       [](Real x) { return bessel_j_ref(1, x); }},
      {"bessel_j1 |x| > 25", bessel_floats, both_signs(25.5, 60.0), [](const Tensor& x) { return bessel_j1(x); },
       [](Real x) { return bessel_j_ref(1, x); }},
      {"bessel_y0", kAllNumeric, positive(0.1, 24.5), [](const Tensor& x) { return bessel_y0(x); },
       [](Real x) { return bessel_y_ref(0, x); }},
      {"bessel_y0 x > 25", bessel_floats, positive(25.5, 60.0), [](const Tensor& x) { return bessel_y0(x); },
       [](Real x) { return bessel_y_ref(0, x); }},
      {"bessel_y1", kAllNumeric, positive(0.1, 24.5), [](const Tensor& x) { return bessel_y1(x); },
       [](Real x) { return bessel_y_ref(1, x); }},
      {"bessel_y1 x > 25", bessel_floats, positive(25.5, 60.0), [](const Tensor& x) { return bessel_y1(x); },
       [](Real x) { return bessel_y_ref(1, x); }},
      // Both sides of |x| = 0.5, where the gradient's series gives way to its closed form.
      {"spherical_bessel_j0", kAllNumeric, positive(-12.0, 12.0),
       [](const Tensor& x) { return spherical_bessel_j0(x); }, [](Real x) { return x == 0 ? 1 : std::sin(x) / x; }},
      {"spherical_bessel_j0 |x| < 1", kFloatTypes, positive(-1.0, 1.0),
       [](const Tensor& x) { return spherical_bessel_j0(x); }, [](Real x) { return x == 0 ? 1 : std::sin(x) / x; }},
      // Both signs, both sides of |x| = 20 and far out.
      {"i0e", kAllNumeric, positive(-80.0, 80.0), [](const Tensor& x) { return i0e(x); },
       [](Real x) { return bessel_i_ref(0, x, true); }},
      {"i1e", kAllNumeric, positive(-80.0, 80.0), [](const Tensor& x) { return i1e(x); },
       [](Real x) { return bessel_i_ref(1, x, true); }},
  };
  uint64_t seed = 7000;
  for (const Unary& u : unary) {
    auto op = u.op;
    auto fn = u.ref;
    OpRow r = make_row(
        u.name, u.dtypes, unary_samples(seed, u.gen), [op](const TensorList& x) { return TensorList{op(x[0])}; },
        ref([fn](const Values& v) { return static_cast<double>(fn(v[0])); }), {0}, float_or_default);
    // Integer inputs give float32 values computed in float32.
    for (DType t : {DType::Int32, DType::Int64, DType::UInt8}) r.tolerance[t] = default_tolerance(DType::Float32);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    const std::string op_name = u.name.substr(0, u.name.find(' '));
    r.errors = u.errors;
    r.errors.push_back(undefined_input(op_name, op));
    rows.push_back(std::move(r));
    seed += 50;
  }
}

void add_remaining_special_rows(std::vector<OpRow>& rows) {
  {
    OpRow r = make_row(
        "mvlgamma p=3", kFloatTypes, unary_samples(7900, positive(1.2, 9.0)),
        [](const TensorList& x) { return TensorList{mvlgamma(x[0], 3)}; }, ref([](const Values& v) {
          return 3.0 * 2.0 / 4.0 * std::log(std::numbers::pi) + std::lgamma(v[0]) + std::lgamma(v[0] - 0.5) +
                 std::lgamma(v[0] - 1.0);
        }),
        {0}, same_dtype);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    r.errors = {
        {"p = 0", [] { mvlgamma(full({2}, 3.0), 0); }, {"mvlgamma", "p", "0"}},
        {"an element at (p - 1) / 2",
         [] {
           mvlgamma(tensor<double>({3.0, 1.0, 2.0}), 3);
         },
         {"mvlgamma", "(p - 1) / 2 = 1", "got 1", "[3]"}},
        undefined_input("mvlgamma", [](const Tensor& x) { return mvlgamma(x, 2); }),
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "zeta", kFloatTypes, binary_samples(7960, positive(1.1, 6.0), positive(0.5, 5.0)),
        [](const TensorList& x) { return TensorList{zeta(x[0], x[1])}; },
        ref([](const Values& v) { return static_cast<double>(zeta_ref(v[0], v[1])); }), {0, 1}, same_dtype);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    r.errors = {
        {"shapes do not broadcast",
         [] {
           zeta(zeros({2, 3}), zeros({4}));
         },
         {"zeta", "[2, 3]", "[4]"}},
        {"undefined q", [] { zeta(zeros({2}), Tensor()); }, {"zeta", "undefined"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // q < 0 off the integers, with integer x (the only real values there): differentiable in q
    // alone.
    const Gen integers = [](const Shape& s, DType t, Device d, uint64_t seed) {
      return floor(rnd_range(s, DType::Float64, Device::cpu(), seed, 2.0, 4.999)).to(t).to(d);
    };
    OpRow r = make_row(
        "zeta q < 0", kFloatTypes, binary_samples(7970, integers, uniform_avoiding(-3.9, -0.1, poles(), 0.15)),
        [](const TensorList& x) { return TensorList{zeta(x[0], x[1])}; },
        ref([](const Values& v) { return static_cast<double>(zeta_ref(v[0], v[1])); }), {1}, same_dtype);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "zeta q=1", kFloatTypes, unary_samples(7980, positive(1.1, 8.0)),
        [](const TensorList& x) { return TensorList{zeta(x[0], 1.0)}; },
        ref([](const Values& v) { return static_cast<double>(zeta_ref(v[0], 1)); }), {0}, same_dtype);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    r.errors = {undefined_input("zeta", [](const Tensor& x) { return zeta(x, 1.0); })};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "xlog1py", kFloatTypes, binary_samples(7950, nonzero(), positive(-0.8, 3.0)),
        [](const TensorList& x) { return TensorList{xlog1py(x[0], x[1])}; },
        ref([](const Values& v) { return v[0] * std::log1p(v[1]); }), {0, 1}, same_dtype);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    r.errors = {
        {"shapes do not broadcast",
         [] {
           xlog1py(zeros({2, 3}), zeros({4}));
         },
         {"xlog1py", "[2, 3]", "[4]"}},
        {"undefined operand", [] { xlog1py(Tensor(), zeros({2})); }, {"xlog1py", "undefined"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace

void add_special_rows(std::vector<OpRow>& rows) {
  add_unary_rows(rows);
  add_remaining_special_rows(rows);
}

}  // namespace kiln::test
