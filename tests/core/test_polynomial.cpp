// Hand tests of core/ops/polynomial.h beyond the op table's rows: the exact values at x = +-1 and
// 0, the degree's truncation and its NaN, Chebyshev's closed forms far past the recurrence (a
// degree of 10^9, values next to float64's overflow), and the gradients at the points where their
// identities are known in closed form.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/kiln.h"
#include "tests/core/pointwise_grads.h"

using namespace kiln;
using test::grads;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");

Tensor doubles(std::vector<double> v) { return tensor(v); }

std::vector<double> vals(const Tensor& t) { return t.to(DType::Float64).to_vector_double(); }

double value(const Tensor& t) { return t.to(DType::Float64).item<double>(); }

// A float64 0-d tensor.
Tensor at(double v) { return full({}, v, DType::Float64); }

double sign_of_power(int64_t n) { return n % 2 ? -1.0 : 1.0; }

// Chebyshev's U_n by its recurrence in long double, the reference for the closed forms.
long double cheb_u_ref(long double x, int64_t n) {
  long double prev = 1, cur = 2 * x;
  if (n == 0) return prev;
  for (int64_t k = 1; k < n; ++k) {
    const long double next = 2 * x * cur - prev;
    prev = cur;
    cur = next;
  }
  return cur;
}

}  // namespace

TEST_CASE("polynomial: exact values at x = 1, -1 and 0 below and past the recurrence's degree 8", "[polynomial]") {
  const Tensor ends = doubles({1.0, -1.0});
  for (int64_t n : {0, 1, 2, 5, 8, 9, 12, 31, 64}) {
    INFO("n = " << n);
    const double s = sign_of_power(n), dn = static_cast<double>(n);
    CHECK(vals(chebyshev_polynomial_t(ends, n)) == std::vector<double>{1.0, s});
    CHECK(vals(chebyshev_polynomial_u(ends, n)) == std::vector<double>{dn + 1, s * (dn + 1)});
    CHECK(vals(chebyshev_polynomial_v(ends, n)) == std::vector<double>{1.0, s * (2 * dn + 1)});
    CHECK(vals(chebyshev_polynomial_w(ends, n)) == std::vector<double>{2 * dn + 1, s});
    // The shifted forms at 1 and 0 are the plain ones at 1 and -1.
    CHECK(vals(shifted_chebyshev_polynomial_w(doubles({1.0, 0.0}), n)) == std::vector<double>{2 * dn + 1, s});
    CHECK(vals(legendre_polynomial_p(ends, n)) == std::vector<double>{1.0, s});
    CHECK(value(laguerre_polynomial_l(doubles({0.0}), n)) == 1.0);
    // H_n(0) = (-1)^(n/2) n! / (n/2)! and He_n(0) = (-1)^(n/2) (n - 1)!! for even n, 0 for odd.
    if (n <= 12) {
      double h = n % 2 ? 0.0 : 1.0, he = h;
      for (int64_t k = n; k > n / 2 && n % 2 == 0; --k) h *= static_cast<double>(k);
      for (int64_t k = n - 1; k > 0 && n % 2 == 0; k -= 2) he *= static_cast<double>(k);
      const double sh = (n / 2) % 2 ? -1.0 : 1.0;
      CHECK(value(hermite_polynomial_h(doubles({0.0}), n)) == sh * h);
      CHECK(value(hermite_polynomial_he(doubles({0.0}), n)) == sh * he);
    }
  }
}

