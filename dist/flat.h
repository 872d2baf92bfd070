// Flat buffers: several tensors' values, or their gradients, laid end to end in one 1-d tensor, so
// one collective moves them all. Shared by DistributedDataParallel's buckets and ZeRO-1's, which
// keep their buffers from step to step (no allocation per step), with the other things their
// buckets need alike: waiting for a list of collectives, the end of a backward pass (or its
// failure), and the order they are issued in. Internal to dist/.
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

// Waits for every collective in `works` (null entries skipped) and resets it, calling done(i) after
// work i succeeded while nothing has failed; all of them are waited for before the first failure is
// rethrown, so no collective is left writing a buffer.
void wait_all(std::vector<std::shared_ptr<Work>>& works, const std::function<void(size_t)>& done = {});

// Queues `on_end` to run when the backward pass now running finishes (queue_backward_callback). If
// the pass fails instead (an exception leaves backward before its callbacks run), `on_abort` runs
// when the engine drops the callback, as the exception leaves backward: a DDP or ZeRO pass can wait
// for the collectives it left in flight and end, so the next backward starts a pass of its own.
// Errors of `on_abort` are swallowed (it runs while an exception is on its way out).
void queue_end_of_pass(std::function<void()> on_end, std::function<void()> on_abort);

// The order of buckets every rank issues from now on: rank 0's `completed` (the order its first
// backward completed them), followed by the buckets it never completed in their `current` order. A
// collective (a broadcast from rank 0): buckets reduced from post-accumulate hooks must go in one
// order on every rank, and backward's order is known only once it has run.
std::vector<size_t> agree_on_order(ProcessGroup& group, const std::vector<size_t>& completed,
                                   const std::vector<size_t>& current);

}  // namespace kiln::dist::detail
