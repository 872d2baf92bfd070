// PyTorch's loss modules: each holds its options and calls its functional loss (core/ops), so a
// training loop reads as PyTorch's: `nn::CrossEntropyLoss criterion; loss = criterion(logits, y)`.
// Names and printed forms are PyTorch's ("CrossEntropyLoss()"); BCEWithLogitsLoss keeps weight and
// pos_weight as buffers, as PyTorch registers them, so they move with Module::to and are saved.
#pragma once

#include <cstdint>
#include <string>

#include "core/ops/loss.h"
#include "core/ops/margin_loss.h"
#include "nn/module.h"

namespace kiln::nn {

// A module of two tensors in (input, target) and a loss out.
class Loss : public Module {
 public:
  explicit Loss(Reduction reduction) : reduction(reduction) {}
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  Tensor operator()(const Tensor& input, const Tensor& target) {
    run_forward_pre_hooks();
    return forward(input, target);
  }

  Reduction reduction;

 protected:
  // A class-weight option: undefined, or 1-d (one per class; a ShapeError naming `loss` otherwise),
  // then registered as buffer "weight".
  Tensor register_class_weight(const char* loss, Tensor weight);
};

// cross_entropy: logits [N, C, *] (or [C]) against class indices or class probabilities, with
// optional class weights ([C], PyTorch's first argument, kept as buffer "weight").
class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(int64_t ignore_index = -100, Reduction reduction = Reduction::Mean,
                            double label_smoothing = 0.0);
  explicit CrossEntropyLoss(Tensor weight, int64_t ignore_index = -100, Reduction reduction = Reduction::Mean,
                            double label_smoothing = 0.0);
  std::string type_name() const override { return "CrossEntropyLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;

  int64_t ignore_index;
  double label_smoothing;
  Tensor weight;  // buffer "weight" when given
};

// nll_loss: log-probabilities [N, C, *] (or [C]) against class indices, optional class weights.
class NLLLoss : public Loss {
 public:
  explicit NLLLoss(Tensor weight = Tensor(), int64_t ignore_index = -100, Reduction reduction = Reduction::Mean);
  std::string type_name() const override { return "NLLLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;

  int64_t ignore_index;
  Tensor weight;  // buffer "weight" when given
};

class MSELoss : public Loss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : Loss(reduction) {}
  std::string type_name() const override { return "MSELoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

class L1Loss : public Loss {
 public:
  explicit L1Loss(Reduction reduction = Reduction::Mean) : Loss(reduction) {}
  std::string type_name() const override { return "L1Loss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

class SmoothL1Loss : public Loss {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::Mean, double beta = 1.0);
  std::string type_name() const override { return "SmoothL1Loss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;

  double beta;
};

class HuberLoss : public Loss {
 public:
  explicit HuberLoss(Reduction reduction = Reduction::Mean, double delta = 1.0);
  std::string type_name() const override { return "HuberLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;

  double delta;
};

// binary_cross_entropy_with_logits, with optional per-element weight and per-class pos_weight.
class BCEWithLogitsLoss : public Loss {
 public:
  explicit BCEWithLogitsLoss(Tensor weight = Tensor(), Reduction reduction = Reduction::Mean,
                             Tensor pos_weight = Tensor());
  std::string type_name() const override { return "BCEWithLogitsLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;

  Tensor weight, pos_weight;  // buffers when given
};

// binary_cross_entropy: probabilities (after a sigmoid) against targets, with an optional
// per-element weight.
class BCELoss : public Loss {
 public:
  explicit BCELoss(Tensor weight = Tensor(), Reduction reduction = Reduction::Mean);
  std::string type_name() const override { return "BCELoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;

  Tensor weight;  // buffer when given
};

// kl_div: log-probabilities against probabilities (or log-probabilities with log_target).
// Reduction::BatchMean gives the KL divergence per sample; Mean (PyTorch's default, kept) divides
// by every element.
class KLDivLoss : public Loss {
 public:
  explicit KLDivLoss(Reduction reduction = Reduction::Mean, bool log_target = false);
  std::string type_name() const override { return "KLDivLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;

  bool log_target;
};

// poisson_nll_loss: log-rates (log_input) or rates against counts.
class PoissonNLLLoss : public Loss {
 public:
  explicit PoissonNLLLoss(bool log_input = true, bool full = false, double eps = 1e-8,
                          Reduction reduction = Reduction::Mean);
  std::string type_name() const override { return "PoissonNLLLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;

  bool log_input, full;
  double eps;
};

// soft_margin_loss: scores against labels of 1 or -1.
class SoftMarginLoss : public Loss {
 public:
  explicit SoftMarginLoss(Reduction reduction = Reduction::Mean);
  std::string type_name() const override { return "SoftMarginLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

// hinge_embedding_loss: distances against labels of 1 (similar) or -1 (dissimilar).
class HingeEmbeddingLoss : public Loss {
 public:
  explicit HingeEmbeddingLoss(double margin = 1.0, Reduction reduction = Reduction::Mean);
  std::string type_name() const override { return "HingeEmbeddingLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;

  double margin;
};

// multilabel_soft_margin_loss: logits [N, C] against 0/1 labels per class, optional class weights.
class MultiLabelSoftMarginLoss : public Loss {
 public:
  explicit MultiLabelSoftMarginLoss(Tensor weight = Tensor(), Reduction reduction = Reduction::Mean);
  std::string type_name() const override { return "MultiLabelSoftMarginLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;

  Tensor weight;  // buffer "weight" when given
};

// multi_margin_loss: scores [N, C] against one class index per sample (a multi-class hinge).
class MultiMarginLoss : public Loss {
 public:
  explicit MultiMarginLoss(int64_t p = 1, double margin = 1.0, Tensor weight = Tensor(),
                           Reduction reduction = Reduction::Mean);
  std::string type_name() const override { return "MultiMarginLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;

  int64_t p;
  double margin;
  Tensor weight;  // buffer "weight" when given
};

// multilabel_margin_loss: scores [N, C] against lists of class indices ending at -1.
class MultiLabelMarginLoss : public Loss {
 public:
  explicit MultiLabelMarginLoss(Reduction reduction = Reduction::Mean);
  std::string type_name() const override { return "MultiLabelMarginLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

// A module of three tensors in and a loss out: two inputs and a target, or an anchor, a positive
// and a negative.
class Loss3 : public Module {
 public:
  explicit Loss3(Reduction reduction) : reduction(reduction) {}
  virtual Tensor forward(const Tensor& a, const Tensor& b, const Tensor& c) = 0;
  Tensor operator()(const Tensor& a, const Tensor& b, const Tensor& c) {
    run_forward_pre_hooks();
    return forward(a, b, c);
  }

  Reduction reduction;
};

// cosine_embedding_loss: x1, x2 [N, D] and a target of 1 (similar) or -1 (dissimilar) per pair.
class CosineEmbeddingLoss : public Loss3 {
 public:
  explicit CosineEmbeddingLoss(double margin = 0.0, Reduction reduction = Reduction::Mean);
  std::string type_name() const override { return "CosineEmbeddingLoss"; }
  Tensor forward(const Tensor& x1, const Tensor& x2, const Tensor& target) override;

  double margin;
};

// margin_ranking_loss: x1, x2 and a target of 1 (x1 ranks above x2) or -1.
class MarginRankingLoss : public Loss3 {
 public:
  explicit MarginRankingLoss(double margin = 0.0, Reduction reduction = Reduction::Mean);
  std::string type_name() const override { return "MarginRankingLoss"; }
  Tensor forward(const Tensor& x1, const Tensor& x2, const Tensor& target) override;

  double margin;
};

// triplet_margin_loss: anchor, positive, negative [N, D].
class TripletMarginLoss : public Loss3 {
 public:
  explicit TripletMarginLoss(double margin = 1.0, double p = 2.0, double eps = 1e-6, bool swap = false,
                             Reduction reduction = Reduction::Mean);
  std::string type_name() const override { return "TripletMarginLoss"; }
  Tensor forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) override;

  double margin, p, eps;
  bool swap;
};

// gaussian_nll_loss: means against targets, with variances of input's shape or one per row.
class GaussianNLLLoss : public Loss3 {
 public:
  explicit GaussianNLLLoss(bool full = false, double eps = 1e-6, Reduction reduction = Reduction::Mean);
  std::string type_name() const override { return "GaussianNLLLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target, const Tensor& var) override;

  bool full;
  double eps;
};

// ctc_loss: log_probs [T, N, C] (log_softmax's output), targets padded [N, S] or concatenated,
// and each sample's input and target lengths.
class CTCLoss : public Module {
 public:
  explicit CTCLoss(int64_t blank = 0, Reduction reduction = Reduction::Mean, bool zero_infinity = false);
  std::string type_name() const override { return "CTCLoss"; }
  Tensor forward(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                 const Tensor& target_lengths);
  Tensor operator()(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                    const Tensor& target_lengths) {
    run_forward_pre_hooks();
    return forward(log_probs, targets, input_lengths, target_lengths);
  }

  int64_t blank;
  Reduction reduction;
  bool zero_infinity;
};

}  // namespace kiln::nn
