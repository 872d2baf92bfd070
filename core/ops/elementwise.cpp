// Elementwise ops: type promotion, broadcasting, output layout, one kernel call, and the backward
// node recorded right under the forward. Backward formulas use tensor ops, or a fused backward
// kernel where one pass does it (relu, gelu, tanh, sigmoid, sqrt, rsqrt, pow, clamp, abs).
#include "core/ops/elementwise.h"

#include <cmath>
#include <limits>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise_grad.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "kernels/error.h"

namespace kiln {

using ops::make_operand;
using ops::scalar_operand;

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  for (const Shape* s : {&a, &b}) {
    for (int64_t v : *s) {
      if (v < 0) throw ShapeError(std::string(op) + ": negative size in shape " + shape_str(*s));
    }
  }
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw ShapeError(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                       " cannot be broadcast (dimension " + std::to_string(i) + ": " + std::to_string(da) + " vs " +
                       std::to_string(db) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  ops::check_defined("sum_to", grad, "gradient");
  if (grad.sizes() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  // `shape` must broadcast to grad's shape: no more dims, and each size equal or 1.
  bool ok = lead >= 0;
  for (int64_t d = 0; ok && d < static_cast<int64_t>(shape.size()); ++d) {
    const int64_t s = shape[static_cast<size_t>(d)];
    ok = s == 1 || s == grad.size(d + lead);
  }
  if (!ok) {
    throw ShapeError("sum_to: a gradient of shape " + shape_str(grad.sizes()) + " cannot be summed to shape " +
                     shape_str(shape) + ", which does not broadcast to it");
  }
  Shape dims;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead || (shape[static_cast<size_t>(d - lead)] == 1 && grad.size(d) != 1)) dims.push_back(d);
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, true);
  return r.reshape(shape);
}

namespace {

// Output of elementwise op `name` over `shape`, laid out like the first input of that exact shape.
Tensor make_output(const char* name, const Shape& shape, DType dtype, Device device,
                   std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs) {
    if (t && t->defined() && t->sizes() == shape) {
      return ops::empty_for(name, shape, ops::strides_like(shape, *t), TensorOptions(dtype, device));
    }
  }
  return ops::empty_for(name, shape, TensorOptions(dtype, device));
}

// Runs the unary kernel into `out` (already shaped like x or x's broadcast).
void launch_unary(const char* name, const Tensor& out, Operand in, UnaryOp op, DType compute, double a, double b) {
  if (out.numel() == 0) return;
  StridedArg o = ops::make_arg(name, out);
  std::vector<StridedArg*> args{&o};
  if (!in.is_scalar) args.push_back(&in.arg);
  ops::collapse_dims(args);
  ops::launch(name, out.device(), kernels::unary, o, in, op, compute, a, b);
}

void launch_binary(const char* name, const Tensor& out, Operand x, Operand y, BinaryOp op, DType compute, double alpha,
                   double beta) {
  if (out.numel() == 0) return;
  StridedArg o = ops::make_arg(name, out);
  std::vector<StridedArg*> args{&o};
  if (!x.is_scalar) args.push_back(&x.arg);
  if (!y.is_scalar) args.push_back(&y.arg);
  ops::collapse_dims(args);
  ops::launch(name, out.device(), kernels::binary, o, x, y, op, compute, alpha, beta);
}

using ops::float_result;

using ops::binary_raw;
using ops::binary_scalar_raw;
using ops::unary_raw;

// Records a unary op whose backward is bop(grad, saved).
void record_unary(const char* name, const Tensor& x, const Tensor& out, const Tensor& saved, BinaryOp bop,
                  double alpha = 0, double beta = 0) {
  if (!needs_grad({&x})) return;
  record_function(name, {x}, {out}, {saved}, [bop, alpha, beta](const FunctionNode::Context& ctx) {
    return TensorList{ops::backward_kernel(ctx.grads[0], ctx.saved_at(0), bop, alpha, beta)};
  });
}

// The result dtype of a binary op; checks first that both operands are defined (messages name `op`).
DType promote(const char* op, const Tensor& a, const Tensor& b) {
  ops::check_defined(op, a, "first operand");
  ops::check_defined(op, b, "second operand");
  return result_type(a, b);
}

}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  ops::check_defined("result_type", a, "first operand");
  ops::check_defined("result_type", b, "second operand");
  if ((a.dim() == 0) == (b.dim() == 0)) return promote_types(a.dtype(), b.dtype());
  return a.dim() == 0 ? promote_with_zero_dim(b.dtype(), a.dtype()) : promote_with_zero_dim(a.dtype(), b.dtype());
}

Tensor ops::operand_in(const char* op, const Tensor& t, const Tensor& other, DType common) {
  if (t.dtype() == common) return t;
  const bool zero_dim_beside_dims = t.dim() == 0 && other.dim() != 0;
  // Every other operand the kernels read in its own dtype gives what it would give converted first
  // (exactly, or rounded once to float32 or float64 either way), except integers taken in 16 bits:
  // int64 2049 * float16 1.5 is 3072 after the rounding to 2048, and 3074 from 2049.
  const bool integer_in_16_bits = (common == DType::Float16 || common == DType::BFloat16) &&
                                  (t.dtype() == DType::Int32 || t.dtype() == DType::Int64);
  if (!zero_dim_beside_dims && !integer_in_16_bits) return t;
  return unary_raw(op, t, UnaryOp::Copy, common);
}

