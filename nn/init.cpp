// torch.nn.init in kiln. trunc_normal_ inverts the normal CDF with tensor ops (erfinv by Giles'
// single-precision polynomials, and past 6 std Newton's method on the tail's asymptotic series) so
// it runs on the tensor's own device and generator, in one pass, however far into a tail [a, b] lies
// (drawn as the tail's probability there, which floats hold precisely: float32 to about 11.5 std,
// float64, which takes over there, to about 37); rejection sampling would loop there. orthogonal_
// takes the QR decomposition of its draw on the host, by Householder reflections in float64.
#include "nn/init.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/index.h"
#include "core/ops/random.h"
#include "core/ops/topk.h"
#include "core/ops/triangle.h"
#include "kernels/error.h"

namespace kiln::nn::init {
namespace {

// Standard normal CDF.
double phi_cdf(double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); }

// Horner evaluation of c[0] w^(n-1) + ... + c[n-1] over a tensor w.
template <size_t N> Tensor polyval(const double (&c)[N], const Tensor& w) {
  Tensor p = w * c[0] + c[1];
  for (size_t k = 2; k < N; ++k) p = p * w + c[k];
  return p;
}

// erfinv(x) for x in (-1, 1), relative error about 1e-7 (M. Giles, "Approximating the erfinv
// function"), from x and w = -log(1 - x^2): the caller forms w, precisely when it knows 1 - |x|.
Tensor erfinv_w(const Tensor& x, const Tensor& w) {
  static constexpr double central[] = {2.81022636e-08,  3.43273939e-07, -3.5233877e-06,
                                       -4.39150654e-06, 0.00021858087,  -0.00125372503,
                                       -0.00417768164,  0.246640727,    1.50140941};
  static constexpr double tail[] = {-0.000200214257, 0.000100950558, 0.00134934322,
                                    -0.00367342844,  0.00573950773,  -0.0076224613,
                                    0.00943887047,   1.00167406,     2.83297682};
  Tensor p = polyval(central, w - 2.5);
  Tensor q = polyval(tail, sqrt(w) - 3.0);
  return where(lt(w, 5.0), p, q) * x;
}

Tensor erfinv(const Tensor& x) { return erfinv_w(x, neg(log((1.0 - x) * (1.0 + x)))); }

// The standard normal quantile x > 0 whose two-sided tail erfc(x / sqrt 2) is p, for p below the
// tail past 6 std: Giles' polynomials leave their range there (at 7 std they were 0.03 off, at 8 they
// returned negative values). Newton's method on log erfc(x / sqrt 2) = -x^2/2 - log x - log(pi/2)/2
// + log S(x), S the asymptotic series 1 - 1/x^2 + 3/x^4 - ... (12 terms: relative error below 1e-7
// from 6 std on), from the first-order solution x^2 = L - log L - log(pi/2), L = -2 log p.
Tensor far_tail_quantile(const Tensor& p) {
  const double half_log_half_pi = 0.5 * std::log(std::numbers::pi / 2.0);
  const Tensor log_p = log(p);
  const Tensor big_l = log_p * -2.0;
  Tensor x = sqrt(big_l - log(big_l) - 2.0 * half_log_half_pi);
  for (int iteration = 0; iteration < 3; ++iteration) {
    const Tensor inv2 = 1.0 / (x * x);
    // S and x S'(x) by Horner over 1/x^2: S = sum_k (-1)^k (2k-1)!! / x^(2k), x S' = sum_k -2k term_k.
    Tensor s = ones_like(x), xs = zeros_like(x), term = ones_like(x);
    double odd = 1.0;
    for (int k = 1; k <= 12; ++k) {
      odd *= 2.0 * k - 1.0;
      term = term * inv2;
      const double sign = k % 2 == 1 ? -1.0 : 1.0;
      s = s + term * (sign * odd);
      xs = xs + term * (sign * odd * -2.0 * k);
    }
    const Tensor h = x * x * -0.5 - log(x) - half_log_half_pi + log(s) - log_p;
    const Tensor dh = neg(x) - 1.0 / x + xs / (s * x);
    x = x - h / dh;
  }
  return x;
}

void check_defined(const char* op, const Tensor& t) {
  if (!t.defined()) throw Error(std::string(op) + ": tensor is undefined");
}

// calculate_fan_in_and_fan_out with errors naming `op`.
std::pair<int64_t, int64_t> fans(const Tensor& t, const char* op) {
  check_defined(op, t);
  if (t.dim() < 2) {
    throw ShapeError(std::string(op) + ": fan in and fan out need a tensor of at least 2 dims, got shape " +
                     shape_str(t.sizes()));
  }
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);  // a product of t's sizes: fits
  return {t.size(1) * receptive, t.size(0) * receptive};
}

