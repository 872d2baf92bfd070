// Op table rows of the polynomial family (core/ops/polynomial.h): each of torch.special's twelve
// orthogonal polynomials at an int64 degree tensor broadcast against x (degrees from -1 to 13, so
// Chebyshev's rows cross degree 8, where their closed forms take over, and x inside and outside
// [-1, 1]), and the one-degree overloads at a low and a high degree. The references are long double
// explicit sums of the polynomials' power series, not their recurrences: U_n = sum (-1)^k C(n - k,
// k) (2x)^(n - 2k), from which T, V and W follow; H and He by their sums over n! / (k! (n - 2k)!),
// L by sum C(n, k) (-x)^k / k! and P by sum C(n, k)^2 ((x - 1) / 2)^(n - k) ((x + 1) / 2)^k.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

using Real = long double;

Real choose(int64_t n, int64_t k) {
  Real c = 1;
  for (int64_t i = 1; i <= k; ++i) c = c * static_cast<Real>(n - k + i) / static_cast<Real>(i);
  return c;
}

Real factorial(int64_t n) {
  Real f = 1;
  for (int64_t i = 2; i <= n; ++i) f *= static_cast<Real>(i);
  return f;
}

// Chebyshev's U_n by its explicit sum (0 for n < 0).
Real cheb_u(Real x, int64_t n) {
  Real s = 0;
  for (int64_t k = 0; 2 * k <= n; ++k) s += ((k % 2) ? -1 : 1) * choose(n - k, k) * std::pow(2 * x, n - 2 * k);
  return s;
}

Real cheb_t(Real x, int64_t n) {
  if (n < 0) return 0;
  if (n == 0) return 1;
  if (n == 1) return x;
  return (cheb_u(x, n) - cheb_u(x, n - 2)) / 2;
}

Real cheb_v(Real x, int64_t n) { return n < 0 ? 0 : cheb_u(x, n) - cheb_u(x, n - 1); }
Real cheb_w(Real x, int64_t n) { return n < 0 ? 0 : cheb_u(x, n) + cheb_u(x, n - 1); }

Real hermite_h(Real x, int64_t n) {
  Real s = 0;
  for (int64_t k = 0; 2 * k <= n; ++k) {
    s += ((k % 2) ? -1 : 1) * std::pow(2 * x, n - 2 * k) / (factorial(k) * factorial(n - 2 * k));
  }
  return n < 0 ? 0 : factorial(n) * s;
}

Real hermite_he(Real x, int64_t n) {
  Real s = 0;
  for (int64_t k = 0; 2 * k <= n; ++k) {
    s += ((k % 2) ? -1 : 1) * std::pow(x, n - 2 * k) / (factorial(k) * factorial(n - 2 * k) * std::pow(2.0L, k));
  }
  return n < 0 ? 0 : factorial(n) * s;
}

Real laguerre(Real x, int64_t n) {
  Real s = 0;
  for (int64_t k = 0; k <= n; ++k) s += choose(n, k) * std::pow(-x, k) / factorial(k);
  return s;
}

Real legendre(Real x, int64_t n) {
  Real s = 0;
  for (int64_t k = 0; k <= n; ++k)
    s += choose(n, k) * choose(n, k) * std::pow((x - 1) / 2, n - k) * std::pow((x + 1) / 2, k);
  return s;
}

using Poly = std::function<Real(Real, int64_t)>;
using TensorOp = Tensor (*)(const Tensor&, const Tensor&);
using FixedOp = Tensor (*)(const Tensor&, int64_t);

// int64 degrees uniform in [lo, hi].
Gen degrees(int64_t lo, int64_t hi) {
  return [=](const Shape& s, DType, Device d, uint64_t seed) {
    const Tensor u = rnd_range(s, DType::Float64, Device::cpu(), seed, static_cast<double>(lo), hi + 0.999);
    return floor(u).to(DType::Int64).to(d);
  };
}

struct Family {
  std::string name;
  TensorOp op;
  FixedOp fixed;
  Poly ref;
  double lo, hi;  // the x range
  int64_t top;    // the highest degree (float16's 65504 holds H to 9 and He to 12 there)
  bool shifted = false;
  std::map<DType, Tolerance> tolerance = {};
};

}  // namespace

