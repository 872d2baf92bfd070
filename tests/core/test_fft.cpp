// Hand tests of core/ops/fft.h beyond the op table's rows (tests/op_table/fft_rows.cpp): round
// trips at every length to 300 and on every path (the dense products up to 64, four-step composites
// such as 96, 128, 256, 1024 and 4096 and the odd 105 and 225, Bluestein's primes 67, 257 and 1021,
// and 2 x prime 134), Parseval, linearity, deltas and constants, rfft as the half of fft, hfft and
// ihfft, the unitary ortho norm, float32 and float64 against a naive DFT at 1000 and 1021, the
// gradients as the adjoint transforms and by gradcheck, what irfft does not read, dims counted over
// the complex shape, stft then istft, the cache, autocast, complex_abs and complex_angle at 0,
// empty batches and the refused dtypes.
//
// Tolerances are norm-wise, ||got - want|| / ||want||: a transform spreads each input's rounding
// over every output, so the elementwise error of a small output is relative to the whole vector's
// size. A transform of length n takes about log2(n) passes (more for Bluestein's), each rounding at
// the dtype's epsilon (float64 1.1e-16, float32 6e-8), and the errors of the passes add up at most.
#include <catch2/catch.hpp>

#include <cmath>
#include <complex>
#include <functional>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "core/kiln.h"
#include "core/ops/fft.h"
#include "tests/core/same_values.h"

using namespace kiln;

namespace {

using Real = long double;
using Cx = std::complex<Real>;
constexpr Real kPi = std::numbers::pi_v<Real>;

bool same(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && test::same_values(a.to_vector_double(), b.to_vector_double());
}

// A standard normal tensor (a complex one ends in 2) from its own seed, drawn in float64 and cast.
Tensor normal(const Shape& shape, DType t, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, TensorOptions(DType::Float64)).to(t);
}

// The complex values of z [..., 2] in row-major order, and of a real x (imaginary parts 0).
std::vector<Cx> cvals(const Tensor& z) {
  const std::vector<double> v = z.to_vector_double();
  std::vector<Cx> c;
  for (size_t i = 0; i + 1 < v.size(); i += 2) c.emplace_back(v[i], v[i + 1]);
  return c;
}
std::vector<Cx> rvals(const Tensor& x) {
  std::vector<Cx> c;
  for (double e : x.to_vector_double()) c.emplace_back(e, 0);
  return c;
}

// The complex [n, 2] tensor of c in dtype t.
Tensor ctensor(const std::vector<Cx>& c, DType t) {
  std::vector<double> v;
  for (const Cx& e : c) {
    v.push_back(static_cast<double>(e.real()));
    v.push_back(static_cast<double>(e.imag()));
  }
  return tensor(v, {static_cast<int64_t>(c.size()), 2}, TensorOptions(DType::Float64)).to(t);
}

// e^(sign 2 pi i m / n) with m reduced mod n before the angle is formed.
Cx root(int64_t m, int64_t n, int sign) {
  const int64_t r = ((m % n) + n) % n;
  const Real a = 2 * kPi * static_cast<Real>(r) / static_cast<Real>(n);
  return {std::cos(a), sign * std::sin(a)};
}

// The DFT by its definition in long double: X_k = sum_j x_j e^(sign 2 pi i j k / n).
std::vector<Cx> naive_dft(const std::vector<Cx>& x, int sign) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<Cx> roots, out;
  for (int64_t m = 0; m < n; ++m) roots.push_back(root(m, n, sign));
  for (int64_t k = 0; k < n; ++k) {
    Cx sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += x[static_cast<size_t>(j)] * roots[static_cast<size_t>((j * k) % n)];
    out.push_back(sum);
  }
  return out;
}

// ||got - want|| / ||want|| (2-norms; want is never 0 here).
double rel_err(const std::vector<Cx>& got, const std::vector<Cx>& want) {
  REQUIRE(got.size() == want.size());
  Real diff = 0, size = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += std::norm(got[i] - want[i]);
    size += std::norm(want[i]);
  }
  return static_cast<double>(std::sqrt(diff / size));
}
double rel_err_real(const Tensor& got, const Tensor& want) {
  REQUIRE(got.sizes() == want.sizes());
  return rel_err(rvals(got), rvals(want));
}

Real energy(const std::vector<Cx>& c) {
  Real e = 0;
  for (const Cx& v : c) e += std::norm(v);
  return e;
}

// The round trips' bound: two transforms of log2(n) passes (three times as many for Bluestein's
// chirps and convolution of a power of two >= 2n - 1) at the dtype's epsilon, with a margin of
// about 10: float64 1e-13 per pass, float32 2e-6. log2(2n) keeps n = 1 above 0.
double round_trip_bound(DType t, int64_t n) {
  return (t == DType::Float64 ? 1e-13 : 2e-6) * std::log2(2.0 * static_cast<double>(n));
}

