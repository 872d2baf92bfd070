// The activations beyond the elementwise kernels' (relu, gelu, silu, leaky_relu, softplus, tanh,
// sigmoid): elu, selu, hardtanh, relu6, hardsigmoid, hardswish, mish and prelu, as
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

}  // namespace kiln
