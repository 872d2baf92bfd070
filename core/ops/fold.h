// PyTorch's unfold (im2col) and fold (col2im) of torch.nn.functional: sliding 2-d windows of an
// image as columns, and columns summed back into an image. Both gather or scatter through one
// index map of the windows (index_select and index_add on the padded image), so they run on every
// device and each is the other's gradient.
#pragma once

#include "core/ops/conv.h"
#include "core/tensor.h"

namespace kiln {

// input [N, C, H, W] (or [C, H, W]) -> [N, C * kh * kw, L] (or [C * kh * kw, L]): every window
// of kernel_size (its elements `dilation` apart), the windows `stride` apart over the image padded
// by `padding` zeros on each side, L = oh * ow of them in row-major order. Row c * kh * kw + i * kw
// + j of the result holds channel c's element (i, j) of each window, as PyTorch's.
Tensor unfold(const Tensor& input, Pair kernel_size, Pair dilation = {1, 1}, Pair padding = {0, 0},
              Pair stride = {1, 1});

// The adjoint of unfold: input [N, C * kh * kw, L] (or [C * kh * kw, L]) of windows, each added
// into an image of output_size (H, W) at its place (overlapping windows sum; the padding is
// dropped) -> [N, C, H, W] (or [C, H, W]). L must be the number of windows the geometry gives.
Tensor fold(const Tensor& input, Pair output_size, Pair kernel_size, Pair dilation = {1, 1}, Pair padding = {0, 0},
            Pair stride = {1, 1});

}  // namespace kiln
