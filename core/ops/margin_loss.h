// The margin and soft-margin classification losses of torch.nn.functional, composed of elementwise
// ops, reductions and gather (no kernels of their own), so autograd gives their gradients:
// soft_margin_loss and hinge_embedding_loss (a label of 1 or -1 per element),
// multilabel_soft_margin_loss (0/1 labels per class), multi_margin_loss (one class index per
// sample, a hinge against every other class) and multilabel_margin_loss (a list of class indices
// per sample, a hinge of each against every class not in it). Like the pointwise losses, and
// stricter than PyTorch (which broadcasts), input and target must be of one shape where both are
// per element. Under autocast they run in float32, as in PyTorch.
#pragma once

#include "core/ops/loss.h"

namespace kiln {

// log(1 + exp(-y x)) per element for labels y of 1 or -1 (any numeric dtype; of input's shape),
// reduced.
Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// x where y is 1, max(0, margin - x) where y is -1, for a target of input's shape; as PyTorch, an
// element whose label is neither adds both terms.
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin = 1.0,
                            Reduction reduction = Reduction::Mean);

// For input [N, C] (or [C]) of logits and target of its shape of 0/1 labels (any numeric dtype):
// -(y log sigmoid(x) + (1 - y) log sigmoid(-x)), times weight ([C], optional), averaged over the C
// classes: one loss per sample, then reduced over the samples.
Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                   Reduction reduction = Reduction::Mean);

// For input [N, C] (or [C]) of scores and target [N] (or 0-d) of int64/int32 class indices y:
// the sum over classes j != y of weight[y] max(0, margin - x[y] + x[j])^p, divided by C, per
// sample, then reduced. p is 1 or 2; weight ([C]) is optional. A target outside [0, C) is an
// IndexError.
Tensor multi_margin_loss(const Tensor& input, const Tensor& target, int64_t p = 1, double margin = 1.0,
                         const Tensor& weight = Tensor(), Reduction reduction = Reduction::Mean);

// For input [N, C] (or [C]) of scores and target of its shape of int64/int32 class indices, each
// row's list ending at its first -1 (the rest ignored): the sum over the listed classes j and the
// classes k not listed of max(0, 1 - (x[j] - x[k])), divided by C, per sample, then reduced. A
// class listed twice counts twice, as in PyTorch. A listed index outside [0, C) is an IndexError.
Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace kiln
