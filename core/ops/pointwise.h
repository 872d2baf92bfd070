// PyTorch's pointwise ops that kiln composes of its elementwise kernels: addcmul and addcdiv (the
// fused-looking updates of optimizers written by hand), logical_xor, isclose and its host-side
// summaries allclose and equal, and rad2deg and deg2rad. Inputs broadcast and promote as the
// elementwise ops' do; both devices run them and autograd comes with them.
#pragma once

#include "core/tensor.h"

namespace kiln {

// input + value t1 t2: torch.addcmul.
Tensor addcmul(const Tensor& input, const Tensor& t1, const Tensor& t2, const Scalar& value = 1);
// input + value t1 / t2 (true division; integer t1 and t2 together are refused, as PyTorch refuses
// them): torch.addcdiv.
Tensor addcdiv(const Tensor& input, const Tensor& t1, const Tensor& t2, const Scalar& value = 1);

// Whether exactly one of a and b is nonzero (true), bool: torch.logical_xor.
Tensor logical_xor(const Tensor& a, const Tensor& b);

// Where a and b (one dtype, broadcast together) are close, bool: equal, or both finite with
// |a - b| <= atol + rtol |b| (not symmetric in a and b, as NumPy's and PyTorch's rule), or with
// equal_nan both NaN. Integer inputs are compared in the default floating dtype. rtol and atol
// >= 0: torch.isclose.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// Whether isclose holds everywhere: a host read (a synchronization on the GPU). torch.allclose.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// Whether a and b have one shape and equal values (after promotion; NaN is never equal): a host
// read. torch.equal.
bool equal(const Tensor& a, const Tensor& b);

// Radians to degrees (x 180 / pi) and back; integer inputs give the default floating dtype.
Tensor rad2deg(const Tensor& x);
Tensor deg2rad(const Tensor& x);

}  // namespace kiln