Tensor ops::unary_raw(const char* name, const Tensor& x, UnaryOp op, DType out_dtype, double a, double b) {
  ops::check_defined(name, x, "input");
  Tensor out = make_output(name, x.sizes(), out_dtype, x.device(), {&x});
  const DType compute = op == UnaryOp::Copy ? ops::cast_compute_dtype(x.dtype(), out_dtype)
                                             : ops::conversion_compute_dtype(x.dtype(), out_dtype);
  launch_unary(name, out, make_operand(name, x, x.sizes()), op, compute, a, b);
  return out;
}

Tensor ops::binary_raw(const char* name, const Tensor& a, const Tensor& b, BinaryOp op, DType out_dtype, DType compute,
                       double alpha, double beta) {
  ops::check_defined(name, a, "first operand");
  ops::check_defined(name, b, "second operand");
  Device dev = ops::common_device(name, {&a, &b});
  Shape shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  Tensor out = make_output(name, shape, out_dtype, dev, {&a, &b});
  const DType common = result_type(a, b);
  const Tensor x = ops::operand_in(name, a, b, common), y = ops::operand_in(name, b, a, common);
  launch_binary(name, out, make_operand(name, x, shape), make_operand(name, y, shape), op, compute, alpha, beta);
  return out;
}

Tensor ops::binary_scalar_raw(const char* name, const Tensor& a, const Operand& v, BinaryOp op, DType out_dtype,
                              DType compute, bool scalar_first, double alpha) {
  ops::check_defined(name, a, "tensor operand");
  Tensor out = make_output(name, a.sizes(), out_dtype, a.device(), {&a});
  Operand t = make_operand(name, a, a.sizes());
  if (scalar_first) {
    launch_binary(name, out, v, t, op, compute, alpha, 0);
  } else {
    launch_binary(name, out, t, v, op, compute, alpha, 0);
  }
  return out;
}

Tensor ops::backward_kernel(const Tensor& g, const Tensor& saved, BinaryOp op, double alpha, double beta) {
  return binary_raw("backward", g, saved, op, g.dtype(), compute_dtype_for(g.dtype()), alpha, beta);
}

// --- unary ------------------------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  ops::check_defined("neg", x, "input");
  if (x.dtype() == DType::Bool) throw DTypeError("neg: bool tensors cannot be negated; use logical_not");
  Tensor out = unary_raw("neg", x, UnaryOp::Neg, x.dtype());
  if (needs_grad({&x})) {
    record_function("neg", {x}, {out}, {},
                    [](const FunctionNode::Context& ctx) { return TensorList{neg(ctx.grads[0])}; });
  }
  return out;
}

Tensor exp(const Tensor& x) {
  if (std::optional<TensorList> c = autocast::cast_inputs("exp", {&x})) return exp((*c)[0]);
  ops::check_defined("exp", x, "input");
  Tensor out = unary_raw("exp", x, UnaryOp::Exp, float_result(x.dtype()));
  if (needs_grad({&x})) {
    record_function("exp", {x}, {out}, {out},
                    [](const FunctionNode::Context& ctx) { return TensorList{mul(ctx.grads[0], ctx.saved_at(0))}; });
  }
  return out;
}

Tensor log(const Tensor& x) {
  if (std::optional<TensorList> c = autocast::cast_inputs("log", {&x})) return log((*c)[0]);
  ops::check_defined("log", x, "input");
  Tensor out = unary_raw("log", x, UnaryOp::Log, float_result(x.dtype()));
  if (needs_grad({&x})) {
    record_function("log", {x}, {out}, {x},
                    [](const FunctionNode::Context& ctx) { return TensorList{div(ctx.grads[0], ctx.saved_at(0))}; });
  }
  return out;
}

// log(1 + x) and exp(x) - 1 as the C library computes them, exact where x is small: log(1 + x)
// loses x below float32's epsilon to the rounding of 1 + x, and exp(x) - 1 all of its digits.
Tensor log1p(const Tensor& x) {
  if (std::optional<TensorList> c = autocast::cast_inputs("log1p", {&x})) return log1p((*c)[0]);
  ops::check_defined("log1p", x, "input");
  Tensor out = unary_raw("log1p", x, UnaryOp::Log1p, float_result(x.dtype()));
  if (needs_grad({&x})) {
    record_function("log1p", {x}, {out}, {x}, [](const FunctionNode::Context& ctx) {
      return TensorList{div(ctx.grads[0], add(ctx.saved_at(0), 1.0))};  // g / (1 + x)
    });
  }
  return out;
}

