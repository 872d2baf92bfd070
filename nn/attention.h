// nn::MultiheadAttention: PyTorch's module of that name (the attention of the original
// Transformer, for encoders, decoders' cross-attention and anything else GPT's causal block does
// not cover): the same constructor arguments, parameter names (in_proj_weight, in_proj_bias,
// out_proj.weight, out_proj.bias; q/k/v_proj_weight when the key or value width differs), init,
// input layouts and mask conventions, so a state dict maps 1:1 onto a PyTorch model's.
// Non-obvious decisions:
// - Masks follow PyTorch's MultiheadAttention, not scaled_dot_product_attention: a bool mask is
//   true where attention is NOT allowed (key_padding_mask: true for a padding key), a float mask is
//   added to the scores. Both are merged into one additive mask for the attention op.
// - need_weights = true (PyTorch's default) computes the scores and probabilities as tensors,
//   because they are returned; false runs scaled_dot_product_attention (one fused node, the
//   flash-attention formulation) and returns no weights: the fast path for training.
// - A query that every mask hides from every key gets zeros (output and weights), as kiln's
//   attention op gives, on both paths; PyTorch's weights path gives NaN there.
// - is_causal alone applies the causal mask (PyTorch's requires attn_mask with it, as a hint);
//   with an attn_mask given, the mask is what counts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/ops/factory.h"
#include "nn/layers.h"

namespace kiln::nn {

// The output projection's class in PyTorch (a Linear that its quantization tooling leaves alone),
// so a printed model reads as PyTorch prints it.
class NonDynamicallyQuantizableLinear : public Linear {
 public:
  using Linear::Linear;
  std::string type_name() const override { return "NonDynamicallyQuantizableLinear"; }
};

struct MultiheadAttentionOptions {
  double dropout = 0.0;               // on the attention probabilities, in training
  bool bias = true;                   // in_proj_bias and out_proj.bias
  // The key's and value's feature sizes (default: embed_dim).
  std::optional<int64_t> kdim{}, vdim{};
  bool batch_first = false;           // inputs [N, L, E] instead of PyTorch's default [L, N, E]
};

// An additive causal mask [l, s] of `options`' floating dtype: 0 where key j <= query i, -inf
// above (top-left aligned, as scaled_dot_product_attention's is_causal). MultiheadAttention's
// is_causal and Transformer::generate_square_subsequent_mask both make theirs here.
Tensor causal_mask(int64_t l, int64_t s, TensorOptions options = {});

class MultiheadAttention : public Module {
 public:
  // embed_dim must be a multiple of num_heads. Init as PyTorch's: xavier_uniform_ on the input
  // projections (the stacked [3E, E] one as a whole), zero biases, out_proj.weight as a Linear's.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  std::string type_name() const override { return "MultiheadAttention"; }

  // query [L, N, E] (batch_first: [N, L, E]; unbatched: [L, E]), key [S, N, kdim], value
  // [S, N, vdim] in the same layout. key_padding_mask [N, S] ([S] unbatched); attn_mask [L, S]
  // or [N * num_heads, L, S] ([num_heads, L, S] unbatched); each bool (true: not allowed) or
  // floating (added). Returns the output in the query's layout and, with need_weights, the
  // attention probabilities [N, L, S] averaged over the heads (average_attn_weights) or
  // [N, num_heads, L, S] (without N when unbatched); undefined otherwise. Dropout applies in
  // training mode only.
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                    const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                                    bool is_causal = false);
  // forward after the forward pre-hooks (nn/module.h).
  std::pair<Tensor, Tensor> operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                       const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                       const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                                       bool is_causal = false) {
    return call(*this, query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal);
  }

  int64_t embed_dim, num_heads, head_dim, kdim, vdim;
  double dropout;
  bool batch_first;
  // in_proj_weight [3E, E] when kdim == vdim == embed_dim; otherwise q_proj_weight [E, E],
  // k_proj_weight [E, kdim] and v_proj_weight [E, vdim]. Undefined where not registered.
  Tensor in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight;
  Tensor in_proj_bias;  // [3E], when bias
  std::shared_ptr<NonDynamicallyQuantizableLinear> out_proj;
};

}  // namespace kiln::nn
