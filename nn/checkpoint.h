// Activation recompute (gradient checkpointing), as torch.utils.checkpoint: a segment runs its
// forward without keeping intermediates and runs it again in backward to get them back. Unlike
// PyTorch's reentrant variant, the parameters a segment reads are inputs of its one autograd node,
// so their gradients flow through the caller's backward like any other (docs/recompute.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "nn/layers.h"

namespace kiln::nn {

struct CheckpointOptions {
  // The tensors that require grad which fn reads besides its inputs: the parameters of the modules
  // it runs. Listed, they become inputs of the checkpoint's node, so their gradients reach .grad
  // through the caller's backward (hooks and end-of-backward callbacks run there, and kiln::grad
  // over them works); a tensor fn reads that requires grad and is neither an input nor listed is
  // then an error in backward. Left empty, such tensors are handled the reentrant way: the
  // backward of the recompute accumulates straight into their .grad, which works with backward()
  // but not with kiln::grad over them.
  TensorList params;
  // State fn updates in place (BatchNorm's running statistics): those fn changed in forward are
  // copied before the recompute and written back after it, so a batch is not counted twice.
  TensorList buffers;
  // Re-run fn with the random state it had in forward (dropout masks equal), then put the state
  // back as it was before the recompute; inside a CUDA graph capture this rewinds the capture's
  // draw count (Generator::position). Turn it off when fn draws no random numbers: nothing is
  // saved or restored.
  bool preserve_rng_state = true;
  // Generators fn draws from besides the default ones of the CPU and of the inputs' and params'
  // CUDA devices, which are always saved.
  std::vector<Generator> generators;
};

using CheckpointFn = std::function<TensorList(const TensorList&)>;

// Runs fn(inputs) without keeping its intermediates and records one autograd node over `inputs`
// and options.params, saving only `inputs`, whose backward runs fn again (grad mode on, forward's
// autocast settings and random state) and differentiates the recomputed outputs. Floating outputs
// carry the node; others are returned as they are. fn simply runs, keeping its graph, when neither
// an input nor a param requires grad, or without grad mode. A kiln::Error naming `checkpoint` when fn is empty or returns no tensor or
// an undefined one; in backward, when the recompute's outputs differ in number, shape or dtype from
// forward's, when fn reads a tensor with history that is not an input, or one that requires grad
// and is not listed while params are.
TensorList checkpoint(CheckpointFn fn, const TensorList& inputs, CheckpointOptions options = {});
Tensor checkpoint(std::function<Tensor(const Tensor&)> fn, const Tensor& input, CheckpointOptions options = {});
// A module's forward: its parameters and buffers are added to options.params and options.buffers.
Tensor checkpoint(const std::shared_ptr<UnaryModule>& module, const Tensor& input, CheckpointOptions options = {});

// As torch.utils.checkpoint.checkpoint_sequential: the modules split into `segments` runs of
// modules.size() / segments (the last one takes the rest); every segment but the last is
// checkpointed with its modules' parameters and buffers, and the last runs plainly (its
// intermediates are needed at once by backward anyway). segments must lie in [1, modules.size()].
Tensor checkpoint_sequential(const std::vector<std::shared_ptr<UnaryModule>>& modules, int64_t segments,
                             const Tensor& input, CheckpointOptions options = {});
Tensor checkpoint_sequential(const Sequential& modules, int64_t segments, const Tensor& input,
                             CheckpointOptions options = {});

}  // namespace kiln::nn