void add_polynomial_rows(std::vector<OpRow>& rows) {
  // H's values in float32 (and float16, computed in float32) err by float32 ulps of the
  // recurrence's largest term, 2k H_(k-1) (8e4 at degree 9 in [-1.5, 1.5]), not of the value: 4e-3
  // measured near a root of H_9, so atol 1e-2 there.
  const std::vector<Family> families = {
      {"chebyshev_polynomial_t", chebyshev_polynomial_t, chebyshev_polynomial_t, cheb_t, -1.3, 1.3, 13},
      {"chebyshev_polynomial_u", chebyshev_polynomial_u, chebyshev_polynomial_u, cheb_u, -1.3, 1.3, 13},
      {"chebyshev_polynomial_v", chebyshev_polynomial_v, chebyshev_polynomial_v, cheb_v, -1.3, 1.3, 13},
      {"chebyshev_polynomial_w", chebyshev_polynomial_w, chebyshev_polynomial_w, cheb_w, -1.3, 1.3, 13},
      {"shifted_chebyshev_polynomial_t", shifted_chebyshev_polynomial_t, shifted_chebyshev_polynomial_t, cheb_t, -0.15,
       1.15, 13, true},
      {"shifted_chebyshev_polynomial_u", shifted_chebyshev_polynomial_u, shifted_chebyshev_polynomial_u, cheb_u, -0.15,
       1.15, 13, true},
      {"shifted_chebyshev_polynomial_v", shifted_chebyshev_polynomial_v, shifted_chebyshev_polynomial_v, cheb_v, -0.15,
       1.15, 13, true},
      {"shifted_chebyshev_polynomial_w", shifted_chebyshev_polynomial_w, shifted_chebyshev_polynomial_w, cheb_w, -0.15,
       1.15, 13, true},
      {"hermite_polynomial_h",
       hermite_polynomial_h,
       hermite_polynomial_h,
       hermite_h,
       -1.5,
       1.5,
       9,
       false,
       {{DType::Float32, {1e-2, 1e-5}}, {DType::Float16, {1e-2, 1e-3}}}},
      {"hermite_polynomial_he", hermite_polynomial_he, hermite_polynomial_he, hermite_he, -2.0, 2.0, 12},
      {"laguerre_polynomial_l", laguerre_polynomial_l, laguerre_polynomial_l, laguerre, -1.0, 8.0, 13},
      {"legendre_polynomial_p", legendre_polynomial_p, legendre_polynomial_p, legendre, -1.3, 1.3, 13},
  };
  uint64_t seed = 9100;
  for (const Family& f : families) {
    const Poly poly = f.ref;
    const bool shifted = f.shifted;
    auto reference = [poly, shifted](const Values& v) {
      const Real x = shifted ? 2 * static_cast<Real>(v[0]) - 1 : static_cast<Real>(v[0]);
      return static_cast<double>(poly(x, static_cast<int64_t>(v[1])));
    };
    const TensorOp op = f.op;
    OpRow r = make_row(
        f.name, kFloatTypes, binary_samples(seed, positive(f.lo, f.hi), degrees(-1, f.top)),
        [op](const TensorList& x) { return TensorList{op(x[0], x[1])}; }, ref(reference), {0}, same_dtype);
    r.tolerance = f.tolerance;
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    r.errors = {
        {"shapes do not broadcast",
         [op] {
           op(zeros({2, 3}), zeros({4}));
         },
         {f.name, "[2, 3]", "[4]"}},
        {"undefined x", [op] { op(Tensor(), zeros({2})); }, {f.name, "undefined"}},
        {"undefined n", [op] { op(zeros({2}), Tensor()); }, {f.name, "undefined"}},
    };
    if (f.name.find("chebyshev") == std::string::npos) {
      r.errors.push_back({"degree past 2^20", [op] { op(zeros({2}), full({2}, 2e6)); }, {f.name, "2000000", "2^20"}});
    }
    rows.push_back(std::move(r));
    seed += 10;
    // The one-degree overload, at a degree inside the recurrence and one past Chebyshev's 8.
    for (const int64_t n : {int64_t{3}, std::min<int64_t>(11, f.top)}) {
      const FixedOp fixed = f.fixed;
      auto fixed_ref = [poly, shifted, n](const Values& v) {
        const Real x = shifted ? 2 * static_cast<Real>(v[0]) - 1 : static_cast<Real>(v[0]);
        return static_cast<double>(poly(x, n));
      };
      OpRow u = make_row(
          f.name + " n=" + std::to_string(n), kFloatTypes, unary_samples(seed, positive(f.lo, f.hi)),
          [fixed, n](const TensorList& x) { return TensorList{fixed(x[0], n)}; }, ref(fixed_ref), {0}, same_dtype);
      u.tolerance = f.tolerance;
      u.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
      u.errors = {undefined_input(f.name, [fixed](const Tensor& x) { return fixed(x, 2); })};
      rows.push_back(std::move(u));
      seed += 10;
    }
  }
}

}  // namespace kiln::test