int64_t fan_for(const Tensor& t, FanMode mode, const char* op) {
  auto [fan_in, fan_out] = fans(t, op);
  int64_t fan = mode == FanMode::FanIn ? fan_in : fan_out;
  if (fan <= 0) throw Error(std::string(op) + ": fan is 0 for a tensor of shape " + shape_str(t.sizes()));
  return fan;
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Conv:
    case Nonlinearity::Sigmoid: return 1.0;
    case Nonlinearity::Tanh: return 5.0 / 3.0;
    case Nonlinearity::ReLU: return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: return std::sqrt(2.0 / (1.0 + param * param));
  }
  return 1.0;
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  return fans(t, "calculate_fan_in_and_fan_out");
}

Tensor uniform_(const Tensor& t, double a, double b) {
  check_defined("uniform_", t);
  NoGradGuard no_grad;
  Tensor h = t;
  h.uniform_(a, b);
  return h;
}

Tensor normal_(const Tensor& t, double mean, double std) {
  check_defined("normal_", t);
  NoGradGuard no_grad;
  Tensor h = t;
  h.normal_(mean, std);
  return h;
}

Tensor constant_(const Tensor& t, double value) {
  check_defined("constant_", t);
  NoGradGuard no_grad;
  Tensor h = t;
  if (t.is_floating_point()) {
    h.fill_(value);
  } else if (std::isfinite(value) && value == std::trunc(value)) {
    h.fill_(static_cast<int64_t>(value));  // an integer value fills an integer tensor exactly
  } else {
    throw DTypeError("constant_: cannot fill a " + std::string(dtype_name(t.dtype())) + " tensor with " +
                     num_str(value));
  }
  return h;
}

Tensor zeros_(const Tensor& t) {
  check_defined("zeros_", t);
  NoGradGuard no_grad;
  Tensor h = t;
  h.zero_();
  return h;
}

Tensor ones_(const Tensor& t) {
  check_defined("ones_", t);
  NoGradGuard no_grad;
  Tensor h = t;
  h.fill_(1);
  return h;
}

Tensor kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_defined("kaiming_uniform_", t);
  if (t.numel() == 0) return t;
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan_for(t, mode, "kaiming_uniform_")));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(t, -bound, bound);
}

Tensor kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_defined("kaiming_normal_", t);
  if (t.numel() == 0) return t;
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan_for(t, mode, "kaiming_normal_")));
  return normal_(t, 0.0, std);
}

Tensor xavier_uniform_(const Tensor& t, double gain) {
  auto [fan_in, fan_out] = fans(t, "xavier_uniform_");
  if (t.numel() == 0) return t;
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(t, -bound, bound);
}

