// PyTorch's loss modules: each holds its options and calls its functional loss (core/ops), so a
// training loop reads as PyTorch's: `nn::CrossEntropyLoss criterion; loss = criterion(logits, y)`.
// Names and printed forms are PyTorch's ("CrossEntropyLoss()"); BCEWithLogitsLoss keeps weight and
// pos_weight as buffers, as PyTorch registers them, so they move with Module::to and are saved.
#pragma once

#include <cstdint>
#include <string>

#include "core/ops/loss.h"
#include "nn/module.h"

namespace kiln::nn {

// A module of two tensors in (input, target) and a loss out.
class Loss : public Module {
 public:
  explicit Loss(Reduction reduction) : reduction(reduction) {}
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

  Reduction reduction;
};

// cross_entropy: logits [N, C, *] (or [C]) against class indices.
class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(int64_t ignore_index = -100, Reduction reduction = Reduction::Mean,
                            double label_smoothing = 0.0);
  std::string type_name() const override { return "CrossEntropyLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;

  int64_t ignore_index;
  double label_smoothing;
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

}  // namespace kiln::nn