TEST_CASE("polynomial: the degree is truncated toward 0, negative gives 0, NaN and inf give NaN", "[polynomial]") {
  const Tensor x = full({6}, 0.3, DType::Float64);
  const Tensor n = doubles({2.7, -0.5, -3.0, kNaN, kInf, -kInf});
  using ByTensor = Tensor (*)(const Tensor&, const Tensor&);
  using ByInt = Tensor (*)(const Tensor&, int64_t);
  const std::vector<std::pair<ByTensor, ByInt>> ops = {
      {chebyshev_polynomial_t, chebyshev_polynomial_t}, {chebyshev_polynomial_u, chebyshev_polynomial_u},
      {hermite_polynomial_h, hermite_polynomial_h},     {laguerre_polynomial_l, laguerre_polynomial_l},
      {legendre_polynomial_p, legendre_polynomial_p},
  };
  for (const auto& [f, fixed] : ops) {
    const std::vector<double> v = vals(f(x, n));
    CHECK(v[0] == value(fixed(at(0.3), 2)));
    CHECK(v[1] == 1.0);
    CHECK(v[2] == 0.0);
    CHECK(std::isnan(v[3]));
    CHECK(std::isnan(v[4]));
    CHECK(std::isnan(v[5]));
    CHECK(value(fixed(at(0.3), -1)) == 0.0);
  }
  // The result's dtype is x's and n's promoted float dtype.
  CHECK(chebyshev_polynomial_t(full({2}, 0.5, DType::Float32), tensor<int64_t>({3, 4})).dtype() == DType::Float32);
  CHECK(chebyshev_polynomial_t(full({2}, 0.5, DType::Float32), doubles({3, 4})).dtype() == DType::Float64);
  CHECK(legendre_polynomial_p(tensor<int64_t>({1, 2}), 3).dtype() == DType::Float32);
  CHECK(vals(legendre_polynomial_p(tensor<int64_t>({1, 2}), 3)) == std::vector<double>{1.0, 17.0});
  CHECK(hermite_polynomial_he(full({2}, 0.5, DType::BFloat16), 2).dtype() == DType::BFloat16);
  // One x for a degree tensor: x takes the degrees' float dtype (float32 for integer degrees).
  const Tensor t = chebyshev_polynomial_t(0.5, tensor<int64_t>({0, 1, 2, 3, -1}));
  CHECK(t.dtype() == DType::Float32);
  CHECK(vals(t) == std::vector<double>{1.0, 0.5, -0.5, -1.0, 0.0});
  CHECK(vals(laguerre_polynomial_l(2.0, doubles({0.0, 1.0, 2.0}))) == std::vector<double>{1.0, -1.0, -1.0});
  CHECK(vals(shifted_chebyshev_polynomial_u(1.0, doubles({4.0, 9.0}))) == std::vector<double>{5.0, 10.0});
  CHECK_THROWS_WITH(legendre_polynomial_p(0.5, Tensor()), Catch::Contains("legendre_polynomial_p"));
}

TEST_CASE("polynomial: Chebyshev's closed forms match the recurrence past degree 8, inside and outside [-1, 1]",
          "[polynomial]") {
  const std::vector<double> xs = {-1.7, -1.0 - 1e-9, -0.999, -0.4, 0.0, 1e-12, 0.5, 0.9999999, 1.0 + 1e-12, 1.05, 3.0};
  for (int64_t n : {8, 9, 10, 17, 40}) {
    INFO("n = " << n);
    const Tensor degrees = full({static_cast<int64_t>(xs.size())}, static_cast<double>(n));
    const std::vector<double> t = vals(chebyshev_polynomial_t(doubles(xs), degrees));
    const std::vector<double> u = vals(chebyshev_polynomial_u(doubles(xs), n));
    const std::vector<double> v = vals(chebyshev_polynomial_v(doubles(xs), degrees));
    const std::vector<double> w = vals(chebyshev_polynomial_w(doubles(xs), n));
    for (size_t i = 0; i < xs.size(); ++i) {
      INFO("x = " << xs[i]);
      const long double un = cheb_u_ref(xs[i], n), um = cheb_u_ref(xs[i], n - 1), ul = cheb_u_ref(xs[i], n - 2);
      // Relative to the larger of the value and the polynomial's bound on [-1, 1] (n + 1 for U):
      // near a root only the absolute error is small.
      const double scale = std::max(std::fabs(static_cast<double>(un)), 2.0 * static_cast<double>(n) + 1);
      CHECK(std::fabs(t[i] - static_cast<double>((un - ul) / 2)) < 1e-13 * scale);
      CHECK(std::fabs(u[i] - static_cast<double>(un)) < 1e-13 * scale);
      CHECK(std::fabs(v[i] - static_cast<double>(un - um)) < 1e-13 * scale);
      CHECK(std::fabs(w[i] - static_cast<double>(un + um)) < 1e-13 * scale);
    }
  }
  // Any degree costs the same: T_n(1/2) = cos(n pi / 3), -1/2 for n = 10^9 (n = 4 mod 6); its error
  // is n times acos's rounding.
  CHECK(value(chebyshev_polynomial_t(at(0.5), 1000000000)) == Approx(-0.5).margin(1e-6));
  // Near float64's overflow: U_10(1e30) = (2e30)^10 (1 - 9 / (4e60) ...) though sinh(11
  // acosh(1e30)) overflows; U_11 there overflows, as its true value. exp(n acosh x) carries n
  // acosh(x) = 698 roundings of acosh's last bit: about 8e-14.
  CHECK(value(chebyshev_polynomial_u(at(1e30), 10)) == Approx(std::pow(2e30, 10)).epsilon(2e-13));
  CHECK(value(chebyshev_polynomial_v(at(-1e30), 10)) == Approx(std::pow(2e30, 10)).epsilon(2e-13));
  CHECK(value(chebyshev_polynomial_w(at(1e30), 10)) == Approx(std::pow(2e30, 10)).epsilon(2e-13));
  CHECK(value(chebyshev_polynomial_u(at(1e30), 11)) == kInf);
  CHECK(value(chebyshev_polynomial_u(at(-kInf), 11)) == -kInf);
  CHECK(value(chebyshev_polynomial_t(at(kInf), 12)) == kInf);
  CHECK(std::isnan(value(chebyshev_polynomial_w(at(kNaN), 12))));
}

