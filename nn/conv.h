// The convolution layers, PyTorch-shaped (class names, constructor arguments in PyTorch's order,
// default init, parameter names, printed form, padding_mode and padding='same'): Conv1d, Conv2d,
// Conv3d and their transposes ConvTranspose1d, ConvTranspose2d, ConvTranspose3d (learned
// upsampling: a DCGAN generator's or a U-Net decoder's layers). nn/layers.h includes this header.
#pragma once

#include <cstdint>
#include <string>

#include "core/ops/conv.h"
#include "core/ops/volume.h"
#include "nn/module.h"

namespace kiln::nn {

// PyTorch's padding_mode of the convolution layers: what the `padding` cells hold. Zeros is the
// convolution's own padding; the others pad the input first (core/ops/shape.h's pad: the edge
// reflected, repeated or wrapped round) and convolve it unpadded.
enum class PaddingMode : uint8_t { Zeros, Reflect, Replicate, Circular };

// PyTorch's padding='same' for Conv1d/2d/3d, in place of the padding argument (and of the stride,
// which must be 1): the output has the input's size. Each dim pads dilation (k - 1) cells, half
// before and the rest after (an odd count puts the extra cell after, as PyTorch's).
struct SamePadding {};
inline constexpr SamePadding kSamePadding{};

// weight [out, in / groups, kH, kW] and bias [out], initialized as PyTorch's Conv2d.
class Conv2d : public UnaryModule {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, Pair stride = {1, 1}, Pair padding = {0, 0},
         Pair dilation = {1, 1}, int64_t groups = 1, bool bias = true, PaddingMode padding_mode = PaddingMode::Zeros);
  Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, SamePadding, Pair dilation = {1, 1},
         int64_t groups = 1, bool bias = true, PaddingMode padding_mode = PaddingMode::Zeros);
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  void reset_parameters();

  int64_t in_channels, out_channels;
  Pair kernel_size, stride, padding, dilation;  // padding {0, 0} with same_padding
  int64_t groups;
  PaddingMode padding_mode = PaddingMode::Zeros;
  bool same_padding = false;
  Tensor weight, bias;
};

// weight [out, in / groups, k] and bias [out], initialized as PyTorch's Conv1d; input [N, C, L] or
// [C, L].
class Conv1d : public UnaryModule {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         int64_t dilation = 1, int64_t groups = 1, bool bias = true, PaddingMode padding_mode = PaddingMode::Zeros);
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, SamePadding, int64_t dilation = 1,
         int64_t groups = 1, bool bias = true, PaddingMode padding_mode = PaddingMode::Zeros);
  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  void reset_parameters();

  int64_t in_channels, out_channels, kernel_size, stride, padding, dilation, groups;
  PaddingMode padding_mode = PaddingMode::Zeros;
  bool same_padding = false;
  Tensor weight, bias;
};

// conv_transpose2d with weight [in, out / groups, kH, kW] and bias [out], initialized as PyTorch's
// ConvTranspose2d: kaiming_uniform_(a = sqrt(5)) over the weight's fan-in, which in this layout is
// out / groups x kH x kW, and the bias uniform in +-1/sqrt(that fan-in). The constructor checks
// output_padding against the stride (PyTorch checks it at the first forward).
class ConvTranspose2d : public UnaryModule {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, Pair stride = {1, 1},
                  Pair padding = {0, 0}, Pair output_padding = {0, 0}, int64_t groups = 1, bool bias = true,
                  Pair dilation = {1, 1});
  std::string type_name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  // PyTorch's forward(input, output_size): a strided conv2d maps `stride` input sizes to one
  // output size, so its transpose can give any of them; output_size ([H, W], or [N, C, H, W] of
  // which the last two count) says which, in place of the layer's output_padding. A size the layer
  // cannot make from x is a kiln::Error naming the sizes it can.
  Tensor forward(const Tensor& x, const Shape& output_size);
  using UnaryModule::operator();
  Tensor operator()(const Tensor& x, const Shape& output_size) { return call(*this, x, output_size); }
  void reset_parameters();

  int64_t in_channels, out_channels;
  Pair kernel_size, stride, padding, output_padding;
  int64_t groups;
  Pair dilation;
  Tensor weight, bias;
};

// conv_transpose1d with weight [in, out / groups, k] and bias [out], initialized as PyTorch's
// ConvTranspose1d; input [N, C, L] or [C, L]. forward(x, output_size) as ConvTranspose2d's, with
// output_size [L] or [N, C, L].
class ConvTranspose1d : public UnaryModule {
 public:
  ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
                  int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, bool bias = true,
                  int64_t dilation = 1);
  std::string type_name() const override { return "ConvTranspose1d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, const Shape& output_size);
  using UnaryModule::operator();
  Tensor operator()(const Tensor& x, const Shape& output_size) { return call(*this, x, output_size); }
  void reset_parameters();

  int64_t in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, dilation;
  Tensor weight, bias;
};

// weight [out, in / groups, kD, kH, kW] and bias [out], initialized as PyTorch's Conv3d; input
// [N, C, D, H, W] or [C, D, H, W] (conv3d of core/ops/volume.h).
class Conv3d : public UnaryModule {
 public:
  Conv3d(int64_t in_channels, int64_t out_channels, Triple kernel_size, Triple stride = {1, 1, 1},
         Triple padding = {0, 0, 0}, Triple dilation = {1, 1, 1}, int64_t groups = 1, bool bias = true,
         PaddingMode padding_mode = PaddingMode::Zeros);
  Conv3d(int64_t in_channels, int64_t out_channels, Triple kernel_size, SamePadding, Triple dilation = {1, 1, 1},
         int64_t groups = 1, bool bias = true, PaddingMode padding_mode = PaddingMode::Zeros);
  std::string type_name() const override { return "Conv3d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  void reset_parameters();

  int64_t in_channels, out_channels;
  Triple kernel_size, stride, padding, dilation;
  int64_t groups;
  PaddingMode padding_mode = PaddingMode::Zeros;
  bool same_padding = false;
  Tensor weight, bias;
};

// conv_transpose3d with weight [in, out / groups, kD, kH, kW] and bias [out], initialized as
// PyTorch's ConvTranspose3d; forward(x, output_size) as ConvTranspose2d's, with output_size
// [D, H, W] or [N, C, D, H, W].
class ConvTranspose3d : public UnaryModule {
 public:
  ConvTranspose3d(int64_t in_channels, int64_t out_channels, Triple kernel_size, Triple stride = {1, 1, 1},
                  Triple padding = {0, 0, 0}, Triple output_padding = {0, 0, 0}, int64_t groups = 1, bool bias = true,
                  Triple dilation = {1, 1, 1});
  std::string type_name() const override { return "ConvTranspose3d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, const Shape& output_size);
  using UnaryModule::operator();
  Tensor operator()(const Tensor& x, const Shape& output_size) { return call(*this, x, output_size); }
  void reset_parameters();

  int64_t in_channels, out_channels;
  Triple kernel_size, stride, padding, output_padding;
  int64_t groups;
  Triple dilation;
  Tensor weight, bias;
};

}  // namespace kiln::nn
