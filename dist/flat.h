// Flat buffers: several tensors' values, or their gradients, laid end to end in one 1-d tensor, so
// one collective moves them all, and the wait for a list of such collectives. Shared by
// DistributedDataParallel's buckets and ZeroRedundancyOptimizer's (when they are reduced:
// buckets.h). Internal to dist/.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "dist/process_group.h"

namespace kiln::dist::detail {

// The elements of `tensors` together.
int64_t total_numel(const TensorList& tensors);
// Copies each tensor (or, with `grads`, its gradient; zeros where it has none) into consecutive
// slices of `flat`, from its start; elements of `flat` past them are left alone.
void pack(const TensorList& tensors, Tensor& flat, bool grads);
// The reverse: consecutive slices of `flat` into each tensor (or its gradient, created where it has
// none), in place, without recording autograd history.
void unpack(const Tensor& flat, const TensorList& tensors, bool grads);

// t = rank 0's t, in place (the tensor's own storage, whatever its layout: one that is not dense
// goes through a contiguous copy), waiting for it.
void broadcast_from_rank0(ProcessGroup& group, const Tensor& t);

// The op whose collective over `flat` averages it over `ranks` ranks: Avg, except in float16, where
// `flat` is divided by the rank count here and the op is Sum, so that the ranks' sum cannot pass
// float16's largest value where their average would not (as PyTorch's fp16 compression hook).
ReduceOp averaging_op(Tensor& flat, int ranks);

// Waits for every collective in `works` (null entries skipped) and resets it, calling done(i) after
// work i succeeded while nothing has failed; all of them are waited for before the first failure is
// rethrown, so no collective is left writing a buffer.
void wait_all(std::vector<std::shared_ptr<Work>>& works, const std::function<void(size_t)>& done = {});

}  // namespace kiln::dist::detail
