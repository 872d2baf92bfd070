// The window functions of core/ops/factory.h: the windows at lengths PyTorch's documentation works
// through, their periodic forms as the symmetric window one longer cut short, their symmetry,
// kaiser_window against its definition through a long double series of I0, options and bad
// arguments.
#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

namespace {

constexpr double kPi = std::numbers::pi;

std::vector<double> vals(const Tensor& t) { return t.to_vector_double(); }

void check_close(const std::vector<double>& got, const std::vector<double>& want, double eps = 1e-15) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(eps));
  }
}

// I0 by its power series in long double: exact to rounding for the arguments a window uses.
double i0_series(long double x) {
  long double term = 1, sum = 1;
  for (int k = 1; k < 200; ++k) {
    term *= (x / 2) * (x / 2) / (static_cast<long double>(k) * k);
    sum += term;
  }
  return static_cast<double>(sum);
}

}  // namespace

TEST_CASE("window: small symmetric and periodic windows by hand", "[window]") {
  check_close(vals(hann_window(5, false, DType::Float64)), {0.0, 0.5, 1.0, 0.5, 0.0});
  check_close(vals(hann_window(4, true, DType::Float64)), {0.0, 0.5, 1.0, 0.5});
  check_close(vals(hamming_window(3, false, 0.54, 0.46, DType::Float64)), {0.08, 1.0, 0.08});
  check_close(vals(hamming_window(3, false, 0.5, 0.5, DType::Float64)), {0.0, 1.0, 0.0});
  check_close(vals(blackman_window(3, false, DType::Float64)), {0.0, 1.0, 0.0});
  check_close(vals(blackman_window(4, true, DType::Float64)), {0.0, 0.34, 1.0, 0.34});
  check_close(vals(bartlett_window(5, false, DType::Float64)), {0.0, 0.5, 1.0, 0.5, 0.0});
  check_close(vals(bartlett_window(4, true, DType::Float64)), {0.0, 0.5, 1.0, 0.5});
  check_close(vals(bartlett_window(4, false, DType::Float64)), {0.0, 2.0 / 3, 2.0 / 3, 0.0});
  // beta = 0 is the rectangle.
  check_close(vals(kaiser_window(6, true, 0.0, DType::Float64)), std::vector<double>(6, 1.0));
}

TEST_CASE("window: lengths 0 and 1, periodic as the longer symmetric window cut, symmetry", "[window]") {
  const std::vector<std::function<Tensor(int64_t, bool)>> windows = {
      [](int64_t n, bool p) { return hann_window(n, p, DType::Float64); },
      [](int64_t n, bool p) { return hamming_window(n, p, 0.54, 0.46, DType::Float64); },
      [](int64_t n, bool p) { return blackman_window(n, p, DType::Float64); },
      [](int64_t n, bool p) { return bartlett_window(n, p, DType::Float64); },
      [](int64_t n, bool p) { return kaiser_window(n, p, 8.6, DType::Float64); },
  };
  for (size_t k = 0; k < windows.size(); ++k) {
    INFO("window " << k);
    for (bool periodic : {true, false}) {
      CHECK(windows[k](0, periodic).sizes() == Shape{0});
      CHECK(vals(windows[k](1, periodic)) == std::vector<double>{1.0});
    }
    for (int64_t n : {2, 7, 64, 513}) {
      INFO("length " << n);
      const std::vector<double> periodic = vals(windows[k](n, true));
      std::vector<double> longer = vals(windows[k](n + 1, false));
      longer.pop_back();
      check_close(periodic, longer);
      const std::vector<double> sym = vals(windows[k](n, false));
      for (int64_t i = 0; i < n; ++i) CHECK(sym[i] == Approx(sym[n - 1 - i]).margin(1e-15));
      // Odd symmetric windows peak at 1 in the middle (the kaiser one by its i0(beta) / i0(beta)).
      if (n % 2 == 1) CHECK(sym[n / 2] == Approx(1.0).margin(1e-15));
    }
  }
}