Tensor expm1(const Tensor& x) {
  if (std::optional<TensorList> c = autocast::cast_inputs("expm1", {&x})) return expm1((*c)[0]);
  ops::check_defined("expm1", x, "input");
  Tensor out = unary_raw("expm1", x, UnaryOp::Expm1, float_result(x.dtype()));
  if (needs_grad({&x})) {
    record_function("expm1", {x}, {out}, {out}, [](const FunctionNode::Context& ctx) {
      return TensorList{mul(ctx.grads[0], add(ctx.saved_at(0), 1.0))};  // g exp(x) = g (y + 1)
    });
  }
  return out;
}

Tensor sin(const Tensor& x) {
  ops::check_defined("sin", x, "input");
  Tensor out = unary_raw("sin", x, UnaryOp::Sin, float_result(x.dtype()));
  if (needs_grad({&x})) {
    record_function("sin", {x}, {out}, {x}, [](const FunctionNode::Context& ctx) {
      return TensorList{mul(ctx.grads[0], cos(ctx.saved_at(0)))};
    });
  }
  return out;
}

Tensor cos(const Tensor& x) {
  ops::check_defined("cos", x, "input");
  Tensor out = unary_raw("cos", x, UnaryOp::Cos, float_result(x.dtype()));
  if (needs_grad({&x})) {
    record_function("cos", {x}, {out}, {x}, [](const FunctionNode::Context& ctx) {
      return TensorList{neg(mul(ctx.grads[0], sin(ctx.saved_at(0))))};
    });
  }
  return out;
}

Tensor sqrt(const Tensor& x) {
  ops::check_defined("sqrt", x, "input");
  Tensor out = unary_raw("sqrt", x, UnaryOp::Sqrt, float_result(x.dtype()));
  record_unary("sqrt", x, out, out, BinaryOp::SqrtBackward);
  return out;
}

Tensor rsqrt(const Tensor& x) {
  if (std::optional<TensorList> c = autocast::cast_inputs("rsqrt", {&x})) return rsqrt((*c)[0]);
  ops::check_defined("rsqrt", x, "input");
  Tensor out = unary_raw("rsqrt", x, UnaryOp::Rsqrt, float_result(x.dtype()));
  record_unary("rsqrt", x, out, out, BinaryOp::RsqrtBackward);
  return out;
}

Tensor abs(const Tensor& x) {
  ops::check_defined("abs", x, "input");
  Tensor out = unary_raw("abs", x, UnaryOp::Abs, x.dtype());
  record_unary("abs", x, out, x, BinaryOp::AbsBackward);
  return out;
}

Tensor sign(const Tensor& x) {
  ops::check_defined("sign", x, "input");
  Tensor out = unary_raw("sign", x, UnaryOp::Sign, x.dtype());
  if (needs_grad({&x})) {
    record_function("sign", {x}, {out}, {}, [](const FunctionNode::Context& ctx) {
      return TensorList{zeros_like(ctx.grads[0])};
    });
  }
  return out;
}

Tensor tanh(const Tensor& x) {
  ops::check_defined("tanh", x, "input");
  Tensor out = unary_raw("tanh", x, UnaryOp::Tanh, float_result(x.dtype()));
  record_unary("tanh", x, out, out, BinaryOp::TanhBackward);
  return out;
}

Tensor sigmoid(const Tensor& x) {
  ops::check_defined("sigmoid", x, "input");
  Tensor out = unary_raw("sigmoid", x, UnaryOp::Sigmoid, float_result(x.dtype()));
  record_unary("sigmoid", x, out, out, BinaryOp::SigmoidBackward);
  return out;
}

Tensor relu(const Tensor& x) {
  ops::check_defined("relu", x, "input");
  if (x.dtype() == DType::Bool) throw DTypeError("relu: not defined for bool tensors");
  Tensor out = unary_raw("relu", x, UnaryOp::Relu, x.dtype());
  record_unary("relu", x, out, out, BinaryOp::ReluBackward);
  return out;
}

Tensor gelu(const Tensor& x, GeluApprox approx) {
  ops::check_defined("gelu", x, "input");
  ops::check_floating("gelu", x, "input");
  bool t = approx == GeluApprox::Tanh;
  Tensor out = unary_raw("gelu", x, t ? UnaryOp::GeluTanh : UnaryOp::GeluErf, x.dtype());
  record_unary("gelu", x, out, x, t ? BinaryOp::GeluTanhBackward : BinaryOp::GeluErfBackward);
  return out;
}

