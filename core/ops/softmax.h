// softmax and log_softmax along one dim: one fused kernel each way, float accumulation for
// float16/bfloat16 inputs read directly; and gumbel_softmax, composed of them and rand.
#pragma once

#include <cstdint>
#include <optional>

#include "core/random.h"
#include "core/tensor.h"

namespace kiln {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// torch.nn.functional.gumbel_softmax: softmax((logits + g) / tau) along dim, g Gumbel(0, 1) noise
// (-log(-log(u)), u uniform drawn in float32 at least, from `generator`, see core/random.h), a
// differentiable sample of the categorical distribution softmax(logits). hard: the one-hot vector
// of its argmax (exactly 0 and 1) with the soft sample's gradient (straight-through). tau must be
// positive and finite.
Tensor gumbel_softmax(const Tensor& logits, double tau = 1.0, bool hard = false, int64_t dim = -1,
                      const std::optional<Generator>& generator = std::nullopt);

}  // namespace kiln
