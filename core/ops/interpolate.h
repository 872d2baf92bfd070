// Resizing the spatial dims of [N, C, *] (torch.nn.functional.interpolate): nearest and linear
// (linear, bilinear or trilinear by the input's 1, 2 or 3 spatial dims), composed of index_select
// and elementwise ops, so both devices run it and its gradient is those ops'.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln {

// Nearest: each output position reads the input at floor(o * scale). Linear: the two neighbours
// of the source position, weighted by distance, one spatial dim after another (separable).
enum class InterpolateMode : uint8_t { Nearest, Linear };

// x [N, C, d1, ...] (1 to 3 spatial dims) resized to `size` (one per spatial dim). align_corners
// (Linear only) maps the corner pixels' centres onto each other, PyTorch's flag; otherwise source
// positions are (o + 0.5) * in / out - 0.5, clamped at 0.
Tensor interpolate(const Tensor& x, const Shape& size, InterpolateMode mode = InterpolateMode::Nearest,
                   bool align_corners = false);
// The same with output sizes floor(in * scale_factor) (one factor per spatial dim, or one for all),
// and the scale 1 / scale_factor in the source positions, as PyTorch computes them when given a
// scale factor.
Tensor interpolate_scale(const Tensor& x, const std::vector<double>& scale_factor,
                         InterpolateMode mode = InterpolateMode::Nearest, bool align_corners = false);

}  // namespace kiln
