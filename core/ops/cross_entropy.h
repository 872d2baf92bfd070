// Cross-entropy from logits: class indices without class weights take one fused node (log-sum-exp
// saved for the backward); class weights and class probabilities are composed (cross_entropy.cpp).
#pragma once

#include <cstdint>

#include "core/ops/loss.h"
#include "core/tensor.h"

namespace kiln {

// logits [N, C] or [N, C, d1, ...] (or [C]); target either
//  - class indices (int64 or int32) of shape [N, d1, ...] (0-d for [C] logits): targets equal to
//    ignore_index contribute nothing and do not count in the mean; or
//  - class probabilities (floating, of the logits' shape; soft labels, as mixup makes): the loss
//    of a row is -sum_c p_c log_softmax(x)_c, and Mean is the mean over rows.
// label_smoothing in [0, 1] mixes the target with the uniform distribution. weight (optional, [C])
// scales each class's terms; with class indices Mean divides by the summed weights of the targets
// counted, as torch.nn.functional.cross_entropy does.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0, const Tensor& weight = Tensor());

}  // namespace kiln