std::string dtype_error(const std::function<void()>& call) {
  try {
    call();
  } catch (const DTypeError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a DTypeError: ") + e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("fft: ifft(fft(z)) and irfft(rfft(x), n) give the input back at every length to 300 and on every path",
          "[fft]") {
  // 1..300 hold the dense lengths (<= 64), the four-step composites 96, 128, 256, 105 and 225, the
  // Bluestein primes 67, 257 and 2 x prime 134; then 1021 (Bluestein), 1024 and 4096 (four-step).
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 300; ++n) lengths.push_back(n);
  for (int64_t n : {1021, 1024, 4096}) lengths.push_back(n);
  for (DType t : {DType::Float64, DType::Float32}) {
    for (int64_t n : lengths) {
      INFO(dtype_name(t) << ", n = " << n);
      const double bound = round_trip_bound(t, n);
      const Tensor z = normal({2, n, 2}, t, 1000 + static_cast<uint64_t>(n));
      const Tensor spectrum = fft(z);
      REQUIRE(spectrum.sizes() == z.sizes());
      CHECK(spectrum.dtype() == t);
      const Tensor back = ifft(spectrum);
      REQUIRE(back.sizes() == z.sizes());
      CHECK(rel_err(cvals(back), cvals(z)) <= bound);
      const Tensor x = normal({2, n}, t, 9000 + static_cast<uint64_t>(n));
      const Tensor half = rfft(x);
      REQUIRE(half.sizes() == Shape{2, n / 2 + 1, 2});
      const Tensor xb = irfft(half, n);
      REQUIRE(xb.sizes() == x.sizes());
      CHECK(xb.dtype() == t);
      CHECK(rel_err_real(xb, x) <= bound);
    }
  }
}

TEST_CASE("fft: Parseval, sum |x|^2 = sum |X|^2 / n, for fft and rfft", "[fft]") {
  for (int64_t n : {1, 17, 64, 96, 67, 130, 257, 1000}) {
    INFO("n = " << n);
    const Tensor z = normal({n, 2}, DType::Float64, 20 + static_cast<uint64_t>(n));
    const Real e = energy(cvals(z)), E = energy(cvals(fft(z))) / static_cast<Real>(n);
    // One transform, then sums of squares: 1e-12 in float64.
    CHECK(static_cast<double>(std::fabs(E - e) / e) <= 1e-12);
    // rfft holds frequencies 0..n/2; the others, their conjugates, count twice, except 0 and n/2.
    const Tensor x = normal({n}, DType::Float64, 40 + static_cast<uint64_t>(n));
    const std::vector<Cx> X = cvals(rfft(x));
    Real half = 0;
    for (size_t k = 0; k < X.size(); ++k) {
      const bool single = k == 0 || (n % 2 == 0 && static_cast<int64_t>(k) == n / 2);
      half += (single ? 1 : 2) * std::norm(X[k]);
    }
    const Real ex = energy(rvals(x));
    CHECK(static_cast<double>(std::fabs(half / static_cast<Real>(n) - ex) / ex) <= 1e-12);
  }
}

TEST_CASE("fft: linear in its input", "[fft]") {
  for (int64_t n : {8, 64, 96, 67, 130}) {
    INFO("n = " << n);
    const Tensor x = normal({3, n, 2}, DType::Float64, 60 + static_cast<uint64_t>(n));
    const Tensor y = normal({3, n, 2}, DType::Float64, 61 + static_cast<uint64_t>(n));
    const Tensor lhs = fft(x * 2.5 - y * 0.75);
    const Tensor rhs = fft(x) * 2.5 - fft(y) * 0.75;
    CHECK(rel_err(cvals(lhs), cvals(rhs)) <= 1e-13);
  }
}

TEST_CASE("fft: a delta at 0 gives ones, a delta at m gives e^(-2 pi i m k / n), a constant only frequency 0",
          "[fft]") {
  for (DType t : {DType::Float64, DType::Float32}) {
    for (int64_t n : {1, 5, 64, 96, 67, 130, 1021}) {
      INFO(dtype_name(t) << ", n = " << n);
      // One transform: within the round trips' bound for two.
      const double tol = round_trip_bound(t, n);
      std::vector<Cx> delta(static_cast<size_t>(n), Cx(0));
      delta[0] = 1;
      CHECK(rel_err(cvals(fft(ctensor(delta, t))), std::vector<Cx>(static_cast<size_t>(n), Cx(1))) <= tol);
      const int64_t m = n / 3;
      delta[0] = 0;
      delta[static_cast<size_t>(m)] = 1;
      std::vector<Cx> want;
      for (int64_t k = 0; k < n; ++k) want.push_back(root(m * k, n, -1));
      CHECK(rel_err(cvals(fft(ctensor(delta, t))), want) <= tol);
      // The inverse of the delta at m: e^(+2 pi i m k / n) / n.
      for (int64_t k = 0; k < n; ++k) want[static_cast<size_t>(k)] = root(m * k, n, +1) / static_cast<Real>(n);
      CHECK(rel_err(cvals(ifft(ctensor(delta, t))), want) <= tol);
      // A constant 1.5 - 0.5i: n times it at frequency 0, zero elsewhere (relative to n |c|).
      const Cx c(1.5, -0.5);
      const std::vector<Cx> got = cvals(fft(ctensor(std::vector<Cx>(static_cast<size_t>(n), c), t)));
      std::vector<Cx> spike(static_cast<size_t>(n), Cx(0));
      spike[0] = c * static_cast<Real>(n);
      CHECK(rel_err(got, spike) <= tol);
    }
  }
}

