// 2-d convolution over NCHW or channels-last inputs (the output keeps the input's layout), its
// transpose (the gradient of a convolution with respect to its input, run forward: upsampling by a
// learned filter), and the 1-d forms of both as 2-d ones of height 1.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace kiln {

using Pair = std::array<int64_t, 2>;

// x [N, C_in, H, W], weight [C_out, C_in / groups, kH, kW], bias [C_out] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Pair stride = {1, 1},
              Pair padding = {0, 0}, Pair dilation = {1, 1}, int64_t groups = 1);

// x [N, C_in, L] (or unbatched [C_in, L]), weight [C_out, C_in / groups, k], bias [C_out] or
// undefined: conv2d over views of height 1 (no copy), so every conv2d path serves it.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);

// The transposed convolution, PyTorch's conv_transpose2d (argument order included: groups comes
// before dilation). x [N, C_in, H, W], weight [C_in, C_out / groups, kH, kW] (a Conv2d weight of
// C_in output channels read the other way), bias [C_out] or undefined; the output is
// [N, C_out, OH, OW] with OH = (H - 1) stride - 2 padding + dilation (kH - 1) + output_padding + 1.
// It is the adjoint of conv2d with the same weight and hyper-parameters: padding crops the output,
// and output_padding (less than the stride, each side) adds rows and columns at the bottom and
// right, picking one of the `stride` input sizes a strided conv2d maps to the same size. It runs
// the convolution kernels in the other roles: forward is conv2d's input gradient, the input
// gradient is conv2d's forward, the weight gradient conv2d's weight gradient with input and output
// gradient swapped.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Pair stride = {1, 1},
                        Pair padding = {0, 0}, Pair output_padding = {0, 0}, int64_t groups = 1,
                        Pair dilation = {1, 1});

// x [N, C_in, L] (or unbatched [C_in, L]), weight [C_in, C_out / groups, k], bias [C_out] or
// undefined: conv_transpose2d over views of height 1.
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
                        int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1);

}  // namespace kiln
