// Fractional max pooling (Graham, "Fractional Max-Pooling", 2014), PyTorch's
// fractional_max_pool2d and fractional_max_pool3d: a max pool whose output size is chosen freely
// (not a whole fraction of the input's) and whose windows start at pseudo-random positions. Each
// plane (batch element and channel) draws one uniform sample u in [0, 1) per spatial dim; with
// alpha = (n - k) / (out - 1), window i of a dim of size n starts at
// trunc((i + u) alpha) - trunc(u alpha), and the last at n - k, so the windows (of the kernel's
// size) cover the dim from end to end with strides of floor(alpha) or ceil(alpha).
//
// The samples are drawn from the generator (or the default one), or given: PyTorch's
// _random_samples, [N, C, 2] in the order (w, h) for 2-d and (t, h, w) for 3-d, as PyTorch reads
// them, so the same samples give PyTorch's windows. The starts are computed in float32 (float64
// for float64 inputs), as PyTorch's CUDA kernels compute them; its CPU loops compute them in the
// input's dtype, so for a float16 or bfloat16 input on PyTorch's CPU a window may start one cell
// away from kiln's.
//
// Composed of ops both devices have (arange, floor, gather, where); the gradient goes to
// each window's first maximum alone, as PyTorch's.
#pragma once

#include <array>
#include <optional>
#include <utility>

#include "core/ops/conv.h"
#include "core/ops/volume.h"
#include "core/random.h"
#include "core/tensor.h"

namespace kiln {

// x [N, C, H, W] or [C, H, W]; output [N, C, output_size] in x's layout. Each output size must
// be positive and at most the input's minus the kernel's plus 1 (every window inside the input).
// random_samples, when defined, is floating [N, C, 2] on x's device with N at least the batch
// (1 for a [C, H, W] input; the first rows are read, as PyTorch's); on the CPU a sample outside
// [0, 1] is an Error (on CUDA the starts are clamped into the input instead, not checked: a check
// would synchronize the device).
Tensor fractional_max_pool2d(const Tensor& x, Pair kernel_size, Pair output_size,
                             const Tensor& random_samples = Tensor(),
                             const std::optional<Generator>& generator = std::nullopt);
// The values and the flat index h * W + w of each one's element in its input plane (PyTorch's
// return_indices), int64 of the output's shape and layout, for max_unpool2d.
std::pair<Tensor, Tensor> fractional_max_pool2d_with_indices(const Tensor& x, Pair kernel_size, Pair output_size,
                                                             const Tensor& random_samples = Tensor(),
                                                             const std::optional<Generator>& generator = std::nullopt);
// x [N, C, T, H, W] or [C, T, H, W]; random_samples [N, C, 3] in (t, h, w) order; the indices
// are t * H * W + h * W + w. Otherwise as the 2-d op.
Tensor fractional_max_pool3d(const Tensor& x, Triple kernel_size, Triple output_size,
                             const Tensor& random_samples = Tensor(),
                             const std::optional<Generator>& generator = std::nullopt);
std::pair<Tensor, Tensor> fractional_max_pool3d_with_indices(const Tensor& x, Triple kernel_size, Triple output_size,
                                                             const Tensor& random_samples = Tensor(),
                                                             const std::optional<Generator>& generator = std::nullopt);

// PyTorch's output_ratio: the output size trunc(n ratio) of each spatial dim of x (the last two,
// or three), every ratio in (0, 1); an Error names a ratio outside that range or an output size
// of 0.
Pair fractional_output_size2d(const Tensor& x, std::array<double, 2> output_ratio);
Triple fractional_output_size3d(const Tensor& x, std::array<double, 3> output_ratio);

}  // namespace kiln