TEST_CASE("fft: rfft(x) is the first n / 2 + 1 values of fft(complex_pair(x, 0))", "[fft]") {
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 40; ++n) lengths.push_back(n);
  for (int64_t n : {64, 96, 100, 67, 130, 256, 1021}) lengths.push_back(n);
  for (DType t : {DType::Float64, DType::Float32}) {
    for (int64_t n : lengths) {
      INFO(dtype_name(t) << ", n = " << n);
      const Tensor x = normal({3, n}, t, 80 + static_cast<uint64_t>(n));
      const Tensor half = rfft(x);
      REQUIRE(half.sizes() == Shape{3, n / 2 + 1, 2});
      const Tensor full = fft(complex_pair(x, zeros_like(x)));
      CHECK(rel_err(cvals(half), cvals(full.narrow(-2, 0, n / 2 + 1))) <= round_trip_bound(t, n));
    }
  }
}

TEST_CASE("fft: hfft and ihfft invert each other, hfft is n irfft of the conjugate, ihfft conj(rfft) / n", "[fft]") {
  for (int64_t n : {1, 2, 7, 8, 67, 96, 100, 131}) {
    INFO("n = " << n);
    const double bound = round_trip_bound(DType::Float64, n);
    const Tensor x = normal({3, n}, DType::Float64, 100 + static_cast<uint64_t>(n));
    const Tensor h = ihfft(x);
    REQUIRE(h.sizes() == Shape{3, n / 2 + 1, 2});
    CHECK(rel_err(cvals(h), cvals(complex_conj(rfft(x)) / static_cast<double>(n))) <= bound);
    const Tensor back = hfft(h, n);
    REQUIRE(back.sizes() == x.sizes());
    CHECK(rel_err_real(back, x) <= bound);
    const Tensor z = normal({2, n / 2 + 1, 2}, DType::Float64, 120 + static_cast<uint64_t>(n));
    CHECK(rel_err_real(hfft(z, n), irfft(complex_conj(z), n) * static_cast<double>(n)) <= bound);
    // The ortho norm of hfft is irfft's ortho norm of the conjugate.
    CHECK(rel_err_real(hfft(z, n, -1, "ortho"), irfft(complex_conj(z), n, -1, "ortho")) <= bound);
  }
}

TEST_CASE("fft: hfftn and ihfftn invert each other, ihfftn is conj(rfftn) / N, over one dim they are hfft and ihfft",
          "[fft]") {
  // [4, 6, n]: the Hermitian dim last of odd and even lengths on the dense, four-step and Bluestein
  // paths, over every dim and over dims [0, 2]; after the loop, dims [2, 0] (the Hermitian dim 0).
  for (int64_t n : {1, 2, 7, 8, 67, 96}) {
    INFO("n = " << n);
    const double bound = round_trip_bound(DType::Float64, 4 * 6 * n);
    const Tensor x = normal({4, 6, n}, DType::Float64, 160 + static_cast<uint64_t>(n));
    const Tensor h = ihfftn(x);
    REQUIRE(h.sizes() == Shape{4, 6, n / 2 + 1, 2});
    CHECK(rel_err(cvals(h), cvals(complex_conj(rfftn(x)) / static_cast<double>(4 * 6 * n))) <= bound);
    CHECK(rel_err_real(hfftn(h, Shape{4, 6, n}), x) <= bound);
    CHECK(rel_err_real(hfft2(ihfft2(x, std::nullopt, {0, 2}, "ortho"), Shape{4, n}, {0, 2}, "ortho"), x) <= bound);
    const Tensor z = normal({3, n / 2 + 1, 2}, DType::Float64, 180 + static_cast<uint64_t>(n));
    CHECK(rel_err_real(hfftn(z, Shape{n}, std::nullopt, "forward"), hfft(z, n, -1, "forward")) <= bound);
    CHECK(rel_err(cvals(ihfftn(x, std::nullopt, Shape{1})), cvals(ihfft(x, std::nullopt, 1))) <= bound);
  }
  // The Hermitian dim first: dims [2, 0] of a real [4, 6, 5] halves dim 0, 4 -> 3.
  const Tensor x = normal({4, 6, 5}, DType::Float64, 199);
  const Tensor h = ihfftn(x, std::nullopt, Shape{2, 0});
  REQUIRE(h.sizes() == Shape{3, 6, 5, 2});
  CHECK(rel_err_real(hfftn(h, Shape{5, 4}, Shape{2, 0}), x) <= round_trip_bound(DType::Float64, 120));
}

