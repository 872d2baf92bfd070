// torch.special's orthogonal polynomials composed of elementwise ops (core/ops/polynomial.h says
// how each is computed). Values are computed off the tape in the compute dtype and rounded once;
// the gradient with respect to x is one node with the derivative's identity.
#include "core/ops/polynomial.h"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <string>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/math.h"
#include "core/ops/pointwise.h"
#include "core/ops/reduce.h"
#include "kernels/error.h"

namespace kiln {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// The largest degree a recurrence runs to: 2^20 passes take some 4 s on one element on a 2-core
// CPU, and grow with the tensor.
constexpr int64_t kMaxDegree = int64_t{1} << 20;
// Chebyshev's recurrences run up to this degree; past it their closed forms take over.
constexpr int64_t kChebyshevRecurrence = 8;

enum class Family { ChebyshevT, ChebyshevU, ChebyshevV, ChebyshevW, HermiteH, HermiteHe, Laguerre, Legendre };

bool is_chebyshev(Family f) {
  return f == Family::ChebyshevT || f == Family::ChebyshevU || f == Family::ChebyshevV || f == Family::ChebyshevW;
}

DType compute_dtype(DType out) { return out == DType::Float64 ? DType::Float64 : DType::Float32; }

// The degrees of a call: m = trunc(n) in float64 whatever the compute dtype (float32 would merge
// n and n - 1 past 2^24, and their parities), of the result's shape (NaN and inf kept), and, once
// known, the largest finite one (-1 when there is none). Uniform: one int64 degree serves every
// element, so no element needs picking out.
struct Degrees {
  Tensor m;
  std::optional<int64_t> top;
  bool uniform = false;
};

// A recurrence runs to `degree` (`what`: "its recurrence", or its gradient's).
void check_degree(const char* op, double degree, const char* what) {
  if (degree > static_cast<double>(kMaxDegree)) {
    const std::string shown = degree < 9e18 ? std::to_string(static_cast<int64_t>(degree)) : num_str(degree);
    throw Error(std::string(op) + ": degree n = " + shown + " is past the largest one " + what +
                " runs to, 2^20 = " + std::to_string(kMaxDegree));
  }
}

// The largest finite degree of d, read to the host once and kept; checked against the limit
// before it becomes an int64 (a degree past 2^63 has none).
int64_t top_of(const char* op, Degrees& d, const char* what) {
  double top = d.top ? static_cast<double>(*d.top) : -1.0;
  if (!d.top && d.m.numel() > 0) top = max(where(isfinite(d.m), d.m, -1.0)).item<double>();
  check_degree(op, top, what);
  d.top = static_cast<int64_t>(std::max(top, -1.0));
  return *d.top;
}

// The degrees n - by.
Degrees lowered(const Degrees& d, int64_t by) {
  Degrees r{sub(d.m, static_cast<double>(by)), std::nullopt, d.uniform};
  if (d.top) r.top = *d.top - by;
  return r;
}

// A three-term recurrence: p_0 = 1, p_1 = a0 x + b0, and p_(k+1) = ((a x + b) p_k - c p_(k-1)) / d
// with {a, b, c, d} = step(k). The division comes last so that exact values stay exact (Laguerre's
// 1 at x = 0, Legendre's 1 at x = 1).
struct Recurrence {
  double a0 = 1, b0 = 0;
  std::array<double, 4> (*step)(double k, double order) = nullptr;
  double order = 0;  // Gegenbauer's lambda, Laguerre's alpha
};

Recurrence chebyshev_recurrence(Family f) {
  const double b0 = f == Family::ChebyshevV ? -1.0 : f == Family::ChebyshevW ? 1.0 : 0.0;
  return {f == Family::ChebyshevT ? 1.0 : 2.0, b0, [](double, double) { return std::array<double, 4>{2, 0, 1, 1}; }};
}

Recurrence hermite_h_recurrence() {
  return {2, 0, [](double k, double) { return std::array<double, 4>{2, 0, 2 * k, 1}; }};
}

Recurrence hermite_he_recurrence() {
  return {1, 0, [](double k, double) { return std::array<double, 4>{1, 0, k, 1}; }};
}

// Laguerre's generalized polynomials of order alpha: (k + 1) L_(k+1) = (2k + 1 + alpha - x) L_k -
// (k + alpha) L_(k-1), L_1 = 1 + alpha - x.
Recurrence laguerre_recurrence(double alpha) {
  return {-1, 1 + alpha,
          [](double k, double a) {
            return std::array<double, 4>{-1, 2 * k + 1 + a, k + a, k + 1};
          },
          alpha};
}

// Gegenbauer's polynomials of order lambda: (k + 1) C_(k+1) = 2 (k + lambda) x C_k - (k + 2 lambda
// - 1) C_(k-1), C_1 = 2 lambda x. Legendre's are those of order 1/2.
Recurrence gegenbauer_recurrence(double lambda) {
  return {2 * lambda, 0,
          [](double k, double l) {
            return std::array<double, 4>{2 * (k + l), 0, k + 2 * l - 1, k + 1};
          },
          lambda};
}

Tensor affine(const Tensor& x, double a, double b) {
  Tensor r = a == 1 ? x : mul(x, a);
  return b == 0 ? r : add(r, b);
}

// The recurrence's p_m at every element whose degree m is at most `top` (0 where m < 0 or m > top);
// for uniform degrees, p_top everywhere. One pass of a few ops per degree.
Tensor run_recurrence(const Recurrence& r, const Tensor& x, const Degrees& d, int64_t top) {
  if (top < 0) return zeros_like(x);
  Tensor prev = ones_like(x);
  Tensor out = d.uniform ? Tensor() : where(eq(d.m, 0.0), prev, 0.0);
  if (top == 0) return d.uniform ? prev : out;
  Tensor cur = affine(x, r.a0, r.b0);
  if (!d.uniform) out = where(eq(d.m, 1.0), cur, out);
  for (int64_t k = 1; k < top; ++k) {
    const auto [a, b, c, den] = r.step(static_cast<double>(k), r.order);
    Tensor next = sub(mul(affine(x, a, b), cur), c == 1 ? prev : mul(prev, c));
    if (den != 1) next = div(next, den);
    prev = std::move(cur);
    cur = std::move(next);
    if (!d.uniform) out = where(eq(d.m, static_cast<double>(k + 1)), cur, out);
  }
  return d.uniform ? cur : out;
}

// Chebyshev's closed form of kind f at y = |x| >= 0, for degrees m >= 0: trigonometric at y =
// cos(t) < 1, hyperbolic at y = cosh(t) > 1 as exp(m t) times a ratio of 1 + exp(-s) or expm1(-s)
// terms (finite wherever the value is), and the exact values at y = 1.
Tensor chebyshev_at_abs(Family f, const Tensor& y, const Tensor& m) {
  const Tensor inside = lt(y, 1.0);
  const Tensor t = acos(where(inside, y, 1.0));
  const Tensor s = acosh(where(inside, 1.0, y));
  const Tensor m_half = add(m, 0.5);
  Tensor in, out, at_one;
  switch (f) {
    case Family::ChebyshevT:
      in = cos(mul(m, t));
      out = cosh(mul(m, s));
      at_one = ones_like(y);
      break;
    case Family::ChebyshevU:
      in = div(sin(mul(add(m, 1.0), t)), sin(t));
      out = mul(exp(mul(m, s)), div(expm1(mul(add(m, 1.0), mul(s, -2.0))), expm1(mul(s, -2.0))));
      at_one = add(m, 1.0);
      break;
    case Family::ChebyshevV:
      // The ratio (1 + exp(-(2m + 1) s)) / (1 + exp(-s)) is below 1: its denominator joins the
      // exponent, so exp(m s) cannot overflow where V does not.
      in = div(cos(mul(m_half, t)), cos(mul(t, 0.5)));
      out = mul(exp(sub(mul(m, s), log1p(exp(neg(s))))), add(exp(mul(m_half, mul(s, -2.0))), 1.0));
      at_one = ones_like(y);
      break;
    default:  // ChebyshevW
      in = div(sin(mul(m_half, t)), sin(mul(t, 0.5)));
      out = mul(exp(mul(m, s)), div(expm1(mul(m_half, mul(s, -2.0))), expm1(neg(s))));
      at_one = add(mul(m, 2.0), 1.0);
      break;
  }
  return where(eq(y, 1.0), at_one, where(inside, in, out));
}

// The closed form at any x, from |x| by the reflections T_n(-x) = (-1)^n T_n(x) (U likewise) and
// V_n(-x) = (-1)^n W_n(x), W_n(-x) = (-1)^n V_n(x).
Tensor chebyshev_closed(Family f, const Tensor& x, const Tensor& m) {
  const Tensor y = abs(x);
  const Tensor positive = chebyshev_at_abs(f, y, m);
  Tensor mirrored = positive;
  if (f == Family::ChebyshevV) mirrored = chebyshev_at_abs(Family::ChebyshevW, y, m);
  if (f == Family::ChebyshevW) mirrored = chebyshev_at_abs(Family::ChebyshevV, y, m);
  const Tensor negative = where(ne(fmod(m, 2.0), 0.0), neg(mirrored), mirrored);
  return where(lt(x, 0.0), negative, positive);
}

// Chebyshev's values: the recurrence up to degree 8, the closed form past it (and for NaN or
// infinite degrees, which give NaN there).
Tensor chebyshev_values(Family f, const Tensor& x, const Degrees& d) {
  const Recurrence r = chebyshev_recurrence(f);
  if (d.uniform) {
    const int64_t n = d.top.value();
    return n <= kChebyshevRecurrence ? run_recurrence(r, x, d, n) : chebyshev_closed(f, x, d.m);
  }
  const Tensor low = run_recurrence(r, x, d, kChebyshevRecurrence);
  return where(le(d.m, static_cast<double>(kChebyshevRecurrence)), low, chebyshev_closed(f, x, d.m));
}

Recurrence recurrence_of(Family f) {
  switch (f) {
    case Family::HermiteH: return hermite_h_recurrence();
    case Family::HermiteHe: return hermite_he_recurrence();
    case Family::Laguerre: return laguerre_recurrence(0);
    default: return gegenbauer_recurrence(0.5);  // Legendre
  }
}

// NaN where the degree is NaN or infinite.
Tensor finite_degrees_only(const Tensor& v, const Degrees& d) { return d.uniform ? v : where(isfinite(d.m), v, kNaN); }

// The infinite values the recurrences miss (they give inf - inf = NaN): at x = +-inf with n >= 1,
// the sign of the leading coefficient (positive; Laguerre's (-1)^n) times sign(x)^n; the same for
// Chebyshev's and Legendre's where |x| > 1 overflowed (their roots lie in (-1, 1), so there the
// value has that sign and a NaN can only be an overflow).
Tensor with_infinities(Family f, const Tensor& x, const Degrees& d, const Tensor& v) {
  const Tensor odd = ne(fmod(d.m, 2.0), 0.0);
  Tensor negative = logical_and(odd, lt(x, 0.0));
  if (f == Family::Laguerre) negative = logical_and(odd, gt(x, 0.0));
  Tensor infinite = isinf(x);
  if (f != Family::HermiteH && f != Family::HermiteHe && f != Family::Laguerre) {
    infinite = logical_or(infinite, logical_and(isnan(v), gt(abs(x), 1.0)));
  }
  const Tensor use = logical_and(infinite, logical_and(ge(d.m, 1.0), isfinite(d.m)));
  return where(use, where(negative, full_like(v, -kInf), kInf), v);
}

Tensor polynomial_values(const char* op, Family f, const Tensor& x, Degrees& d) {
  const Tensor v = is_chebyshev(f) ? chebyshev_values(f, x, d)
                                   : run_recurrence(recurrence_of(f), x, d, top_of(op, d, "its recurrence"));
  return finite_degrees_only(with_infinities(f, x, d, v), d);
}

// d p_n / dx at x (the shifted forms' argument 2x - 1 for them), by the identities in the header.
Tensor polynomial_slope(const char* op, Family f, const Tensor& x, Degrees& d) {
  Tensor slope;
  if (f == Family::ChebyshevT) {
    slope = mul(d.m, chebyshev_values(Family::ChebyshevU, x, lowered(d, 1)));
  } else {
    const int64_t top = top_of(op, d, "its gradient's recurrence");
    auto at = [&](const Recurrence& r, int64_t by) { return run_recurrence(r, x, lowered(d, by), top - by); };
    switch (f) {
      case Family::ChebyshevU: slope = mul(at(gegenbauer_recurrence(2), 1), 2.0); break;
      case Family::ChebyshevV:
        slope = mul(sub(at(gegenbauer_recurrence(2), 1), at(gegenbauer_recurrence(2), 2)), 2.0);
        break;
      case Family::ChebyshevW:
        slope = mul(add(at(gegenbauer_recurrence(2), 1), at(gegenbauer_recurrence(2), 2)), 2.0);
        break;
      case Family::HermiteH: slope = mul(mul(d.m, 2.0), at(hermite_h_recurrence(), 1)); break;
      case Family::HermiteHe: slope = mul(d.m, at(hermite_he_recurrence(), 1)); break;
      case Family::Laguerre: slope = neg(at(laguerre_recurrence(1), 1)); break;
      default: slope = at(gegenbauer_recurrence(1.5), 1); break;  // Legendre
    }
  }
  return finite_degrees_only(slope, d);
}

// One polynomial of x at degrees n (a tensor) or `fixed` (when n is null).
Tensor polynomial(const char* op, Family f, bool shifted, const Tensor& x, const Tensor* n, int64_t fixed) {
  ops::check_defined(op, x, "x");
  if (n) {
    ops::check_defined(op, *n, "n");
    ops::common_device(op, {&x, n});
  }
  const Shape shape = n ? broadcast_shapes(x.sizes(), n->sizes(), op) : x.sizes();
  const DType out = ops::float_result(n ? result_type(x, *n) : x.dtype());
  const DType work = compute_dtype(out);
  Tensor xc = x.detach().to(work);
  if (xc.sizes() != shape) xc = xc.expand(shape).contiguous();
  Degrees d;
  Tensor result;
  {
    NoGradGuard no_grad;
    if (n) {
      d.m = trunc(n->detach().to(DType::Float64));
      if (d.m.sizes() != shape) d.m = d.m.expand(shape).contiguous();
    } else {
      d.m = full(shape, static_cast<double>(fixed), TensorOptions(DType::Float64, x.device()));
      d.top = std::max<int64_t>(fixed, -1);
      d.uniform = true;
    }
    const Tensor u = shifted ? sub(mul(xc, 2.0), 1.0) : xc;
    result = polynomial_values(op, f, u, d).to(out);
  }
  if (needs_grad({&x})) {
    const Shape xs = x.sizes();
    const DType in = x.dtype();
    const std::optional<int64_t> top = d.top;
    const bool uniform = d.uniform;
    record_function(op, {x}, {result}, {xc, d.m}, [=](const FunctionNode::Context& ctx) {
      Degrees saved{ctx.saved_at(1), top, uniform};
      const Tensor& xv = ctx.saved_at(0);
      const Tensor u = shifted ? sub(mul(xv, 2.0), 1.0) : xv;
      Tensor slope = polynomial_slope(op, f, u, saved);
      if (shifted) slope = mul(slope, 2.0);
      return TensorList{sum_to(mul(ctx.grads[0].to(work), slope), xs).to(in)};
    });
  }
  return result;
}

// One x for every degree of n: x as a 0-d tensor of n's float dtype on n's device (a float16 n
// rounds x to float16, as PyTorch's wrapped scalars).
Tensor polynomial_at(const char* op, Family f, bool shifted, double x, const Tensor& n) {
  ops::check_defined(op, n, "n");
  const Tensor xt = full({}, x, TensorOptions(ops::float_result(n.dtype()), n.device()));
  return polynomial(op, f, shifted, xt, &n, 0);
}

}  // namespace

