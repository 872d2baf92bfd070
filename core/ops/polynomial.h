// torch.special's classical orthogonal polynomials: Chebyshev's of the four kinds T, U, V, W and
// their shifted forms on [0, 1], Hermite's physicists' H and probabilists' He, Laguerre's L and
// Legendre's P, each of degree n at x.
//
// The degree is a tensor broadcast against x, or one int64 for every element; x is a tensor, or one
// double for every degree of a degree tensor (of that tensor's float dtype). As in PyTorch, a
// float degree is truncated toward zero (2.7 is 2, -0.5 is 0) and a negative one gives 0; a NaN or
// infinite one gives NaN (PyTorch's is undefined there). The result's dtype is x's and n's promoted
// dtype, a float one (integers give float32); values are computed in float64 for float64 and in
// float32 otherwise, but for the degree, held in float64, and its products.
//
// How they are computed. Every family satisfies a three-term recurrence p_(k+1) = (a_k x + b_k) p_k
// - c_k p_(k-1) from p_0 = 1, which kiln runs as one elementwise pass of a few ops per degree.
// Chebyshev's runs to degree 8; past it their closed forms take over, at the same cost for any
// degree: with x = cos(t) inside [-1, 1], T_n = cos(n t), U_n = sin((n + 1) t) / sin(t), V_n =
// cos((n + 1/2) t) / cos(t / 2) and W_n = sin((n + 1/2) t) / sin(t / 2); outside, their hyperbolic
// twins at x = cosh(t), written as exp(n t) times a ratio near 1, so that nothing overflows before
// the value does. They are taken at |x| and reflected: T_n(-x) = (-1)^n T_n(x), U likewise, V_n(-x)
// = (-1)^n W_n(x) and W_n(-x) = (-1)^n V_n(x). So t stays in [0, pi / 2]: near t = pi the rounding
// of t itself would cost sin(t) and cos(t / 2) their digits, while near 0 numerator and denominator
// keep theirs. At |x| = 1 the values are exact. Hermite's, Laguerre's and Legendre's run the
// recurrence up to the largest degree: a degree tensor's maximum is read to the host (a device sync
// on CUDA), the cost is that many passes over the tensor, and a degree past 2^20 is an error rather
// than an hours-long loop. Float64 values are within 3.4e-14 of the largest |p_k(x)|, k <= n
// (measured to degree 40 on [-3, 3]: near a root only the absolute error is small, as for every
// method); the closed forms' error grows as n t ulps. Values overflow to inf as the true ones do,
// and x = +-inf gives the infinity of the leading term (PyTorch's recurrences give NaN there, inf -
// inf); Hermite's, and Laguerre's for x > 0, may still give NaN past an overflow at finite x, as
// PyTorch's.
//
// Gradients. PyTorch gives these none; kiln's, with respect to x (n carries none), are their
// derivative identities: T_n' = n U_(n-1), U_n' = 2 C2_(n-1), V_n' = 2 (C2_(n-1) - C2_(n-2)), W_n'
// = 2 (C2_(n-1) + C2_(n-2)) with C2 Gegenbauer's polynomials of order 2 (shifted forms: twice these
// at 2x - 1), H_n' = 2n H_(n-1), He_n' = n He_(n-1), L_n' = -L1_(n-1) with L1 Laguerre's
// generalized polynomials of order 1, and P_n' = C3/2_(n-1), Gegenbauer's of order 3/2. All but T's
// run their recurrence to the largest degree in the backward pass, so U's, V's and W's gradients,
// unlike their values, cost a pass per degree and stop with an error past degree 2^20.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

// Chebyshev's polynomials of the first (T), second (U), third (V) and fourth (W) kinds:
// T_0 = U_0 = V_0 = W_0 = 1, T_1 = x, U_1 = 2x, V_1 = 2x - 1, W_1 = 2x + 1, then p_(k+1) = 2x p_k -
// p_(k-1).
Tensor chebyshev_polynomial_t(const Tensor& x, const Tensor& n);
Tensor chebyshev_polynomial_t(const Tensor& x, int64_t n);
Tensor chebyshev_polynomial_t(double x, const Tensor& n);
Tensor chebyshev_polynomial_u(const Tensor& x, const Tensor& n);
Tensor chebyshev_polynomial_u(const Tensor& x, int64_t n);
Tensor chebyshev_polynomial_u(double x, const Tensor& n);
Tensor chebyshev_polynomial_v(const Tensor& x, const Tensor& n);
Tensor chebyshev_polynomial_v(const Tensor& x, int64_t n);
Tensor chebyshev_polynomial_v(double x, const Tensor& n);
Tensor chebyshev_polynomial_w(const Tensor& x, const Tensor& n);
Tensor chebyshev_polynomial_w(const Tensor& x, int64_t n);
Tensor chebyshev_polynomial_w(double x, const Tensor& n);
// The same at 2x - 1: orthogonal on [0, 1].
Tensor shifted_chebyshev_polynomial_t(const Tensor& x, const Tensor& n);
Tensor shifted_chebyshev_polynomial_t(const Tensor& x, int64_t n);
Tensor shifted_chebyshev_polynomial_t(double x, const Tensor& n);
Tensor shifted_chebyshev_polynomial_u(const Tensor& x, const Tensor& n);
Tensor shifted_chebyshev_polynomial_u(const Tensor& x, int64_t n);
Tensor shifted_chebyshev_polynomial_u(double x, const Tensor& n);
Tensor shifted_chebyshev_polynomial_v(const Tensor& x, const Tensor& n);
Tensor shifted_chebyshev_polynomial_v(const Tensor& x, int64_t n);
Tensor shifted_chebyshev_polynomial_v(double x, const Tensor& n);
Tensor shifted_chebyshev_polynomial_w(const Tensor& x, const Tensor& n);
Tensor shifted_chebyshev_polynomial_w(const Tensor& x, int64_t n);
Tensor shifted_chebyshev_polynomial_w(double x, const Tensor& n);
// Hermite's physicists' polynomials, H_(k+1) = 2x H_k - 2k H_(k-1) (H_1 = 2x), orthogonal under
// exp(-x^2), and the probabilists' ones, He_(k+1) = x He_k - k He_(k-1) (He_1 = x), under exp(-x^2
// / 2).
Tensor hermite_polynomial_h(const Tensor& x, const Tensor& n);
Tensor hermite_polynomial_h(const Tensor& x, int64_t n);
Tensor hermite_polynomial_h(double x, const Tensor& n);
Tensor hermite_polynomial_he(const Tensor& x, const Tensor& n);
Tensor hermite_polynomial_he(const Tensor& x, int64_t n);
Tensor hermite_polynomial_he(double x, const Tensor& n);
// Laguerre's polynomials, (k + 1) L_(k+1) = (2k + 1 - x) L_k - k L_(k-1) (L_1 = 1 - x), orthogonal
// on [0, inf) under exp(-x).
Tensor laguerre_polynomial_l(const Tensor& x, const Tensor& n);
Tensor laguerre_polynomial_l(const Tensor& x, int64_t n);
Tensor laguerre_polynomial_l(double x, const Tensor& n);
// Legendre's polynomials, (k + 1) P_(k+1) = (2k + 1) x P_k - k P_(k-1) (P_1 = x), orthogonal on
// [-1, 1].
Tensor legendre_polynomial_p(const Tensor& x, const Tensor& n);
Tensor legendre_polynomial_p(const Tensor& x, int64_t n);
Tensor legendre_polynomial_p(double x, const Tensor& n);

}  // namespace kiln
