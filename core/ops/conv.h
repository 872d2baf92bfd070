// 2-d convolution over NCHW or channels-last inputs (the output keeps the input's layout), and
// 1-d convolution as a 2-d one of height 1.
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

}  // namespace kiln
