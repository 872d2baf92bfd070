// The less common elementwise math: each forward one kernel of the elementwise path
// (ops::unary_raw, ops::binary_raw) or, for hypot and the ops after it, composed of elementwise
// ops; the backwards composed of tensor ops.
#include "core/ops/math.h"

#include <cmath>
#include <numbers>
#include <string>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/copy.h"
#include "core/ops/elementwise_grad.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "kernels/error.h"

namespace kiln {

namespace {

using ops::float_result;

// What a unary op's backward reads: its input x or its output y.
enum class Saves : uint8_t { Input, Output };
using UnaryGrad = Tensor (*)(const Tensor& g, const Tensor& saved);

// A float-valued unary op (integer and bool inputs give float32) whose gradient is grad(g, saved).
Tensor float_unary(const char* name, const Tensor& x, UnaryOp op, Saves saves, UnaryGrad grad) {
  if (std::optional<TensorList> c = autocast::cast_inputs(name, {&x})) {
    return float_unary(name, (*c)[0], op, saves, grad);
  }
  ops::check_defined(name, x, "input");
  Tensor out = ops::unary_raw(name, x, op, float_result(x.dtype()));
  if (needs_grad({&x})) {
    record_function(name, {x}, {out}, {saves == Saves::Input ? x : out}, [grad](const FunctionNode::Context& ctx) {
      return TensorList{grad(ctx.grads[0], ctx.saved_at(0))};
    });
  }
  return out;
}

// floor, ceil, trunc and round: float tensors rounded in their dtype, integers copied.
Tensor rounding(const char* name, const Tensor& x, UnaryOp op) {
  ops::check_defined(name, x, "input");
  if (x.dtype() == DType::Bool) throw DTypeError(std::string(name) + ": not defined for bool tensors");
  if (!is_floating(x.dtype())) return x.clone();
  Tensor out = ops::unary_raw(name, x, op, x.dtype());
  if (needs_grad({&x})) {
    record_function(name, {x}, {out}, {},
                    [](const FunctionNode::Context& ctx) { return TensorList{zeros_like(ctx.grads[0])}; });
  }
  return out;
}

// 1 / sqrt(1 - x^2), asin's derivative (and acos's, negated).
Tensor rsqrt_one_minus_square(const Tensor& x) { return rsqrt(sub(1.0, mul(x, x))); }

// --- rounding divisions and remainders -----------------------------------------------------------

BinaryOp rounding_op(RoundingMode mode) {
  return mode == RoundingMode::Trunc ? BinaryOp::TruncDivide : BinaryOp::FloorDivide;
}

const char* mode_name(RoundingMode mode) {
  switch (mode) {
    case RoundingMode::None: return "div";
    case RoundingMode::Trunc: return "div(rounding_mode='trunc')";
    case RoundingMode::Floor: return "div(rounding_mode='floor')";
  }
  return "div";
}

// The result dtype of a rounding division or remainder, after the checks every form makes.
DType rounding_result(const char* name, DType rt) {
  if (rt == DType::Bool) throw DTypeError(std::string(name) + ": not defined for bool operands");
  return rt;
}

// An integer division by zero is refused (it has no value; PyTorch raises too), a tensor divisor's
// zeros found by reading it back.
void check_integer_divisor(const char* name, const Tensor& b, DType rt) {
  if (is_floating(rt) || b.numel() == 0) return;
  if (any(eq(b.detach(), 0)).item<bool>()) {
    throw Error(std::string(name) + ": integer division by zero (the " + dtype_name(b.dtype()) + " divisor of shape " +
                shape_str(b.sizes()) + " holds a 0)");
  }
}
void check_integer_divisor(const char* name, const Scalar& b, DType rt) {
  if (!is_floating(rt) && b.to_double() == 0) {
    throw Error(std::string(name) + ": integer division by zero (the divisor is " + b.str() + ")");
  }
}

// a op b for two tensors, op one of the rounding divisions or remainders; the gradient, when the
// op has one (the remainders), is g for a and -g q(a, b) for b, q the matching rounded quotient.
Tensor rounding_binary(const char* name, const Tensor& a, const Tensor& b, BinaryOp op,
                       std::optional<RoundingMode> quotient) {
  ops::check_defined(name, a, "first operand");
  ops::check_defined(name, b, "second operand");
  const DType rt = rounding_result(name, result_type(a, b));
  check_integer_divisor(name, b, rt);
  Tensor out = ops::binary_raw(name, a, b, op, rt, compute_dtype_for(rt));
  if (!needs_grad({&a, &b})) return out;
  const Shape as = a.sizes(), bs = b.sizes();
  if (!quotient) {
    record_function(name, {a, b}, {out}, {}, [as, bs](const FunctionNode::Context& ctx) {
      const TensorOptions options(ctx.grads[0].dtype(), ctx.grads[0].device());
      TensorList r(2);
      if (ctx.needs_input_grad[0]) r[0] = zeros(as, options);
      if (ctx.needs_input_grad[1]) r[1] = zeros(bs, options);
      return r;
    });
    return out;
  }
  const RoundingMode mode = *quotient;
  record_function(name, {a, b}, {out}, {b.requires_grad() ? a : Tensor(), b.requires_grad() ? b : Tensor()},
                  [as, bs, mode](const FunctionNode::Context& ctx) {
                    const Tensor& g = ctx.grads[0];
                    TensorList r(2);
                    if (ctx.needs_input_grad[0]) r[0] = sum_to(g, as);
                    if (ctx.needs_input_grad[1]) {
                      r[1] = sum_to(neg(mul(g, div(ctx.saved_at(0), ctx.saved_at(1), mode))), bs);
                    }
                    return r;
                  });
  return out;
}

// The same with a scalar divisor (or, scalar_first, a scalar dividend): the tensor's gradient is g
// for a remainder's dividend, -g q(s, b) for its divisor, zero for a rounded quotient.
Tensor rounding_scalar(const char* name, const Tensor& t, const Scalar& s, BinaryOp op,
                       std::optional<RoundingMode> quotient, bool scalar_first = false) {
  ops::check_defined(name, t, "tensor operand");
  const DType rt = rounding_result(name, promote_with_scalar(t.dtype(), s));
  if (scalar_first) {
    check_integer_divisor(name, t, rt);
  } else {
    check_integer_divisor(name, s, rt);
  }
  Tensor out = ops::binary_scalar_raw(name, t, ops::scalar_operand(s), op, rt, compute_dtype_for(rt), scalar_first);
  if (!needs_grad({&t})) return out;
  if (!quotient) {
    record_function(name, {t}, {out}, {},
                    [](const FunctionNode::Context& ctx) { return TensorList{zeros_like(ctx.grads[0])}; });
  } else if (!scalar_first) {
    record_function(name, {t}, {out}, {}, [](const FunctionNode::Context& ctx) { return TensorList{ctx.grads[0]}; });
  } else {
    const RoundingMode mode = *quotient;
    record_function(name, {t}, {out}, {t}, [s, mode](const FunctionNode::Context& ctx) {
      const Tensor& b = ctx.saved_at(0);
      return TensorList{neg(mul(ctx.grads[0], div(full_like(b, s), b, mode)))};
    });
  }
  return out;
}

}  // namespace

// --- rounding ------------------------------------------------------------------------------------

Tensor floor(const Tensor& x) { return rounding("floor", x, UnaryOp::Floor); }
Tensor ceil(const Tensor& x) { return rounding("ceil", x, UnaryOp::Ceil); }
Tensor trunc(const Tensor& x) { return rounding("trunc", x, UnaryOp::Trunc); }
Tensor round(const Tensor& x) { return rounding("round", x, UnaryOp::Round); }

Tensor round(const Tensor& x, int64_t decimals) {
  if (decimals == 0) return round(x);
  ops::check_defined("round", x, "input");
  if (!is_floating(x.dtype())) {
    throw DTypeError("round: decimals=" + std::to_string(decimals) + " needs a float tensor, got " +
                     dtype_name(x.dtype()));
  }
  const double scale = std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals));
  if (!std::isfinite(scale)) {
    throw Error("round: decimals=" + std::to_string(decimals) + " is too large (10^" + std::to_string(decimals) +
                " overflows)");
  }
  // float16 and bfloat16 are scaled in float32: 5.39453125 * 100 in float16 is 539.5, which rounds
  // to 540 (5.40) where the value's own 539.45 rounds to 539 (5.39).
  const DType wide = ops::widened_dtype(x.dtype());
  const Tensor v = wide == x.dtype() ? x : x.to(wide);
  const Tensor r = decimals > 0 ? div(round(mul(v, scale)), scale) : mul(round(div(v, scale)), scale);
  return wide == x.dtype() ? r : r.to(x.dtype());
}

