// The scalar math of every elementwise op, written once for the CPU reference and the CUDA kernels.
// C is the compute type (float, double or int64_t); ops that need a float are never called with
// int64_t by core (it promotes their output to a float dtype first).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/elementwise.h"
#include "kernels/macros.h"
#ifndef __CUDACC__
#include "kernels/exp_poly.h"
#endif

namespace kiln::ew {

// A double parameter of an op (a clamp's bounds, a power, alpha and beta) in the compute type C, as
// both twins' launch code converts it: by the elements' rule (detail::float_to_integer) for int64,
// which saturates (int64's max is not a double, and an out-of-range conversion is undefined) and
// makes NaN, which no integer holds, 0.
template <typename C>
C to_compute(double v) {
  return detail::convert_value<C>(v);
}

// Integer +, - and * wrap modulo 2^64 (two's complement), as PyTorch's integer ops do, where C++'s
// signed overflow is undefined: the operands as uint64_t, whose arithmetic wraps, and the result
// back in C (modulo 2^bits since C++20). Floats are plain.
template <typename C>
KILN_HD C wrap_add(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y));
  } else {
    return x + y;
  }
}
template <typename C>
KILN_HD C wrap_sub(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<uint64_t>(x) - static_cast<uint64_t>(y));
  } else {
    return x - y;
  }
}
template <typename C>
KILN_HD C wrap_mul(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
  } else {
    return x * y;
  }
}

template <typename C> KILN_HD bool is_nan(C x) {
  if constexpr (std::is_floating_point_v<C>) {
    return x != x;
  } else {
    return false;
  }
}

// By squaring, wrapping as integer multiplication does (and no square after the last bit: 65536^2
// fits, its next square would not).
template <typename C> KILN_HD C int_pow(C base, C exp) {
  if (exp < 0) return base == 1 ? 1 : (base == -1 ? ((exp & 1) ? -1 : 1) : 0);
  C r = 1;
  while (exp) {
    if (exp & 1) r = wrap_mul(r, base);
    exp >>= 1;
    if (exp) base = wrap_mul(base, base);
  }
  return r;
}

template <typename C> KILN_HD C pow_fn(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::pow(x, y);
  } else {
    return int_pow(x, y);
  }
}

// x^a for one exponent a across a tensor (pow(x, Scalar) and its backward), as PyTorch computes it:
// the exponents it special-cases go through those operations (0.5: sqrt, so sqrt(-inf) is NaN and
// sqrt(-0) is -0 where C's pow gives +inf and +0; -0.5: 1 / sqrt, as rsqrt; 2, 3 and -2: products,
// each rounded; -1: a division), the rest through pow.
template <typename C>
KILN_HD C pow_scalar_fn(C x, C a) {
  if constexpr (std::is_floating_point_v<C>) {
    if (a == C(0.5)) return std::sqrt(x);
    if (a == C(-0.5)) return C(1) / std::sqrt(x);
    if (a == C(2)) return x * x;
    if (a == C(3)) return x * x * x;
    if (a == C(-1)) return C(1) / x;
    if (a == C(-2)) return C(1) / (x * x);
  }
  return pow_fn(x, a);
}

template <typename C> KILN_HD C sign_fn(C x) {
  if (is_nan(x)) return x;
  return static_cast<C>((C(0) < x) - (x < C(0)));
}

// e^x. The CPU's float path is kernels/exp_poly.h: branch-free, so the loops around it vectorize.
template <typename C> KILN_HD C exp_fn(C x) {
#ifndef __CUDACC__
  if constexpr (std::is_same_v<C, float>) return exp_poly(x);
#endif
  return std::exp(x);
}

// 1 / (1 + e^-x), without a branch: e^-x overflows to +inf for very negative x, giving 0.
template <typename C> KILN_HD C sigmoid_fn(C x) { return C(1) / (C(1) + exp_fn(-x)); }