TEST_CASE("polynomial: infinite x and overflow give the leading term's infinity, not inf - inf", "[polynomial]") {
  const Tensor x = doubles({kInf, -kInf, 1e200, -1e200});
  CHECK(vals(chebyshev_polynomial_t(x, 3)) == std::vector<double>{kInf, -kInf, kInf, -kInf});
  CHECK(vals(chebyshev_polynomial_t(x, 0)) == std::vector<double>{1.0, 1.0, 1.0, 1.0});
  CHECK(vals(chebyshev_polynomial_v(x, 5)) == std::vector<double>{kInf, -kInf, kInf, -kInf});
  CHECK(vals(chebyshev_polynomial_w(x, 4)) == std::vector<double>{kInf, kInf, kInf, kInf});
  CHECK(vals(legendre_polynomial_p(x, 4)) == std::vector<double>{kInf, kInf, kInf, kInf});
  CHECK(vals(legendre_polynomial_p(x, 3)) == std::vector<double>{kInf, -kInf, kInf, -kInf});
  CHECK(vals(shifted_chebyshev_polynomial_u(x, 3)) == std::vector<double>{kInf, -kInf, kInf, -kInf});
  // Laguerre's leading coefficient is (-1)^n / n!; Hermite's are positive.
  const Tensor ends = doubles({kInf, -kInf});
  CHECK(vals(laguerre_polynomial_l(ends, 3)) == std::vector<double>{-kInf, kInf});
  CHECK(vals(laguerre_polynomial_l(ends, 2)) == std::vector<double>{kInf, kInf});
  CHECK(vals(hermite_polynomial_h(ends, 3)) == std::vector<double>{kInf, -kInf});
  CHECK(vals(hermite_polynomial_he(ends, 6)) == std::vector<double>{kInf, kInf});
  // A degree tensor too: each element its own degree.
  CHECK(vals(chebyshev_polynomial_u(ends, tensor<int64_t>({0, 7}))) == std::vector<double>{1.0, -kInf});
}