Tensor frac(const Tensor& x) {
  ops::check_defined("frac", x, "input");
  if (!is_floating(x.dtype()))
    throw DTypeError(std::string("frac: needs a float tensor, got ") + dtype_name(x.dtype()));
  return sub(x, trunc(x));
}

// --- trigonometric and hyperbolic ----------------------------------------------------------------

Tensor tan(const Tensor& x) {
  return float_unary("tan", x, UnaryOp::Tan, Saves::Output,
                     [](const Tensor& g, const Tensor& y) { return mul(g, add(mul(y, y), 1.0)); });
}
Tensor asin(const Tensor& x) {
  return float_unary("asin", x, UnaryOp::Asin, Saves::Input,
                     [](const Tensor& g, const Tensor& v) { return mul(g, rsqrt_one_minus_square(v)); });
}
Tensor acos(const Tensor& x) {
  return float_unary("acos", x, UnaryOp::Acos, Saves::Input,
                     [](const Tensor& g, const Tensor& v) { return neg(mul(g, rsqrt_one_minus_square(v))); });
}
Tensor atan(const Tensor& x) {
  return float_unary("atan", x, UnaryOp::Atan, Saves::Input,
                     [](const Tensor& g, const Tensor& v) { return div(g, add(mul(v, v), 1.0)); });
}
Tensor sinh(const Tensor& x) {
  return float_unary("sinh", x, UnaryOp::Sinh, Saves::Input,
                     [](const Tensor& g, const Tensor& v) { return mul(g, cosh(v)); });
}
Tensor cosh(const Tensor& x) {
  return float_unary("cosh", x, UnaryOp::Cosh, Saves::Input,
                     [](const Tensor& g, const Tensor& v) { return mul(g, sinh(v)); });
}
Tensor asinh(const Tensor& x) {
  return float_unary("asinh", x, UnaryOp::Asinh, Saves::Input,
                     [](const Tensor& g, const Tensor& v) { return mul(g, rsqrt(add(mul(v, v), 1.0))); });
}
Tensor acosh(const Tensor& x) {
  return float_unary("acosh", x, UnaryOp::Acosh, Saves::Input,
                     [](const Tensor& g, const Tensor& v) { return mul(g, rsqrt(sub(mul(v, v), 1.0))); });
}
Tensor atanh(const Tensor& x) {
  return float_unary("atanh", x, UnaryOp::Atanh, Saves::Input,
                     [](const Tensor& g, const Tensor& v) { return div(g, sub(1.0, mul(v, v))); });
}

