// Gradient clipping by total norm, as torch.nn.utils.clip_grad_norm_ computes it, without a host
// sync: the norm stays a device tensor and the clip factor min(1, max_norm / (norm + 1e-6)) is
// multiplied into every gradient unconditionally (a factor of 1 when no clipping is needed).
#pragma once

#include "core/tensor.h"

namespace kiln::nn::optim {

// The total norm of the gradients of `params` (those without a gradient are skipped), as a 0-d
// float32 tensor on their device (on the CPU, 0, when none has a gradient). Gradients must be on
// one device.
Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type = 2.0);

}  // namespace kiln::nn::optim
