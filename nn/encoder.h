// The Transformer encoder of PyTorch's nn: TransformerEncoderLayer (self-attention and a
// feed-forward block, each with a residual connection, layer norm after them by default or before
// them with norm_first) and TransformerEncoder (a stack of such layers, an optional final norm),
// with PyTorch's arguments, defaults and parameter names ("layers.0.self_attn.in_proj_weight",
// "layers.0.linear1.weight", "layers.0.norm1.weight", "norm.weight"), so a state dict maps 1:1.
// Non-obvious decision: TransformerEncoder starts every layer from the first layer's weights, as
// PyTorch's does (it deep-copies the layer it is given), so a kiln model and a PyTorch model built
// alike start alike; the layers part ways as they train.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention.h"
#include "nn/layers.h"

namespace kiln::nn {

// PyTorch's activation "relu" (the default) and "gelu" (exact, not the tanh approximation).
enum class EncoderActivation : uint8_t { ReLU, GELU };

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  // On the attention probabilities, the feed-forward hidden layer and both residual branches.
  double dropout = 0.1;
  EncoderActivation activation = EncoderActivation::ReLU;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;  // src [N, S, E] instead of [S, N, E]
  bool norm_first = false;   // pre-norm: x + sa(norm1(x)), then x + ff(norm2(x))
  bool bias = true;          // in the linear layers, the attention and the layer norms
};

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options = {});
  std::string type_name() const override { return "TransformerEncoderLayer"; }

  // src [S, N, E] ([N, S, E] with batch_first; [S, E] unbatched); src_mask and src_key_padding_mask
  // as MultiheadAttention's attn_mask and key_padding_mask; is_causal: the causal mask. Same shape
  // out.
  Tensor forward(const Tensor& src, const Tensor& src_mask = Tensor(), const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false);

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;
  bool norm_first;
  EncoderActivation activation;
};

class TransformerEncoder : public Module {
 public:
  // num_layers layers of TransformerEncoderLayer(d_model, nhead, layer), all starting from the
  // first one's weights; with final_norm, a LayerNorm(d_model, layer.layer_norm_eps) after them
  // ("norm", PyTorch's norm argument, which pre-norm stacks need).
  TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers, TransformerEncoderLayerOptions layer = {},
                     bool final_norm = false);
  std::string type_name() const override { return "TransformerEncoder"; }
  Tensor forward(const Tensor& src, const Tensor& mask = Tensor(), const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false);

  std::shared_ptr<ModuleList> layers_list;  // "layers"
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // undefined without final_norm
};

}  // namespace kiln::nn
