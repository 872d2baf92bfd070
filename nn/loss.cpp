// The loss modules: options checked at construction (as the functional losses would check them at
// the first call), forward calls the functional loss.
#include "nn/loss.h"

#include <cmath>
#include <string>

#include "core/ops/cross_entropy.h"
#include "core/ops/ctc_loss.h"
#include "core/ops/mse_loss.h"
#include "kernels/error.h"
#include "nn/layers.h"

namespace kiln::nn {

Tensor Loss::register_class_weight(const char* loss, Tensor weight) {
  if (!weight.defined()) return weight;
  if (weight.dim() != 1) {
    throw ShapeError(std::string(loss) + ": weight must be 1-d, one per class, got shape " + shape_str(weight.sizes()));
  }
  return register_buffer("weight", std::move(weight));
}

CrossEntropyLoss::CrossEntropyLoss(int64_t ignore_index, Reduction reduction, double label_smoothing)
    : CrossEntropyLoss(Tensor(), ignore_index, reduction, label_smoothing) {}

CrossEntropyLoss::CrossEntropyLoss(Tensor weight, int64_t ignore_index, Reduction reduction, double label_smoothing)
    : Loss(reduction), ignore_index(ignore_index), label_smoothing(label_smoothing) {
  kiln::detail::check_reduction("CrossEntropyLoss", reduction);
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
    throw Error("CrossEntropyLoss: label_smoothing must be in [0, 1], got " + num_str(label_smoothing));
  }
  this->weight = register_class_weight("CrossEntropyLoss", std::move(weight));
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return cross_entropy(input, target, reduction, ignore_index, label_smoothing, weight);
}

NLLLoss::NLLLoss(Tensor weight, int64_t ignore_index, Reduction reduction)
    : Loss(reduction), ignore_index(ignore_index) {
  kiln::detail::check_reduction("NLLLoss", reduction);
  this->weight = register_class_weight("NLLLoss", std::move(weight));
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return nll_loss(input, target, weight, ignore_index, reduction);
}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) { return mse_loss(input, target, reduction); }

Tensor L1Loss::forward(const Tensor& input, const Tensor& target) { return l1_loss(input, target, reduction); }

SmoothL1Loss::SmoothL1Loss(Reduction reduction, double beta) : Loss(reduction), beta(beta) {
  if (!(beta >= 0.0) || !std::isfinite(beta)) {
    throw Error("SmoothL1Loss: beta must be a finite number >= 0, got " + num_str(beta));
  }
}

Tensor SmoothL1Loss::forward(const Tensor& input, const Tensor& target) {
  return smooth_l1_loss(input, target, reduction, beta);
}

HuberLoss::HuberLoss(Reduction reduction, double delta) : Loss(reduction), delta(delta) {
  if (!(delta > 0.0) || !std::isfinite(delta)) {
    throw Error("HuberLoss: delta must be a finite number > 0, got " + num_str(delta));
  }
}

Tensor HuberLoss::forward(const Tensor& input, const Tensor& target) {
  return huber_loss(input, target, reduction, delta);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(Tensor weight, Reduction reduction, Tensor pos_weight) : Loss(reduction) {
  kiln::detail::check_reduction("BCEWithLogitsLoss", reduction);
  if (weight.defined()) this->weight = register_buffer("weight", std::move(weight));
  if (pos_weight.defined()) this->pos_weight = register_buffer("pos_weight", std::move(pos_weight));
}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy_with_logits(input, target, weight, pos_weight, reduction);
}

BCELoss::BCELoss(Tensor weight, Reduction reduction) : Loss(reduction) {
  kiln::detail::check_reduction("BCELoss", reduction);
  if (weight.defined()) this->weight = register_buffer("weight", std::move(weight));
}

Tensor BCELoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy(input, target, weight, reduction);
}

KLDivLoss::KLDivLoss(Reduction reduction, bool log_target) : Loss(reduction), log_target(log_target) {
  if (reduction != Reduction::BatchMean) kiln::detail::check_reduction("KLDivLoss", reduction);
}

Tensor KLDivLoss::forward(const Tensor& input, const Tensor& target) {
  return kl_div(input, target, reduction, log_target);
}

PoissonNLLLoss::PoissonNLLLoss(bool log_input, bool full, double eps, Reduction reduction)
    : Loss(reduction), log_input(log_input), full(full), eps(eps) {
  kiln::detail::check_reduction("PoissonNLLLoss", reduction);
  detail::check_eps("PoissonNLLLoss", eps);
}

Tensor PoissonNLLLoss::forward(const Tensor& input, const Tensor& target) {
  return poisson_nll_loss(input, target, log_input, full, eps, reduction);
}

SoftMarginLoss::SoftMarginLoss(Reduction reduction) : Loss(reduction) {
  kiln::detail::check_reduction("SoftMarginLoss", reduction);
}

