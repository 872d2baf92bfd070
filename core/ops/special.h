// The special functions of torch.special that kiln had no kernel for: the gamma family (lgamma,
// digamma, polygamma, mvlgamma), the inverse error function, the normal distribution's cdf, its log
// and its inverse, the scaled complementary error function, logit, sinc, entr, xlog1py, the
// modified Bessel functions of orders 0 and 1 of both kinds (I and K, and their scaled forms), the
// Bessel functions J and Y of orders 0 and 1, and the spherical j0.
//
// Each is composed of elementwise ops that have CPU and CUDA kernels (log, exp, erfc, sin, where,
// ...), evaluated without the tape; its gradient is recorded as one node with the derivative's
// closed form, so no branch a `where` discards can put a NaN into a gradient. Integer and bool
// inputs give float32; float16 and bfloat16 are computed in float32 and rounded once at the end.
// Float64 values are good to a few units of rounding (relative, or absolute near a root), float32
// ones to about 1e-6 (tests/op_table/special_rows.cpp holds them to that).
#pragma once

#include <optional>

#include "core/tensor.h"

namespace kiln {

// log |Gamma(x)|: a Stirling series at x + 8 and up (x + 3 in float32), brought down by the
// recurrence, and the reflection formula below 0.5. inf at the poles 0, -1, -2, ... The gradient is
// digamma(x).
Tensor lgamma(const Tensor& x);
// d/dx lgamma(x), psi(x). At 0, -inf (+inf at -0.0); at the negative integers, NaN, as PyTorch.
// The gradient is polygamma(1, x).
Tensor digamma(const Tensor& x);
// The n-th derivative of digamma (n >= 0; polygamma(0, x) is digamma). At the poles: +inf for odd
// n, NaN for even n >= 2 (the two sides' limits differ in sign). Its gradient is polygamma of order
// n + 1. Orders past 8 are computed in float64 whatever the dtype (their series' factorials leave
// float32's range).
Tensor polygamma(int64_t n, const Tensor& x);
// The multivariate log-gamma function of dimension p >= 1: p (p - 1) / 4 log(pi) + the sum over
// i < p of lgamma(x - i / 2). Every element must exceed (p - 1) / 2; on the CPU that is checked
// (an Error naming the smallest element), on CUDA it is not (a check would synchronize the device).
Tensor mvlgamma(const Tensor& x, int64_t p);

// The inverse of erf on [-1, 1]: +-inf at +-1, NaN outside. Newton's method from a closed-form
// first guess, on erf near 0 and on log(erfc) beyond |x| = 0.5, where 1 - |x| is exact, so x next
// to +-1 inverts to all its digits. The gradient is sqrt(pi) / 2 exp(erfinv(x)^2). float32 under
// autocast, as PyTorch's list.
Tensor erfinv(const Tensor& x);
// exp(x^2) erfc(x), finite where erfc underflows: the asymptotic series above x = 8. The gradient
// is 2 x erfcx(x) - 2 / sqrt(pi).
Tensor erfcx(const Tensor& x);
// The standard normal distribution's cdf, (1 + erf(x / sqrt 2)) / 2, computed as erfc(-x / sqrt 2)
// / 2 so its left tail keeps its digits.
Tensor ndtr(const Tensor& x);
// log(ndtr(x)), finite far into the left tail (through erfcx below x = -1).
Tensor log_ndtr(const Tensor& x);
// The inverse of ndtr on [0, 1]: -inf at 0, inf at 1, NaN outside; accurate for p down to the
// smallest normal number (through erfc's inverse, not erfinv(2 p - 1), which loses small p).
Tensor ndtri(const Tensor& p);

// log(x / (1 - x)). With eps, x is first clamped to [eps, 1 - eps] and the gradient is 0 outside
// that range; without it, the gradient is NaN outside [0, 1] (PyTorch's rules). eps in [0, 0.5].
Tensor logit(const Tensor& x, std::optional<double> eps = std::nullopt);
// sin(pi x) / (pi x), 1 at 0 (its gradient 0 there).
Tensor sinc(const Tensor& x);
// The entropy term -x log x: 0 at 0, -inf for x < 0. The gradient is -(1 + log x).
Tensor entr(const Tensor& x);
// x * log1p(y), 0 where x is 0 and y is not NaN (as xlogy). Broadcast; integers give float32.
Tensor xlog1py(const Tensor& x, const Tensor& y);
// The Hurwitz zeta function zeta(x, q) = sum_(k>=0) (q + k)^-x (Riemann's at q = 1),
// torch.special.zeta, with PyTorch's domain: inf at x = 1 and at q = 0, -1, -2, ...; NaN for x < 1,
// and for q < 0 unless x is an integer. At x = inf or q = inf it takes the limits (1 at q = 1, else
// 0 or inf; PyTorch's are NaN there). Nine terms directly, then the Euler-Maclaurin tail with eight
// Bernoulli terms, some 90 elementwise passes (polygamma's series is the same function): float64
// values within 7.1e-16 of the true ones (relative; measured for x from 1.01 to 60 and q from 0.01
// to 100). A q < 0 off the integers is brought to three values at positive arguments, at three
// times the cost; to know whether there is one, a q tensor's smallest element is read to the host
// (a device sync on CUDA; the one-q form needs none). Broadcast; integers give float32. Gradients:
// d/dq = -x zeta(x + 1, q), and, where PyTorch has none, d/dx = -sum log(q + k) (q + k)^-x by the
// same sum differentiated (NaN where q < 0, where x is an integer).
Tensor zeta(const Tensor& x, const Tensor& q);
Tensor zeta(const Tensor& x, double q);
// One x for every q: x as a 0-d tensor of q's float dtype.
Tensor zeta(double x, const Tensor& q);

// The modified Bessel functions of the first kind, I0 (even) and I1 (odd), as torch.i0 and
// torch.special.i0, i1 (also named modified_bessel_i0 and _i1 there). Up to |x| = 20 the power
// series sum (x^2 / 4)^k / (k! (k + n)!) (times x / 2 for I1), 34 terms; beyond, the asymptotic
// series e^|x| / sqrt(2 pi |x|) sum a_k / |x|^k, 26 terms: float64 values within about 1.5e-15 of
// the true ones (relative; the rounding of x^2 and of the exponential, magnified by the functions'
// slopes, about |x| / 2). i0 overflows to inf past |x| = 713.98 in float64 (91.9 in float32), as
// the true value does. Each is over a hundred elementwise passes over the tensor: cheap for a
// window, not for an activation. The gradients: i0' = i1 and i1' = i0 - i1 / x (1/2 at 0).
Tensor i0(const Tensor& x);
Tensor i1(const Tensor& x);
// exp(-|x|) i0(x) and exp(-|x|) i1(x): finite for every x, 0 at +-inf (the asymptotic series
// without its exponential). Gradients: i0e' = i1e - sign(x) i0e and i1e' = i0e - i1e (sign(x) +
// 1 / x), 1/2 at 0.
Tensor i0e(const Tensor& x);
Tensor i1e(const Tensor& x);
// torch.special's other names for i0 and i1.
inline Tensor modified_bessel_i0(const Tensor& x) { return i0(x); }
inline Tensor modified_bessel_i1(const Tensor& x) { return i1(x); }

// The modified Bessel functions of the second kind, K0 and K1, for x > 0 (torch.special's
// modified_bessel_k0 and _k1): +inf at 0 and NaN below, as PyTorch's. Up to x = 1 their series, up
// to 20 the integral e^x K_n(x) = int_0^inf exp(-x (cosh s - 1)) cosh(n s) ds by the trapezoidal
// rule (31 nodes), beyond it the asymptotic series: float64 values within about 1e-15 of the true
// ones (relative), in some 250 elementwise passes. PyTorch gives them no gradient; kiln's are
// K0' = -K1 and K1' = -K0 - K1 / x.
Tensor modified_bessel_k0(const Tensor& x);
Tensor modified_bessel_k1(const Tensor& x);
// exp(x) K0(x) and exp(x) K1(x): finite for every x > 0, 0 at inf. Gradients: k0e' = k0e - k1e and
// k1e' = k1e (1 - 1 / x) - k0e.
Tensor scaled_modified_bessel_k0(const Tensor& x);
Tensor scaled_modified_bessel_k1(const Tensor& x);

// The Bessel functions of the first kind, J0 (even) and J1 (odd), and of the second kind, Y0 and Y1
// (x > 0: -inf at 0, NaN below, as PyTorch's), torch.special's bessel_j0, _j1, _y0 and _y1. Below
// |x| = 25 J's integral 1/(2 pi) int cos(n s - x sin s) ds by the trapezoidal rule (160 nodes,
// folded to 41 by symmetry) and Y by Neumann's series in the J_2k that the same nodes give; beyond,
// Hankel's expansions (24 terms). Float64 values are within a few 1e-16 of the true ones (absolute:
// near their roots, as every method's; the functions are at most 1 there), in some 250 (J) to 550
// (Y1) elementwise passes. J at +-inf and Y at +inf are 0, their limits (PyTorch's are NaN there).
// PyTorch gives them no gradient; kiln's are J0' = -J1, J1' = J0 - J1 / x (1/2 at 0), Y0' = -Y1
// and Y1' = Y0 - Y1 / x (+inf at 0).
Tensor bessel_j0(const Tensor& x);
Tensor bessel_j1(const Tensor& x);
Tensor bessel_y0(const Tensor& x);
Tensor bessel_y1(const Tensor& x);
// sin(x) / x (1 at 0, 0 at +-inf), torch.special.spherical_bessel_j0. PyTorch gives it no
// gradient; kiln's is (cos x - sin(x) / x) / x, by its series below |x| = 0.5 (where that
// difference cancels), 0 at 0.
Tensor spherical_bessel_j0(const Tensor& x);

}  // namespace kiln
