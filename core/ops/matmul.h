// Matrix products with PyTorch's matmul rules: 1-d operands are promoted to a row or column and
// the added dim removed afterwards; batch dims broadcast.
#pragma once

#include "core/tensor.h"

namespace kiln {

Tensor matmul(const Tensor& a, const Tensor& b);
// x @ w^T + b, the product of nn.Linear (w is [out_features, in_features]).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace kiln