#define KILN_POLYNOMIAL(name, family, shifted)                                                           \
  Tensor name(const Tensor& x, const Tensor& n) { return polynomial(#name, family, shifted, x, &n, 0); } \
  Tensor name(const Tensor& x, int64_t n) { return polynomial(#name, family, shifted, x, nullptr, n); }  \
  Tensor name(double x, const Tensor& n) { return polynomial_at(#name, family, shifted, x, n); }

KILN_POLYNOMIAL(chebyshev_polynomial_t, Family::ChebyshevT, false)
KILN_POLYNOMIAL(chebyshev_polynomial_u, Family::ChebyshevU, false)
KILN_POLYNOMIAL(chebyshev_polynomial_v, Family::ChebyshevV, false)
KILN_POLYNOMIAL(chebyshev_polynomial_w, Family::ChebyshevW, false)
KILN_POLYNOMIAL(shifted_chebyshev_polynomial_t, Family::ChebyshevT, true)
KILN_POLYNOMIAL(shifted_chebyshev_polynomial_u, Family::ChebyshevU, true)
KILN_POLYNOMIAL(shifted_chebyshev_polynomial_v, Family::ChebyshevV, true)
KILN_POLYNOMIAL(shifted_chebyshev_polynomial_w, Family::ChebyshevW, true)
KILN_POLYNOMIAL(hermite_polynomial_h, Family::HermiteH, false)
KILN_POLYNOMIAL(hermite_polynomial_he, Family::HermiteHe, false)
KILN_POLYNOMIAL(laguerre_polynomial_l, Family::Laguerre, false)
KILN_POLYNOMIAL(legendre_polynomial_p, Family::Legendre, false)

#undef KILN_POLYNOMIAL

}  // namespace kiln
