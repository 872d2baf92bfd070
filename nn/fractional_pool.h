// FractionalMaxPool2d and FractionalMaxPool3d: core/ops/fractional_pool.h's ops as layers, with
// PyTorch's arguments. Each call draws fresh windows, in training and in eval alike (as PyTorch's),
// from `generator` or the default generator; `random_samples`, when defined, fixes them (PyTorch's
// _random_samples). The output size is output_size, or output_ratio times the input's size
// (truncated), each ratio in (0, 1).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>

#include "core/ops/conv.h"
#include "core/ops/volume.h"
#include "core/random.h"
#include "nn/module.h"

namespace kiln::nn {

class FractionalMaxPool2d : public UnaryModule {
 public:
  FractionalMaxPool2d(Pair kernel_size, Pair output_size);
  // output_ratio (ratio_h, ratio_w).
  FractionalMaxPool2d(Pair kernel_size, double ratio_h, double ratio_w);
  std::string type_name() const override { return "FractionalMaxPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  // The values and each one's index in its input plane (PyTorch's return_indices=True), for
  // MaxUnpool2d.
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);
  // The output size for x: output_size, or output_ratio of x's height and width.
  Pair output_size_for(const Tensor& x) const;

  Pair kernel_size;
  std::optional<Pair> output_size;                    // exactly one of output_size
  std::optional<std::array<double, 2>> output_ratio;  // and output_ratio is set
  Tensor random_samples;                              // [N, C, 2] in (w, h) order, or undefined
  std::optional<Generator> generator;
};

class FractionalMaxPool3d : public UnaryModule {
 public:
  FractionalMaxPool3d(Triple kernel_size, Triple output_size);
  // output_ratio (ratio_t, ratio_h, ratio_w).
  FractionalMaxPool3d(Triple kernel_size, double ratio_t, double ratio_h, double ratio_w);
  std::string type_name() const override { return "FractionalMaxPool3d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);
  Triple output_size_for(const Tensor& x) const;

  Triple kernel_size;
  std::optional<Triple> output_size;
  std::optional<std::array<double, 3>> output_ratio;
  Tensor random_samples;  // [N, C, 3] in (t, h, w) order, or undefined
  std::optional<Generator> generator;
};

}  // namespace kiln::nn
