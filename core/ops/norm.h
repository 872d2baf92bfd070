// Group norm and RMS norm, composed of kiln's reductions and elementwise ops (each of which has its
// CPU and CUDA kernels), so autograd and every device come with them. float16 and bfloat16 inputs
// are normalized in float32 and the result is rounded once to the input's dtype, as PyTorch's
// kernels accumulate in float; under autocast both run in float32 (core/autocast.cpp).
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace kiln {

// PyTorch's group_norm: input [N, C, *] with C divisible by num_groups; each sample's channels are
// split into num_groups groups of C / num_groups channels, and each group (its channels and all
// their positions) is normalized by its own mean and biased variance; weight and bias (optional)
// [C] scale and shift each channel.
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// PyTorch's rms_norm: x / sqrt(mean(x^2 over the trailing normalized_shape dims) + eps) * weight
// (optional, of normalized_shape). eps defaults, as PyTorch's, to the machine epsilon of the
// input's dtype (float32: 2^-23).
Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);

}  // namespace kiln
