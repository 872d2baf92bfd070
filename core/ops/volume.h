// 3-d convolution and pooling over volumes [N, C, D, H, W] (or one volume [C, D, H, W]): video
// clips, scans, voxel grids. No kernels of their own: each op is written as 2-d ops over the
// height and width and a pass along the depth, so both devices run them (cuDNN's 2-d convolutions
// on CUDA) and their gradients are those ops'. Arguments and defaults are PyTorch's; triples are
// (depth, height, width).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <utility>

#include "core/tensor.h"

namespace kiln {

using Triple = std::array<int64_t, 3>;

// x [N, C_in, D, H, W], weight [C_out, C_in / groups, kD, kH, kW], bias [C_out] or undefined. The
// depth taps of every output position are gathered as extra channels (index_select along the depth
// of the zero-padded input: kD copies of it), so one conv2d with kD x C_in / groups input channels
// per group computes the whole convolution.
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Triple stride = {1, 1, 1},
              Triple padding = {0, 0, 0}, Triple dilation = {1, 1, 1}, int64_t groups = 1);
// The transposed convolution, PyTorch's conv_transpose3d (groups before dilation, as there):
// x [N, C_in, D, H, W], weight [C_in, C_out / groups, kD, kH, kW], bias [C_out] or undefined; each
// output size is (in - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1, with
// output_padding less than the stride. One conv_transpose2d makes every depth tap's plane (kD x
// C_out / groups output channels per group), and fold (col2im along the depth) adds them into
// their output depths and crops the padding.
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Triple stride = {1, 1, 1},
                        Triple padding = {0, 0, 0}, Triple output_padding = {0, 0, 0}, int64_t groups = 1,
                        Triple dilation = {1, 1, 1});

// The pools are separable: a box window's maximum (or sum, or count of non-padding cells) is
// that of the per-plane windows' results along the depth. max_pool2d pools each depth's plane,
// then a second max_pool2d with a (kD, 1) window pools along the depth; the first maximum in the
// window's (d, h, w) order wins ties, as PyTorch's, so the gradient goes where PyTorch's does.
// stride {0, 0, 0} means "equal to kernel_size" (PyTorch's default); padding at most half the
// kernel per dim.
Tensor max_pool3d(const Tensor& x, Triple kernel_size, Triple stride = {0, 0, 0}, Triple padding = {0, 0, 0},
                  Triple dilation = {1, 1, 1}, bool ceil_mode = false);
// max_pool3d's values and the flat index d * H * W + h * W + w of each winner in its input volume
// (int64, the output's shape), for max_unpool3d.
std::pair<Tensor, Tensor> max_pool3d_with_indices(const Tensor& x, Triple kernel_size, Triple stride = {0, 0, 0},
                                                  Triple padding = {0, 0, 0}, Triple dilation = {1, 1, 1},
                                                  bool ceil_mode = false);
// Zeros of [N, C, output_size] (by default (in - 1) stride - 2 padding + kernel_size per dim) with
// each value of x at its index from max_pool3d_with_indices; as max_unpool2d otherwise.
Tensor max_unpool3d(const Tensor& x, const Tensor& indices, Triple kernel_size, Triple stride = {0, 0, 0},
                    Triple padding = {0, 0, 0}, std::optional<Triple> output_size = std::nullopt);
// The mean over each window; without count_include_pad over its cells inside the input only.
// In ceil mode a window's cells past the right padding count for nothing, as PyTorch's. With
// divisor_override (non-zero), the sum of the cells inside divided by it instead.
Tensor avg_pool3d(const Tensor& x, Triple kernel_size, Triple stride = {0, 0, 0}, Triple padding = {0, 0, 0},
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
// Means over PyTorch's adaptive windows: output cell i of a dim of size n covers
// [floor(i n / out), ceil((i + 1) n / out)).
Tensor adaptive_avg_pool3d(const Tensor& x, Triple output_size);
// The maximum over the adaptive windows; where several elements share it, the gradient is split
// among them, one dim after another (PyTorch gives it to one), as adaptive_max_pool2d's.
Tensor adaptive_max_pool3d(const Tensor& x, Triple output_size);
// adaptive_max_pool3d's values and the flat index d * H * W + h * W + w of each one's element in
// its input volume, int64 of the output's shape; the first maximum of a window in (d, h, w) order
// takes the whole gradient, as PyTorch's (see adaptive_max_pool2d_with_indices).
std::pair<Tensor, Tensor> adaptive_max_pool3d_with_indices(const Tensor& x, Triple output_size);
// (sum over each window of x^p)^(1 / p): avg_pool3d of x^p times the window's size, as lp_pool2d
// (and PyTorch's: in ceil mode a window hanging past the end is scaled up to the kernel's size).
Tensor lp_pool3d(const Tensor& x, double norm_type, Triple kernel_size, Triple stride = {0, 0, 0},
                 bool ceil_mode = false);

}  // namespace kiln