Tensor silu(const Tensor& x) {
  ops::check_defined("silu", x, "input");
  ops::check_floating("silu", x, "input");
  Tensor out = unary_raw("silu", x, UnaryOp::Silu, x.dtype());
  record_unary("silu", x, out, x, BinaryOp::SiluBackward);
  return out;
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  ops::check_defined("leaky_relu", x, "input");
  ops::check_floating("leaky_relu", x, "input");
  if (!std::isfinite(negative_slope)) {
    throw Error("leaky_relu: negative_slope must be finite, got " + num_str(negative_slope));
  }
  Tensor out = unary_raw("leaky_relu", x, UnaryOp::LeakyRelu, x.dtype(), negative_slope);
  record_unary("leaky_relu", x, out, x, BinaryOp::LeakyReluBackward, negative_slope);
  return out;
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  if (std::optional<TensorList> c = autocast::cast_inputs("softplus", {&x})) return softplus((*c)[0], beta, threshold);
  ops::check_defined("softplus", x, "input");
  ops::check_floating("softplus", x, "input");
  if (!(beta > 0.0) || !std::isfinite(beta) || std::isnan(threshold)) {
    throw Error("softplus: beta must be a finite number > 0 and threshold a number, got beta=" + num_str(beta) +
                " threshold=" + num_str(threshold));
  }
  Tensor out = unary_raw("softplus", x, UnaryOp::Softplus, x.dtype(), beta, threshold);
  record_unary("softplus", x, out, x, BinaryOp::SoftplusBackward, beta, threshold);
  return out;
}

Tensor pow(const Tensor& x, const Scalar& exponent) {
  if (std::optional<TensorList> c = autocast::cast_inputs("pow", {&x})) return pow((*c)[0], exponent);
  ops::check_defined("pow", x, "base");
  DType rt = promote_with_scalar(x.dtype(), exponent);
  if (!is_floating(rt) && exponent.to_double() < 0) {
    throw Error("pow: integer tensors cannot be raised to a negative integer power (exponent " + exponent.str() + ")");
  }
  Tensor out = make_output("pow", x.sizes(), rt, x.device(), {&x});
  launch_unary("pow", out, make_operand("pow", x, x.sizes()), UnaryOp::PowScalar, compute_dtype_for(rt),
               exponent.to_double(), 0);
  record_unary("pow", x, out, x, BinaryOp::PowScalarBackward, exponent.to_double());
  return out;
}

Tensor pow(const Scalar& base, const Tensor& exponent) {
  if (std::optional<TensorList> c = autocast::cast_inputs("pow", {&exponent})) return pow(base, (*c)[0]);
  ops::check_defined("pow", exponent, "exponent");
  DType rt = promote_with_scalar(exponent.dtype(), base);
  Tensor out = make_output("pow", exponent.sizes(), rt, exponent.device(), {&exponent});
  launch_unary("pow", out, make_operand("pow", exponent, exponent.sizes()), UnaryOp::RPowScalar, compute_dtype_for(rt),
               base.to_double(), 0);
  if (needs_grad({&exponent})) {
    const double b = base.to_double(), lb = std::log(b);
    record_function("pow", {exponent}, {out}, {exponent, out}, [b, lb](const FunctionNode::Context& ctx) {
      Tensor g = mul(ctx.grads[0], ctx.saved_at(1)) * lb;
      // d/de 0^e = 0 where e >= 0, as PyTorch defines it (0 * log 0 would be NaN).
      if (b == 0.0) g = where(ge(ctx.saved_at(0), 0), zeros_like(g), g);
      return TensorList{g};
    });
  }
  return out;
}

Tensor pow(const Tensor& x, const Tensor& exponent) {
  if (std::optional<TensorList> c = autocast::cast_inputs("pow", {&x, &exponent})) return pow((*c)[0], (*c)[1]);
  DType rt = promote("pow", x, exponent);
  Tensor out = binary_raw("pow", x, exponent, BinaryOp::Pow, rt, compute_dtype_for(rt));
  if (needs_grad({&x, &exponent})) {
    Shape xs = x.sizes(), es = exponent.sizes();
    record_function("pow", {x, exponent}, {out}, {x, exponent, out}, [xs, es](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      Tensor b = ctx.saved_at(0), e = ctx.saved_at(1), y = ctx.saved_at(2);
      TensorList r(2);
      if (ctx.needs_input_grad[0]) {
        // d/db b^e = e b^(e-1); defined as 0 where e == 0, as PyTorch does (0 * 0^-1 would be NaN).
        Tensor gbase = g * e * pow(b, e - 1.0);
        r[0] = sum_to(where(eq(e, 0), zeros_like(gbase), gbase), xs);
      }
      if (ctx.needs_input_grad[1]) {
        // d/de b^e = b^e log b; defined as 0 where b == 0 and e >= 0, as PyTorch does.
        Tensor gexp = g * y * log(b);
        r[1] = sum_to(where(logical_and(eq(b, 0), ge(e, 0)), zeros_like(gexp), gexp), es);
      }
      return r;
    });
  }
  return out;
}

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  ops::check_defined("clamp", x, "input");
  if (!min && !max) throw Error("clamp: at least one of min and max must be given");
  DType rt = x.dtype();
  if (min) rt = promote_with_scalar(rt, *min);
  if (max) rt = promote_with_scalar(rt, *max);
  if (!is_floating(rt)) {
    // An integer result holds its bounds, as PyTorch's checked conversion of them: 2^40 is no
    // int32 bound (the kernel clamps in double and stored 2^40 into an int32; past 2^53,
    // masked_fill wrapped it).
    for (const auto* b : {&min, &max}) {
      if (*b) ops::check_fill_value("clamp", **b, rt);
    }
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor out = make_output("clamp", x.sizes(), rt, x.device(), {&x});
  const auto wide = [](const std::optional<Scalar>& b) { return b && !ops::exact_in_double(*b); };
  if (ops::clamp_bound_is_nan(min, max)) {  // a NaN bound: every element NaN (rt is a float dtype)
    NoGradGuard no_grad;
    out.fill_(nan);
  } else if (!is_floating(rt) && (wide(min) || wide(max))) {
    // An integer bound past 2^53 is not a double (the kernel's bounds are): compared and stored
    // exactly instead, as the int64 scalars of lt/gt and masked_fill are (integers have no gradient).
    NoGradGuard no_grad;
    ops::copy_raw(out, x, "clamp");
    if (min) out.masked_fill_(lt(out, *min), *min);
    if (max) out.masked_fill_(gt(out, *max), *max);
  } else {
    const double lo = min ? min->to_double() : nan, hi = max ? max->to_double() : nan;  // NaN: no bound
    launch_unary("clamp", out, make_operand("clamp", x, x.sizes()), UnaryOp::Clamp, compute_dtype_for(rt), lo, hi);
  }
  ops::record_clamp("clamp", x, out, x, min, max);
  return out;
}

