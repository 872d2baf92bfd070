// A GPT-2-style decoder whose module tree, parameter names and init follow nanoGPT's, so its
// state dict maps 1:1 onto a PyTorch nanoGPT model ("transformer.h.0.attn.c_attn.weight").
// lm_head.weight is the very tensor of transformer.wte.weight (tied): listed once by parameters(),
// under both names in state_dict().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "nn/layers.h"

namespace kiln::nn {

struct GPTConfig {
  int64_t vocab_size = 50304;
  int64_t block_size = 1024;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;
  bool bias = true;  // biases in Linear and LayerNorm layers
  // Activation recompute: each TransformerBlock runs through nn::checkpoint, keeping only its input
  // for backward and running it again there (docs/recompute.md). Outputs and gradients are the
  // same bits either way; off by default.
  bool recompute = false;

  // GPT-2 small ("124M"): 12 layers, 12 heads, 768 wide, block 1024 and GPT-2's own vocabulary of
  // 50257 tokens (nanoGPT pads it to 50304 for speed; this preset keeps the real one, as the
  // tokenized corpora use it), biases on, dropout 0. 124,439,808 parameters, the tied output
  // layer counted once.
  static GPTConfig gpt2_124m() {
    GPTConfig c;
    c.vocab_size = 50257;
    c.block_size = 1024;
    c.n_layer = 12;
    c.n_head = 12;
    c.n_embd = 768;
    c.dropout = 0.0;
    c.bias = true;
    return c;
  }
};

// Multi-head causal self-attention: one fused q/k/v projection, scaled_dot_product_attention
// with is_causal, an output projection and residual dropout. x [B, T, C] -> [B, T, C].
class CausalSelfAttention : public UnaryModule {
 public:
  explicit CausalSelfAttention(const GPTConfig& config);
  std::string type_name() const override { return "CausalSelfAttention"; }
  Tensor forward(const Tensor& x) override;

  int64_t n_head, n_embd;
  double dropout;
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> attn_dropout, resid_dropout;
};

// Linear(C, 4C), GELU (tanh approximation, as GPT-2), Linear(4C, C), dropout. With biases, the three
// run as gelu_mlp (core/ops/matmul.h): GEMMs with bias-GELU and dGELU/bias-gradient epilogues.
class MLP : public UnaryModule {
 public:
  explicit MLP(const GPTConfig& config);
  std::string type_name() const override { return "MLP"; }
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> c_fc;
  std::shared_ptr<GELU> gelu;
  std::shared_ptr<Linear> c_proj;
  std::shared_ptr<Dropout> dropout;
};

// Pre-LayerNorm residual block: x + attn(ln_1(x)), then x + mlp(ln_2(x)).
class TransformerBlock : public UnaryModule {
 public:
  explicit TransformerBlock(const GPTConfig& config);
  std::string type_name() const override { return "Block"; }
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<LayerNorm> ln_2;
  std::shared_ptr<MLP> mlp;
};

class GPT : public UnaryModule {
 public:
  explicit GPT(const GPTConfig& config);
  std::string type_name() const override { return "GPT"; }

  // idx int64 [B, T] with T <= block_size -> logits [B, T, vocab_size].
  Tensor forward(const Tensor& idx) override;
  // Mean cross-entropy of forward(idx) against targets int64 [B, T]; targets equal to -1 are
  // ignored (nanoGPT's convention).
  Tensor loss(const Tensor& idx, const Tensor& targets);
  // Appends max_new_tokens sampled tokens to idx [B, T] -> [B, T + max_new_tokens], under
  // NoGradGuard. Each step sees at most the last block_size tokens, divides the last logits by
  // temperature (> 0; below 1e-30, as 1e-30: a greedy draw), keeps the top_k largest when given,
  // then the nucleus of top_p (in (0, 1]) when given (filter_top_p), and samples from the softmax.
  // The mode is left as it is: call eval() first to turn dropout off, as in nanoGPT.
  Tensor generate(const Tensor& idx, int64_t max_new_tokens, double temperature = 1.0,
                  std::optional<int64_t> top_k = std::nullopt, std::optional<double> top_p = std::nullopt);
  // nanoGPT's get_num_params: parameters counted once, without the position embedding unless
  // non_embedding is false (the token embedding counts, being the output layer too).
  int64_t get_num_params(bool non_embedding = true) const;

  const GPTConfig& config() const { return config_; }

  // The "transformer" container (wte, wpe, drop, h, ln_f) and typed handles into it.
  std::shared_ptr<ModuleDict> transformer;
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList> h_list;
  std::vector<std::shared_ptr<TransformerBlock>> h;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> lm_head;

 private:
  GPTConfig config_;
};

// Nucleus (top-p) filtering of logits [..., vocab] along the last dim: each row keeps its most
// likely tokens, in order of probability, until their softmax probabilities add up to top_p
// (in (0, 1]); the others become -inf. The likeliest token always stays, and a token as likely as
// the last one kept stays too (ties are not broken). top_p = 1 keeps every token of nonzero
// probability. Composed of softmax, sort, cumsum and gather, on the logits' device.
Tensor filter_top_p(const Tensor& logits, double top_p);

}  // namespace kiln::nn
