// The Transformer of PyTorch's nn ("Attention Is All You Need"): TransformerEncoderLayer
// (self-attention, then a feed-forward block), TransformerDecoderLayer (self-attention, attention
// over the encoder's output, then a feed-forward block), each block with a residual connection and
// a layer norm after it (or before it, norm_first); the stacks TransformerEncoder and
// TransformerDecoder with an optional final norm; and Transformer, an encoder and a decoder. The
// same arguments, defaults and parameter names as PyTorch's ("encoder.layers.0.self_attn.
// in_proj_weight", "decoder.layers.0.multihead_attn.out_proj.weight", "decoder.norm.weight"), so a
// state dict maps 1:1. Non-obvious decision: a stack starts every layer from its first layer's
// weights, as PyTorch's does (it deep-copies the layer it is given), so a kiln model and a PyTorch
// model built alike start alike; the layers part ways as they train.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention.h"
#include "nn/layers.h"

namespace kiln::nn {

// PyTorch's activation "relu" (the default) and "gelu" (exact, not the tanh approximation).
enum class TransformerActivation : uint8_t { ReLU, GELU };

// The arguments every Transformer layer takes after d_model and nhead, with PyTorch's defaults.
struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048;
  // On the attention probabilities, the feed-forward hidden layer and every residual branch.
  double dropout = 0.1;
  TransformerActivation activation = TransformerActivation::ReLU;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;  // sequences [N, S, E] instead of [S, N, E]
  bool norm_first = false;   // pre-norm: x + block(norm(x)) instead of norm(x + block(x))
  bool bias = true;          // in the linear layers, the attentions and the layer norms
};

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});
  std::string type_name() const override { return "TransformerEncoderLayer"; }

  // src [S, N, E] ([N, S, E] with batch_first; [S, E] unbatched); src_mask and src_key_padding_mask
  // as MultiheadAttention's attn_mask and key_padding_mask; is_causal: the causal mask. Same shape
  // out.
  Tensor forward(const Tensor& src, const Tensor& src_mask = Tensor(), const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false);
  // forward after the forward pre-hooks (nn/module.h).
  Tensor operator()(const Tensor& src, const Tensor& src_mask = Tensor(), const Tensor& src_key_padding_mask = Tensor(),
                    bool is_causal = false) {
    return call(*this, src, src_mask, src_key_padding_mask, is_causal);
  }

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;
  bool norm_first;
  TransformerActivation activation;
};

class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});
  std::string type_name() const override { return "TransformerDecoderLayer"; }

  // tgt [T, N, E] and memory [S, N, E] (the encoder's output; batch_first: [N, T, E], [N, S, E]);
  // the tgt masks go to the self-attention, the memory masks to the attention over memory.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false,
                 bool memory_is_causal = false);
  // forward after the forward pre-hooks (nn/module.h).
  Tensor operator()(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                    const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                    const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false,
                    bool memory_is_causal = false) {
    return call(*this, tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
                memory_is_causal);
  }

  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  std::shared_ptr<Dropout> dropout1, dropout2, dropout3;
  bool norm_first;
  TransformerActivation activation;
};

class TransformerEncoder : public Module {
 public:
  // num_layers layers of TransformerEncoderLayer(d_model, nhead, layer), all starting from the
  // first one's weights; with final_norm, a LayerNorm(d_model, layer.layer_norm_eps) after them
  // ("norm", PyTorch's norm argument, which pre-norm stacks need).
  TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers, TransformerLayerOptions layer = {},
                     bool final_norm = false);
  std::string type_name() const override { return "TransformerEncoder"; }
  Tensor forward(const Tensor& src, const Tensor& mask = Tensor(), const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false);
  // forward after the forward pre-hooks (nn/module.h).
  Tensor operator()(const Tensor& src, const Tensor& mask = Tensor(), const Tensor& src_key_padding_mask = Tensor(),
                    bool is_causal = false) {
    return call(*this, src, mask, src_key_padding_mask, is_causal);
  }

  std::shared_ptr<ModuleList> layers_list;  // "layers"
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // undefined without final_norm
};

class TransformerDecoder : public Module {
 public:
  // As TransformerEncoder, of TransformerDecoderLayer.
  TransformerDecoder(int64_t d_model, int64_t nhead, int64_t num_layers, TransformerLayerOptions layer = {},
                     bool final_norm = false);
  std::string type_name() const override { return "TransformerDecoder"; }
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false,
                 bool memory_is_causal = false);
  // forward after the forward pre-hooks (nn/module.h).
  Tensor operator()(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                    const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                    const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false,
                    bool memory_is_causal = false) {
    return call(*this, tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
                memory_is_causal);
  }

  std::shared_ptr<ModuleList> layers_list;  // "layers"
  std::vector<std::shared_ptr<TransformerDecoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;
};

struct TransformerOptions {
  int64_t d_model = 512, nhead = 8, num_encoder_layers = 6, num_decoder_layers = 6;
  TransformerLayerOptions layer{};
};

// PyTorch's nn.Transformer: an encoder and a decoder, each with a final norm (as PyTorch builds
// them). Its weights are initialized as PyTorch's: xavier_uniform_ on every parameter with more
// than one dim.
class Transformer : public Module {
 public:
  explicit Transformer(TransformerOptions options = {});
  std::string type_name() const override { return "Transformer"; }
  // decoder(tgt, encoder(src, src_mask, src_key_padding_mask), ...): [T, N, E] ([N, T, E]).
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = Tensor(),
                 const Tensor& tgt_mask = Tensor(), const Tensor& memory_mask = Tensor(),
                 const Tensor& src_key_padding_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), bool src_is_causal = false,
                 bool tgt_is_causal = false, bool memory_is_causal = false);
  // forward after the forward pre-hooks (nn/module.h).
  Tensor operator()(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = Tensor(),
                    const Tensor& tgt_mask = Tensor(), const Tensor& memory_mask = Tensor(),
                    const Tensor& src_key_padding_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                    const Tensor& memory_key_padding_mask = Tensor(), bool src_is_causal = false,
                    bool tgt_is_causal = false, bool memory_is_causal = false) {
    return call(*this, src, tgt, src_mask, tgt_mask, memory_mask, src_key_padding_mask, tgt_key_padding_mask,
                memory_key_padding_mask, src_is_causal, tgt_is_causal, memory_is_causal);
  }
  // [size, size] float32: 0 on and below the diagonal, -inf above it (a float attn_mask that lets
  // position i see positions up to i), as PyTorch's generate_square_subsequent_mask.
  static Tensor generate_square_subsequent_mask(int64_t size, Device device = Device::cpu());

  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
  int64_t d_model, nhead;
  bool batch_first;
};

}  // namespace kiln::nn