TEST_CASE("fft: fftn, ifftn, fft2 and ifft2 over no dims are copies, the real and Hermitian forms refuse them",
          "[fft]") {
  const Tensor base = normal({3, 4, 2}, DType::Float64, 230);
  for (int which = 0; which < 5; ++which) {
    INFO("call " << which);
    Tensor z = base.clone().set_requires_grad(true);
    // which 4: a 0-d complex, whose default dims are none
    const Tensor out = which == 0   ? fftn(z, std::nullopt, Shape{})
                       : which == 1 ? ifftn(z, Shape{}, std::nullopt, "ortho")
                       : which == 2 ? fft2(z, std::nullopt, Shape{})
                       : which == 3 ? ifft2(z, Shape{}, Shape{}, "forward")
                                    : fftn(z.select(0, 1).select(0, 2));
    CHECK(same(out.detach(), which == 4 ? base.select(0, 1).select(0, 2) : base));
    CHECK(out.data_ptr() != z.data_ptr());
    sum(mul(out, 3.0)).backward();
    std::vector<double> want(24, which == 4 ? 0.0 : 3.0);
    if (which == 4) want[(1 * 4 + 2) * 2] = want[(1 * 4 + 2) * 2 + 1] = 3.0;  // only z[1, 2] read
    CHECK(test::same_values(z.grad().to_vector_double(), want));
  }
  // The norm is still checked.
  CHECK_THROWS_WITH(fftn(base, std::nullopt, Shape{}, "sideways"), Catch::Contains("sideways"));
  // The real and Hermitian forms have a dim of their own to halve: none is an Error naming them.
  CHECK_THROWS_WITH(rfftn(normal({3, 4}, DType::Float64, 231), std::nullopt, Shape{}),
                    Catch::Contains("rfftn") && Catch::Contains("at least one dim"));
  CHECK_THROWS_WITH(irfftn(base, Shape{}), Catch::Contains("irfftn") && Catch::Contains("at least one dim"));
  CHECK_THROWS_WITH(hfft2(base, std::nullopt, Shape{}),
                    Catch::Contains("hfft2") && Catch::Contains("at least one dim"));
  CHECK_THROWS_WITH(ihfftn(normal({3, 4}, DType::Float64, 232), Shape{}),
                    Catch::Contains("ihfftn") && Catch::Contains("at least one dim"));
  // A 0-d complex tensor: the real forms' default dims are none too.
  CHECK_THROWS_WITH(irfftn(zeros({2})), Catch::Contains("irfftn") && Catch::Contains("no dim to transform"));
  // A 0-d complex has no dim 0 to name.
  CHECK_THROWS_AS(fftn(zeros({2}), std::nullopt, Shape{0}), IndexError);
  CHECK_THROWS_WITH(fft(zeros({2})), Catch::Contains("no dim to transform"));
}

TEST_CASE("fft: the ortho norm is unitary, the forward norm divides the forward transform by n", "[fft]") {
  for (int64_t n : {5, 64, 96, 67, 130}) {
    INFO("n = " << n);
    const Tensor z = normal({2, n, 2}, DType::Float64, 140 + static_cast<uint64_t>(n));
    const Real e = energy(cvals(z));
    const Tensor Z = fft(z, std::nullopt, -1, "ortho");
    CHECK(static_cast<double>(std::fabs(energy(cvals(Z)) - e) / e) <= 1e-13);
    CHECK(static_cast<double>(std::fabs(energy(cvals(ifft(z, std::nullopt, -1, "ortho"))) - e) / e) <= 1e-13);
    CHECK(rel_err(cvals(ifft(Z, std::nullopt, -1, "ortho")), cvals(z)) <= 1e-13);
    CHECK(rel_err(cvals(fft(z, std::nullopt, -1, "forward")), cvals(fft(z) / static_cast<double>(n))) <= 1e-13);
    CHECK(rel_err(cvals(ifft(z, std::nullopt, -1, "forward")), cvals(ifft(z) * static_cast<double>(n))) <= 1e-13);
  }
}

TEST_CASE("fft: float32 and float64 against a naive DFT at lengths 1000 (four-step) and 1021 (Bluestein)", "[fft]") {
  for (int64_t n : {1000, 1021}) {
    for (DType t : {DType::Float64, DType::Float32}) {
      INFO(dtype_name(t) << ", n = " << n);
      // float64: 1e-12. float32: 3e-6 log2(n), about 3e-5: passes of 6e-8 with a margin over
      // Bluestein's six (chirp, transform of 2048, product, inverse, chirp).
      const double bound = t == DType::Float64 ? 1e-12 : 3e-6 * std::log2(static_cast<double>(n));
      const Tensor z = normal({n, 2}, t, 160 + static_cast<uint64_t>(n));
      const std::vector<Cx> zv = cvals(z);  // the values the transform sees (float32: rounded)
      CHECK(rel_err(cvals(fft(z)), naive_dft(zv, -1)) <= bound);
      std::vector<Cx> inverse = naive_dft(zv, +1);
      for (Cx& c : inverse) c /= static_cast<Real>(n);
      CHECK(rel_err(cvals(ifft(z)), inverse) <= bound);
      const Tensor x = normal({n}, t, 170 + static_cast<uint64_t>(n));
      std::vector<Cx> X = naive_dft(rvals(x), -1);
      X.resize(static_cast<size_t>(n / 2 + 1));
      CHECK(rel_err(cvals(rfft(x)), X) <= bound);
    }
  }
}