TEST_CASE("polynomial: the gradients by their identities at the known points, below and past degree 8",
          "[polynomial]") {
  for (int64_t n : {0, 1, 4, 9, 14}) {
    INFO("n = " << n);
    const double d = static_cast<double>(n), s = sign_of_power(n);
    auto at_ends = [](Tensor (*f)(const Tensor&, int64_t), int64_t n) {
      return grads([f, n](const Tensor& x) { return f(x, n); }, {1.0, -1.0});
    };
    // T_n'(1) = n^2, U_n'(1) = n (n + 1) (n + 2) / 3, P_n'(1) = n (n + 1) / 2; odd or even about 0.
    const std::vector<double> t = at_ends(chebyshev_polynomial_t, n);
    CHECK(t[0] == Approx(d * d));
    CHECK(t[1] == Approx(-s * d * d));
    const std::vector<double> u = at_ends(chebyshev_polynomial_u, n);
    CHECK(u[0] == Approx(d * (d + 1) * (d + 2) / 3));
    CHECK(u[1] == Approx(-s * d * (d + 1) * (d + 2) / 3));
    const std::vector<double> p = at_ends(legendre_polynomial_p, n);
    CHECK(p[0] == Approx(d * (d + 1) / 2));
    // V_n = U_n - U_(n-1), W_n = U_n + U_(n-1).
    const double u1 = d * (d + 1) * (d + 2) / 3, u0 = (d - 1) * d * (d + 1) / 3;
    CHECK(at_ends(chebyshev_polynomial_v, n)[0] == Approx(u1 - (n > 0 ? u0 : 0.0)));
    CHECK(at_ends(chebyshev_polynomial_w, n)[0] == Approx(u1 + (n > 0 ? u0 : 0.0)));
    // The shifted forms: twice the plain slope at 2x - 1 (x = 1 there is 1).
    CHECK(grads([n](const Tensor& x) { return shifted_chebyshev_polynomial_t(x, n); }, {1.0})[0] == Approx(2 * d * d));
    // L_n'(0) = -n; H_n' = 2n H_(n-1), He_n' = n He_(n-1).
    CHECK(grads([n](const Tensor& x) { return laguerre_polynomial_l(x, n); }, {0.0})[0] == Approx(-d));
    // At 0, by the closed values there: H_(n-1)(0) = (-1)^(m) (2m)! / m! and He_(n-1)(0) =
    // (-1)^m (2m - 1)!! for n - 1 = 2m, 0 for even n.
    double h = 0.0, he = 0.0;
    if (n % 2 == 1) {
      const int64_t m = (n - 1) / 2;
      h = m % 2 ? -1.0 : 1.0;
      he = h;
      for (int64_t k = 2 * m; k > m; --k) h *= static_cast<double>(k);
      for (int64_t k = 2 * m - 1; k > 0; k -= 2) he *= static_cast<double>(k);
    }
    CHECK(grads([n](const Tensor& x) { return hermite_polynomial_h(x, n); }, {0.0})[0] == Approx(2 * d * h));
    CHECK(grads([n](const Tensor& x) { return hermite_polynomial_he(x, n); }, {0.0})[0] == Approx(d * he));
  }
  // With a degree tensor: mixed degrees on both sides of 8 in one call, each slope its own.
  const Tensor n = tensor<int64_t>({2, 12, -1, 9});
  const std::vector<double> g =
      grads([&n](const Tensor& x) { return chebyshev_polynomial_u(x, n); }, {1.0, 1.0, 1.0, -1.0});
  CHECK(g[0] == Approx(8.0));
  CHECK(g[1] == Approx(12.0 * 13 * 14 / 3));
  CHECK(g[2] == 0.0);
  CHECK(g[3] == Approx(9.0 * 10 * 11 / 3));
  // n carries no gradient.
  Tensor degrees = doubles({2.0, 3.0});
  degrees.set_requires_grad(true);
  CHECK_FALSE(legendre_polynomial_p(doubles({0.1, 0.2}), degrees).requires_grad());
}

TEST_CASE("polynomial: bad calls name the op and what is wrong", "[polynomial]") {
  CHECK_THROWS_WITH(hermite_polynomial_h(zeros({2}), int64_t{2000000}),
                    Catch::Contains("hermite_polynomial_h") && Catch::Contains("2^20"));
  CHECK_THROWS_WITH(legendre_polynomial_p(zeros({2}), doubles({3.0, 3e6})),
                    Catch::Contains("legendre_polynomial_p") && Catch::Contains("3000000"));
  CHECK_THROWS_WITH(chebyshev_polynomial_t(zeros({2, 3}), zeros({4})),
                    Catch::Contains("chebyshev_polynomial_t") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_AS(laguerre_polynomial_l(Tensor(), 2), Error);
  // A degree past int64's range is past the limit too, not wrapped around to a negative one.
  CHECK_THROWS_WITH(legendre_polynomial_p(zeros({2}), doubles({3.0, 1e19})),
                    Catch::Contains("legendre_polynomial_p") && Catch::Contains("2^20"));
  // U's gradient runs a recurrence to the degree (its value does not).
  Tensor x = doubles({0.5});
  x.set_requires_grad(true);
  const Tensor u = chebyshev_polynomial_u(x, int64_t{3000000});
  CHECK(std::isfinite(value(u)));
  CHECK_THROWS_WITH(u.sum().backward(), Catch::Contains("chebyshev_polynomial_u") && Catch::Contains("3000000") &&
                                            Catch::Contains("gradient"));
  // Chebyshev's closed forms need no recurrence to any degree.
  CHECK(std::isfinite(value(chebyshev_polynomial_w(at(0.25), int64_t{1} << 40))));
}
