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

}  // namespace kiln