TEST_CASE("fft: the gradient of sum(fft(z, n) * w) is the adjoint transform of w", "[fft]") {
  // L = sum_k (re w_k re X_k + im w_k im X_k); its gradient in the pair layout is
  // sum_k w_k e^(+2 pi i j k / n) for the inputs the transform reads (j < n), 0 for those cut off.
  const std::vector<std::pair<int64_t, int64_t>> cases = {{67, 67}, {96, 96},  {130, 130}, {257, 257},
                                                          {50, 67}, {100, 96}, {40, 72}};
  for (const auto& [len, n] : cases) {
    INFO("input length " << len << ", n = " << n);
    Tensor z = normal({len, 2}, DType::Float64, 200 + static_cast<uint64_t>(len));
    z.set_requires_grad(true);
    const Tensor w = normal({n, 2}, DType::Float64, 300 + static_cast<uint64_t>(n));
    (fft(z, n) * w).sum().backward();
    REQUIRE(z.grad().defined());
    const std::vector<Cx> wv = cvals(w);
    std::vector<Cx> want;
    for (int64_t j = 0; j < len; ++j) {
      Cx sum = 0;
      if (j < n)
        for (int64_t k = 0; k < n; ++k) sum += wv[static_cast<size_t>(k)] * root(j * k, n, +1);
      want.push_back(sum);
    }
    CHECK(rel_err(cvals(z.grad()), want) <= 1e-12);
  }
  // rfft: d/dx_j = Re(sum_{k <= n/2} w_k e^(+2 pi i j k / n)); even lengths take the packed path.
  for (int64_t n : {67, 96, 130, 7, 8}) {
    INFO("rfft, n = " << n);
    Tensor x = normal({n}, DType::Float64, 400 + static_cast<uint64_t>(n));
    x.set_requires_grad(true);
    const Tensor w = normal({n / 2 + 1, 2}, DType::Float64, 500 + static_cast<uint64_t>(n));
    (rfft(x) * w).sum().backward();
    REQUIRE(x.grad().defined());
    const std::vector<Cx> wv = cvals(w);
    std::vector<Cx> want;
    for (int64_t j = 0; j < n; ++j) {
      Cx sum = 0;
      for (int64_t k = 0; k <= n / 2; ++k) sum += wv[static_cast<size_t>(k)] * root(j * k, n, +1);
      want.emplace_back(sum.real(), 0);
    }
    CHECK(rel_err(rvals(x.grad()), want) <= 1e-12);
  }
}

TEST_CASE("fft: gradcheck of rfft, irfft, hfft and ihfft at lengths 7, 8 and 67", "[fft]") {
  for (int64_t n : {7, 8, 67}) {
    for (const char* norm : {"backward", "ortho", "forward"}) {
      INFO("n = " << n << ", norm " << norm);
      const std::string nm = norm;
      Tensor x = normal({2, n}, DType::Float64, 600 + static_cast<uint64_t>(n));
      x.set_requires_grad(true);
      Tensor z = normal({2, n / 2 + 1, 2}, DType::Float64, 700 + static_cast<uint64_t>(n));
      z.set_requires_grad(true);
      const std::vector<std::pair<std::string, GradcheckResult>> results = {
          {"rfft", gradcheck([&](const TensorList& in) { return TensorList{rfft(in[0], std::nullopt, -1, nm)}; }, {x})},
          {"irfft", gradcheck([&](const TensorList& in) { return TensorList{irfft(in[0], n, -1, nm)}; }, {z})},
          {"hfft", gradcheck([&](const TensorList& in) { return TensorList{hfft(in[0], n, -1, nm)}; }, {z})},
          {"ihfft",
           gradcheck([&](const TensorList& in) { return TensorList{ihfft(in[0], std::nullopt, -1, nm)}; }, {x})},
      };
      for (const auto& [op, r] : results) {
        INFO(op);
        CHECK(r.message == "");
        CHECK(r.ok);
      }
    }
  }
}

TEST_CASE("fft: float32 gradients equal float64's to float32's precision", "[fft]") {
  for (int64_t n : {8, 96, 67}) {
    INFO("n = " << n);
    const Tensor z64 = normal({2, n, 2}, DType::Float64, 800 + static_cast<uint64_t>(n));
    const Tensor w64 = normal({2, n, 2}, DType::Float64, 810 + static_cast<uint64_t>(n));
    const Tensor x64 = normal({2, n}, DType::Float64, 820 + static_cast<uint64_t>(n));
    const Tensor v64 = normal({2, n / 2 + 1, 2}, DType::Float64, 830 + static_cast<uint64_t>(n));
    std::vector<std::vector<Cx>> grads[2];
    for (DType t : {DType::Float64, DType::Float32}) {
      // Fresh leaves each time (detach: z64 itself never joins a graph).
      Tensor z = z64.detach().to(t), x = x64.detach().to(t);
      z.set_requires_grad(true);
      x.set_requires_grad(true);
      (fft(z) * w64.to(t)).sum().backward();
      (rfft(x) * v64.to(t)).sum().backward();
      REQUIRE(z.grad().defined());
      REQUIRE(x.grad().defined());
      CHECK(z.grad().dtype() == t);
      grads[t == DType::Float64 ? 0 : 1] = {cvals(z.grad()), rvals(x.grad())};
    }
    // One transform's rounding in float32 (as against the naive DFT above): 3e-6 log2(n).
    const double bound = 3e-6 * std::log2(2.0 * static_cast<double>(n));
    CHECK(rel_err(grads[1][0], grads[0][0]) <= bound);
    CHECK(rel_err(grads[1][1], grads[0][1]) <= bound);
  }
}