TEST_CASE("window: hann is sin^2 and kaiser follows its definition", "[window]") {
  const int64_t n = 33;
  const std::vector<double> hann = vals(hann_window(n, false, DType::Float64));
  for (int64_t i = 0; i < n; ++i) {
    const double s = std::sin(kPi * static_cast<double>(i) / (n - 1));
    CHECK(hann[i] == Approx(s * s).margin(1e-15));
  }
  for (double beta : {0.5, 5.0, 14.0, 60.0}) {
    INFO("beta " << beta);
    const std::vector<double> w = vals(kaiser_window(n, true, beta, DType::Float64));
    for (int64_t i = 0; i < n; ++i) {
      const double r = 2.0 * static_cast<double>(i) / static_cast<double>(n) - 1;
      const double want = i0_series(beta * std::sqrt(1 - r * r)) / i0_series(beta);
      CHECK(w[i] == Approx(want).epsilon(1e-13).margin(1e-300));
    }
  }
  // A beta far past where i0(beta) overflows still gives a window: 1 in the middle, tiny ends.
  const std::vector<double> sharp = vals(kaiser_window(9, false, 2000.0, DType::Float64));
  CHECK(sharp[4] == 1.0);
  CHECK(sharp[0] == 0.0);
  // Next to the middle the ratio is e^(a - beta) sqrt(beta / a) to within 1 / (8a).
  const double a = 2000.0 * std::sqrt(1 - 0.25 * 0.25);
  CHECK(sharp[3] == Approx(std::exp(a - 2000.0) * std::sqrt(2000.0 / a)).epsilon(1e-4));
}

TEST_CASE("window: options give the dtype, device and requires_grad, rounded once", "[window]") {
  const Tensor w = hann_window(10, true, TensorOptions(DType::BFloat16, Device::cpu(), true));
  CHECK(w.dtype() == DType::BFloat16);
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
  CHECK(vals(w) == vals(hann_window(10, true, DType::Float64).to(DType::BFloat16)));
  CHECK(hamming_window(8).dtype() == DType::Float32);
  // PyTorch's C++ overloads: (length, options) with the defaults, and (length, periodic, options).
  CHECK(vals(hann_window(9, DType::Float64)) == vals(hann_window(9, true, DType::Float64)));
  CHECK(vals(hamming_window(9, DType::Float64)) == vals(hamming_window(9, true, 0.54, 0.46, DType::Float64)));
  CHECK(vals(hamming_window(9, false, DType::Float64)) == vals(hamming_window(9, false, 0.54, 0.46, DType::Float64)));
  CHECK(vals(blackman_window(9, DType::Float64)) == vals(blackman_window(9, true, DType::Float64)));
  CHECK(vals(bartlett_window(9, DType::Float64)) == vals(bartlett_window(9, true, DType::Float64)));
  CHECK(vals(kaiser_window(9, DType::Float64)) == vals(kaiser_window(9, true, 12.0, DType::Float64)));
  CHECK(vals(kaiser_window(9, false, DType::Float64)) == vals(kaiser_window(9, false, 12.0, DType::Float64)));
  // i0 is even: a negative beta gives the positive one's window, as PyTorch's.
  CHECK(vals(kaiser_window(9, false, -6.0, DType::Float64)) == vals(kaiser_window(9, false, 6.0, DType::Float64)));
  CHECK(vals(kaiser_window(12, false, 12.0, DType::Float32)) ==
        vals(kaiser_window(12, false, 12.0, DType::Float64).to(DType::Float32)));
}

TEST_CASE("window: bad arguments name the op and the value", "[window]") {
  CHECK_THROWS_WITH(hann_window(-1), Catch::Contains("hann_window") && Catch::Contains("-1"));
  CHECK_THROWS_AS(hamming_window(4, true, 0.54, 0.46, DType::Int64), DTypeError);
  CHECK_THROWS_WITH(blackman_window(4, true, DType::Bool),
                    Catch::Contains("blackman_window") && Catch::Contains("bool"));
  CHECK_THROWS_WITH(bartlett_window(-3), Catch::Contains("bartlett_window") && Catch::Contains("-3"));
  CHECK_THROWS_WITH(kaiser_window(4, true, std::nan("")), Catch::Contains("kaiser_window") && Catch::Contains("nan"));
  CHECK_THROWS_WITH(kaiser_window(4, true, -INFINITY), Catch::Contains("kaiser_window") && Catch::Contains("inf"));
  CHECK_THROWS_WITH(kaiser_window(-2, true, 1.0), Catch::Contains("kaiser_window") && Catch::Contains("-2"));
}