Tensor atan2(const Tensor& y, const Tensor& x) {
  if (std::optional<TensorList> c = autocast::cast_inputs("atan2", {&y, &x})) return atan2((*c)[0], (*c)[1]);
  ops::check_defined("atan2", y, "first operand");
  ops::check_defined("atan2", x, "second operand");
  const DType rt = float_result(result_type(y, x));
  Tensor out = ops::binary_raw("atan2", y, x, BinaryOp::Atan2, rt, compute_dtype_for(rt));
  if (needs_grad({&y, &x})) {
    const Shape ys = y.sizes(), xs = x.sizes();
    record_function("atan2", {y, x}, {out}, {y, x}, [ys, xs](const FunctionNode::Context& ctx) {
      // d/dy = x / (x^2 + y^2), d/dx = -y / (x^2 + y^2)
      const Tensor& g = ctx.grads[0];
      const Tensor &yv = ctx.saved_at(0), &xv = ctx.saved_at(1);
      const Tensor scaled = div(g, add(mul(xv, xv), mul(yv, yv)));
      TensorList r(2);
      if (ctx.needs_input_grad[0]) r[0] = sum_to(mul(scaled, xv), ys);
      if (ctx.needs_input_grad[1]) r[1] = sum_to(neg(mul(scaled, yv)), xs);
      return r;
    });
  }
  return out;
}

// --- erf, logarithms, powers ---------------------------------------------------------------------

namespace {
// 2 / sqrt(pi) e^(-x^2), erf's derivative.
Tensor erf_slope(const Tensor& x) { return mul(exp(neg(mul(x, x))), 2.0 * std::numbers::inv_sqrtpi); }
}  // namespace

