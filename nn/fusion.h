// Batch-norm folding for inference, as torch.nn.utils.fusion: in eval mode a batch norm after a
// convolution (or a linear layer) is an affine map per output channel, y = s (x - mean) + beta with
// s = gamma / sqrt(var + eps), so it folds into the layer before it: w' = s w (each output
// channel's weights scaled) and b' = s (b - mean) + beta. The fused layer computes in one pass what
// took two, and the batch norm can leave the model (an Identity in its place).
//
// kiln's modules are not copied, so the fusing functions change the layer in place (hence the
// trailing underscore; PyTorch's return a fused copy): its weight keeps its identity and takes the
// folded values, and its bias takes the folded bias, registered when the layer had none. The
// folding is computed in float64 and rounded once to the layer's dtype.
#pragma once

#include <cstdint>
#include <utility>

#include "core/tensor.h"
#include "nn/conv.h"
#include "nn/layers.h"
#include "nn/norm.h"

namespace kiln::nn {

// The folded weight and bias of a convolution (weight [out, in / groups, *k], or for a transposed
// one [in, out / groups, *k]) followed by a batch norm with running statistics bn_rm and bn_rv
// [out], eps, and affine weight and bias [out] (undefined: ones and zeros); conv_b undefined is a
// zero bias. groups matters only for a transposed convolution, whose output channels are split
// across dim 0 and dim 1 of its weight. Returned in conv_w's dtype and device.
std::pair<Tensor, Tensor> fuse_conv_bn_weights(const Tensor& conv_w, const Tensor& conv_b, const Tensor& bn_rm,
                                               const Tensor& bn_rv, double bn_eps, const Tensor& bn_w,
                                               const Tensor& bn_b, bool transpose = false, int64_t groups = 1);
// The same for a linear layer, weight [out, in], followed by a batch norm over its out features.
std::pair<Tensor, Tensor> fuse_linear_bn_weights(const Tensor& linear_w, const Tensor& linear_b, const Tensor& bn_rm,
                                                 const Tensor& bn_rv, double bn_eps, const Tensor& bn_w,
                                                 const Tensor& bn_b);

// Folds `bn` into the layer. Both must be in eval mode (a training batch norm normalizes with the
// batch's statistics, which no fixed weight reproduces), the batch norm must track running
// statistics, and its features must be the layer's output channels (for a linear layer, also 1,
// broadcast as PyTorch allows); otherwise a kiln::Error naming both, and nothing changes.
Conv1d& fuse_conv_bn_eval_(Conv1d& conv, const BatchNorm& bn);
Conv2d& fuse_conv_bn_eval_(Conv2d& conv, const BatchNorm& bn);
Conv3d& fuse_conv_bn_eval_(Conv3d& conv, const BatchNorm& bn);
ConvTranspose1d& fuse_conv_bn_eval_(ConvTranspose1d& conv, const BatchNorm& bn);
ConvTranspose2d& fuse_conv_bn_eval_(ConvTranspose2d& conv, const BatchNorm& bn);
ConvTranspose3d& fuse_conv_bn_eval_(ConvTranspose3d& conv, const BatchNorm& bn);
Linear& fuse_linear_bn_eval_(Linear& linear, const BatchNorm& bn);

}  // namespace kiln::nn
