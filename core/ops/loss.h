// The losses' shared Reduction, and the pointwise and class-index losses composed of elementwise
// ops, reductions and gather (no kernels of their own), so their gradients are autograd's through
// them: l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy_with_logits and nll_loss, as
// torch.nn.functional computes them. cross_entropy (fused kernels) and mse_loss have families of
// their own. Like mse_loss, and stricter than PyTorch (which broadcasts with a warning), the
// pointwise losses need input and target of one shape: a [N, 1] against [N] mismatch is nearly
// always a bug, and broadcasting it silently gives an [N, N] loss. Under autocast they run in
// float32, as in PyTorch.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

// How per-element losses are combined.
enum class Reduction : uint8_t { None, Mean, Sum };

// |input - target| reduced.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// 0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta (beta >= 0; beta 0 is
// l1_loss), reduced.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);

// 0.5 d^2 where d = |input - target| < delta, else delta (d - 0.5 delta) (delta > 0), reduced.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, double delta = 1.0);

// The binary cross entropy of sigmoid(input) against target (probabilities in [0, 1], of input's
// shape), computed from the logits without forming the sigmoid: (1 - t) x + w_pos softplus(-x),
// where w_pos = 1 + (pos_weight - 1) t. weight (optional) multiplies each element's loss and
// pos_weight (optional) the positive term; both broadcast to input's shape (pos_weight usually
// [C], one per class of the last dim).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                        const Tensor& pos_weight = Tensor(), Reduction reduction = Reduction::Mean);

// The negative log likelihood of class indices: -weight[t] * input[t] per element, for input
// [N, C, *] (or [C]) of log-probabilities and target [N, *] (or 0-d) of int64/int32 indices in
// [0, C) or ignore_index (which contribute nothing). Mean divides by the summed weights of the
// elements not ignored (NaN when every one is). weight: optional [C].
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(), int64_t ignore_index = -100,
                Reduction reduction = Reduction::Mean);

namespace detail {
// A reduction's name for messages, and a kiln::Error naming `op` for a value outside the enum.
void check_reduction(const char* op, Reduction reduction);
// Per-element losses combined as `reduction` says.
Tensor reduce_loss(const Tensor& losses, Reduction reduction);
// The checks of a pointwise loss (mse_loss's and this file's): input and target defined, floating,
// on one device and of one shape, and a known reduction.
void check_pointwise_loss(const char* op, const Tensor& input, const Tensor& target, Reduction reduction);
}  // namespace detail

}  // namespace kiln
