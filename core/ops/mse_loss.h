// Mean squared error.
#pragma once

#include <cstdint>

#include "core/ops/loss.h"
#include "core/tensor.h"

namespace kiln {

// (input - target)^2 reduced; shapes must be equal (no broadcasting: a [N, 1] vs [N] mismatch is
// nearly always a bug).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace kiln
