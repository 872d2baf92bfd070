// Group norm, RMS norm, instance norm and local response norm. group_norm and rms_norm are
// composed of kiln's reductions and elementwise ops (each with its CPU and CUDA kernels), so
// autograd and every device come with them; float16 and bfloat16 inputs are normalized in float32
// and the result is rounded once to the input's dtype, as PyTorch's kernels accumulate in float,
// and under autocast both run in float32 (core/autocast.cpp). instance_norm runs batch norm's
// kernels on a reshaped input; local_response_norm sums squares over sliding channel windows.
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

// PyTorch's instance_norm: input [N, C, *] (at least one position per channel beyond N and C);
// with use_input_stats each sample's channel is normalized by its own mean and biased variance
// over its positions, and running_mean/running_var ([C], optional, together) are updated in place
// with the average over the samples of their means and unbiased variances (PyTorch's momentum
// rule); without, the running statistics normalize every sample (they are then required). weight
// and bias (optional) [C] scale and shift each channel. It runs as PyTorch's does, as batch_norm of
// the input seen as [1, N * C, *] (its fused kernels), so half-precision inputs are read directly
// and, as batch_norm, it is not in autocast's table.
Tensor instance_norm(const Tensor& input, const Tensor& running_mean = Tensor(), const Tensor& running_var = Tensor(),
                     const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);

// PyTorch's local_response_norm over the channels of input [N, C, *] (at least 3 dims): each
// element divided by (k + alpha / size * sum of the squares of the `size` channels around it)^beta,
// the window centred (size / 2 channels before, (size - 1) / 2 after) and zero past the ends.
Tensor local_response_norm(const Tensor& input, int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0);

}  // namespace kiln