template <typename C> KILN_HD C gelu_erf_fn(C x) {
  return C(0.5) * x * (C(1) + std::erf(x * C(0.70710678118654752440)));
}
template <typename C> KILN_HD C gelu_erf_grad(C x) {
  C cdf = C(0.5) * (C(1) + std::erf(x * C(0.70710678118654752440)));
  C pdf = std::exp(C(-0.5) * x * x) * C(0.39894228040143267794);
  return cdf + x * pdf;
}
// The tanh approximation. On the CPU through 0.5 (1 + tanh(u)) = sigmoid(2u): one exp instead of a
// tanh (glibc's tanhf, through expm1f, cost more than any other function in a CPU GPT step), and
// no cancellation in 1 + tanh(u) where tanh(u) is near -1; 1 - tanh(u)^2 = 4 s (1 - s). The CUDA
// twin keeps tanh, whose device version is fast.
template <typename C> KILN_HD C gelu_tanh_fn(C x) {
  const C k = C(0.79788456080286535588);  // sqrt(2/pi)
  C u = k * (x + C(0.044715) * x * x * x);
#ifdef __CUDA_ARCH__
  return C(0.5) * x * (C(1) + std::tanh(u));
#else
  return x * sigmoid_fn(C(2) * u);
#endif
}
template <typename C> KILN_HD C gelu_tanh_grad(C x) {
  const C k = C(0.79788456080286535588);
  C x2 = x * x;
  C u = k * (x + C(0.044715) * x2 * x);
#ifdef __CUDA_ARCH__
  C t = std::tanh(u);
  return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * k * (C(1) + C(3) * C(0.044715) * x2);
#else
  C s = sigmoid_fn(C(2) * u);
  return s + C(2) * x * s * (C(1) - s) * k * (C(1) + C(3) * C(0.044715) * x2);
#endif
}

template <UnaryOp OP, typename C> KILN_HD C unary_fn(C x, C a, C b) {
  if constexpr (OP == UnaryOp::Copy) {
    return x;
  } else if constexpr (OP == UnaryOp::Neg) {
    // For integers -INT64_MIN is INT64_MIN, as PyTorch's; floats flip the sign, so 0 gives -0
    // (0 - x would give +0).
    if constexpr (std::is_integral_v<C>)
      return wrap_sub(C(0), x);
    else
      return -x;
  } else if constexpr (OP == UnaryOp::Abs) {
    return x <= C(0) ? wrap_sub(C(0), x) : x;  // <=: -0 gives +0
  } else if constexpr (OP == UnaryOp::Sign) {
    return sign_fn(x);
  } else if constexpr (OP == UnaryOp::Relu) {
    return (x > C(0) || is_nan(x)) ? x : C(0);
  } else if constexpr (OP == UnaryOp::Clamp) {
    if (is_nan(x)) return x;
    if (!is_nan(a) && x < a) x = a;  // a NaN bound means "no bound"
    if (!is_nan(b) && x > b) x = b;
    return x;
  } else if constexpr (OP == UnaryOp::LogicalNot) {
    return x == C(0) ? C(1) : C(0);
  } else if constexpr (OP == UnaryOp::PowScalar) {
    return pow_scalar_fn(x, a);
  } else if constexpr (OP == UnaryOp::RPowScalar) {
    return pow_fn(a, x);
  } else if constexpr (std::is_floating_point_v<C>) {
    if constexpr (OP == UnaryOp::Exp) return exp_fn(x);
    if constexpr (OP == UnaryOp::Log) return std::log(x);
    if constexpr (OP == UnaryOp::Sqrt) return std::sqrt(x);
    if constexpr (OP == UnaryOp::Rsqrt) return C(1) / std::sqrt(x);
    if constexpr (OP == UnaryOp::Tanh) return std::tanh(x);
    if constexpr (OP == UnaryOp::Sigmoid) return sigmoid_fn(x);
    if constexpr (OP == UnaryOp::GeluErf) return gelu_erf_fn(x);
    if constexpr (OP == UnaryOp::GeluTanh) return gelu_tanh_fn(x);
    if constexpr (OP == UnaryOp::Silu) return x * sigmoid_fn(x);
    if constexpr (OP == UnaryOp::LeakyRelu) return x > C(0) ? x : a * x;  // NaN: a * NaN
    if constexpr (OP == UnaryOp::Softplus) {
      // Past the threshold the function is x to within rounding (PyTorch's linear branch).
      const C ax = a * x;
      return ax > b ? x : std::log1p(exp_fn(ax)) / a;
    }
    if constexpr (OP == UnaryOp::Sin) return std::sin(x);
    if constexpr (OP == UnaryOp::Cos) return std::cos(x);
    if constexpr (OP == UnaryOp::Log1p) return std::log1p(x);
    if constexpr (OP == UnaryOp::Expm1) return std::expm1(x);
    if constexpr (OP == UnaryOp::Floor) return std::floor(x);
    if constexpr (OP == UnaryOp::Ceil) return std::ceil(x);
    if constexpr (OP == UnaryOp::Round) return std::nearbyint(x);  // half to even (the default mode)
    if constexpr (OP == UnaryOp::Trunc) return std::trunc(x);
    if constexpr (OP == UnaryOp::Tan) return std::tan(x);
    if constexpr (OP == UnaryOp::Asin) return std::asin(x);
    if constexpr (OP == UnaryOp::Acos) return std::acos(x);
    if constexpr (OP == UnaryOp::Atan) return std::atan(x);
    if constexpr (OP == UnaryOp::Sinh) return std::sinh(x);
    if constexpr (OP == UnaryOp::Cosh) return std::cosh(x);
    if constexpr (OP == UnaryOp::Asinh) return std::asinh(x);
    if constexpr (OP == UnaryOp::Acosh) return std::acosh(x);
    if constexpr (OP == UnaryOp::Atanh) return std::atanh(x);
    if constexpr (OP == UnaryOp::Erf) return std::erf(x);
    if constexpr (OP == UnaryOp::Erfc) return std::erfc(x);
    if constexpr (OP == UnaryOp::Log2) return std::log2(x);
    if constexpr (OP == UnaryOp::Log10) return std::log10(x);
    if constexpr (OP == UnaryOp::Exp2) return std::exp2(x);
    return x;
  } else {
    return x;  // float-only op on integers: unreachable, core promotes first
  }
}