Tensor erf(const Tensor& x) {
  return float_unary("erf", x, UnaryOp::Erf, Saves::Input,
                     [](const Tensor& g, const Tensor& v) { return mul(g, erf_slope(v)); });
}
Tensor erfc(const Tensor& x) {
  return float_unary("erfc", x, UnaryOp::Erfc, Saves::Input,
                     [](const Tensor& g, const Tensor& v) { return neg(mul(g, erf_slope(v))); });
}
Tensor log2(const Tensor& x) {
  return float_unary("log2", x, UnaryOp::Log2, Saves::Input,
                     [](const Tensor& g, const Tensor& v) { return div(g, mul(v, std::numbers::ln2)); });
}
Tensor log10(const Tensor& x) {
  return float_unary("log10", x, UnaryOp::Log10, Saves::Input,
                     [](const Tensor& g, const Tensor& v) { return div(g, mul(v, std::numbers::ln10)); });
}
Tensor exp2(const Tensor& x) {
  return float_unary("exp2", x, UnaryOp::Exp2, Saves::Output,
                     [](const Tensor& g, const Tensor& y) { return mul(g, mul(y, std::numbers::ln2)); });
}

Tensor reciprocal(const Tensor& x) {
  if (std::optional<TensorList> c = autocast::cast_inputs("reciprocal", {&x})) return reciprocal((*c)[0]);
  ops::check_defined("reciprocal", x, "input");
  return div(1.0, x);
}

Tensor square(const Tensor& x) {
  ops::check_defined("square", x, "input");
  return pow(x, 2);
}

namespace {
// x log y, 0 where x is 0 and y is not NaN, without autograd.
Tensor xlogy_values(const Tensor& x, const Tensor& y) {
  const Tensor product = mul(x, log(y));
  const Tensor zero_x = logical_and(eq(x, 0), logical_not(isnan(y)));
  return where(zero_x, zeros({}, TensorOptions(product.dtype(), product.device())), product);
}
}  // namespace

Tensor xlogy(const Tensor& x, const Tensor& y) {
  ops::check_defined("xlogy", x, "first operand");
  ops::check_defined("xlogy", y, "second operand");
  Tensor out = xlogy_values(x.detach(), y.detach());
  if (needs_grad({&x, &y})) {
    const Shape xs = x.sizes(), ys = y.sizes();
    record_function("xlogy", {x, y}, {out}, {x, y}, [xs, ys](const FunctionNode::Context& ctx) {
      // d/dx = xlogy(x != 0, y): log y, and 0 where x is 0 (where a product rule through log(y)
      // would give 0 * -inf = NaN at y = 0); d/dy = x / y.
      const Tensor& g = ctx.grads[0];
      const Tensor &xv = ctx.saved_at(0), &yv = ctx.saved_at(1);
      TensorList r(2);
      if (ctx.needs_input_grad[0]) r[0] = sum_to(mul(g, xlogy_values(ne(xv, 0), yv)), xs);
      if (ctx.needs_input_grad[1]) r[1] = sum_to(div(mul(g, xv), yv), ys);
      return r;
    });
  }
  return out;
}

// --- composed: hypot, copysign, signbit, fmax/fmin, heaviside, ldexp, float_power ---------------

namespace {
void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  ops::check_defined(op, a, "first operand");
  ops::check_defined(op, b, "second operand");
  broadcast_shapes(a.sizes(), b.sizes(), op);
}

// a < 0, or a zero whose reciprocal is -inf.
Tensor negative_sign(const Tensor& x) {
  if (!is_floating(x.dtype())) return x.dtype() == DType::Bool ? zeros_like(x).to(DType::Bool) : lt(x, 0);
  return logical_or(lt(x, 0.0), logical_and(eq(x, 0.0), lt(div(1.0, x), 0.0)));
}

