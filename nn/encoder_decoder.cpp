// The Transformer's layers, stacks and model (see encoder_decoder.h).
#include "nn/encoder_decoder.h"

#include <string>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "kernels/error.h"
#include "nn/init.h"

namespace kiln::nn {
namespace {

void check_options(const char* layer, const TransformerLayerOptions& o) {
  if (o.dim_feedforward <= 0) {
    throw Error(std::string(layer) + ": dim_feedforward must be positive, got " + std::to_string(o.dim_feedforward));
  }
}

std::shared_ptr<MultiheadAttention> attention(int64_t d_model, int64_t nhead, const TransformerLayerOptions& o) {
  MultiheadAttentionOptions a;
  a.dropout = o.dropout;
  a.bias = o.bias;
  a.batch_first = o.batch_first;
  return std::make_shared<MultiheadAttention>(d_model, nhead, a);
}

std::shared_ptr<LayerNorm> layer_norm(int64_t d_model, const TransformerLayerOptions& o) {
  return std::make_shared<LayerNorm>(d_model, o.layer_norm_eps, true, o.bias);
}

// The feed-forward block both layers end with, before its residual dropout.
Tensor feed_forward(Linear& linear1, Dropout& dropout, Linear& linear2, TransformerActivation activation,
                    const Tensor& x) {
  const Tensor hidden = linear1(x);
  return linear2(dropout(activation == TransformerActivation::GELU ? gelu(hidden) : relu(hidden)));
}

// A stack's layers: num_layers of them, each starting from the first's weights.
template <class Layer>
std::vector<std::shared_ptr<Layer>> stack(const char* name, ModuleList& list, int64_t d_model, int64_t nhead,
                                          int64_t num_layers, const TransformerLayerOptions& layer) {
  if (num_layers <= 0) {
    throw Error(std::string(name) + ": num_layers must be positive, got " + std::to_string(num_layers));
  }
  std::vector<std::shared_ptr<Layer>> layers;
  for (int64_t i = 0; i < num_layers; ++i) {
    auto l = std::make_shared<Layer>(d_model, nhead, layer);
    if (i > 0) l->load_state_dict(layers.front()->state_dict());  // PyTorch's deep copies of one layer
    list.push_back(l);
    layers.push_back(l);
  }
  return layers;
}

}  // namespace

// --- TransformerEncoderLayer ---------------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options)
    : norm_first(options.norm_first), activation(options.activation) {
  check_options("TransformerEncoderLayer", options);
  self_attn = register_module("self_attn", attention(d_model, nhead, options));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward, options.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model, options.bias));
  norm1 = register_module("norm1", layer_norm(d_model, options));
  norm2 = register_module("norm2", layer_norm(d_model, options));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                        bool is_causal) {
  auto sa = [&](const Tensor& x) {
    return (*dropout1)(
        (*self_attn)(x, x, x, src_key_padding_mask, /*need_weights=*/false, src_mask, true, is_causal).first);
  };
  auto ff = [&](const Tensor& x) { return (*dropout2)(feed_forward(*linear1, *dropout, *linear2, activation, x)); };
  if (norm_first) {
    const Tensor x = src + sa((*norm1)(src));
    return x + ff((*norm2)(x));
  }
  const Tensor x = (*norm1)(src + sa(src));
  return (*norm2)(x + ff(x));
}

// --- TransformerDecoderLayer ---------------------------------------------------------------------

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options)
    : norm_first(options.norm_first), activation(options.activation) {
  check_options("TransformerDecoderLayer", options);
  self_attn = register_module("self_attn", attention(d_model, nhead, options));
  multihead_attn = register_module("multihead_attn", attention(d_model, nhead, options));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward, options.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model, options.bias));
  norm1 = register_module("norm1", layer_norm(d_model, options));
  norm2 = register_module("norm2", layer_norm(d_model, options));
  norm3 = register_module("norm3", layer_norm(d_model, options));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                        bool memory_is_causal) {
  auto sa = [&](const Tensor& x) {
    return (*dropout1)(
        (*self_attn)(x, x, x, tgt_key_padding_mask, /*need_weights=*/false, tgt_mask, true, tgt_is_causal).first);
  };
  auto mha = [&](const Tensor& x) {
    return (*dropout2)((*multihead_attn)(x, memory, memory, memory_key_padding_mask, /*need_weights=*/false,
                                         memory_mask, true, memory_is_causal)
                           .first);
  };
  auto ff = [&](const Tensor& x) { return (*dropout3)(feed_forward(*linear1, *dropout, *linear2, activation, x)); };
  if (norm_first) {
    Tensor x = tgt + sa((*norm1)(tgt));
    x = x + mha((*norm2)(x));
    return x + ff((*norm3)(x));
  }
  Tensor x = (*norm1)(tgt + sa(tgt));
  x = (*norm2)(x + mha(x));
  return (*norm3)(x + ff(x));
}