Tensor SoftMarginLoss::forward(const Tensor& input, const Tensor& target) {
  return soft_margin_loss(input, target, reduction);
}

HingeEmbeddingLoss::HingeEmbeddingLoss(double margin, Reduction reduction) : Loss(reduction), margin(margin) {
  kiln::detail::check_reduction("HingeEmbeddingLoss", reduction);
  if (!std::isfinite(margin)) throw Error("HingeEmbeddingLoss: margin must be finite, got " + num_str(margin));
}

Tensor HingeEmbeddingLoss::forward(const Tensor& input, const Tensor& target) {
  return hinge_embedding_loss(input, target, margin, reduction);
}

MultiLabelSoftMarginLoss::MultiLabelSoftMarginLoss(Tensor weight, Reduction reduction) : Loss(reduction) {
  kiln::detail::check_reduction("MultiLabelSoftMarginLoss", reduction);
  this->weight = register_class_weight("MultiLabelSoftMarginLoss", std::move(weight));
}

Tensor MultiLabelSoftMarginLoss::forward(const Tensor& input, const Tensor& target) {
  return multilabel_soft_margin_loss(input, target, weight, reduction);
}

MultiMarginLoss::MultiMarginLoss(int64_t p, double margin, Tensor weight, Reduction reduction)
    : Loss(reduction), p(p), margin(margin) {
  kiln::detail::check_reduction("MultiMarginLoss", reduction);
  if (p != 1 && p != 2) throw Error("MultiMarginLoss: p must be 1 or 2, got " + std::to_string(p));
  if (!std::isfinite(margin)) throw Error("MultiMarginLoss: margin must be finite, got " + num_str(margin));
  this->weight = register_class_weight("MultiMarginLoss", std::move(weight));
}

Tensor MultiMarginLoss::forward(const Tensor& input, const Tensor& target) {
  return multi_margin_loss(input, target, p, margin, weight, reduction);
}

MultiLabelMarginLoss::MultiLabelMarginLoss(Reduction reduction) : Loss(reduction) {
  kiln::detail::check_reduction("MultiLabelMarginLoss", reduction);
}

Tensor MultiLabelMarginLoss::forward(const Tensor& input, const Tensor& target) {
  return multilabel_margin_loss(input, target, reduction);
}

CosineEmbeddingLoss::CosineEmbeddingLoss(double margin, Reduction reduction) : Loss3(reduction), margin(margin) {
  kiln::detail::check_reduction("CosineEmbeddingLoss", reduction);
  if (!std::isfinite(margin)) throw Error("CosineEmbeddingLoss: margin must be finite, got " + num_str(margin));
}

Tensor CosineEmbeddingLoss::forward(const Tensor& x1, const Tensor& x2, const Tensor& target) {
  return cosine_embedding_loss(x1, x2, target, margin, reduction);
}

MarginRankingLoss::MarginRankingLoss(double margin, Reduction reduction) : Loss3(reduction), margin(margin) {
  kiln::detail::check_reduction("MarginRankingLoss", reduction);
  if (!std::isfinite(margin)) throw Error("MarginRankingLoss: margin must be finite, got " + num_str(margin));
}

Tensor MarginRankingLoss::forward(const Tensor& x1, const Tensor& x2, const Tensor& target) {
  return margin_ranking_loss(x1, x2, target, margin, reduction);
}

TripletMarginLoss::TripletMarginLoss(double margin, double p, double eps, bool swap, Reduction reduction)
    : Loss3(reduction), margin(margin), p(p), eps(eps), swap(swap) {
  kiln::detail::check_reduction("TripletMarginLoss", reduction);
  if (!(margin >= 0.0) || !std::isfinite(margin)) {
    throw Error("TripletMarginLoss: margin must be a finite number >= 0, got " + num_str(margin));
  }
  if (!(p >= 1.0)) throw Error("TripletMarginLoss: the norm's order p must be >= 1, got " + num_str(p));
}

Tensor TripletMarginLoss::forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) {
  return triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, reduction);
}

GaussianNLLLoss::GaussianNLLLoss(bool full, double eps, Reduction reduction) : Loss3(reduction), full(full), eps(eps) {
  kiln::detail::check_reduction("GaussianNLLLoss", reduction);
  detail::check_eps("GaussianNLLLoss", eps);
}

Tensor GaussianNLLLoss::forward(const Tensor& input, const Tensor& target, const Tensor& var) {
  return gaussian_nll_loss(input, target, var, full, eps, reduction);
}

CTCLoss::CTCLoss(int64_t blank, Reduction reduction, bool zero_infinity)
    : blank(blank), reduction(reduction), zero_infinity(zero_infinity) {
  kiln::detail::check_reduction("CTCLoss", reduction);
  if (blank < 0) throw Error("CTCLoss: blank must be a class index >= 0, got " + std::to_string(blank));
}

Tensor CTCLoss::forward(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                        const Tensor& target_lengths) {
  return ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity);
}

}  // namespace kiln::nn
