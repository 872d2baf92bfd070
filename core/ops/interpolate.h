// Resizing the spatial dims of [N, C, *] (torch.nn.functional.interpolate): nearest, linear
// (linear, bilinear or trilinear by the input's 1, 2 or 3 spatial dims), bicubic and area, composed
// of index_select and elementwise ops, so both devices run it and its gradient is those ops'.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln {

// Nearest: each output position reads the input at floor(o * scale). Linear: the two neighbours
// of the source position, weighted by distance, one spatial dim after another (separable).
// Bicubic (2 spatial dims): the four neighbours, with the cubic convolution weights of Keys' kernel
// at a = -0.75 as PyTorch's, neighbours past an edge read at the edge; the result may overshoot
// the input's range. Area: each output position is the mean of the input cells its interval
// covers, [floor(o in / out), ceil((o + 1) in / out)), which is adaptive average pooling (PyTorch's
// area mode).
enum class InterpolateMode : uint8_t { Nearest, Linear, Bicubic, Area };

// x [N, C, d1, ...] (1 to 3 spatial dims) resized to `size` (one per spatial dim). align_corners
// (Linear and Bicubic) maps the corner pixels' centres onto each other, PyTorch's flag; otherwise
// source positions are (o + 0.5) * in / out - 0.5, clamped at 0 for Linear. Linear, Bicubic and
// Area take floating inputs; float16 and bfloat16 are blended in float32 by Bicubic and Area.
// antialias (PyTorch's flag, Linear and Bicubic over 2 spatial dims): when a dim shrinks, each
// output position blends every input position under the filter stretched by the shrink factor (a
// triangle for Linear, Keys' cubic at a = -0.5 for Bicubic, as PIL's and PyTorch's), the weights
// normalized to sum to 1, instead of its 2 or 4 neighbours only: no aliasing. Growing dims take
// the unstretched filter, so Linear upsampling is the plain one and Bicubic's uses a = -0.5. The
// weights form one [out, in] matrix per dim, applied by a matmul (in float32 at least).
Tensor interpolate(const Tensor& x, const Shape& size, InterpolateMode mode = InterpolateMode::Nearest,
                   bool align_corners = false, bool antialias = false);
// The same with output sizes floor(in * scale_factor) (one factor per spatial dim, or one for all),
// and the scale 1 / scale_factor in the source positions, as PyTorch computes them when given a
// scale factor (Area uses the sizes alone).
Tensor interpolate_scale(const Tensor& x, const std::vector<double>& scale_factor,
                         InterpolateMode mode = InterpolateMode::Nearest, bool align_corners = false,
                         bool antialias = false);

}  // namespace kiln