Tensor logical_not(const Tensor& x) { return unary_raw("logical_not", x, UnaryOp::LogicalNot, DType::Bool); }

Tensor isnan(const Tensor& x) {
  ops::check_defined("isnan", x, "input");
  if (!x.is_floating_point()) return zeros(x.sizes(), TensorOptions(DType::Bool, x.device()));
  return binary_raw("isnan", x, x, BinaryOp::Ne, DType::Bool, compute_dtype_for(x.dtype()));
}

Tensor isinf(const Tensor& x) {
  ops::check_defined("isinf", x, "input");
  if (!x.is_floating_point()) return zeros(x.sizes(), TensorOptions(DType::Bool, x.device()));
  return eq(abs(x), INFINITY);
}

Tensor isposinf(const Tensor& x) {
  ops::check_defined("isposinf", x, "input");
  if (!x.is_floating_point()) return zeros(x.sizes(), TensorOptions(DType::Bool, x.device()));
  return eq(x, INFINITY);
}

Tensor isneginf(const Tensor& x) {
  ops::check_defined("isneginf", x, "input");
  if (!x.is_floating_point()) return zeros(x.sizes(), TensorOptions(DType::Bool, x.device()));
  return eq(x, -INFINITY);
}

Tensor isfinite(const Tensor& x) {
  ops::check_defined("isfinite", x, "input");
  if (!x.is_floating_point()) return ones(x.sizes(), TensorOptions(DType::Bool, x.device()));
  return lt(abs(x), INFINITY);  // false for inf and for NaN
}

Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf, std::optional<double> neginf) {
  const char* op = "nan_to_num";
  ops::check_defined(op, x, "input");
  if (!x.is_floating_point()) return x.clone();
  const double top = posinf ? *posinf : ops::largest_finite(x.dtype());
  const double bottom = neginf ? *neginf : -ops::largest_finite(x.dtype());
  // Each replacement must fit the dtype, as a fill's value must.
  ops::check_fill_value(op, nan, x.dtype());
  ops::check_fill_value(op, top, x.dtype());
  ops::check_fill_value(op, bottom, x.dtype());
  return where(isnan(x), nan, where(isposinf(x), top, where(isneginf(x), bottom, x)));
}

Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  const char* op = "lerp";
  ops::check_defined(op, start, "start");
  ops::check_defined(op, end, "end");
  ops::check_defined(op, weight, "weight");
  ops::check_floating(op, start, "start");
  ops::check_floating(op, end, "end");
  ops::check_floating(op, weight, "weight");
  const Tensor span = end - start;
  return where(lt(abs(weight), 0.5), start + weight * span, end - span * (1.0 - weight));
}

Tensor lerp(const Tensor& start, const Tensor& end, const Scalar& weight) {
  ops::check_defined("lerp", start, "start");
  ops::check_defined("lerp", end, "end");
  ops::check_floating("lerp", start, "start");
  ops::check_floating("lerp", end, "end");
  const double w = weight.to_double();
  const Tensor span = end - start;
  return std::fabs(w) < 0.5 ? start + span * w : end - span * (1.0 - w);
}

// --- binary -----------------------------------------------------------------------------------

namespace {
Tensor add_impl(const char* name, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  ops::check_defined(name, a, "first operand");
  ops::check_defined(name, b, "second operand");
  DType rt = promote(name, a, b);
  if (alpha.is_floating() && !is_floating(rt)) {
    throw DTypeError(std::string(name) + ": a float alpha (" + alpha.str() + ") needs floating operands, got " +
                     dtype_name(rt));
  }
  // The kernels take alpha as a double: an integer one that a double does not hold (past 2^53) scales
  // b first, exactly, in the result's dtype (integer tensors take no gradient).
  if (!is_floating(rt) && rt != DType::Bool && !ops::exact_in_double(alpha)) {
    return add_impl(name, a, mul(b.to(rt), alpha), Scalar(1));
  }
  Tensor out = binary_raw(name, a, b, BinaryOp::Add, rt, compute_dtype_for(rt), alpha.to_double());
  ops::record_add(name, a, b, out, alpha.to_double());
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) { return add_impl("add", a, b, alpha); }

Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  if ((a.defined() && a.dtype() == DType::Bool) || (b.defined() && b.dtype() == DType::Bool)) {
    throw DTypeError("sub: bool tensors cannot be subtracted; use ne");
  }
  return add_impl("sub", a, b, ops::negated(alpha));
}

