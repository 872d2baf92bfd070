// Batch norm over [N, C, ...] activations (NCHW or channels-last). Activations may be
// float16/bfloat16 and are read directly; statistics accumulate in float.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

// In training, normalizes with the batch statistics and updates running_mean/running_var in place
// (unbiased variance, PyTorch's momentum rule) when they are given; in eval, uses them.
// weight/bias [C] are optional.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);

}  // namespace kiln
