// The 3-d pooling layers over [N, C, D, H, W] or [C, D, H, W], PyTorch-shaped (class names,
// constructor arguments in PyTorch's order, printed form): MaxPool3d, MaxUnpool3d, AvgPool3d,
// AdaptiveAvgPool3d, AdaptiveMaxPool3d, LPPool3d, each one op of core/ops/volume.h. (Conv3d and
// ConvTranspose3d are in nn/conv.h.) nn/layers.h includes this header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "core/ops/volume.h"
#include "nn/module.h"

namespace kiln::nn {

// stride {0, 0, 0} means "equal to kernel_size", PyTorch's default.
class MaxPool3d : public UnaryModule {
 public:
  explicit MaxPool3d(Triple kernel_size, Triple stride = {0, 0, 0}, Triple padding = {0, 0, 0},
                     Triple dilation = {1, 1, 1}, bool ceil_mode = false);
  explicit MaxPool3d(int64_t kernel_size) : MaxPool3d(Triple{kernel_size, kernel_size, kernel_size}) {}
  std::string type_name() const override { return "MaxPool3d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  // The values and each one's index in its input volume (PyTorch's return_indices=True), for
  // MaxUnpool3d.
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);

  Triple kernel_size, stride, padding, dilation;
  bool ceil_mode;
};

// max_unpool3d: a MaxPool3d's values put back at their indices (zeros elsewhere), at the default
// size or at output_size ([D, H, W], or the whole shape as PyTorch accepts).
class MaxUnpool3d : public Module {
 public:
  explicit MaxUnpool3d(Triple kernel_size, Triple stride = {0, 0, 0}, Triple padding = {0, 0, 0});
  explicit MaxUnpool3d(int64_t kernel_size) : MaxUnpool3d(Triple{kernel_size, kernel_size, kernel_size}) {}
  std::string type_name() const override { return "MaxUnpool3d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x, const Tensor& indices, const Shape& output_size = {});
  Tensor operator()(const Tensor& x, const Tensor& indices, const Shape& output_size = {}) {
    run_forward_pre_hooks();
    return forward(x, indices, output_size);
  }

  Triple kernel_size, stride, padding;
};

class AvgPool3d : public UnaryModule {
 public:
  explicit AvgPool3d(Triple kernel_size, Triple stride = {0, 0, 0}, Triple padding = {0, 0, 0}, bool ceil_mode = false,
                     bool count_include_pad = true, std::optional<int64_t> divisor_override = std::nullopt);
  explicit AvgPool3d(int64_t kernel_size) : AvgPool3d(Triple{kernel_size, kernel_size, kernel_size}) {}
  std::string type_name() const override { return "AvgPool3d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  Triple kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
  std::optional<int64_t> divisor_override;  // the windows' sums divided by it (non-zero)
};

class AdaptiveAvgPool3d : public UnaryModule {
 public:
  explicit AdaptiveAvgPool3d(Triple output_size);
  explicit AdaptiveAvgPool3d(int64_t output_size) : AdaptiveAvgPool3d(Triple{output_size, output_size, output_size}) {}
  std::string type_name() const override { return "AdaptiveAvgPool3d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  Triple output_size;
};

class AdaptiveMaxPool3d : public UnaryModule {
 public:
  explicit AdaptiveMaxPool3d(Triple output_size);
  explicit AdaptiveMaxPool3d(int64_t output_size) : AdaptiveMaxPool3d(Triple{output_size, output_size, output_size}) {}
  std::string type_name() const override { return "AdaptiveMaxPool3d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  // The values and each one's index in its input volume (PyTorch's return_indices=True).
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);

  Triple output_size;
};

// lp_pool3d: (sum over each window of x^norm_type)^(1 / norm_type); stride {0, 0, 0} (PyTorch's
// None) means "equal to kernel_size".
class LPPool3d : public UnaryModule {
 public:
  LPPool3d(double norm_type, Triple kernel_size, Triple stride = {0, 0, 0}, bool ceil_mode = false);
  std::string type_name() const override { return "LPPool3d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  double norm_type;
  Triple kernel_size, stride;
  bool ceil_mode;
};

}  // namespace kiln::nn