TEST_CASE("fft: irfft does not read the imaginary part of frequency 0, nor of n / 2 for even n", "[fft]") {
  for (int64_t n : {8, 9, 64, 100, 67, 131}) {
    INFO("n = " << n);
    const int64_t m = n / 2 + 1;
    const Tensor z = normal({m, 2}, DType::Float64, 900 + static_cast<uint64_t>(n));
    std::vector<Cx> v = cvals(z);
    v[0] += Cx(0, 5);
    if (n % 2 == 0) v[static_cast<size_t>(m - 1)] += Cx(0, -3);
    const Tensor base = irfft(z, n);
    CHECK(rel_err_real(irfft(ctensor(v, DType::Float64), n), base) <= 1e-13);
    CHECK(rel_err_real(hfft(ctensor(v, DType::Float64), n), hfft(z, n)) <= 1e-13);
    if (n % 2 == 1) {
      // For odd n the last point is an ordinary frequency: its imaginary part is read.
      v[static_cast<size_t>(m - 1)] += Cx(0, 1);
      CHECK(rel_err_real(irfft(ctensor(v, DType::Float64), n), base) > 1e-3);
    }
  }
}

TEST_CASE("fft: dims count over the complex shape, without the pair dim", "[fft]") {
  const Tensor z = normal({4, 6, 2}, DType::Float64, 950);
  // dim 0 and -2 are both the first complex dim of [4, 6]; the transform along it equals the one
  // along the last dim of the transposed tensor.
  const Tensor along0 = fft(z, std::nullopt, 0);
  REQUIRE(along0.sizes() == Shape{4, 6, 2});
  CHECK(same(along0, fft(z, std::nullopt, -2)));
  const Tensor moved = fft(z.transpose(0, 1).contiguous()).transpose(0, 1);
  CHECK(rel_err(cvals(along0), cvals(moved.contiguous())) <= 1e-14);
  // And with n: only dim 0 changes size.
  CHECK(fft(z, 7, 0).sizes() == Shape{7, 6, 2});
  CHECK(irfft(z, 9, 0).sizes() == Shape{9, 6});
  CHECK(rfft(normal({4, 6}, DType::Float64, 951), std::nullopt, 0).sizes() == Shape{3, 6, 2});
  // The pair dim is no dim of the complex tensor.
  CHECK_THROWS_AS(fft(z, std::nullopt, 2), Error);
}

TEST_CASE("fft: istft(stft(x)) gives a random signal back", "[fft]") {
  for (DType t : {DType::Float64, DType::Float32}) {
    INFO(dtype_name(t));
    // A 64-point transform and its inverse per frame, then the overlap-add divided by an envelope
    // of at least 0.0064 (hamming's ends squared): float64 1e-12, float32 1e-5.
    const double tol = t == DType::Float64 ? 1e-12 : 1e-5;
    const Tensor x = normal({2, 500}, t, 970);
    const Tensor hann = hann_window(64, true, t);
    // Centred: 1 + 500 / 16 = 32 frames; the default length is 16 * 31 = 496.
    Tensor z = stft(x, 64, 16, std::nullopt, hann);
    REQUIRE(z.sizes() == Shape{2, 33, 32, 2});
    Tensor y = istft(z, 64, 16, std::nullopt, hann, true, false, std::nullopt, 500);
    REQUIRE(y.sizes() == Shape{2, 500});
    CHECK(y.dtype() == t);
    CHECK(rel_err_real(y, x) <= tol);
    y = istft(z, 64, 16, std::nullopt, hann);
    REQUIRE(y.sizes() == Shape{2, 496});
    CHECK(rel_err_real(y, x.narrow(1, 0, 496)) <= tol);
    // Normalized and two-sided.
    z = stft(x, 64, 16, std::nullopt, hann, true, PadMode::Reflect, true, false);
    REQUIRE(z.sizes() == Shape{2, 64, 32, 2});
    y = istft(z, 64, 16, std::nullopt, hann, true, true, false, 500);
    REQUIRE(y.sizes() == Shape{2, 500});
    CHECK(rel_err_real(y, x) <= tol);
    // A 1-d signal.
    z = stft(x[0], 64, 16, std::nullopt, hann);
    REQUIRE(z.sizes() == Shape{33, 32, 2});
    y = istft(z, 64, 16, std::nullopt, hann, true, false, std::nullopt, 500);
    REQUIRE(y.sizes() == Shape{500});
    CHECK(rel_err_real(y, x[0]) <= tol);
    // Not centred: 1 + (500 - 64) / 16 = 28 frames spanning 64 + 16 * 27 = 496 samples. hann's
    // first value is 0, so the envelope is 0 at sample 0: refused (NOLA).
    z = stft(x, 64, 16, std::nullopt, hann, false);
    REQUIRE(z.sizes() == Shape{2, 33, 28, 2});
    CHECK_THROWS_AS(istft(z, 64, 16, std::nullopt, hann, false), Error);
    // hamming's ends are 0.08: the whole span comes back; length 500 pads the last 4 with zeros.
    const Tensor hamming = hamming_window(64, true, t);
    z = stft(x, 64, 16, std::nullopt, hamming, false);
    y = istft(z, 64, 16, std::nullopt, hamming, false);
    REQUIRE(y.sizes() == Shape{2, 496});
    CHECK(rel_err_real(y, x.narrow(1, 0, 496)) <= tol);
    y = istft(z, 64, 16, std::nullopt, hamming, false, false, std::nullopt, 500);
    REQUIRE(y.sizes() == Shape{2, 500});
    CHECK(rel_err_real(y.narrow(1, 0, 496), x.narrow(1, 0, 496)) <= tol);
    CHECK(test::same_values(y.narrow(1, 496, 4).to_vector_double(), std::vector<double>(8, 0.0)));
  }
}

