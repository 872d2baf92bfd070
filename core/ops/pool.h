// 2-d pooling over NCHW or channels-last inputs (the output keeps the input's layout), and 1-d
// pooling over [N, C, L].
#pragma once

#include "core/ops/conv.h"
#include "core/tensor.h"

namespace kiln {

// stride {0, 0} means "equal to kernel_size", as PyTorch's default; one zero stride is an Error.
Tensor max_pool2d(const Tensor& x, Pair kernel_size, Pair stride = {0, 0}, Pair padding = {0, 0},
                  Pair dilation = {1, 1}, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& x, Pair kernel_size, Pair stride = {0, 0}, Pair padding = {0, 0},
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size);

// 1-d pooling over [N, C, L] or [C, L] (the 2-d ops on a height of 1). stride 0 means "equal to
// kernel_size", as above.
Tensor max_pool1d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0, int64_t dilation = 1,
                  bool ceil_mode = false);
Tensor avg_pool1d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0, bool ceil_mode = false,
                  bool count_include_pad = true);
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size);

}  // namespace kiln
