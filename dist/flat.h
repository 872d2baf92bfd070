// Flat buffers: several tensors' values, or their gradients, laid end to end in one 1-d tensor, so
// one collective moves them all. Shared by DistributedDataParallel's buckets and ZeRO-1's groups,
// which keep their buffers from step to step (no allocation per step). Internal to dist/.
#pragma once

#include "core/tensor.h"

namespace kiln::dist::detail {

// The elements of `tensors` together.
int64_t total_numel(const TensorList& tensors);
// Copies each tensor (or, with `grads`, its gradient; zeros where it has none) into consecutive
// slices of `flat`, from its start; elements of `flat` past them are left alone.
void pack(const TensorList& tensors, Tensor& flat, bool grads);
// The reverse: consecutive slices of `flat` into each tensor (or its gradient, created where it has
// none), in place, without recording autograd history.
void unpack(const Tensor& flat, const TensorList& tensors, bool grads);

}  // namespace kiln::dist::detail