Tensor add(const Tensor& a, const Scalar& b) {
  ops::check_defined("add", a, "tensor operand");
  DType rt = promote_with_scalar(a.dtype(), b);
  Tensor out = binary_scalar_raw("add", a, scalar_operand(b), BinaryOp::Add, rt, compute_dtype_for(rt));
  ops::record_scalar("add", a, out, ops::ScalarGrad::Identity, b);
  return out;
}

namespace {
void check_sub_operand(const Tensor& t) {
  ops::check_defined("sub", t, "tensor operand");
  if (t.dtype() == DType::Bool) throw DTypeError("sub: bool tensors cannot be subtracted; use ne");
}
}  // namespace

Tensor sub(const Tensor& a, const Scalar& b) {
  check_sub_operand(a);
  return add(a, ops::negated(b));
}

Tensor sub(const Scalar& a, const Tensor& b) {
  check_sub_operand(b);
  return add(neg(b), a);
}

Tensor mul(const Tensor& a, const Tensor& b) {
  DType rt = promote("mul", a, b);
  Tensor out = binary_raw("mul", a, b, BinaryOp::Mul, rt, compute_dtype_for(rt));
  ops::record_mul("mul", a, b, out, a, b);
  return out;
}

Tensor mul(const Tensor& a, const Scalar& b) {
  ops::check_defined("mul", a, "tensor operand");
  DType rt = promote_with_scalar(a.dtype(), b);
  Tensor out = binary_scalar_raw("mul", a, scalar_operand(b), BinaryOp::Mul, rt, compute_dtype_for(rt));
  ops::record_scalar("mul", a, out, ops::ScalarGrad::Mul, b);
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  DType rt = float_result(promote("div", a, b));
  Tensor out = binary_raw("div", a, b, BinaryOp::Div, rt, compute_dtype_for(rt));
  ops::record_div("div", a, b, out);
  return out;
}

Tensor div(const Tensor& a, const Scalar& b) {
  ops::check_defined("div", a, "tensor operand");
  DType rt = float_result(promote_with_scalar(a.dtype(), b));
  Tensor out = binary_scalar_raw("div", a, scalar_operand(b), BinaryOp::Div, rt, compute_dtype_for(rt));
  ops::record_scalar("div", a, out, ops::ScalarGrad::Div, b);
  return out;
}

Tensor div(const Scalar& a, const Tensor& b) {
  ops::check_defined("div", b, "tensor operand");
  DType rt = float_result(promote_with_scalar(b.dtype(), a));
  Tensor out =
      binary_scalar_raw("div", b, scalar_operand(a), BinaryOp::Div, rt, compute_dtype_for(rt), /*scalar_first=*/true);
  if (needs_grad({&b})) {
    record_function("div", {b}, {out}, {b, out}, [](const FunctionNode::Context& ctx) {
      // d(a/b)/db = -(a/b) / b
      return TensorList{neg(div(mul(ctx.grads[0], ctx.saved_at(1)), ctx.saved_at(0)))};
    });
  }
  return out;
}