Tensor xavier_normal_(const Tensor& t, double gain) {
  auto [fan_in, fan_out] = fans(t, "xavier_normal_");
  if (t.numel() == 0) return t;
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

Tensor trunc_normal_(const Tensor& t, double mean, double std, double a, double b) {
  if (!t.defined()) throw Error("trunc_normal_: tensor is undefined");
  if (!t.is_floating_point()) {
    throw DTypeError(std::string("trunc_normal_: needs a floating tensor, got ") + dtype_name(t.dtype()));
  }
  if (!(a < b)) throw Error("trunc_normal_: needs a < b, got a=" + num_str(a) + " b=" + num_str(b));
  if (!(std >= 0) || !std::isfinite(std)) {
    throw Error("trunc_normal_: std must be finite and non-negative, got " + num_str(std));
  }
  if (!std::isfinite(mean)) throw Error("trunc_normal_: mean must be finite, got " + num_str(mean));
  NoGradGuard no_grad;
  Tensor h = t;
  if (t.numel() == 0) return h;
  if (std == 0) {
    h.fill_(std::min(std::max(mean, a), b));
    return h;
  }
  // u uniform on [2 Phi(alpha) - 1, 2 Phi(beta) - 1] maps through mean + std * sqrt(2) * erfinv(u)
  // onto the normal restricted to [a, b]. Float32 work unless the tensor is float64.
  const DType work = t.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  const double alpha = (a - mean) / std, beta = (b - mean) / std;
  if (alpha >= 0.0 || beta <= 0.0) {
    // [a, b] on one side of the mean: u is drawn as its distance p = 1 - |u| from 1, the tail's
    // probability erfc(t / sqrt 2), which a float keeps to full relative precision however small
    // (1 - u itself rounds to a handful of values past about 4.5 std in float32, 8 in float64).
    // Mirrored below the mean.
    const bool upper = alpha >= 0.0;
    const double near = upper ? alpha : -beta, far = upper ? beta : -alpha;
    // Past about 11.5 std the tail's probability nears float32's smallest normal (2^-126 at 13 std),
    // where every draw would collapse onto the bound: float64 work there (to about 37 std).
    const DType tail_work = std::erfc(near / std::sqrt(2.0)) < 0x1p-100 ? DType::Float64 : work;
    const double tiny = tail_work == DType::Float64 ? 0x1p-1022 : 0x1p-126;  // the smallest normal: log stays finite
    Tensor p = empty(t.sizes(), TensorOptions(tail_work, t.device()));
    p.uniform_(std::max(std::erfc(far / std::sqrt(2.0)), tiny), std::max(std::erfc(near / std::sqrt(2.0)), tiny));
    Tensor z = erfinv_w(1.0 - p, neg(log(p * (2.0 - p)))) * std::sqrt(2.0);
    if (far > 6.0) z = where(lt(p, std::erfc(6.0 / std::sqrt(2.0))), far_tail_quantile(p), z);
    z = z * std;
    h.copy_(clamp(upper ? mean + z : mean - z, a, b));
    return h;
  }
  const double lo = 2.0 * phi_cdf((a - mean) / std) - 1.0;
  const double hi = 2.0 * phi_cdf((b - mean) / std) - 1.0;
  Tensor u = empty(t.sizes(), TensorOptions(work, t.device()));
  u.uniform_(lo, hi);
  // erfinv(+-1) is infinite: keep u one ulp inside (-1, 1); the final clamp then catches any
  // rounding past the bounds.
  const double edge = work == DType::Float64 ? 1.0 - 0x1p-53 : 1.0 - 0x1p-24;
  u = clamp(u, -edge, edge);
  Tensor x = clamp(erfinv(u) * (std * std::sqrt(2.0)) + mean, a, b);
  h.copy_(x);
  return h;
}

namespace {

void check_floating_init(const char* name, const Tensor& t) {
  if (!t.defined()) throw Error(std::string(name) + ": tensor is undefined");
  if (!t.is_floating_point()) {
    throw DTypeError(std::string(name) + ": needs a floating tensor, got " + dtype_name(t.dtype()));
  }
}

// Q of the QR decomposition of the row-major m x n matrix a (m >= n) by Householder reflections,
// its columns scaled by the signs of R's diagonal: an m x n matrix with orthonormal columns.
std::vector<double> householder_q(std::vector<double> a, int64_t m, int64_t n) {
  auto at = [&](int64_t i, int64_t j) -> double& { return a[static_cast<size_t>(i * n + j)]; };
  std::vector<std::vector<double>> reflectors;
  std::vector<double> r_sign(static_cast<size_t>(n), 1.0);
  for (int64_t k = 0; k < n; ++k) {
    double norm = 0;
    for (int64_t i = k; i < m; ++i) norm += at(i, k) * at(i, k);
    norm = std::sqrt(norm);
    // v = x + sign(x0) |x| e0 reflects x onto -sign(x0) |x| e0, the diagonal of R.
    const double alpha = at(k, k) >= 0 ? -norm : norm;
    r_sign[static_cast<size_t>(k)] = alpha >= 0 ? 1.0 : -1.0;
    std::vector<double> v(static_cast<size_t>(m - k));
    for (int64_t i = k; i < m; ++i) v[static_cast<size_t>(i - k)] = at(i, k);
    v[0] -= alpha;
    double vv = 0;
    for (double e : v) vv += e * e;
    if (vv > 0) {
      for (int64_t j = k; j < n; ++j) {
        double dot = 0;
        for (int64_t i = k; i < m; ++i) dot += v[static_cast<size_t>(i - k)] * at(i, j);
        const double f = 2 * dot / vv;
        for (int64_t i = k; i < m; ++i) at(i, j) -= f * v[static_cast<size_t>(i - k)];
      }
    }
    reflectors.push_back(std::move(v));
  }
  // Q = H_0 ... H_{n-1} applied to the first n columns of the identity, last reflector first.
  std::vector<double> q(static_cast<size_t>(m * n), 0.0);
  auto q_at = [&](int64_t i, int64_t j) -> double& { return q[static_cast<size_t>(i * n + j)]; };
  for (int64_t j = 0; j < n; ++j) q_at(j, j) = 1.0;
  for (int64_t k = n - 1; k >= 0; --k) {
    const std::vector<double>& v = reflectors[static_cast<size_t>(k)];
    double vv = 0;
    for (double e : v) vv += e * e;
    if (vv == 0) continue;
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t i = k; i < m; ++i) dot += v[static_cast<size_t>(i - k)] * q_at(i, j);
      const double f = 2 * dot / vv;
      for (int64_t i = k; i < m; ++i) q_at(i, j) -= f * v[static_cast<size_t>(i - k)];
    }
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) q_at(i, j) *= r_sign[static_cast<size_t>(j)];
  }
  return q;
}

}  // namespace

