// The autograd nodes of the elementwise ops, one recorder per op, shared by its out-of-place and
// in-place forms (add/add_, mul/mul_, div/div_, clamp/clamp_, where/masked_fill_), so a backward
// formula is written once. Each records only when needs_grad says so; `name` names the node.
// Internal to core/ops.
#pragma once

#include <optional>

#include "core/scalar.h"
#include "core/tensor.h"

namespace kiln::ops {

// out = a + alpha * b: da = g, db = alpha * g, each summed to its input's shape.
void record_add(const char* name, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);
// out = a * b. a_value and b_value are the factors as they were when multiplied (an in-place
// product passes a copy of its old self): da = g * b_value, db = g * a_value.
void record_mul(const char* name, const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& a_value,
                const Tensor& b_value);
// out = a / b: da = g / b, db = -(g / b) * out.
// b_value: b's value for the backward when b itself is about to change (div_ by a tensor sharing
// self's memory); b when undefined.
void record_div(const char* name, const Tensor& a, const Tensor& b, const Tensor& out,
                const Tensor& b_value = Tensor());
// out = x op s for a scalar s: dx = g (add), g * s (mul) or g / s (div).
enum class ScalarGrad : uint8_t { Identity, Mul, Div };
void record_scalar(const char* name, const Tensor& x, const Tensor& out, ScalarGrad kind, const Scalar& s);
// out = clamp(x, min, max), either bound possibly absent; x_value is x before the op. The gradient
// passes where min <= x <= max, nowhere when a bound is NaN (the result is NaN: clamp_bound_is_nan).
void record_clamp(const char* name, const Tensor& x, const Tensor& out, const Tensor& x_value,
                  const std::optional<Scalar>& min, const std::optional<Scalar>& max);
// Whether either of clamp's bounds is a NaN, which makes every element NaN, as in PyTorch.
bool clamp_bound_is_nan(const std::optional<Scalar>& min, const std::optional<Scalar>& max);
// out = cond ? a : b with either side possibly a scalar (undefined): the gradient goes to the side
// each element came from.
void record_where(const char* name, const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);

}  // namespace kiln::ops
