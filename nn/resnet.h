// Small image classifiers for 28x28 (Fashion-MNIST) and 32x32 (CIFAR) inputs: a CIFAR-style
// ResNet of BasicBlocks, with torchvision's module names (conv1, bn1, layer1.0.downsample.0, fc),
// and SmallCNN, a two-stage conv net for train_cnn. Both take any image size whose stages
// divide evenly; ResNet's global average pool makes it size-agnostic.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "nn/layers.h"

namespace kiln::nn {

// Two 3x3 conv + BN stages with a residual shortcut: identity, or a 1x1 conv (stride `stride`) +
// BN projection when the stride or the width changes. Convs have no bias (BN follows).
class BasicBlock : public UnaryModule {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride = 1);
  std::string type_name() const override { return "BasicBlock"; }
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<ReLU> relu;
  std::shared_ptr<Conv2d> conv2;
  std::shared_ptr<BatchNorm2d> bn2;
  std::shared_ptr<Sequential> downsample;  // null for the identity shortcut
};

struct ResNetConfig {
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  // One entry per stage (1 to 8 stages, both lists the same length): output channels, and
  // BasicBlocks per stage. The default is the three-stage CIFAR ResNet-14 train_cnn uses.
  std::vector<int64_t> widths = {16, 32, 64};
  std::vector<int64_t> blocks = {2, 2, 2};
  // Activation recompute: each BasicBlock runs through nn::checkpoint, keeping only its input for
  // backward and running it again there; BatchNorm's running statistics are put back after the
  // recompute, so they count each batch once (docs/recompute.md). Off by default.
  bool recompute = false;

  // ResNet-18 for 32x32 images, as CIFAR training recipes adapt it: a 3x3 stem without max-pool,
  // four stages of two BasicBlocks, 64 to 512 channels.
  static ResNetConfig resnet18_cifar(int64_t num_classes = 10) {
    ResNetConfig c;
    c.num_classes = num_classes;
    c.widths = {64, 128, 256, 512};
    c.blocks = {2, 2, 2, 2};
    return c;
  }
};

// Stem conv3x3(in, widths[0]) + BN + ReLU; one stage layer1, layer2, ... of BasicBlocks per width
// (stride 2 at the start of every stage but the first); AdaptiveAvgPool2d(1), Flatten,
// Linear(widths.back(), num_classes).
// Convs: kaiming_normal_(fan_out, relu); BN: weight 1, bias 0; fc: Linear's default.
class ResNet : public UnaryModule {
 public:
  explicit ResNet(const ResNetConfig& config = {});
  std::string type_name() const override { return "ResNet"; }
  Tensor forward(const Tensor& x) override;  // [N, in_channels, H, W] -> logits [N, num_classes]

  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<ReLU> relu;
  std::vector<std::shared_ptr<Sequential>> layers;  // "layer1", "layer2", ...
  std::shared_ptr<AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<Flatten> flatten;
  std::shared_ptr<Linear> fc;

 private:
  ResNetConfig config_;
};

struct SmallCNNConfig {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  int64_t image_size = 28;  // square inputs; must be divisible by 4 (two 2x2 max pools)
  int64_t hidden = 128;
  double dropout = 0.5;
};

// features: conv3x3(in, 32) + BN + ReLU + maxpool2, conv3x3(32, 64) + BN + ReLU + maxpool2 (convs
// without bias: BN's shift replaces it)
// (28x28 -> 7x7); classifier: Flatten, Linear(64 * 7 * 7, 128), ReLU, Dropout, Linear(128, 10).
class SmallCNN : public UnaryModule {
 public:
  explicit SmallCNN(const SmallCNNConfig& config = {});
  std::string type_name() const override { return "SmallCNN"; }
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Sequential> features, classifier;

 private:
  SmallCNNConfig config_;
};

}  // namespace kiln::nn