TEST_CASE("fft: fft_cache_size grows with a new length or dtype, and fft_cache_clear empties the cache", "[fft]") {
  fft_cache_clear();
  CHECK(fft_cache_size() == 0);
  const Tensor z = normal({37, 2}, DType::Float64, 990);
  const Tensor first = fft(z);
  const size_t one = fft_cache_size();
  CHECK(one > 0);
  // The same length, kind and dtype again: served from the cache, nothing added.
  CHECK(same(fft(z), first));
  CHECK(fft_cache_size() == one);
  fft(normal({67, 2}, DType::Float64, 991));
  const size_t two = fft_cache_size();
  CHECK(two > one);
  fft(z.to(DType::Float32));
  CHECK(fft_cache_size() > two);
  fft_cache_clear();
  CHECK(fft_cache_size() == 0);
  // Rebuilt from float64 on the host: the same values.
  CHECK(same(fft(z), first));
  CHECK(fft_cache_size() > 0);
}

TEST_CASE("fft: under autocast the transforms stay float32 and give the same values", "[fft]") {
  const Tensor dense = normal({3, 8, 2}, DType::Float32, 1001);
  const Tensor four_step = normal({2, 96, 2}, DType::Float32, 1002);
  const Tensor bluestein = normal({2, 67, 2}, DType::Float32, 1003);
  const Tensor x = normal({2, 100}, DType::Float32, 1004);
  const Tensor window = hann_window(16, true, DType::Float32);
  auto run = [&] {
    return TensorList{fft(dense), fft(four_step),      ifft(bluestein),
                      rfft(x),    irfft(rfft(x), 100), stft(x, 16, 4, std::nullopt, window)};
  };
  const TensorList plain = run();
  TensorList cast;
  {
    AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
    cast = run();
  }
  REQUIRE(cast.size() == plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("output " << i);
    CHECK(cast[i].dtype() == DType::Float32);
    CHECK(same(cast[i], plain[i]));
  }
}

TEST_CASE("fft: complex_abs and complex_angle have gradient 0 at 0, z / |z| and i z / |z|^2 elsewhere", "[fft]") {
  for (bool angle : {false, true}) {
    INFO((angle ? "complex_angle" : "complex_abs"));
    Tensor z = tensor(std::vector<double>{0, 0, 3, -4, 0, 0}, {3, 2});
    z.set_requires_grad(true);
    (angle ? complex_angle(z) : complex_abs(z)).sum().backward();
    REQUIRE(z.grad().defined());
    const std::vector<double> g = z.grad().to_vector_double();
    // abs: (re, im) / |z| = (0.6, -0.8); angle: (-im, re) / |z|^2 = (0.16, 0.12).
    const std::vector<double> want =
        angle ? std::vector<double>{0, 0, 0.16, 0.12, 0, 0} : std::vector<double>{0, 0, 0.6, -0.8, 0, 0};
    REQUIRE(g.size() == want.size());
    for (size_t i = 0; i < g.size(); ++i) {
      INFO("element " << i);
      CHECK(!std::isnan(g[i]));
      CHECK(g[i] == Approx(want[i]).margin(1e-15));
    }
  }
  // The values there: |0| = 0 and arg 0 = 0.
  CHECK(complex_abs(zeros({2})).item<float>() == 0.0f);
  CHECK(complex_angle(zeros({2})).item<float>() == 0.0f);
}

TEST_CASE("fft: an empty batch gives an empty result of the right shape", "[fft]") {
  CHECK(fft(zeros({0, 8, 2})).sizes() == Shape{0, 8, 2});
  CHECK(ifft(zeros({0, 8, 2}), 12).sizes() == Shape{0, 12, 2});
  CHECK(rfft(zeros({0, 8})).sizes() == Shape{0, 5, 2});
  CHECK(irfft(zeros({0, 5, 2})).sizes() == Shape{0, 8});
  CHECK(hfft(zeros({0, 5, 2}), 9).sizes() == Shape{0, 9});
  CHECK(ihfft(zeros({0, 8})).sizes() == Shape{0, 5, 2});
  CHECK(fft2(zeros({0, 4, 6, 2})).sizes() == Shape{0, 4, 6, 2});
  CHECK(hfft2(zeros({0, 4, 5, 2})).sizes() == Shape{0, 4, 8});
  CHECK(ihfft2(zeros({0, 4, 6})).sizes() == Shape{0, 4, 4, 2});
  CHECK(fft(zeros({3, 0, 8, 2}), std::nullopt, -1).sizes() == Shape{3, 0, 8, 2});
}