// fmax (max = true) or fmin of a and b in their result type, with a's and b's gradients masked.
Tensor nan_ignoring_extremum(const char* op, const Tensor& a, const Tensor& b, bool max) {
  check_operands(op, a, b);
  const DType rt = result_type(a, b);
  const Tensor x = to_dtype(a.detach(), rt), y = to_dtype(b.detach(), rt);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = where(isnan(y), x, where(isnan(x), y, max ? maximum(x, y) : minimum(x, y)));
  }
  if (needs_grad({&a, &b})) {
    const Shape as = a.sizes(), bs = b.sizes();
    const DType at = a.dtype(), bt = b.dtype();
    record_function(op, {a, b}, {out}, {x, y}, [as, bs, at, bt, max](const FunctionNode::Context& ctx) {
      // a takes the gradient where it won, tied, or stood beside a NaN; b everywhere else.
      const Tensor &xv = ctx.saved_at(0), &yv = ctx.saved_at(1), &g = ctx.grads[0];
      const Tensor to_a = logical_or(max ? ge(xv, yv) : le(xv, yv), isnan(yv));
      TensorList r(2);
      if (ctx.needs_input_grad[0]) r[0] = to_dtype(sum_to(where(to_a, g, 0.0), as), at);
      if (ctx.needs_input_grad[1]) r[1] = to_dtype(sum_to(where(to_a, 0.0, g), bs), bt);
      return r;
    });
  }
  return out;
}
}  // namespace

Tensor hypot(const Tensor& a, const Tensor& b) {
  const char* op = "hypot";
  check_operands(op, a, b);
  const DType out_dtype = float_result(result_type(a, b));
  const DType work = ops::widened_dtype(out_dtype);
  const Tensor x = to_dtype(a.detach(), work), y = to_dtype(b.detach(), work);
  Tensor out;
  {
    NoGradGuard no_grad;
    const Tensor ax = abs(x), ay = abs(y);
    const Tensor big = maximum(ax, ay), ratio = div(minimum(ax, ay), big);
    const Tensor scaled = mul(big, sqrt(add(mul(ratio, ratio), 1.0)));
    const Tensor finite = where(eq(big, 0.0), 0.0, scaled);
    out = to_dtype(where(logical_or(isinf(x), isinf(y)), INFINITY, finite), out_dtype);
  }
  if (needs_grad({&a, &b})) {
    const Shape as = a.sizes(), bs = b.sizes();
    const DType at = a.dtype(), bt = b.dtype();
    record_function(op, {a, b}, {out}, {x, y, out}, [=](const FunctionNode::Context& ctx) {
      const Tensor &xv = ctx.saved_at(0), &yv = ctx.saved_at(1);
      const Tensor scale = div(ctx.grads[0].to(work), ctx.saved_at(2).to(work));
      TensorList r(2);
      if (ctx.needs_input_grad[0]) r[0] = to_dtype(sum_to(mul(scale, xv), as), at);
      if (ctx.needs_input_grad[1]) r[1] = to_dtype(sum_to(mul(scale, yv), bs), bt);
      return r;
    });
  }
  return out;
}

Tensor copysign(const Tensor& a, const Tensor& b) {
  const char* op = "copysign";
  check_operands(op, a, b);
  const DType out_dtype = float_result(result_type(a, b));
  const Tensor x = to_dtype(a.detach(), out_dtype);
  Tensor out;
  {
    NoGradGuard no_grad;
    const Tensor magnitude = abs(x);
    out = where(negative_sign(b.detach()), neg(magnitude), magnitude);
  }
  if (needs_grad({&a, &b})) {
    const Shape as = a.sizes(), bs = b.sizes();
    const DType at = a.dtype(), bt = b.dtype();
    record_function(op, {a, b}, {out}, {x, out}, [as, bs, at, bt](const FunctionNode::Context& ctx) {
      // The ratio out / a is +-1: whether the sign flipped; 0 where a is 0 (and 0 / 0 would be
      // NaN).
      const Tensor &xv = ctx.saved_at(0), &g = ctx.grads[0];
      TensorList r(2);
      if (ctx.needs_input_grad[0])
        r[0] = to_dtype(sum_to(where(eq(xv, 0.0), 0.0, mul(g, div(ctx.saved_at(1), xv))), as), at);
      if (ctx.needs_input_grad[1]) r[1] = zeros(bs, TensorOptions(bt, g.device()));
      return r;
    });
  }
  return out;
}

Tensor copysign(const Tensor& a, const Scalar& b) {
  ops::check_defined("copysign", a, "first operand");
  // b as a 0-d tensor of the result's dtype (its sign survives any rounding, -0.0 included).
  return copysign(a, full({}, b.to_double(), TensorOptions(float_result(a.dtype()), a.device())));
}