namespace {
Tensor max_min(const char* name, const Tensor& a, const Tensor& b, bool is_max) {
  DType rt = promote(name, a, b);
  Tensor out = binary_raw(name, a, b, is_max ? BinaryOp::Maximum : BinaryOp::Minimum, rt, compute_dtype_for(rt));
  if (needs_grad({&a, &b})) {
    Shape as = a.sizes(), bs = b.sizes();
    record_function(name, {a, b}, {out}, {a, b}, [as, bs, is_max](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      Tensor x = ctx.saved_at(0), y = ctx.saved_at(1);
      // The winner gets the gradient; ties split it evenly, as PyTorch does.
      Tensor a_wins = is_max ? gt(x, y) : lt(x, y);
      Tensor tie = eq(x, y);
      Tensor half = g * 0.5;
      Tensor zero = zeros_like(g);
      TensorList r(2);
      if (ctx.needs_input_grad[0]) r[0] = sum_to(where(a_wins, g, where(tie, half, zero)), as);
      if (ctx.needs_input_grad[1]) {
        Tensor b_wins = logical_not(logical_or(a_wins, tie));
        r[1] = sum_to(where(b_wins, g, where(tie, half, zero)), bs);
      }
      return r;
    });
  }
  return out;
}

Tensor compare(const char* name, const Tensor& a, const Tensor& b, BinaryOp op) {
  return binary_raw(name, a, b, op, DType::Bool, compute_dtype_for(promote(name, a, b)));
}
Tensor compare(const char* name, const Tensor& a, const Scalar& b, BinaryOp op) {
  ops::check_defined(name, a, "tensor operand");
  const DType common = promote_with_scalar(a.dtype(), b);
  return binary_scalar_raw(name, a, scalar_operand(b, common), op, DType::Bool, compute_dtype_for(common));
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return max_min("maximum", a, b, true); }
Tensor minimum(const Tensor& a, const Tensor& b) { return max_min("minimum", a, b, false); }

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", a, b, BinaryOp::Eq); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", a, b, BinaryOp::Ne); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", a, b, BinaryOp::Lt); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", a, b, BinaryOp::Le); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", a, b, BinaryOp::Gt); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", a, b, BinaryOp::Ge); }
Tensor eq(const Tensor& a, const Scalar& b) { return compare("eq", a, b, BinaryOp::Eq); }
Tensor ne(const Tensor& a, const Scalar& b) { return compare("ne", a, b, BinaryOp::Ne); }
Tensor lt(const Tensor& a, const Scalar& b) { return compare("lt", a, b, BinaryOp::Lt); }
Tensor le(const Tensor& a, const Scalar& b) { return compare("le", a, b, BinaryOp::Le); }
Tensor gt(const Tensor& a, const Scalar& b) { return compare("gt", a, b, BinaryOp::Gt); }
Tensor ge(const Tensor& a, const Scalar& b) { return compare("ge", a, b, BinaryOp::Ge); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return compare("logical_and", a, b, BinaryOp::LogicalAnd); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return compare("logical_or", a, b, BinaryOp::LogicalOr); }

// --- where, masked_fill ------------------------------------------------------------------------

namespace {
Tensor where_impl(const Tensor& cond, const Tensor* a, const Scalar* as, const Tensor* b, const Scalar* bs) {
  const char* name = "where";
  ops::check_defined(name, cond, "condition");
  if (cond.dtype() != DType::Bool) {
    throw DTypeError(std::string("where: condition must be bool, got ") + dtype_name(cond.dtype()) + " (shape " +
                     shape_str(cond.sizes()) + ")");
  }
  Device dev = ops::common_device(name, {&cond, a, b});
  Shape shape = cond.sizes();
  if (a) shape = broadcast_shapes(shape, a->sizes(), name);
  if (b) shape = broadcast_shapes(shape, b->sizes(), name);
  DType rt;
  Tensor a_in, b_in;  // converted to rt where that changes their values (ops::operand_in)
  if (a && b) {
    rt = result_type(*a, *b);
    a_in = ops::operand_in(name, *a, *b, rt);
    b_in = ops::operand_in(name, *b, *a, rt);
  } else if (a) {
    rt = promote_with_scalar(a->dtype(), *bs);
  } else {
    rt = promote_with_scalar(b->dtype(), *as);
  }
  Tensor out = make_output(name, shape, rt, dev, {a, b});
  if (out.numel() > 0) {
    StridedArg o = ops::make_arg(name, out);
    StridedArg c = ops::make_arg(name, cond, shape);
    Operand x = a ? make_operand(name, a_in.defined() ? a_in : *a, shape) : scalar_operand(*as, rt);
    Operand y = b ? make_operand(name, b_in.defined() ? b_in : *b, shape) : scalar_operand(*bs, rt);
    std::vector<StridedArg*> args{&o, &c};
    if (a) args.push_back(&x.arg);
    if (b) args.push_back(&y.arg);
    ops::collapse_dims(args);
    ops::launch(name, dev, kernels::where, o, c, x, y, compute_dtype_for(rt));
  }
  ops::record_where(name, cond, a ? *a : Tensor(), b ? *b : Tensor(), out);
  return out;
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  ops::check_defined("where", a, "first value");
  ops::check_defined("where", b, "second value");
  return where_impl(cond, &a, nullptr, &b, nullptr);
}
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b) {
  ops::check_defined("where", a, "first value");
  return where_impl(cond, &a, nullptr, nullptr, &b);
}
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b) {
  ops::check_defined("where", b, "second value");
  return where_impl(cond, nullptr, &a, &b, nullptr);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  ops::check_defined("masked_fill", x, "input");
  ops::check_defined("masked_fill", mask, "mask");
  if (mask.dtype() != DType::Bool) {
    throw DTypeError(std::string("masked_fill: mask must be bool, got ") + dtype_name(mask.dtype()) + " (shape " +
                     shape_str(mask.sizes()) + ")");
  }
  if (broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill") != x.sizes()) {
    throw ShapeError("masked_fill: mask of shape " + shape_str(mask.sizes()) + " does not broadcast to input shape " +
                     shape_str(x.sizes()));
  }
  // The value is stored as a fill stores it (checked: 1e5 does not fit float16); a float into an
  // integer tensor is cut toward zero first, so that where() keeps the integer dtype and the value
  // is not rounded through float32 on the way (1e18 into int64).
  ops::check_fill_value("masked_fill", value, x.dtype());
  const Scalar stored = value.is_floating() && !x.is_floating_point() && x.dtype() != DType::Bool
                            ? Scalar(static_cast<int64_t>(value.to_double()))
                            : value;
  Tensor out = where(mask, stored, x);
  return out.dtype() == x.dtype() ? out : out.to(x.dtype());
}