// Division rounded down and the remainder that goes with it (Python's // and %), and their C
// forms (trunc and fmod). Integers divide exactly; a zero divisor gives 0 (core refuses integer
// division by zero before a kernel runs, so this only keeps the kernel defined), and -1 negates,
// wrapping for INT64_MIN as negation does, where C's INT64_MIN / -1 is undefined. Floats follow
// IEEE: a zero divisor gives inf or NaN.
template <typename C>
KILN_HD C fmod_fn(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::fmod(x, y);
  } else {
    return (y == 0 || y == -1) ? C(0) : x % y;
  }
}

// x - floor(x / y) y: fmod's remainder moved into y's sign when the two differ.
template <typename C>
KILN_HD C remainder_fn(C x, C y) {
  const C r = fmod_fn(x, y);
  return (r != C(0) && ((r < C(0)) != (y < C(0)))) ? r + y : r;
}

template <typename C>
KILN_HD C trunc_divide_fn(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::trunc(x / y);
  } else {
    if (y == 0) return C(0);
    return y == -1 ? wrap_sub(C(0), x) : x / y;
  }
}

// For floats, the quotient is rebuilt from fmod's exact remainder ((x - r) / y is then an integer
// up to one rounding) instead of floor(x / y), which can round x / y up across an integer: 1 //
// 0.1 is 9 (0.1 is a little above 1/10), where floor(1 / 0.1) gives 10. The last step rounds to
// the nearest integer, absorbing that one rounding; a zero quotient keeps the sign of x / y.
template <typename C>
KILN_HD C floor_divide_fn(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    if (y == C(0)) return x / y;
    const C r = std::fmod(x, y);
    C q = (x - r) / y;
    if (r != C(0) && ((r < C(0)) != (y < C(0)))) q -= C(1);
    if (q == C(0)) return std::copysign(C(0), x / y);
    const C f = std::floor(q);
    return q - f > C(0.5) ? f + C(1) : f;
  } else {
    const C q = trunc_divide_fn(x, y);
    return (y != 0 && y != -1 && x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
  }
}