TEST_CASE("fft: integer, float16 and bfloat16 inputs are DTypeErrors naming the op", "[fft]") {
  CHECK_THROWS_AS(fft(zeros({4, 2}, DType::Int64)), DTypeError);
  CHECK_THROWS_AS(rfft(arange(8)), DTypeError);
  CHECK_THROWS_AS(irfft(zeros({5, 2}, DType::Int32)), DTypeError);
  for (DType t : {DType::Float16, DType::BFloat16, DType::Int64}) {
    INFO(dtype_name(t));
    const std::vector<std::pair<std::string, std::function<void()>>> calls = {
        {"ifft", [t] { ifft(zeros({4, 2}, t)); }},          {"rfft", [t] { rfft(zeros({4}, t)); }},
        {"irfft", [t] { irfft(zeros({4, 2}, t)); }},        {"hfft", [t] { hfft(zeros({4, 2}, t)); }},
        {"ihfft", [t] { ihfft(zeros({4}, t)); }},           {"fft2", [t] { fft2(zeros({4, 4, 2}, t)); }},
        {"fftn", [t] { fftn(zeros({4, 4, 2}, t)); }},       {"rfftn", [t] { rfftn(zeros({4, 4}, t)); }},
        {"irfftn", [t] { irfftn(zeros({4, 4, 2}, t)); }},   {"stft", [t] { stft(zeros({40}, t), 16); }},
        {"istft", [t] { istft(zeros({9, 5, 2}, t), 16); }}, {"fft", [t] { fft(zeros({4, 2}, t)); }},
        {"hfft2", [t] { hfft2(zeros({4, 4, 2}, t)); }},     {"ihfftn", [t] { ihfftn(zeros({4, 4}, t)); }},
    };
    for (const auto& [op, call] : calls) {
      INFO(op);
      const std::string message = dtype_error(call);
      CHECK(message.rfind("not a DTypeError", 0) == std::string::npos);
      CHECK(message != "no error");
      CHECK(message.find(op) != std::string::npos);
      CHECK(message.find(dtype_name(t)) != std::string::npos);
    }
  }
}

TEST_CASE("fft: fftshift undoes ifftshift, centres fftfreq, and keeps (re, im) pairs together", "[fft]") {
  for (int64_t n = 1; n <= 10; ++n) {
    INFO("n = " << n);
    // fftshift(fftfreq(n)) runs from -floor(n/2) to ceil(n/2) - 1, ascending by 1 / n.
    const std::vector<double> f = fftshift(fftfreq(n, 1.0, DType::Float64)).to_vector_double();
    REQUIRE(f.size() == static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      CHECK(f[static_cast<size_t>(i)] == Approx(static_cast<double>(i - n / 2) / static_cast<double>(n)).margin(1e-15));
    const Tensor x = normal({n, n + 1}, DType::Float64, 1100 + static_cast<uint64_t>(n));
    CHECK(same(ifftshift(fftshift(x)), x));
    CHECK(same(fftshift(ifftshift(x)), x));
  }
  // On a complex [5, 6]: the shift over dims 0 and 1 is a roll of the pairs by (2, 3).
  const Tensor z = normal({5, 6, 2}, DType::Float64, 1120);
  CHECK(same(fftshift(z, Shape{0, 1}), roll(z, {2, 3}, {0, 1})));
  CHECK(same(ifftshift(z, Shape{0, 1}), roll(z, {-2, -3}, {0, 1})));
  // rfftfreq(n, d) ends at the Nyquist frequency 1 / (2 d) for even n.
  const std::vector<double> r = rfftfreq(8, 0.25, DType::Float64).to_vector_double();
  REQUIRE(r.size() == 5);
  CHECK(r.back() == Approx(2.0).margin(1e-15));
}

TEST_CASE("fft: every transform returns a new tensor, length 1 and an fftshift over no dims included", "[fft]") {
  const Tensor z = randn({3, 1, 2}, TensorOptions(DType::Float64));
  const std::vector<double> before = z.to_vector_double();
  for (Tensor out :
       {fft(z), ifft(z, std::nullopt, -1, "ortho"), fft2(z, std::nullopt, Shape{0, 1}), fftshift(z, Shape{})}) {
    out.mul_(0.0);
    CHECK(test::same_values(z.to_vector_double(), before));
  }
  // With the input requiring grad, the output is a result of its own: changing it in place is
  // recorded as for any op's result, and the gradient is the out-of-place one's.
  for (int64_t n : {1, 8, 70}) {
    INFO("n " << n);
    const Tensor base = randn({3, n, 2}, TensorOptions(DType::Float64));
    Tensor z1 = base.clone().set_requires_grad(true), z2 = base.clone().set_requires_grad(true);
    Tensor out = fft(z1, std::nullopt, 0);
    out.mul_(2.0);
    sum(mul(out, out)).backward();
    sum(square(mul(fft(z2, std::nullopt, 0), 2.0))).backward();
    CHECK(same(z1.grad(), z2.grad()));
  }
}

TEST_CASE("fft: complex_abs's output may be changed in place before backward", "[fft]") {
  Tensor z = tensor(std::vector<double>{3, 4, 0, 0}, {2, 2}).set_requires_grad(true);
  Tensor a = complex_abs(z);
  a.mul_(2.0);  // |z| is recomputed in backward, not read from a
  sum(a).backward();
  const std::vector<double> g = z.grad().to_vector_double();
  CHECK(g[0] == Approx(1.2).epsilon(1e-15));
  CHECK(g[1] == Approx(1.6).epsilon(1e-15));
  CHECK(g[2] == 0.0);
  CHECK(g[3] == 0.0);
}

TEST_CASE("fft: a float16 or bfloat16 input under autocast is transformed in float32", "[fft]") {
  const Tensor x = randn({2, 100}).to(DType::BFloat16);
  Tensor got;
  {
    AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
    got = rfft(x);
  }
  CHECK(got.dtype() == DType::Float32);
  CHECK(same(got, rfft(x.to(DType::Float32))));
  CHECK_THROWS_AS(rfft(x), DTypeError);  // without autocast, refused
}