Tensor signbit(const Tensor& x) {
  ops::check_defined("signbit", x, "input");
  NoGradGuard no_grad;
  return negative_sign(x.detach());
}

Tensor fmax(const Tensor& a, const Tensor& b) { return nan_ignoring_extremum("fmax", a, b, true); }
Tensor fmin(const Tensor& a, const Tensor& b) { return nan_ignoring_extremum("fmin", a, b, false); }

Tensor heaviside(const Tensor& x, const Tensor& values) {
  const char* op = "heaviside";
  check_operands(op, x, values);
  if (x.dtype() != values.dtype()) {
    throw DTypeError(std::string(op) + ": x and values must share a dtype, got " + dtype_name(x.dtype()) + " and " +
                     dtype_name(values.dtype()));
  }
  const Tensor xd = x.detach();
  const Tensor at_zero = eq(xd, 0);
  Tensor out;
  {
    NoGradGuard no_grad;
    const Tensor step = to_dtype(gt(xd, 0), x.dtype());
    out = where(at_zero, values.detach(), step);
  }
  if (needs_grad({&x, &values})) {
    const Shape xs = x.sizes(), vs = values.sizes();
    record_function(op, {x, values}, {out}, {at_zero}, [xs, vs](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      TensorList r(2);
      if (ctx.needs_input_grad[0]) r[0] = zeros(xs, TensorOptions(g.dtype(), g.device()));
      if (ctx.needs_input_grad[1]) r[1] = sum_to(where(ctx.saved_at(0), g, 0.0), vs);
      return r;
    });
  }
  return out;
}

Tensor ldexp(const Tensor& x, const Tensor& e) {
  const char* op = "ldexp";
  check_operands(op, x, e);
  const DType out_dtype = float_result(x.dtype());
  return mul(to_dtype(x, out_dtype), exp2(to_dtype(e, out_dtype)));
}

Tensor float_power(const Tensor& a, const Tensor& b) {
  check_operands("float_power", a, b);
  return pow(to_dtype(a, DType::Float64), to_dtype(b, DType::Float64));
}
Tensor float_power(const Tensor& a, const Scalar& b) {
  ops::check_defined("float_power", a, "base");
  return pow(to_dtype(a, DType::Float64), b.to_double());
}
Tensor float_power(const Scalar& a, const Tensor& b) {
  ops::check_defined("float_power", b, "exponent");
  return pow(a.to_double(), to_dtype(b, DType::Float64));
}

// --- rounding divisions and remainders -----------------------------------------------------------

Tensor div(const Tensor& a, const Tensor& b, RoundingMode mode) {
  if (mode == RoundingMode::None) return div(a, b);
  return rounding_binary(mode_name(mode), a, b, rounding_op(mode), std::nullopt);
}
Tensor div(const Tensor& a, const Scalar& b, RoundingMode mode) {
  if (mode == RoundingMode::None) return div(a, b);
  return rounding_scalar(mode_name(mode), a, b, rounding_op(mode), std::nullopt);
}
Tensor floor_divide(const Tensor& a, const Tensor& b) {
  return rounding_binary("floor_divide", a, b, BinaryOp::FloorDivide, std::nullopt);
}
Tensor floor_divide(const Tensor& a, const Scalar& b) {
  return rounding_scalar("floor_divide", a, b, BinaryOp::FloorDivide, std::nullopt);
}
Tensor fmod(const Tensor& a, const Tensor& b) {
  return rounding_binary("fmod", a, b, BinaryOp::Fmod, RoundingMode::Trunc);
}
Tensor fmod(const Tensor& a, const Scalar& b) {
  return rounding_scalar("fmod", a, b, BinaryOp::Fmod, RoundingMode::Trunc);
}
Tensor remainder(const Tensor& a, const Tensor& b) {
  return rounding_binary("remainder", a, b, BinaryOp::Remainder, RoundingMode::Floor);
}
Tensor remainder(const Tensor& a, const Scalar& b) {
  return rounding_scalar("remainder", a, b, BinaryOp::Remainder, RoundingMode::Floor);
}
Tensor remainder(const Scalar& a, const Tensor& b) {
  return rounding_scalar("remainder", b, a, BinaryOp::Remainder, RoundingMode::Floor, /*scalar_first=*/true);
}

}  // namespace kiln