// --- the stacks ----------------------------------------------------------------------------------

TransformerEncoder::TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                                       TransformerLayerOptions layer, bool final_norm) {
  layers_list = register_module("layers", std::make_shared<ModuleList>());
  layers = stack<TransformerEncoderLayer>("TransformerEncoder", *layers_list, d_model, nhead, num_layers, layer);
  if (final_norm) norm = register_module("norm", layer_norm(d_model, layer));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                   bool is_causal) {
  Tensor x = src;
  for (const auto& l : layers) x = (*l)(x, mask, src_key_padding_mask, is_causal);
  return norm ? (*norm)(x) : x;
}

TransformerDecoder::TransformerDecoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                                       TransformerLayerOptions layer, bool final_norm) {
  layers_list = register_module("layers", std::make_shared<ModuleList>());
  layers = stack<TransformerDecoderLayer>("TransformerDecoder", *layers_list, d_model, nhead, num_layers, layer);
  if (final_norm) norm = register_module("norm", layer_norm(d_model, layer));
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask, bool tgt_is_causal, bool memory_is_causal) {
  Tensor x = tgt;
  for (const auto& l : layers) {
    x = (*l)(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
             memory_is_causal);
  }
  return norm ? (*norm)(x) : x;
}

// --- Transformer ---------------------------------------------------------------------------------

Transformer::Transformer(TransformerOptions options)
    : d_model(options.d_model), nhead(options.nhead), batch_first(options.layer.batch_first) {
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(options.d_model, options.nhead,
                                                                            options.num_encoder_layers, options.layer,
                                                                            /*final_norm=*/true));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(options.d_model, options.nhead,
                                                                            options.num_decoder_layers, options.layer,
                                                                            /*final_norm=*/true));
  for (const Tensor& p : parameters()) {
    if (p.dim() > 1) init::xavier_uniform_(p);
  }
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                            const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                            const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask,
                            bool src_is_causal, bool tgt_is_causal, bool memory_is_causal) {
  if (!src.defined() || !tgt.defined()) throw Error("Transformer: src and tgt must be defined");
  const bool batched = src.dim() == 3;
  const int64_t batch_dim = batch_first ? 0 : 1;
  if (src.dim() != tgt.dim() || (batched && src.size(batch_dim) != tgt.size(batch_dim))) {
    throw ShapeError("Transformer: src " + shape_str(src.sizes()) + " and tgt " + shape_str(tgt.sizes()) +
                     " must have one batch size (dim " + std::to_string(batch_dim) +
                     (batch_first ? ", batch_first" : "") + ")");
  }
  if (src.dim() == 0 || src.size(-1) != d_model || tgt.size(-1) != d_model) {
    throw ShapeError("Transformer: the feature size of src " + shape_str(src.sizes()) + " and tgt " +
                     shape_str(tgt.sizes()) + " must be d_model = " + std::to_string(d_model));
  }
  const Tensor memory = (*encoder)(src, src_mask, src_key_padding_mask, src_is_causal);
  return (*decoder)(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
                    memory_is_causal);
}

Tensor Transformer::generate_square_subsequent_mask(int64_t size, Device device) {
  if (size < 0) throw Error("generate_square_subsequent_mask: size must be non-negative, got " + std::to_string(size));
  return causal_mask(size, size, TensorOptions(DType::Float32, device));
}

}  // namespace kiln::nn
