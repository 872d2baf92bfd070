// The connectionist temporal classification loss (torch.nn.functional.ctc_loss): the negative log
// of the probability, summed over every alignment, that per-frame class scores spell a target
// sequence once repeats are merged and blanks dropped. Composed of gather, logsumexp and where (no
// kernels of its own): the forward variable alpha runs over the target's blank-extended labels one
// frame at a time, and autograd through the recursion gives the gradient.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ops/loss.h"
#include "core/tensor.h"

namespace kiln {

// log_probs: [T, N, C] (or [T, C] unbatched), log-probabilities over C classes per frame, usually
// log_softmax's output. targets: [N, S] class indices padded past each length, or the N targets
// concatenated in one 1-d tensor (batched only); unbatched, [S]. input_lengths and target_lengths:
// per sample, the frames and target labels that count (input_lengths <= T, target_lengths <= S for
// padded targets). Targets hold classes in [0, C) other than `blank` (checked for CPU targets).
//
// Each sample's loss is inf where no alignment exists (a target longer than its frames allow);
// zero_infinity makes those losses 0 with zero gradient. Mean divides each loss by its target
// length (at least 1) before averaging over the batch, as PyTorch. The gradient is the exact one
// with respect to log_probs (PyTorch's CPU and CUDA kernels return the gradient through a
// log_softmax instead, the same once composed with log_softmax); an infinite loss passes none back.
// float16 and bfloat16 are computed in float32; float32 under autocast, as PyTorch's list.
// Lengths are read on the host (a synchronization when they are CUDA tensors).
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank = 0, Reduction reduction = Reduction::Mean,
                bool zero_infinity = false);
// The lengths as integer tensors ([N], or 0-d unbatched), as PyTorch takes them.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank = 0, Reduction reduction = Reduction::Mean,
                bool zero_infinity = false);

}  // namespace kiln
