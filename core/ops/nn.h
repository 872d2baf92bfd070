// Neural-network ops: softmax, norms, dropout, embedding and losses, each one autograd node with a
// fused kernel. Activations may be float16/bfloat16 and are read directly; statistics accumulate
// in float; parameters keep their own dtype.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// Normalizes over the trailing dims `normalized_shape`; weight and bias (optional) have that shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// x: [N, C, ...] (NCHW or channels-last). In training, normalizes with the batch statistics and
// updates running_mean/running_var in place (unbiased variance, PyTorch's momentum rule) when
// they are given; in eval, uses them. weight/bias [C] are optional.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);

// Zeroes each element with probability p and scales the rest by 1/(1-p). The mask of element i
// (row-major logical index) comes from Philox (seed, offset, i), so CPU and CUDA draw identical masks.
Tensor dropout(const Tensor& x, double p, bool training = true);

// Rows of weight [num_embeddings, dim] picked by integer indices of any shape.
Tensor embedding(const Tensor& weight, const Tensor& indices);

enum class Reduction : uint8_t { None, Mean, Sum };

// logits [N, C] or [N, C, d1, ...] (or [C] with a 0-d target); target int64 class indices of
// shape [N, d1, ...]. Targets equal to ignore_index contribute nothing and do not count in the
// mean. label_smoothing in [0, 1] mixes the one-hot target with the uniform distribution.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace kiln
