// 2-d pooling over NCHW or channels-last inputs (the output keeps the input's layout), and 1-d
// pooling over [N, C, L]. The adaptive max pools and the power-average (LP) pools are composed of
// the others and of index_select and amax; max_unpool of scatter_add and gather.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "core/ops/conv.h"
#include "core/tensor.h"

namespace kiln {

// stride {0, 0} means "equal to kernel_size", as PyTorch's default; one zero stride is an Error.
Tensor max_pool2d(const Tensor& x, Pair kernel_size, Pair stride = {0, 0}, Pair padding = {0, 0},
                  Pair dilation = {1, 1}, bool ceil_mode = false);
// max_pool2d's values and, for each, where it came from: the flat index h * W + w of the winning
// element in its input plane (PyTorch's return_indices), int64 of the output's shape and layout.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Pair kernel_size, Pair stride = {0, 0},
                                                  Pair padding = {0, 0}, Pair dilation = {1, 1},
                                                  bool ceil_mode = false);
// max_pool2d's partial inverse: zeros of [N, C, output_size] (by default (in - 1) stride - 2
// padding + kernel_size per dim) with each value of x written at its index from
// max_pool2d_with_indices. An element two windows shared is written once; its gradient is the
// output gradient gathered at the index, as PyTorch's. Indices outside the output plane are an
// IndexError (on CUDA, at the next synchronization).
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, Pair kernel_size, Pair stride = {0, 0},
                    Pair padding = {0, 0}, std::optional<Pair> output_size = std::nullopt);
// The mean over each window: of all its cells (count_include_pad) or of those inside the input;
// in ceil mode a window's cells past the right padding count for nothing, as PyTorch's. With
// divisor_override (non-zero), the sum of the window's cells inside the input divided by it
// instead (count_include_pad then has no effect), as PyTorch's.
Tensor avg_pool2d(const Tensor& x, Pair kernel_size, Pair stride = {0, 0}, Pair padding = {0, 0},
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size);
// The maximum over PyTorch's adaptive windows: output cell i of a dim of size n covers
// [floor(i n / out), ceil((i + 1) n / out)). Where several elements share a window's maximum, the
// gradient is split among them (PyTorch gives it to one).
Tensor adaptive_max_pool2d(const Tensor& x, Pair output_size);
// adaptive_max_pool2d's values and the flat index h * W + w of each one's element in its input
// plane (PyTorch's return_indices), int64 of the output's shape and layout. Here the first maximum
// of a window in its (h, w) order (its last NaN where it has one) takes the whole gradient, as
// PyTorch's. The winners are found one dim at a time (ops::max_over_windows): temporaries of a
// few times the input's size (int64 indices among them), none holding every window's cells.
std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, Pair output_size);
// (sum over each window of x^p)^(1 / p), PyTorch's lp_pool2d: an average pool of x^p times the
// window's size, its sign kept, then the 1/p power. No padding; stride {0, 0} is kernel_size. As in
// PyTorch, a negative window sum with a fractional 1/p is NaN, and in ceil mode a window hanging
// past the input's end has its sum scaled by the kernel's size over its cells inside.
Tensor lp_pool2d(const Tensor& x, double norm_type, Pair kernel_size, Pair stride = {0, 0}, bool ceil_mode = false);

// 1-d pooling over [N, C, L] or [C, L] (the 2-d ops on a height of 1). stride 0 means "equal to
// kernel_size", as above.
Tensor max_pool1d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0, int64_t dilation = 1,
                  bool ceil_mode = false);
std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, int64_t kernel_size, int64_t stride = 0,
                                                  int64_t padding = 0, int64_t dilation = 1, bool ceil_mode = false);
Tensor max_unpool1d(const Tensor& x, const Tensor& indices, int64_t kernel_size, int64_t stride = 0,
                    int64_t padding = 0, std::optional<int64_t> output_size = std::nullopt);
Tensor avg_pool1d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0, bool ceil_mode = false,
                  bool count_include_pad = true);
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size);
Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size);
std::pair<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& x, int64_t output_size);
Tensor lp_pool1d(const Tensor& x, double norm_type, int64_t kernel_size, int64_t stride = 0, bool ceil_mode = false);

namespace ops {
// What the pooling ops share with the 3-d pools of core/ops/volume.h; errors name `op`.
// PyTorch's pooling output size: floor (or ceil) of the window count, where with ceil_mode the
// last window must still start inside the input or its left padding. nullopt when a step overflows
// int64 (a huge kernel, dilation or stride).
std::optional<int64_t> pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode);
// max_unpool over the last out_plane.size() dims of x into an output plane of out_plane, with the
// input checks (indices int64 of x's shape, on its device, inside the plane).
Tensor max_unpool(const char* op, const Tensor& x, const Tensor& indices, const Shape& out_plane);
// The default unpooled size of one dim: (in - 1) stride - 2 padding + kernel.
int64_t unpooled_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding);
// The cells of PyTorch's adaptive windows over a dim of size n, [out, widest] int64 on `device`:
// row i is floor(i n / out), ... up to ceil((i + 1) n / out) - 1, which shorter rows repeat.
Tensor adaptive_cells(int64_t n, int64_t out, Device device);
// The maximum over PyTorch's adaptive windows along `dim` of x, `out` of them.
Tensor adaptive_max_along(const Tensor& x, int64_t dim, int64_t out);
// The maximum of each plane of x (its last positions.size() dims; the dims before them make the
// planes) over windows given cell by cell: positions[d] is int64 [planes or 1, O_d, K_d], the
// coordinate along spatial dim d of the k-th cell of output cell o's window (a shorter window
// repeats a cell). The values [lead dims, O_1, ...] and the flat index of each winner in its plane
// (int64, the same shape): the first maximum in the window's row-major order, or its last NaN
// where it has one (max_pool2d's rule and PyTorch's). All of the gradient goes to the winner. 2-d
// pools of channels-last inputs give channels-last outputs. Positions must lie inside the plane.
std::pair<Tensor, Tensor> max_over_windows(const Tensor& x, const std::vector<Tensor>& positions);
// sign(s) relu(|s|) * window, then the 1/p power: lp_pool's tail over an average pool s of x^p.
Tensor lp_from_average(const Tensor& average, double norm_type, int64_t window);
// norm_type finite and nonzero, or an Error.
void check_norm_type(const char* op, double norm_type);
// divisor_override's result from `inside_mean`, avg_pool's means over each window's cells inside
// the input (count_include_pad false): times the count of those cells (a product of per-dim
// counts, min(o s - p + k, in) - max(o s - p, 0)), over `divisor`, computed in the widened dtype.
// One entry per spatial dim in in, kernel, stride, padding; the outputs are inside_mean's last
// dims.
Tensor sum_over_divisor(const Tensor& inside_mean, const Shape& in, const Shape& kernel, const Shape& stride,
                        const Shape& padding, int64_t divisor);
// The input checks every pooling op makes: [C, *] or [N, C, *] with `spatial` dims in *, floating,
// and only the batch dim may be empty (as PyTorch's pooling ops check: no channels, or no rows, is
// a mistake upstream, not an empty batch).
void check_pool_input(const char* op, const Tensor& x, int64_t spatial);
// divisor_override non-zero, or an Error naming op.
void check_divisor(const char* op, std::optional<int64_t> divisor_override);
}  // namespace ops

}  // namespace kiln
