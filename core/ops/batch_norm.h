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

// What batch_norm can apply in the pass that normalizes, instead of ops after it that would each
// read and write the whole activation again: y = relu(batch_norm(x) + residual), the "bn, add,
// relu" ending of a ResNet block, or y = relu(batch_norm(x)) without a residual.
struct BatchNormEpilogue {
  Tensor residual;    // added when defined: x's sizes, dtype and device (any strides)
  bool relu = false;  // ReLU last
};

// batch_norm with an epilogue. The result has the bits of batch_norm, add and relu run one after
// another, and so have the gradients. The backward of a ReLU without a residual runs inside the
// batch norm backward's passes (it masks the incoming gradient by the saved output); with a
// residual, the masked gradient is the residual's, and batch norm's backward reads it.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps, const BatchNormEpilogue& epilogue);

}  // namespace kiln
