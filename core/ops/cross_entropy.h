// Cross-entropy from logits: one fused node, log-sum-exp saved for the backward.
#pragma once

#include <cstdint>

#include "core/ops/loss.h"
#include "core/tensor.h"

namespace kiln {

// logits [N, C] or [N, C, d1, ...] (or [C] with a 0-d target); target int64 class indices of
// shape [N, d1, ...]. Targets equal to ignore_index contribute nothing and do not count in the
// mean. label_smoothing in [0, 1] mixes the one-hot target with the uniform distribution.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);

}  // namespace kiln