template <BinaryOp OP, typename C> KILN_HD C binary_fn(C x, C y, C alpha, C beta) {
  if constexpr (OP == BinaryOp::Add) return wrap_add(x, wrap_mul(alpha, y));
  if constexpr (OP == BinaryOp::Sub) return wrap_sub(x, wrap_mul(alpha, y));
  if constexpr (OP == BinaryOp::Mul) return wrap_mul(x, y);
  if constexpr (OP == BinaryOp::Div) {
    if constexpr (std::is_floating_point_v<C>) {
      return x / y;
    } else {
      return y == 0 ? C(0) : x / y;  // never reached for integers: core divides in float
    }
  }
  if constexpr (OP == BinaryOp::Pow) return pow_fn(x, y);
  if constexpr (OP == BinaryOp::Maximum) return is_nan(x) ? x : (is_nan(y) ? y : (x > y ? x : y));
  if constexpr (OP == BinaryOp::Minimum) return is_nan(x) ? x : (is_nan(y) ? y : (x < y ? x : y));
  if constexpr (OP == BinaryOp::Eq) return C(x == y);
  if constexpr (OP == BinaryOp::Ne) return C(x != y);
  if constexpr (OP == BinaryOp::Lt) return C(x < y);
  if constexpr (OP == BinaryOp::Le) return C(x <= y);
  if constexpr (OP == BinaryOp::Gt) return C(x > y);
  if constexpr (OP == BinaryOp::Ge) return C(x >= y);
  if constexpr (OP == BinaryOp::LogicalAnd) return C(x != C(0) && y != C(0));
  if constexpr (OP == BinaryOp::LogicalOr) return C(x != C(0) || y != C(0));
  if constexpr (OP == BinaryOp::Fmod) return fmod_fn(x, y);
  if constexpr (OP == BinaryOp::Remainder) return remainder_fn(x, y);
  if constexpr (OP == BinaryOp::FloorDivide) return floor_divide_fn(x, y);
  if constexpr (OP == BinaryOp::TruncDivide) return trunc_divide_fn(x, y);
  if constexpr (OP == BinaryOp::ReluBackward) return y > C(0) ? x : C(0);
  if constexpr (OP == BinaryOp::ClampBackward) {
    bool in = (is_nan(alpha) || y >= alpha) && (is_nan(beta) || y <= beta);
    return in ? x : C(0);
  }
  if constexpr (OP == BinaryOp::AbsBackward) return x * sign_fn(y);
  if constexpr (OP == BinaryOp::PowScalarBackward) {
    if (alpha == C(0)) return C(0);
    return x * alpha * pow_scalar_fn(y, static_cast<C>(alpha - C(1)));
  }
  if constexpr (std::is_floating_point_v<C>) {
    if constexpr (OP == BinaryOp::Atan2) return std::atan2(x, y);
    if constexpr (OP == BinaryOp::GeluErfBackward) return x * gelu_erf_grad(y);
    if constexpr (OP == BinaryOp::GeluTanhBackward) return x * gelu_tanh_grad(y);
    if constexpr (OP == BinaryOp::TanhBackward) return x * (C(1) - y * y);
    if constexpr (OP == BinaryOp::SigmoidBackward) return x * y * (C(1) - y);
    if constexpr (OP == BinaryOp::RsqrtBackward) return C(-0.5) * x * y * y * y;
    if constexpr (OP == BinaryOp::SqrtBackward) return x / (C(2) * y);
    if constexpr (OP == BinaryOp::SiluBackward) {
      const C s = sigmoid_fn(y);
      return x * (s * (C(1) + y * (C(1) - s)));
    }
    if constexpr (OP == BinaryOp::LeakyReluBackward) return y > C(0) ? x : alpha * x;
    if constexpr (OP == BinaryOp::SoftplusBackward) {
      const C ay = alpha * y;
      return ay > beta ? x : x * sigmoid_fn(ay);
    }
  }
  return x;
}

}  // namespace kiln::ew
