// The less common elementwise math, as PyTorch names and defines it: rounding; the tangent, the
// inverse and hyperbolic trigonometric functions; erf and erfc; base-2 and base-10 logarithms and
// exp2; atan2; the rounding divisions and their remainders; hypot, copysign, signbit, fmax and
// fmin, heaviside, ldexp and float_power. Each is one kernel of the elementwise path
// (kernels/elementwise_math.h) or composed of such ops, on the CPU and CUDA alike.
#pragma once

#include "core/scalar.h"
#include "core/tensor.h"

namespace kiln {

// Rounding to an integral value of the same float dtype: floor, ceil, trunc (toward zero) and
// round (half to even: 0.5 and 1.5 both round to an even neighbour, 0 and 2). Integer tensors come
// back as a copy; bool tensors are refused. The gradient is zero (the functions are flat wherever
// they are differentiable).
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor trunc(const Tensor& x);
Tensor round(const Tensor& x);
// Rounded to `decimals` digits after the point (before it when negative): round(x * 10^d) / 10^d
// (round(x / 10^-d) * 10^-d for negative d), as PyTorch computes it, so half to even again (0.125
// at 2 decimals is 0.12) and the scaling's rounding included; float16 and bfloat16 are scaled in
// float32. Float tensors only when decimals is not 0.
Tensor round(const Tensor& x, int64_t decimals);
// x - trunc(x): the fractional part, with x's sign. Float tensors only; the gradient is 1.
Tensor frac(const Tensor& x);

// In radians; integer inputs give float32. tan, asin, acos, sinh and cosh run in float32 under
// autocast (their float16 results overflow or lose their digits near the poles).
Tensor tan(const Tensor& x);
Tensor asin(const Tensor& x);
Tensor acos(const Tensor& x);
Tensor atan(const Tensor& x);
Tensor sinh(const Tensor& x);
Tensor cosh(const Tensor& x);
Tensor asinh(const Tensor& x);
Tensor acosh(const Tensor& x);
Tensor atanh(const Tensor& x);
// The angle of the point (x, y) in (-pi, pi], with the signs of both (atan(y / x) knows one):
// atan2(y, x). Broadcast; integers give float32.
Tensor atan2(const Tensor& y, const Tensor& x);

// The error function and its complement 1 - erf(x), exact where erf(x) is near 1.
Tensor erf(const Tensor& x);
Tensor erfc(const Tensor& x);
// Logarithms in bases 2 and 10 (float32 under autocast), and 2^x.
Tensor log2(const Tensor& x);
Tensor log10(const Tensor& x);
Tensor exp2(const Tensor& x);
// 1 / x (integers give float32; float32 under autocast) and x * x (in x's dtype).
Tensor reciprocal(const Tensor& x);
Tensor square(const Tensor& x);
// x * log(y), 0 where x is 0 (even for y = 0 or inf; a NaN y stays NaN): the entropy terms that
// must not turn 0 * log(0) into NaN. Broadcast; integers give float32.
Tensor xlogy(const Tensor& x, const Tensor& y);

// sqrt(a^2 + b^2) without squaring: the larger magnitude times sqrt(1 + r^2), r the ratio of the
// smaller to it, so 1e300 and 1e-300 pairs neither overflow nor flush to 0. inf when either is
// infinite (even beside a NaN). Gradients a / hypot and b / hypot (NaN at (0, 0), as PyTorch's).
// Broadcast; integers give float32; float16 and bfloat16 are computed in float32.
Tensor hypot(const Tensor& a, const Tensor& b);
// |a| with b's sign, that of a zero included (copysign(1, -0.0) is -1); a NaN b counts as positive
// (its sign bit is not read). Gradient with respect to a: the ratio copysign(a, b) / a (0 where a
// is 0); b's is 0. Broadcast; integers give float32.
Tensor copysign(const Tensor& a, const Tensor& b);
Tensor copysign(const Tensor& a, const Scalar& b);
// True where x is negative, -0.0 included (a NaN counts as positive). A bool tensor.
Tensor signbit(const Tensor& x);
// maximum and minimum that ignore a NaN beside a number (NaN only where both are); ties and NaNs
// give the gradient to a, as PyTorch's. Broadcast, in result_type(a, b).
Tensor fmax(const Tensor& a, const Tensor& b);
Tensor fmin(const Tensor& a, const Tensor& b);
// The step function: 0 where x < 0, 1 where x > 0, `values` where x is 0 (broadcast). Gradient 0
// with respect to x (flat where it is differentiable); `values` gets the gradient where x is 0.
// x and values must share a dtype, as PyTorch requires.
Tensor heaviside(const Tensor& x, const Tensor& values);
// x * 2^e, in x's float dtype (float32 for integers). Differentiable in both.
Tensor ldexp(const Tensor& x, const Tensor& e);
// pow computed in float64, whatever the operands' dtypes: a float64 result.
Tensor float_power(const Tensor& a, const Tensor& b);
Tensor float_power(const Tensor& a, const Scalar& b);
Tensor float_power(const Scalar& a, const Tensor& b);

// Division rounded toward zero (Trunc) or down (Floor); None is true division, as div. Integer
// operands divide exactly, in their promoted integer dtype (PyTorch's rule; a float operand makes
// the result float); an integer division by zero is an error, which for a tensor divisor costs a
// look at its values (a device synchronization on the GPU). Float division by zero follows IEEE
// (inf or NaN). The rounded quotients have zero gradient.
enum class RoundingMode : uint8_t { None, Trunc, Floor };
Tensor div(const Tensor& a, const Tensor& b, RoundingMode mode);
Tensor div(const Tensor& a, const Scalar& b, RoundingMode mode);
// div(a, b, RoundingMode::Floor): Python's //, so -7 // 2 is -4.
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, const Scalar& b);
// The remainders that go with those quotients: fmod(a, b) = a - trunc(a / b) b has a's sign (C's
// fmod); remainder(a, b) = a - floor(a / b) b has b's sign (Python's %), so remainder(-7, 3) is 2
// and fmod(-7, 3) is -1. fmod is exact for floats (no rounded a / b enters); remainder adds b to
// it where the signs differ. Gradients: g for a, -g trunc(a / b) or -g floor(a / b) for b. The
// same rules for integers and zero divisors as div.
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, const Scalar& b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Scalar& b);
Tensor remainder(const Scalar& a, const Tensor& b);

}  // namespace kiln
