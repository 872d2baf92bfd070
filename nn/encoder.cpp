// TransformerEncoderLayer and TransformerEncoder (see encoder.h).
#include "nn/encoder.h"

#include <string>

#include "core/ops/elementwise.h"
#include "kernels/error.h"

namespace kiln::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options)
    : norm_first(options.norm_first), activation(options.activation) {
  if (options.dim_feedforward <= 0) {
    throw Error("TransformerEncoderLayer: dim_feedforward must be positive, got " +
                std::to_string(options.dim_feedforward));
  }
  MultiheadAttentionOptions attention;
  attention.dropout = options.dropout;
  attention.bias = options.bias;
  attention.batch_first = options.batch_first;
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead, attention));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward, options.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model, options.bias));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(d_model, options.layer_norm_eps, true, options.bias));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(d_model, options.layer_norm_eps, true, options.bias));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                        bool is_causal) {
  auto self_attention = [&](const Tensor& x) {
    return dropout1->forward(
        self_attn->forward(x, x, x, src_key_padding_mask, /*need_weights=*/false, src_mask, true, is_causal).first);
  };
  auto feed_forward = [&](const Tensor& x) {
    const Tensor hidden = linear1->forward(x);
    const Tensor act = activation == EncoderActivation::GELU ? gelu(hidden) : relu(hidden);
    return dropout2->forward(linear2->forward(dropout->forward(act)));
  };
  if (norm_first) {
    const Tensor x = src + self_attention(norm1->forward(src));
    return x + feed_forward(norm2->forward(x));
  }
  const Tensor x = norm1->forward(src + self_attention(src));
  return norm2->forward(x + feed_forward(x));
}

TransformerEncoder::TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                                       TransformerEncoderLayerOptions layer, bool final_norm) {
  if (num_layers <= 0) {
    throw Error("TransformerEncoder: num_layers must be positive, got " + std::to_string(num_layers));
  }
  layers_list = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i) {
    auto l = std::make_shared<TransformerEncoderLayer>(d_model, nhead, layer);
    if (i > 0) l->load_state_dict(layers.front()->state_dict());  // PyTorch's deep copies of one layer
    layers_list->push_back(l);
    layers.push_back(l);
  }
  if (final_norm) {
    norm = register_module("norm", std::make_shared<LayerNorm>(d_model, layer.layer_norm_eps, true, layer.bias));
  }
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                   bool is_causal) {
  Tensor x = src;
  for (const auto& l : layers) x = l->forward(x, mask, src_key_padding_mask, is_causal);
  return norm ? norm->forward(x) : x;
}

}  // namespace kiln::nn
