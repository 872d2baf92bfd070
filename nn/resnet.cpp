// ResNet and SmallCNN. The ResNet stem is a stride-1 3x3 conv without max pool (CIFAR-style): on
// 28x28 or 32x32 inputs an ImageNet stem would leave too few pixels for three stages.
#include "nn/resnet.h"

#include <functional>
#include <string>
#include <utility>

#include "core/ops/elementwise.h"
#include "kernels/error.h"
#include "nn/checkpoint.h"
#include "nn/init.h"

namespace kiln::nn {
namespace {

std::shared_ptr<Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride) {
  return std::make_shared<Conv2d>(in, out, Pair{3, 3}, Pair{stride, stride}, Pair{1, 1}, Pair{1, 1}, 1, false);
}

void check_image(const char* model, const Tensor& x, int64_t channels) {
  if (x.dim() != 4 || x.size(1) != channels) {
    throw ShapeError(std::string(model) + ": expected input [N, " + std::to_string(channels) + ", H, W], got shape " +
                     shape_str(x.sizes()));
  }
}

}  // namespace

// --- BasicBlock ---------------------------------------------------------------------------------

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride) {
  if (in_channels <= 0 || out_channels <= 0) {
    throw Error("BasicBlock: in_channels and out_channels must be positive, got " + std::to_string(in_channels) +
                " and " + std::to_string(out_channels));
  }
  if (stride <= 0) throw Error("BasicBlock: stride must be positive, got " + std::to_string(stride));
  conv1 = register_module("conv1", conv3x3(in_channels, out_channels, stride));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(out_channels));
  relu = register_module("relu", std::make_shared<ReLU>());
  conv2 = register_module("conv2", conv3x3(out_channels, out_channels, 1));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    downsample = register_module(
        "downsample",
        std::make_shared<Sequential>(std::vector<std::shared_ptr<UnaryModule>>{
            std::make_shared<Conv2d>(in_channels, out_channels, Pair{1, 1}, Pair{stride, stride}, Pair{0, 0},
                                     Pair{1, 1}, 1, false),
            std::make_shared<BatchNorm2d>(out_channels)}));
  }
}

// Each batch norm ends in the ReLU after it, the second also in the shortcut's addition: one pass
// over the activation each (BatchNorm2d's epilogue), where the ops one after another take two and
// three.
Tensor BasicBlock::forward(const Tensor& x) {
  const BatchNormEpilogue then_relu{.residual = {}, .relu = true};
  relu->run_forward_pre_hooks();  // the ReLU each epilogue applies (PyTorch's block calls it twice)
  const Tensor out = (*conv2)((*bn1)((*conv1)(x), then_relu));
  const Tensor shortcut = downsample ? (*downsample)(x) : x;
  relu->run_forward_pre_hooks();
  return (*bn2)(out, BatchNormEpilogue{.residual = shortcut, .relu = true});
}

// --- ResNet -------------------------------------------------------------------------------------

ResNet::ResNet(const ResNetConfig& config) : config_(config) {
  if (config.in_channels <= 0) {
    throw Error("ResNet: in_channels must be positive, got " + std::to_string(config.in_channels));
  }
  if (config.num_classes <= 0) {
    throw Error("ResNet: num_classes must be positive, got " + std::to_string(config.num_classes));
  }
  if (config.widths.empty() || config.widths.size() > 8 || config.blocks.size() != config.widths.size()) {
    throw Error("ResNet: needs 1 to 8 stages with one width and one block count each, got " +
                std::to_string(config.widths.size()) + " widths and " + std::to_string(config.blocks.size()) +
                " block counts");
  }
  for (size_t s = 0; s < config.widths.size(); ++s) {
    if (config.widths[s] <= 0 || config.blocks[s] <= 0) {
      throw Error("ResNet: stage widths and block counts must be positive, got stage " + std::to_string(s + 1) +
                  " width " + std::to_string(config.widths[s]) + " blocks " + std::to_string(config.blocks[s]));
    }
  }
  conv1 = register_module("conv1", conv3x3(config.in_channels, config.widths[0], 1));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(config.widths[0]));
  relu = register_module("relu", std::make_shared<ReLU>());
  int64_t in = config.widths[0];
  auto stage = [&](const std::string& name, size_t s) {
    auto seq = std::make_shared<Sequential>();
    for (int64_t b = 0; b < config.blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      seq->push_back(std::make_shared<BasicBlock>(in, config.widths[s], stride));
      in = config.widths[s];
    }
    return register_module(name, seq);
  };
  for (size_t s = 0; s < config.widths.size(); ++s) layers.push_back(stage("layer" + std::to_string(s + 1), s));
  avgpool = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  flatten = register_module("flatten", std::make_shared<Flatten>(1));
  fc = register_module("fc", std::make_shared<Linear>(config.widths.back(), config.num_classes));

  // He init for the convs (fan_out, as torchvision); BatchNorm2d starts at weight 1, bias 0.
  std::function<void(Module&)> init_convs = [&](Module& m) {
    if (auto* conv = dynamic_cast<Conv2d*>(&m)) {
      init::kaiming_normal_(conv->weight, 0.0, init::FanMode::FanOut, init::Nonlinearity::ReLU);
    } else if (auto* bn = dynamic_cast<BatchNorm2d*>(&m)) {
      init::ones_(bn->weight);
      init::zeros_(bn->bias);
    }
    for (const auto& [n, c] : m.named_children()) init_convs(*c);
  };
  init_convs(*this);
}

