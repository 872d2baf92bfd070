// The activations beyond the elementwise kernels' (relu, gelu, silu, leaky_relu, softplus, tanh,
// sigmoid): elu, selu, celu, hardtanh, relu6, hardsigmoid, hardswish, mish, prelu, logsigmoid,
// softsign, tanhshrink, softshrink, hardshrink, threshold, glu and softmin, as
// torch.nn.functional computes them, composed of elementwise ops (where() picks a branch, and the
// exponential only ever sees the negative side, so no branch's overflow reaches the gradient).
#pragma once

#include "core/tensor.h"

namespace kiln {

// x for x > 0, alpha (exp(x) - 1) otherwise.
Tensor elu(const Tensor& x, double alpha = 1.0);
// scale * elu(x, alpha) with SELU's fixed alpha and scale (Klambauer et al.).
Tensor selu(const Tensor& x);
// x clamped to [min_val, max_val] (min_val <= max_val); relu6 is hardtanh(x, 0, 6).
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor relu6(const Tensor& x);
// relu6(x + 3) / 6, and x times it.
Tensor hardsigmoid(const Tensor& x);
Tensor hardswish(const Tensor& x);
// x tanh(softplus(x)) (Misra).
Tensor mish(const Tensor& x);
// x for x > 0, weight x otherwise; weight has one value, or one per channel (dim 1 of x).
Tensor prelu(const Tensor& x, const Tensor& weight);
// max(0, x) + min(0, alpha (exp(x / alpha) - 1)), alpha != 0 (Barron).
Tensor celu(const Tensor& x, double alpha = 1.0);
// log(sigmoid(x)), as min(x, 0) - log1p(exp(-|x|)): no overflow on either side, and the tiny
// values of the positive tail (-exp(-x)) kept rather than rounded to 0.
Tensor logsigmoid(const Tensor& x);
// x / (1 + |x|).
Tensor softsign(const Tensor& x);
// x - tanh(x).
Tensor tanhshrink(const Tensor& x);
// x - lambd above lambd, x + lambd below -lambd, 0 between (lambd >= 0).
Tensor softshrink(const Tensor& x, double lambd = 0.5);
// x where |x| > lambd, 0 elsewhere (lambd >= 0).
Tensor hardshrink(const Tensor& x, double lambd = 0.5);
// x where x > threshold, value elsewhere.
Tensor threshold(const Tensor& x, double threshold, double value);
// The gated linear unit: x split in halves a, b along dim (of even size), a * sigmoid(b).
Tensor glu(const Tensor& x, int64_t dim = -1);
// softmax(-x) along dim.
Tensor softmin(const Tensor& x, int64_t dim);

}  // namespace kiln
