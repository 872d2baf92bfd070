// Batch-norm folding: the folded weights in float64, and the in-place fusion into each layer type.
#include "nn/fusion.h"

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/math.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln::nn {

namespace {

// A batch-norm vector in float64, of `n` entries (a single one broadcast when allow_one), or
// `fill` when undefined.
Tensor bn_vector(const char* op, const char* what, const Tensor& t, int64_t n, double fill, Device device,
                 bool allow_one = false) {
  if (!t.defined()) return full({n}, fill, TensorOptions(DType::Float64, device));
  if (t.dim() != 1 || (t.size(0) != n && !(allow_one && t.size(0) == 1))) {
    throw ShapeError(std::string(op) + ": the batch norm's " + what + " is " + shape_str(t.sizes()) + " for " +
                     std::to_string(n) + " output channels");
  }
  return t.detach().to(device).to(DType::Float64).expand({n});
}

struct Folded {
  Tensor scale, bias;  // float64 [out]: s and s (b - mean) + beta
};

Folded fold(const char* op, const Tensor& w, const Tensor& b, int64_t out, const Tensor& bn_rm, const Tensor& bn_rv,
            double bn_eps, const Tensor& bn_w, const Tensor& bn_b, bool allow_one) {
  if (!bn_rm.defined() || !bn_rv.defined()) {
    throw Error(std::string(op) + ": the batch norm has no running statistics (track_running_stats is off)");
  }
  if (!std::isfinite(bn_eps) || bn_eps < 0.0) throw Error(std::string(op) + ": eps must be finite and >= 0");
  const Device dev = w.device();
  const Tensor rm = bn_vector(op, "running_mean", bn_rm, out, 0.0, dev, allow_one);
  const Tensor rv = bn_vector(op, "running_var", bn_rv, out, 1.0, dev, allow_one);
  const Tensor gamma = bn_vector(op, "weight", bn_w, out, 1.0, dev, allow_one);
  const Tensor beta = bn_vector(op, "bias", bn_b, out, 0.0, dev, allow_one);
  Tensor bias = zeros({out}, TensorOptions(DType::Float64, dev));
  if (b.defined()) {
    if (b.dim() != 1 || b.size(0) != out) {
      throw ShapeError(std::string(op) + ": the layer's bias is " + shape_str(b.sizes()) + " for " +
                       std::to_string(out) + " output channels");
    }
    bias = b.detach().to(DType::Float64);
  }
  const Tensor scale = gamma / sqrt(rv + bn_eps);
  return {scale, (bias - rm) * scale + beta};
}

void check_weight(const char* op, const Tensor& w, int64_t min_dims) {
  if (!w.defined() || w.dim() < min_dims || !is_floating(w.dtype())) {
    throw Error(
        std::string(op) + ": the layer's weight must be a floating tensor of " + std::to_string(min_dims) +
        " dims or more, got " +
        (w.defined() ? std::string(dtype_name(w.dtype())) + " " + shape_str(w.sizes()) : std::string("undefined")));
  }
}

}  // namespace

std::pair<Tensor, Tensor> fuse_conv_bn_weights(const Tensor& conv_w, const Tensor& conv_b, const Tensor& bn_rm,
                                               const Tensor& bn_rv, double bn_eps, const Tensor& bn_w,
                                               const Tensor& bn_b, bool transpose, int64_t groups) {
  const char* op = "fuse_conv_bn_weights";
  check_weight(op, conv_w, 2);
  if (groups < 1 || (transpose && conv_w.size(0) % groups != 0)) {
    throw Error(std::string(op) + ": groups " + std::to_string(groups) + " does not divide the weight " +
                shape_str(conv_w.sizes()));
  }
  NoGradGuard no_grad;
  const int64_t out = transpose ? conv_w.size(1) * groups : conv_w.size(0);
  const Folded f = fold(op, conv_w, conv_b, out, bn_rm, bn_rv, bn_eps, bn_w, bn_b, false);
  const Tensor w = conv_w.detach().to(DType::Float64);
  Tensor fused;
  if (!transpose) {
    Shape s(static_cast<size_t>(w.dim()), 1);
    s[0] = out;
    fused = w * f.scale.reshape(s);
  } else {
    // [in, out / groups, *k] as [groups, in / groups, out / groups, *k]: group g's weights make
    // output channels g (out / groups) + j.
    Shape grouped{groups, w.size(0) / groups};
    grouped.insert(grouped.end(), w.sizes().begin() + 1, w.sizes().end());
    Shape s(grouped.size(), 1);
    s[0] = groups;
    s[2] = out / groups;
    fused = (w.reshape(grouped) * f.scale.reshape(s)).reshape(w.sizes());
  }
  return {fused.to(conv_w.dtype()), f.bias.to(conv_w.dtype())};
}

std::pair<Tensor, Tensor> fuse_linear_bn_weights(const Tensor& linear_w, const Tensor& linear_b, const Tensor& bn_rm,
                                                 const Tensor& bn_rv, double bn_eps, const Tensor& bn_w,
                                                 const Tensor& bn_b) {
  const char* op = "fuse_linear_bn_weights";
  check_weight(op, linear_w, 2);
  if (linear_w.dim() != 2)
    throw Error(std::string(op) + ": the weight must be [out, in], got " + shape_str(linear_w.sizes()));
  NoGradGuard no_grad;
  const int64_t out = linear_w.size(0);
  const Folded f = fold(op, linear_w, linear_b, out, bn_rm, bn_rv, bn_eps, bn_w, bn_b, true);
  const Tensor fused = linear_w.detach().to(DType::Float64) * f.scale.unsqueeze(1);
  return {fused.to(linear_w.dtype()), f.bias.to(linear_w.dtype())};
}

namespace {

// Checks the pair, folds, and writes the result into the layer (bias registered when it had none).
template <class L>
L& fuse_into(const std::string& op, L& layer, const BatchNorm& bn, int64_t out, bool transpose, int64_t groups,
             bool linear) {
  const std::string pair = " (" + layer.type_name() + " with " + bn.type_name() + ")";
  if (layer.is_training() || bn.is_training()) {
    throw Error(op + ": both modules must be in eval mode" + pair +
                "; in training, batch norm normalizes with each batch's statistics, which no fixed weight folds");
  }
  if (!bn.track_running_stats) {
    throw Error(op + ": the batch norm does not track running statistics" + pair);
  }
  // The members must be the registered parameters: a pruned or parametrized tensor is recomputed
  // from other tensors at each call, so writing into the layer's would be lost and reading the
  // batch norm's could be stale. A layer without bias must have nowhere a "bias" is registered.
  const auto plain = [](const Module& m, const char* name, const Tensor& member) {
    return member.defined() ? m.has_parameter(name) : !m.has_parameter(name);
  };
  if (!plain(layer, "weight", layer.weight) || !layer.weight.defined() || !plain(layer, "bias", layer.bias)) {
    throw Error(op + ": the layer's weight or bias is not a plain parameter (pruned or parametrized?)" + pair);
  }
  if (!plain(bn, "weight", bn.weight) || !plain(bn, "bias", bn.bias)) {
    throw Error(op + ": the batch norm's weight or bias is not a plain parameter (pruned or parametrized?)" + pair);
  }
  detail::member_tensor(op, layer, "weight", layer.weight);
  if (layer.bias.defined()) detail::member_tensor(op, layer, "bias", layer.bias);
  if (bn.num_features != out && !(linear && bn.num_features == 1)) {
    throw ShapeError(op + ": the batch norm has " + std::to_string(bn.num_features) + " features, the layer " +
                     std::to_string(out) + " output channels" + pair);
  }
  auto [w, b] = linear ? fuse_linear_bn_weights(layer.weight, layer.bias, bn.running_mean, bn.running_var, bn.eps,
                                                bn.weight, bn.bias)
                       : fuse_conv_bn_weights(layer.weight, layer.bias, bn.running_mean, bn.running_var, bn.eps,
                                              bn.weight, bn.bias, transpose, groups);
  NoGradGuard no_grad;
  layer.weight.copy_(w);
  if (layer.bias.defined()) {
    layer.bias.copy_(b);
  } else {
    layer.bias = layer.register_parameter("bias", b, layer.weight.requires_grad());
  }
  return layer;
}

}  // namespace

Conv1d& fuse_conv_bn_eval_(Conv1d& conv, const BatchNorm& bn) {
  return fuse_into("fuse_conv_bn_eval_", conv, bn, conv.out_channels, false, 1, false);
}
Conv2d& fuse_conv_bn_eval_(Conv2d& conv, const BatchNorm& bn) {
  return fuse_into("fuse_conv_bn_eval_", conv, bn, conv.out_channels, false, 1, false);
}
Conv3d& fuse_conv_bn_eval_(Conv3d& conv, const BatchNorm& bn) {
  return fuse_into("fuse_conv_bn_eval_", conv, bn, conv.out_channels, false, 1, false);
}
ConvTranspose1d& fuse_conv_bn_eval_(ConvTranspose1d& conv, const BatchNorm& bn) {
  return fuse_into("fuse_conv_bn_eval_", conv, bn, conv.out_channels, true, conv.groups, false);
}
ConvTranspose2d& fuse_conv_bn_eval_(ConvTranspose2d& conv, const BatchNorm& bn) {
  return fuse_into("fuse_conv_bn_eval_", conv, bn, conv.out_channels, true, conv.groups, false);
}
ConvTranspose3d& fuse_conv_bn_eval_(ConvTranspose3d& conv, const BatchNorm& bn) {
  return fuse_into("fuse_conv_bn_eval_", conv, bn, conv.out_channels, true, conv.groups, false);
}
Linear& fuse_linear_bn_eval_(Linear& linear, const BatchNorm& bn) {
  return fuse_into("fuse_linear_bn_eval_", linear, bn, linear.out_features, false, 1, true);
}

}  // namespace kiln::nn