Tensor ResNet::forward(const Tensor& x) {
  check_image("ResNet", x, config_.in_channels);
  // The stem's batch norm and ReLU in one pass (BatchNorm2d's epilogue).
  relu->run_forward_pre_hooks();  // the ReLU the epilogue applies
  Tensor y = (*bn1)((*conv1)(x), BatchNormEpilogue{.residual = {}, .relu = true});
  if (config_.recompute) {
    // A BasicBlock draws no random numbers: no random state to save and restore.
    CheckpointOptions recompute;
    recompute.preserve_rng_state = false;
    for (const auto& stage : layers) {
      stage->run_forward_pre_hooks();  // the Sequential, whose blocks run one by one here
      for (const auto& block : *stage) y = checkpoint(block, y, recompute);
    }
  } else {
    for (const auto& stage : layers) y = (*stage)(y);
  }
  return (*fc)((*flatten)((*avgpool)(y)));
}

// --- SmallCNN -----------------------------------------------------------------------------------

SmallCNN::SmallCNN(const SmallCNNConfig& config) : config_(config) {
  if (config.image_size <= 0 || config.image_size % 4 != 0) {
    throw Error("SmallCNN: image_size must be a positive multiple of 4, got " + std::to_string(config.image_size));
  }
  for (const auto& [what, v] : {std::pair<const char*, int64_t>{"in_channels", config.in_channels},
                                {"num_classes", config.num_classes},
                                {"hidden", config.hidden}}) {
    if (v <= 0) throw Error(std::string("SmallCNN: ") + what + " must be positive, got " + std::to_string(v));
  }
  const int64_t side = config.image_size / 4;
  // The classifier reads 64 * side^2 features: a count past int64 is a bad image_size.
  int64_t flat = 0;
  if (__builtin_mul_overflow(side, side, &flat) || __builtin_mul_overflow(flat, int64_t{64}, &flat)) {
    throw Error("SmallCNN: image_size " + std::to_string(config.image_size) +
                " is too large (the classifier's 64 * (image_size / 4)^2 inputs overflow int64)");
  }
  features = register_module(
      "features",
      std::make_shared<Sequential>(std::vector<std::shared_ptr<UnaryModule>>{
          std::make_shared<Conv2d>(config.in_channels, 32, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}, Pair{1, 1}, 1, false),
          std::make_shared<BatchNorm2d>(32), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(Pair{2, 2}),
          std::make_shared<Conv2d>(32, 64, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}, Pair{1, 1}, 1, false),
          std::make_shared<BatchNorm2d>(64),
          std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(Pair{2, 2})}));
  classifier = register_module(
      "classifier", std::make_shared<Sequential>(std::vector<std::shared_ptr<UnaryModule>>{
                        std::make_shared<Flatten>(1), std::make_shared<Linear>(flat, config.hidden),
                        std::make_shared<ReLU>(), std::make_shared<Dropout>(config.dropout),
                        std::make_shared<Linear>(config.hidden, config.num_classes)}));
}

Tensor SmallCNN::forward(const Tensor& x) {
  check_image("SmallCNN", x, config_.in_channels);
  if (x.size(2) != config_.image_size || x.size(3) != config_.image_size) {
    throw ShapeError("SmallCNN: built for " + std::to_string(config_.image_size) + "x" +
                     std::to_string(config_.image_size) + " images, got input of shape " + shape_str(x.sizes()));
  }
  return (*classifier)((*features)(x));
}

}  // namespace kiln::nn
