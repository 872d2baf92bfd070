// Scaled dot-product attention as one autograd node (not a chain of ops), PyTorch's semantics.
#pragma once

#include <optional>

#include "core/random.h"
#include "core/random.h"
#include "core/tensor.h"

namespace kiln {

// q [..., L, E], k [..., S, E], v [..., S, Ev] (batch dims broadcast; the last dim of each must be
// contiguous). attn_mask: bool (true = attend) or float (added to the scores), broadcastable to
// [..., L, S]. is_causal uses PyTorch's alignment (query i sees keys j <= i, top-left aligned, when
// L != S). dropout_p > 0 drops attention weights with a Philox mask keyed by (batch, head, query,
// key), drawn from `generator` (default: the device's; see core/random.h). scale defaults to
// 1/sqrt(E). The forward saves the row log-sum-exp; the backward recomputes the probabilities from
// it (the flash-attention formulation).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = std::nullopt,
                                    const std::optional<Generator>& generator = std::nullopt);

}  // namespace kiln
