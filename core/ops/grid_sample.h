// grid_sample and affine_grid (torch.nn.functional's): read an image at arbitrary points given in
// normalized coordinates, and the points of an affine map of the output grid, the two halves of a
// spatial transformer. Composed of gather and elementwise ops, no kernels of their own: the input's
// gradient is gather's (a scatter_add), the grid's flows through the interpolation weights.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

// How grid_sample reads between pixels: the four neighbours weighted bilinearly, the 4x4
// neighbours through the cubic convolution kernel (A = -0.75, as interpolate's bicubic), or the
// nearest one (halves rounded to even).
enum class GridSampleMode : uint8_t { Bilinear, Nearest, Bicubic };
// Where a point falls outside the image: zeros, the border's value (coordinates clamped), or the
// value mirrored at the border (coordinates reflected, then clamped).
enum class GridPadding : uint8_t { Zeros, Border, Reflection };

// input [N, C, H, W] read at grid [N, Ho, Wo, 2] (x then y, -1 the left or top edge and +1 the
// right or bottom one): [N, C, Ho, Wo] in input's dtype. align_corners: -1 and +1 are the centres
// of the corner pixels; otherwise their outer edges (PyTorch's default, false). input and grid
// share one floating dtype and device; float16 and bfloat16 are computed in float32. Gradients for
// both; the grid's is zero in Nearest mode and where Border or Reflection clamps a coordinate.
Tensor grid_sample(const Tensor& input, const Tensor& grid, GridSampleMode mode = GridSampleMode::Bilinear,
                   GridPadding padding = GridPadding::Zeros, bool align_corners = false);

// The sampling grid [N, H, W, 2] of the affine maps theta [N, 2, 3] applied to the normalized
// coordinates of an output of size [N, C, H, W] (align_corners as grid_sample's):
// grid[n, h, w] = theta[n] (x_w, y_h, 1). Differentiable in theta.
Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners = false);

}  // namespace kiln
