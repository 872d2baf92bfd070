// 2-d convolution over NCHW or channels-last inputs (the output keeps the input's layout).
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace kiln {

using Pair = std::array<int64_t, 2>;

// x [N, C_in, H, W], weight [C_out, C_in / groups, kH, kW], bias [C_out] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Pair stride = {1, 1},
              Pair padding = {0, 0}, Pair dilation = {1, 1}, int64_t groups = 1);

}  // namespace kiln
