// Elementwise ops with broadcasting and type promotion (core/scalar.h: PyTorch's); all
// differentiable where math allows. Integer inputs of float-only ops (exp, div, ...) produce float32
// like PyTorch.
#pragma once

#include <optional>

#include "core/tensor.h"
#include "kernels/elementwise.h"

namespace kiln {

enum class GeluApprox : uint8_t { None, Tanh };

// The dtype both operands of a binary op on a and b are taken in, and of its result (but for
// comparisons, whose result is bool): promote_types of the two, or, when one of them is 0-d and the
// other is not, promote_with_zero_dim. Such a 0-d operand is converted to that dtype first, as
// PyTorch converts it: float16 x == a float32 0-d tensor of 0.1 compares with float16's 0.1.
DType result_type(const Tensor& a, const Tensor& b);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
// log(1 + x) and exp(x) - 1, exact for small x where log(x + 1) and exp(x) - 1 lose it to rounding;
// both run in float32 under autocast.
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
// In radians; integer inputs give float32.
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::None);
// x * sigmoid(x) (SiLU, "swish"): floating inputs.
Tensor silu(const Tensor& x);
// x where x > 0, else negative_slope * x (PyTorch's default slope 0.01): floating inputs.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's softplus; runs in
// float32 under autocast): floating inputs, beta > 0.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor pow(const Tensor& x, const Scalar& exponent);
Tensor pow(const Scalar& base, const Tensor& exponent);
Tensor pow(const Tensor& x, const Tensor& exponent);
// A missing bound is no bound; at least one must be given.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor logical_not(const Tensor& x);

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor sub(const Scalar& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Scalar& b);
Tensor div(const Scalar& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

// Comparisons give bool tensors and are not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Scalar& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor isnan(const Tensor& x);
// Whether each element is +-inf (isinf, isposinf, isneginf) or neither inf nor NaN (isfinite):
// bool tensors; integer and bool inputs are all finite.
Tensor isinf(const Tensor& x);
Tensor isposinf(const Tensor& x);
Tensor isneginf(const Tensor& x);
Tensor isfinite(const Tensor& x);
// x with NaN, +inf and -inf replaced: by `nan`, and by `posinf` and `neginf` or, without them, the
// dtype's largest and lowest finite values, as torch.nan_to_num. The gradient reaches the finite
// elements only. Integer and bool inputs come back as a copy.
Tensor nan_to_num(const Tensor& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);
// start + weight (end - start), as torch.lerp: computed from the nearer end (end - (end - start)
// (1 - weight) from weight 0.5 on), so weight 1 gives end exactly. Floating operands, broadcast.
Tensor lerp(const Tensor& start, const Tensor& end, const Scalar& weight);
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);

// cond ? a : b, broadcasting all three; cond must be bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b);
// x with `value` where mask (bool, broadcasting to x) is true; the value is stored as full() stores
// it: an Error if it overflows x's dtype (ops::check_fill_value), a float into an integer tensor
// cut toward zero.
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);

// The shape two shapes broadcast to; a ShapeError naming `op` when they cannot.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Sums `grad` down to `shape` (the inverse of broadcasting), for backward of broadcast ops.
Tensor sum_to(const Tensor& grad, const Shape& shape);

// Operators.
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);

}  // namespace kiln
