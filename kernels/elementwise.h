// Elementwise kernels: one generic path for every unary, binary and ternary op. Operands are
// StridedArgs cast on load to a compute type (float for float/half/bf16, double for float64,
// int64 for integers and bool) and cast on store, so there is no kernel per dtype pair. Core
// collapses operands that are dense with identical strides to 1-D, which is the fast path.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/kernel.h"
#include "kernels/macros.h"
#include "kernels/strided.h"

namespace kiln {

// clang-format off
enum class UnaryOp : uint8_t {
  Copy,  // cast/copy
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Tanh, Sigmoid, Relu, GeluErf, GeluTanh, Sign,
  PowScalar,   // x ^ a
  RPowScalar,  // a ^ x
  Clamp,       // min(max(x, a), b); NaN stays NaN
  LogicalNot,
  Silu,        // x * sigmoid(x)
  LeakyRelu,   // x > 0 ? x : a * x
  Softplus,    // a x > b ? x : log(1 + exp(a x)) / a (beta a, threshold b)
  Sin, Cos,
  Log1p,       // log(1 + x), exact for small x
  Expm1,       // exp(x) - 1, exact for small x
  // From Floor on, the uncommon math, kept last (CUDA gives them the generic kernel only:
  // is_uncommon in kernels/cuda/elementwise_unary.cuh). Rounding to an integral value, float inputs
  // only (core copies integers); Round is half to even.
  Floor, Ceil, Round, Trunc,
  Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh,
  Erf, Erfc, Log2, Log10, Exp2,
};

enum class BinaryOp : uint8_t {
  Add,  // a + alpha * b
  Sub,  // a - alpha * b
  Mul, Div, Pow, Maximum, Minimum,
  Eq, Ne, Lt, Le, Gt, Ge,  // bool result
  LogicalAnd, LogicalOr,
  Atan2,        // atan2(a, b): the angle of the point (b, a)
  Fmod,         // a - trunc(a / b) b: the remainder with a's sign (C's fmod)
  Remainder,    // a - floor(a / b) b: the remainder with b's sign (Python's %)
  FloorDivide,  // floor(a / b), Python's // (integers: exact)
  TruncDivide,  // trunc(a / b) (integers: C's /)
  // backward helpers: (grad, x or y) -> grad_input
  ReluBackward,       // x > 0 ? g : 0
  GeluErfBackward,    // g * gelu'(x)
  GeluTanhBackward,   // g * gelu_tanh'(x)
  TanhBackward,       // g * (1 - y^2), y = tanh(x)
  SigmoidBackward,    // g * y * (1 - y)
  RsqrtBackward,      // -0.5 * g * y^3, y = rsqrt(x)
  SqrtBackward,       // g / (2 y), y = sqrt(x)
  PowScalarBackward,  // g * alpha * x^(alpha - 1)
  ClampBackward,      // alpha <= x <= beta ? g : 0 (NaN bounds mean no bound)
  AbsBackward,        // g * sign(x)
  SiluBackward,       // g * s (1 + x (1 - s)), s = sigmoid(x)
  LeakyReluBackward,  // x > 0 ? g : alpha * g
  SoftplusBackward,   // alpha x > beta ? g : g * sigmoid(alpha x)
};

// Every op once, for the CPU and CUDA dispatch switches (-Wswitch flags an op missing here).
#define KILN_FOR_EACH_UNARY_OP(X)                                                                        \
  X(Copy) X(Neg) X(Exp) X(Log) X(Sqrt) X(Rsqrt) X(Abs) X(Tanh) X(Sigmoid) X(Relu) X(GeluErf) X(GeluTanh) \
  X(Sign) X(PowScalar) X(RPowScalar) X(Clamp) X(LogicalNot) X(Silu) X(LeakyRelu) X(Softplus) X(Sin)      \
  X(Cos) X(Log1p) X(Expm1) X(Floor) X(Ceil) X(Round) X(Trunc) X(Tan) X(Asin) X(Acos) X(Atan) X(Sinh)     \
  X(Cosh) X(Asinh) X(Acosh) X(Atanh) X(Erf) X(Erfc) X(Log2) X(Log10) X(Exp2)
#define KILN_FOR_EACH_BINARY_OP(X)                                                                       \
  X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Maximum) X(Minimum) X(Eq) X(Ne) X(Lt) X(Le) X(Gt) X(Ge)           \
  X(LogicalAnd) X(LogicalOr) X(Atan2) X(Fmod) X(Remainder) X(FloorDivide) X(TruncDivide) X(ReluBackward) \
  X(GeluErfBackward) X(GeluTanhBackward) X(TanhBackward) X(SigmoidBackward) X(RsqrtBackward)             \
  X(SqrtBackward) X(PowScalarBackward) X(ClampBackward) X(AbsBackward) X(SiluBackward)                   \
  X(LeakyReluBackward) X(SoftplusBackward)
// clang-format on

// An operand: a strided tensor or, when is_scalar, a value broadcast everywhere. A scalar carries
// its value twice: as a double for floating compute, and exactly as an int64 for the integer
// compute of integer dtypes (an int64 past 2^53 does not survive a double: INT64_MAX would round
// to 2^63 and wrap to INT64_MIN).
struct Operand {
  StridedArg arg;
  bool is_scalar = false;
  double scalar = 0.0;
  int64_t int_scalar = 0;
};

// A scalar operand's value in the compute type C. An integer past 2^53 (not a double exactly) is
// rounded once from the integer: through the double, a float rounded it twice (2^60 + 2^36 + 1
// became 2^60, where the int64's conversion and a fill give 2^60 + 2^37). A double that is an
// integer there equals int_scalar exactly, so it rounds the same either way.
template <typename C> KILN_HD C scalar_as(const Operand& o) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(o.int_scalar);
  } else {
    return detail::is_wide_integer(o.scalar, o.int_scalar) ? static_cast<C>(o.int_scalar) : static_cast<C>(o.scalar);
  }
}

// Compute type of an elementwise op: what operands are converted to before the math.
constexpr DType compute_dtype_for(DType t) {
  if (t == DType::Float64) return DType::Float64;
  if (is_floating(t)) return DType::Float32;
  return DType::Int64;
}

// All StridedArgs of one call have the output's ndim and sizes (broadcast dims have stride 0). The
// CUDA twins take device pointers of the current device; launch failures are DeviceErrors naming
// the op.
void unary_cpu(const StridedArg& out, const Operand& in, UnaryOp op, DType compute, double a, double b,
               const KernelContext& ctx);
void unary_cuda(const StridedArg& out, const Operand& in, UnaryOp op, DType compute, double a, double b,
                const KernelContext& ctx);
void binary_cpu(const StridedArg& out, const Operand& x, const Operand& y, BinaryOp op, DType compute, double alpha,
                double beta, const KernelContext& ctx);
void binary_cuda(const StridedArg& out, const Operand& x, const Operand& y, BinaryOp op, DType compute, double alpha,
                 double beta, const KernelContext& ctx);
// out = cond ? x : y
void where_cpu(const StridedArg& out, const StridedArg& cond, const Operand& x, const Operand& y, DType compute,
               const KernelContext& ctx);
void where_cuda(const StridedArg& out, const StridedArg& cond, const Operand& x, const Operand& y, DType compute,
                const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(unary);
KILN_KERNEL(binary);
KILN_KERNEL(where);
}  // namespace kernels

}  // namespace kiln