// --- operators ---------------------------------------------------------------------------------

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Scalar& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(a, b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, b); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, b); }

// Method forms of common ops.
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::pow(const Scalar& e) const { return kiln::pow(*this, e); }

// --- the autograd nodes (core/ops/elementwise_grad.h) ------------------------------------------

void ops::record_add(const char* name, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  if (!needs_grad({&a, &b})) return;
  Shape as = a.sizes(), bs = b.sizes();
  record_function(name, {a, b}, {out}, {}, [as, bs, alpha](const FunctionNode::Context& ctx) {
    const Tensor& g = ctx.grads[0];
    TensorList r(2);
    if (ctx.needs_input_grad[0]) r[0] = sum_to(g, as);
    if (ctx.needs_input_grad[1]) r[1] = sum_to(alpha == 1.0 ? g : g * alpha, bs);
    return r;
  });
}

void ops::record_mul(const char* name, const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& a_value,
                     const Tensor& b_value) {
  if (!needs_grad({&a, &b})) return;
  Shape as = a.sizes(), bs = b.sizes();
  // Save only what the wanted gradients need.
  record_function(name, {a, b}, {out}, {b.requires_grad() ? a_value : Tensor(), a.requires_grad() ? b_value : Tensor()},
                  [as, bs](const FunctionNode::Context& ctx) {
                    const Tensor& g = ctx.grads[0];
                    TensorList r(2);
                    if (ctx.needs_input_grad[0]) r[0] = sum_to(mul(g, ctx.saved_at(1)), as);
                    if (ctx.needs_input_grad[1]) r[1] = sum_to(mul(g, ctx.saved_at(0)), bs);
                    return r;
                  });
}

void ops::record_div(const char* name, const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& b_value) {
  if (!needs_grad({&a, &b})) return;
  Shape as = a.sizes(), bs = b.sizes();
  const Tensor& divisor = b_value.defined() ? b_value : b;
  record_function(name, {a, b}, {out}, {divisor, out}, [as, bs](const FunctionNode::Context& ctx) {
    const Tensor gq = div(ctx.grads[0], ctx.saved_at(0));
    TensorList r(2);
    if (ctx.needs_input_grad[0]) r[0] = sum_to(gq, as);
    if (ctx.needs_input_grad[1]) r[1] = sum_to(neg(mul(gq, ctx.saved_at(1))), bs);
    return r;
  });
}

void ops::record_scalar(const char* name, const Tensor& x, const Tensor& out, ScalarGrad kind, const Scalar& s) {
  if (!needs_grad({&x})) return;
  record_function(name, {x}, {out}, {}, [kind, s](const FunctionNode::Context& ctx) {
    switch (kind) {
      case ScalarGrad::Mul: return TensorList{mul(ctx.grads[0], s)};
      case ScalarGrad::Div: return TensorList{div(ctx.grads[0], s)};
      case ScalarGrad::Identity: break;
    }
    return TensorList{ctx.grads[0]};
  });
}

bool ops::clamp_bound_is_nan(const std::optional<Scalar>& min, const std::optional<Scalar>& max) {
  return (min && std::isnan(min->to_double())) || (max && std::isnan(max->to_double()));
}

void ops::record_clamp(const char* name, const Tensor& x, const Tensor& out, const Tensor& x_value,
                       const std::optional<Scalar>& min, const std::optional<Scalar>& max) {
  if (!needs_grad({&x})) return;
  // The kernel's bounds: NaN where there is none; with a NaN bound, +inf and -inf, between which no
  // element lies.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const bool none = clamp_bound_is_nan(min, max);
  const double lo = none ? inf : min ? min->to_double() : nan;
  const double hi = none ? -inf : max ? max->to_double() : nan;
  record_function(name, {x}, {out}, {x_value}, [lo, hi](const FunctionNode::Context& ctx) {
    return TensorList{ops::backward_kernel(ctx.grads[0], ctx.saved_at(0), BinaryOp::ClampBackward, lo, hi)};
  });
}

void ops::record_where(const char* name, const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (!needs_grad({&a, &b})) return;
  Shape ash = a.defined() ? a.sizes() : Shape{}, bsh = b.defined() ? b.sizes() : Shape{};
  record_function(name, {a, b}, {out}, {cond}, [ash, bsh](const FunctionNode::Context& ctx) {
    const Tensor& g = ctx.grads[0];
    const Tensor c = ctx.saved_at(0);
    TensorList r(2);
    if (ctx.needs_input_grad[0]) r[0] = sum_to(where(c, g, 0.0), ash);
    if (ctx.needs_input_grad[1]) r[1] = sum_to(where(c, 0.0, g), bsh);
    return r;
  });
}

}  // namespace kiln
