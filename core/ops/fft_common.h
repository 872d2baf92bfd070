// What the two files of the FFT family share (core/ops/fft.cpp, core/ops/fft_stft.cpp): the input
// checks and complex arithmetic on (real, imaginary) pairs composed of kiln's ops, so they are
// differentiable wherever they are used.
#pragma once

#include <cstdint>

#include "core/ops/elementwise.h"
#include "core/ops/shape.h"
#include "core/tensor.h"

namespace kiln::fft_detail {

// x is float32 or float64 (a DTypeError otherwise) and, when `complex`, has a last dim of 2 (a
// ShapeError otherwise); with `needs_dim`, x has a dim to transform (a real x at least 1 dim, a
// complex one at least 1 besides its pair dim).
void check_input(const char* op, const Tensor& x, bool complex, bool needs_dim = true);
// z's last dim is 2, the (real, imaginary) pair (a ShapeError naming `what` otherwise).
void check_pair_dim(const char* op, const Tensor& z, const char* what);
// `dim` of the complex shape of z (z's dims without the pair dim), wrapped; an IndexError when out
// of range.
int64_t complex_dim(const char* op, const Tensor& z, int64_t dim);

inline Tensor re_of(const Tensor& z) { return z.select(-1, 0); }
inline Tensor im_of(const Tensor& z) { return z.select(-1, 1); }
inline Tensor pair(const Tensor& re, const Tensor& im) { return stack({re, im}, -1); }
inline Tensor cmul(const Tensor& a, const Tensor& b) {
  const Tensor ar = re_of(a), ai = im_of(a), br = re_of(b), bi = im_of(b);
  return pair(sub(mul(ar, br), mul(ai, bi)), add(mul(ar, bi), mul(ai, br)));
}
inline Tensor conj(const Tensor& z) { return pair(re_of(z), neg(im_of(z))); }

}  // namespace kiln::fft_detail
