// The window functions of core/ops/factory.h: each value from its closed form in float64 on the
// host, rounded once to the requested dtype and moved to the requested device.
#include "core/ops/factory.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <string>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
#include "core/ops/special.h"
#include "kernels/error.h"

namespace kiln {
namespace {

constexpr double kPi = std::numbers::pi;

void check_window(const char* op, int64_t length, const TensorOptions& options) {
  if (length < 0) throw Error(std::string(op) + ": window_length must be non-negative, got " + std::to_string(length));
  if (!is_floating(options.dtype)) {
    throw DTypeError(std::string(op) + ": the window's dtype must be floating, got " + ops::dtype_str(options.dtype));
  }
}

// The positions n / (N - 1) in [0, 1] of the window's values, where N is the length of the
// symmetric window (length + 1 when periodic). Empty for lengths below 2, whose windows are ones.
std::vector<double> positions(int64_t length, bool periodic) {
  std::vector<double> t;
  if (length < 2) return t;
  const double last = static_cast<double>(periodic ? length : length - 1);
  for (int64_t n = 0; n < length; ++n) t.push_back(static_cast<double>(n) / last);
  return t;
}

// A float64 window in options' dtype, device and requires_grad.
Tensor finish_window(const Tensor& w, const TensorOptions& options) {
  Tensor out = w.to(options.dtype).to(options.device);
  if (options.requires_grad) out.set_requires_grad(true);
  return out;
}

// The window whose value at position t is shape(t).
Tensor make_window(const char* op, int64_t length, bool periodic, const TensorOptions& options,
                   const std::function<double(double)>& shape) {
  check_window(op, length, options);
  std::vector<double> values(static_cast<size_t>(length), 1.0);
  const std::vector<double> t = positions(length, periodic);
  for (size_t n = 0; n < t.size(); ++n) values[n] = shape(t[n]);
  return finish_window(tensor(values, {}, TensorOptions(DType::Float64)), options);
}

// The generalized cosine window sum_k a_k cos(2 pi k t) with alternating signs, as Hann, Hamming
// and Blackman are.
double cosine_sum(double t, std::initializer_list<double> a) {
  double sum = 0, sign = 1;
  int k = 0;
  for (double ak : a) {
    sum += sign * ak * std::cos(2 * kPi * k++ * t);
    sign = -sign;
  }
  return sum;
}

}  // namespace

Tensor hann_window(int64_t window_length, bool periodic, TensorOptions options) {
  return make_window("hann_window", window_length, periodic, options, [](double t) {
    return cosine_sum(t, {0.5, 0.5});
  });
}

Tensor hann_window(int64_t window_length, TensorOptions options) { return hann_window(window_length, true, options); }

Tensor hamming_window(int64_t window_length, TensorOptions options) {
  return hamming_window(window_length, true, options);
}

Tensor hamming_window(int64_t window_length, bool periodic, TensorOptions options) {
  return hamming_window(window_length, periodic, 0.54, 0.46, options);
}

Tensor hamming_window(int64_t window_length, bool periodic, double alpha, double beta, TensorOptions options) {
  return make_window("hamming_window", window_length, periodic, options, [=](double t) {
    return cosine_sum(t, {alpha, beta});
  });
}

Tensor blackman_window(int64_t window_length, bool periodic, TensorOptions options) {
  return make_window("blackman_window", window_length, periodic, options, [](double t) {
    return cosine_sum(t, {0.42, 0.5, 0.08});
  });
}

Tensor blackman_window(int64_t window_length, TensorOptions options) {
  return blackman_window(window_length, true, options);
}

Tensor bartlett_window(int64_t window_length, TensorOptions options) {
  return bartlett_window(window_length, true, options);
}

Tensor bartlett_window(int64_t window_length, bool periodic, TensorOptions options) {
  return make_window("bartlett_window", window_length, periodic, options,
                     [](double t) { return 1 - std::fabs(2 * t - 1); });
}

Tensor kaiser_window(int64_t window_length, TensorOptions options) {
  return kaiser_window(window_length, true, options);
}

Tensor kaiser_window(int64_t window_length, bool periodic, TensorOptions options) {
  return kaiser_window(window_length, periodic, 12.0, options);
}

Tensor kaiser_window(int64_t window_length, bool periodic, double beta, TensorOptions options) {
  const char* op = "kaiser_window";
  check_window(op, window_length, options);
  if (!std::isfinite(beta)) throw Error(std::string(op) + ": beta must be finite, got " + num_str(beta));
  beta = std::fabs(beta);  // i0 is even: -beta gives beta's window, as PyTorch's
  const std::vector<double> t = positions(window_length, periodic);
  if (t.empty()) return make_window(op, window_length, periodic, options, [](double) { return 1.0; });
  // The arguments a = beta sqrt(1 - (2t - 1)^2) <= beta, then i0(a) / i0(beta) as i0e(a) /
  // i0e(beta) e^(a - beta), which no beta overflows.
  std::vector<double> a;
  for (double position : t) {
    const double r = 2 * position - 1;
    a.push_back(beta * std::sqrt(std::max(0.0, 1 - r * r)));
  }
  const Tensor args = tensor(a, {}, TensorOptions(DType::Float64));
  const double scale = i0e(scalar_tensor(beta, TensorOptions(DType::Float64))).item<double>();
  return finish_window(mul(div(i0e(args), scale), exp(sub(args, beta))), options);
}

}  // namespace kiln
