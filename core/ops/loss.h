// The losses' shared Reduction, and the pointwise and class-index losses composed of elementwise
// ops, reductions and gather (no kernels of their own), so their gradients are autograd's through
// them: l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy_with_logits, nll_loss and kl_div,
// as torch.nn.functional computes them, and binary_cross_entropy (a node of its own for PyTorch's
// clamped gradient). cross_entropy (fused kernels) and mse_loss have families of their own. Like
// mse_loss, and stricter than PyTorch (which broadcasts with a warning), the
// pointwise losses need input and target of one shape: a [N, 1] against [N] mismatch is nearly
// always a bug, and broadcasting it silently gives an [N, N] loss. Under autocast they run in
// float32, as in PyTorch (which refuses binary_cross_entropy there instead).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

// How per-element losses are combined. BatchMean (the sum divided by the input's first dim) is
// kl_div's alone, the reduction that makes it the KL divergence per sample; the other losses
// refuse it.
enum class Reduction : uint8_t { None, Mean, Sum, BatchMean };

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

// The binary cross entropy of probabilities input (in [0, 1]) against target (of input's shape):
// -weight (t log x + (1 - t) log(1 - x)), each log clamped at -100 as in PyTorch, so that x of
// exactly 0 or 1 gives a finite loss. The gradient is PyTorch's, w (x - t) / max(x (1 - x), 1e-12),
// finite where a sigmoid saturated; target gets one too. weight (optional) broadcasts to input's
// shape. On the CPU an input outside [0, 1] is a kiln::Error; on CUDA it is not checked (that would
// wait for the device at every call) and its loss is NaN. binary_cross_entropy_with_logits is the
// stabler choice after a sigmoid.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                            Reduction reduction = Reduction::Mean);

// The Kullback-Leibler divergence sum target (log target - input) for input of log-probabilities
// and target of probabilities (of input's shape; a zero target contributes 0), or with log_target
// of log-probabilities: exp(target) (target - input). Reduction::BatchMean divides the sum by
// input's first dim (the true KL divergence per sample; Mean divides by every element, as PyTorch).
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
              bool log_target = false);

// The negative log likelihood of class indices: -weight[t] * input[t] per element, for input
// [N, C, *] (or [C]) of log-probabilities and target [N, *] (or 0-d) of int64/int32 indices in
// [0, C) or ignore_index (which contribute nothing). Mean divides by the summed weights of the
// elements not ignored (NaN when every one is). weight: optional [C].
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(), int64_t ignore_index = -100,
                Reduction reduction = Reduction::Mean);

// The negative log likelihood of target under a Poisson distribution of rate exp(input)
// (log_input) or input: exp(x) - t x, or x - t log(x + eps). full adds Stirling's approximation of
// log(t!), t log t - t + 0.5 log(2 pi t), where t > 1 (0 elsewhere), as PyTorch. input and target
// are of one shape; both get gradients.
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input = true, bool full = false,
                        double eps = 1e-8, Reduction reduction = Reduction::Mean);

// The negative log likelihood of target under a Gaussian of mean input and variance var:
// 0.5 (log v + (x - t)^2 / v), plus 0.5 log(2 pi) with full. var is of input's shape, of input's
// shape with a last dim of 1 (one variance per row), or of input's shape less its last dim (the
// same, unsqueezed). v is var clamped at eps, and, as in PyTorch, the clamp passes var's gradient
// through unchanged. A negative (or NaN) var is a kiln::Error on the CPU; on CUDA it is not
// checked (that would wait for the device) and a negative one reads as eps.
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var, bool full = false,
                         double eps = 1e-6, Reduction reduction = Reduction::Mean);

// Losses over pairs and triplets of vectors (metric learning), PyTorch's semantics:
// cosine_embedding_loss: x1, x2 [N, D] (or [D]) and target [N] (or 0-d) of 1 (similar: 1 - cos)
// or -1 (dissimilar: max(0, cos - margin)); any other target value adds 0. cos is PyTorch's:
// x1.x2 / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)).
Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin = 0.0,
                             Reduction reduction = Reduction::Mean);
// margin_ranking_loss: max(0, -target (x1 - x2) + margin), the three broadcast together; target 1
// asks x1 to rank above x2 by the margin, -1 below.
Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin = 0.0,
                           Reduction reduction = Reduction::Mean);
// triplet_margin_loss: max(0, d(anchor, positive) - d(anchor, negative) + margin) with d the
// pairwise_distance of order p (and its eps) over [N, D] (or [D]) operands; swap takes the
// negative's distance to the positive when it is the smaller (PyTorch's distance swap).
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative, double margin = 1.0,
                           double p = 2.0, double eps = 1e-6, bool swap = false, Reduction reduction = Reduction::Mean);

namespace detail {
// A kiln::Error naming `op` for a reduction other than None, Mean and Sum (BatchMean is kl_div's).
void check_reduction(const char* op, Reduction reduction);
// Per-element losses combined as `reduction` says.
Tensor reduce_loss(const Tensor& losses, Reduction reduction);
// Per-element losses of a class-index loss combined as `reduction` says, Mean dividing by the
// summed `weights` of the elements (NaN when they sum to 0); None gives `none_shape`.
Tensor reduce_weighted(const Tensor& losses, const Tensor& weights, Reduction reduction, const Shape& none_shape);
// The checks of a pointwise loss (mse_loss's and this file's): input and target defined, floating,
// on one device and of one shape, and a known reduction.
void check_pointwise_loss(const char* op, const Tensor& input, const Tensor& target, Reduction reduction);
// The checks of a class-index loss (nll_loss's, cross_entropy's): `input` (named `what` in
// messages) floating with a class dim, target integer indices of shape [N, *] for input [N, C, *]
// (0-d for [C]), one device, a known reduction. Returns the shape of the target for input seen as
// [N, C, *] (a [C] input is one row: [1]).
Shape check_class_target(const char* op, const Tensor& input, const char* what, const Tensor& target,
                         Reduction reduction);
// The per-element terms of a class-index loss over log-probabilities x [N, C, *] and int64
// indices t [N, *]: kept (t != ignore_index), weights (weight[t], or 1 without weight; 0 where not
// kept) and losses (-weights x[t]). A target outside [0, C) that is not ignore_index is an
// IndexError naming `op`.
struct ClassTerms {
  Tensor kept, weights, losses;
};
ClassTerms nll_terms(const char* op, const Tensor& x, const Tensor& t, const Tensor& weight, int64_t ignore_index);
// A [C] class weight viewed to broadcast along dim `class_dim` of a `dims`-d tensor.
Tensor class_weight_view(const Tensor& weight, int64_t dims, int64_t class_dim);
}  // namespace detail

}  // namespace kiln
