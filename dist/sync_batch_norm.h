// Synchronized batch norm for data-parallel training (PyTorch's SyncBatchNorm). With plain DDP each
// rank's batch norm normalizes with the statistics of its own share of the batch, so N ranks do not
// train the model one process would on the whole batch; with synchronized statistics they do. kiln
// keeps the BatchNorm1d/2d/3d modules (and so every model's member pointers and state-dict names)
// and gives each one a BatchNormSync: its training forward then takes the per-channel sums of every
// rank (nn/layers.cpp, BatchNorm::synced_forward). Non-obvious decisions:
// - The cross-process sum is an autograd op whose backward is the same sum of the gradient, so the
//   backward needs no hand-written kernel: autograd differentiates the synchronized statistics.
//   Each forward costs two small all-reduces per batch-norm layer (2C + 1 values) and each backward
//   two more, in the same order on every rank.
// - The statistics are unfused kiln ops (several passes over the activation), where the local path
//   is one fused kernel: correct first; a fused synchronized kernel is future work.
// - Its backward all-reduces run during backward, among DDP's (or ZeRO's) bucket reductions, and every
//   rank must issue them all in one order. A parameter without a gradient on some ranks only (DDP's
//   find_unused_parameters, or ZeRO) makes those ranks issue its bucket at the end of backward, and the
//   others during it: the collectives pair wrongly and the job fails or hangs (KILN_DIST_TIMEOUT ends
//   it). With synchronized batch norm, use each parameter on every rank or on none. (PyTorch's DDP
//   has the same ordering constraint.)
#pragma once

#include <memory>

#include "dist/process_group.h"
#include "nn/module.h"

namespace kiln::dist {

// The sum of `t` over the group's ranks, differentiably: the backward sums the incoming gradient
// over the ranks too (every rank's loss depends on every rank's input). A new tensor; `t` is left
// as it was. Every rank must call it at the same point.
Tensor all_reduce_sum_differentiable(const Tensor& t, ProcessGroup& group);

// Makes every batch norm (BatchNorm1d, 2d, 3d) in `module` (recursively) normalize with the
// statistics of the whole group's batch while training. Returns how many it converted. Call it on
// every rank, before DistributedDataParallel; evaluation is unchanged (the running statistics,
// updated identically on every rank).
int convert_sync_batchnorm(nn::Module& module, ProcessGroup& group);

}  // namespace kiln::dist