Tensor eye_(const Tensor& t) {
  check_floating_init("eye_", t);
  if (t.dim() != 2) throw ShapeError("eye_: needs a 2-d tensor, got shape " + shape_str(t.sizes()));
  NoGradGuard no_grad;
  Tensor h = t;
  h.zero_();
  Tensor diag = diagonal(h);
  diag.fill_(1.0);
  return h;
}

Tensor dirac_(const Tensor& t, int64_t groups) {
  check_floating_init("dirac_", t);
  if (t.dim() < 3 || t.dim() > 5) {
    throw ShapeError("dirac_: needs a 3-, 4- or 5-d weight [out, in, *kernel], got shape " + shape_str(t.sizes()));
  }
  if (groups <= 0 || t.size(0) % groups != 0) {
    throw Error("dirac_: the " + std::to_string(t.size(0)) +
                " output channels must split into groups = " + std::to_string(groups));
  }
  NoGradGuard no_grad;
  Tensor h = t;
  h.zero_();
  const int64_t per_group = t.size(0) / groups, channels = std::min(per_group, t.size(1));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t d = 0; d < channels; ++d) {
      Tensor centre = h.select(0, g * per_group + d).select(0, d);
      while (centre.dim() > 0) centre = centre.select(0, centre.size(0) / 2);
      centre.fill_(1.0);
    }
  }
  return h;
}

Tensor orthogonal_(const Tensor& t, double gain) {
  check_floating_init("orthogonal_", t);
  if (t.dim() < 2) throw ShapeError("orthogonal_: needs at least 2 dims, got shape " + shape_str(t.sizes()));
  if (!std::isfinite(gain)) throw Error("orthogonal_: gain must be finite, got " + num_str(gain));
  NoGradGuard no_grad;
  Tensor h = t;
  if (t.numel() == 0) return h;
  const int64_t rows = t.size(0), cols = t.numel() / rows;
  const int64_t m = std::max(rows, cols), n = std::min(rows, cols);
  // The draw on the tensor's device, as [m, n]; Q's columns become t's rows when rows < cols.
  Tensor draw = empty({m, n}, TensorOptions(DType::Float64, t.device()));
  normal_(draw);
  const std::vector<double> q = householder_q(draw.to(Device::cpu()).to_vector_double(), m, n);
  Tensor qt = tensor(q, {m, n}, TensorOptions(DType::Float64)).to(t.device());
  if (rows < cols) qt = qt.t();
  h.copy_((qt * gain).reshape(t.sizes()));
  return h;
}

Tensor sparse_(const Tensor& t, double sparsity, double std) {
  check_floating_init("sparse_", t);
  if (t.dim() != 2) throw ShapeError("sparse_: needs a 2-d tensor, got shape " + shape_str(t.sizes()));
  if (!(sparsity >= 0.0 && sparsity <= 1.0))
    throw Error("sparse_: sparsity must be in [0, 1], got " + num_str(sparsity));
  if (!(std >= 0) || !std::isfinite(std))
    throw Error("sparse_: std must be finite and non-negative, got " + num_str(std));
  NoGradGuard no_grad;
  Tensor h = t;
  normal_(h, 0.0, std);
  const int64_t rows = t.size(0), zeroed = static_cast<int64_t>(std::ceil(sparsity * static_cast<double>(rows)));
  if (zeroed == 0 || t.numel() == 0) return h;
  // Each column's first `zeroed` rows of a random order.
  const Tensor order = argsort(rand({rows, t.size(1)}, TensorOptions(DType::Float32, t.device())), 0);
  h.copy_(scatter(h, 0, order.narrow(0, 0, zeroed), 0.0));
  return h;
}

}  // namespace kiln::nn::init
