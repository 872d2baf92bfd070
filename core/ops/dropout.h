// dropout: the mask of element i (row-major logical index) comes from Philox (seed, offset, i), so
// CPU and CUDA draw identical masks and the backward redraws it instead of storing it.
#pragma once

#include <cstdint>
#include <optional>

#include "core/random.h"
#include "core/tensor.h"

namespace kiln {

// Zeroes each element with probability p and scales the rest by 1/(1-p); returns x unchanged when
// not training or p == 0 (and then draws nothing). `generator`: see core/random.h.
Tensor dropout(const Tensor& x, double p, bool training = true,
               const std::optional<Generator>& generator = std::nullopt);

// Channel dropout (PyTorch's dropout1d, dropout2d, dropout3d): zeroes whole channels, each with
// probability p, and scales the others by 1/(1-p), so neighbouring activations of a convolution's
// feature map drop together. x is [N, C, *spatial] or unbatched [C, *spatial] with 1, 2 or 3
// spatial dims; the mask is dropout() of ones [N, C, 1, ...] in x's dtype (so channel i of the
// batch keeps the draw of element i), broadcast over the spatial dims. Unchanged when not training
// or p == 0.
Tensor dropout1d(const Tensor& x, double p, bool training = true,
                 const std::optional<Generator>& generator = std::nullopt);
Tensor dropout2d(const Tensor& x, double p, bool training = true,
                 const std::optional<Generator>& generator = std::nullopt);
Tensor dropout3d(const Tensor& x, double p, bool training = true,
                 const std::optional<Generator>& generator = std::nullopt);

// Alpha dropout (PyTorch's alpha_dropout), for self-normalizing networks (SELU): a dropped element
// becomes SELU's negative saturation -1.7581 rather than 0, and an affine map a x + b restores a
// zero mean and unit variance input's mean and variance: with keep mask m (dropout()'s draw of
// ones, element i kept with probability 1 - p), out = a (x m + alpha' (m - 1 + p)), where alpha' =
// 1.7580993408473766 and a = 1 / sqrt((alpha'^2 p + 1) (1 - p)). Unchanged when not training or
// p == 0; zeros for p == 1 (as PyTorch's).
Tensor alpha_dropout(const Tensor& x, double p, bool training = true,
                     const std::optional<Generator>& generator = std::nullopt);
// The same with one draw per channel of [N, C, *] (or [C, *]) inputs (feature_alpha_dropout), as
// dropout2d is to dropout; x has at least 2 dims.
Tensor feature_alpha_dropout(const Tensor& x, double p, bool training = true,
                             const std::optional<Generator>& generator = std::nullopt);

}  // namespace kiln
