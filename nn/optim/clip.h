// Gradient clipping by total norm, as torch.nn.utils.clip_grad_norm_ computes it, without a host
// sync (unless asked to refuse a non-finite norm), and by value: the norm stays a device tensor and
// the clip factor min(1, max_norm / (norm + 1e-6)) is multiplied into every gradient
// unconditionally (a factor of 1 when no clipping is needed).
#pragma once

#include "core/tensor.h"

namespace kiln::nn::optim {

// The total norm of the gradients of `params` (those without a gradient are skipped), as a 0-d
// tensor on their device, float64 when a gradient is float64 and float32 otherwise (foreach_norm);
// on the CPU, a float32 0, when none has a gradient. Gradients must be on one device.
// error_if_nonfinite: reads the norm to the host (a sync) and throws a kiln::Error, leaving the
// gradients as they were, when it is inf or NaN (PyTorch's flag of that name); otherwise a
// non-finite norm scales every gradient by 0 (inf) or NaN, which a GradScaler's step then skips.
Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every element of the gradients of `params` into [-clip_value, clip_value] in place, as
// torch.nn.utils.clip_grad_value_ (NaN stays NaN). clip_value must be >= 0.
void clip_grad_value_(const TensorList& params, double clip_value);

// clip_grad_norm_'s second half, for gradients whose total norm was found elsewhere
// (dist::ZeroRedundancyOptimizer::clip_grad_norm_ combines the norms of every rank's shards):
// multiplies each gradient of `params` by min(1, max_norm / (total_norm + 1e-6)), on the device.
// total_norm is a 0-d tensor on the gradients' device.
void clip_grads_with_norm_(const TensorList& params, double max_norm, const Tensor& total_norm);

// The kiln::Error, naming `op`, that clip_grad_norm_ throws for a max_norm below 0 or NaN, or a
// norm_type that is not positive; nothing when both are valid.
void check_clip_options(const char* op, double max_norm, double norm_type);

}  // namespace kiln::nn::optim
