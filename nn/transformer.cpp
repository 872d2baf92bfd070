// GPT: nanoGPT's module tree and init in kiln. q, k and v are views into the fused projection
// (split on the last dim, then [B, T, H, D] transposed), so attention reads them without copies.
#include "nn/transformer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/attention.h"
#include "core/ops/factory.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/dropout.h"
#include "core/ops/embedding.h"
#include "core/ops/layer_norm.h"
#include "core/ops/matmul.h"
#include "core/ops/random.h"
#include "core/ops/softmax.h"
#include "core/ops/topk.h"
#include "core/ops/reduce.h"
#include "core/ops/scan.h"
#include "core/ops/index.h"
#include "core/ops/elementwise.h"
#include "core/ops/shape.h"
#include "kernels/error.h"
#include "nn/checkpoint.h"
#include "nn/init.h"

namespace kiln::nn {
namespace {

void check_config(const GPTConfig& c) {
  auto positive = [](const char* what, int64_t v) {
    if (v <= 0) throw Error(std::string("GPTConfig: ") + what + " must be positive, got " + std::to_string(v));
  };
  positive("vocab_size", c.vocab_size);
  positive("block_size", c.block_size);
  positive("n_head", c.n_head);
  positive("n_embd", c.n_embd);
  if (c.n_layer < 0) throw Error("GPTConfig: n_layer must be non-negative, got " + std::to_string(c.n_layer));
  // The MLP is 4 * n_embd wide (and c_attn 3 * n_embd): that product must fit.
  if (c.n_embd > std::numeric_limits<int64_t>::max() / 4) {
    throw Error("GPTConfig: n_embd " + std::to_string(c.n_embd) + " is too large (4 * n_embd overflows int64)");
  }
  if (c.n_embd % c.n_head != 0) {
    throw Error("GPTConfig: n_embd " + std::to_string(c.n_embd) + " is not divisible by n_head " +
                std::to_string(c.n_head));
  }
  if (!(c.dropout >= 0.0 && c.dropout < 1.0)) {
    throw Error("GPTConfig: dropout must be in [0, 1), got " + num_str(c.dropout));
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

// --- CausalSelfAttention ------------------------------------------------------------------------

CausalSelfAttention::CausalSelfAttention(const GPTConfig& config)
    : n_head(config.n_head), n_embd(config.n_embd), dropout(config.dropout) {
  check_config(config);
  c_attn = register_module("c_attn", std::make_shared<Linear>(n_embd, 3 * n_embd, config.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(n_embd, n_embd, config.bias));
  // attn_dropout holds no state: the attention op applies the probability itself. It is
  // registered so the printed tree matches nanoGPT's.
  attn_dropout = register_module("attn_dropout", std::make_shared<Dropout>(config.dropout));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(config.dropout));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  if (x.dim() != 3 || x.size(2) != n_embd) {
    throw ShapeError("CausalSelfAttention: expected input [B, T, " + std::to_string(n_embd) + "], got shape " +
                     shape_str(x.sizes()));
  }
  const int64_t b = x.size(0), t = x.size(1), hd = n_embd / n_head;
  TensorList qkv = split((*c_attn)(x), n_embd, 2);
  auto heads = [&](const Tensor& p) { return p.view({b, t, n_head, hd}).transpose(1, 2); };
  Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), Tensor(),
                                          is_training() ? dropout : 0.0, /*is_causal=*/true);
  y = y.transpose(1, 2).reshape({b, t, n_embd});
  return (*resid_dropout)((*c_proj)(y));
}

// --- MLP ----------------------------------------------------------------------------------------

MLP::MLP(const GPTConfig& config) {
  check_config(config);
  c_fc = register_module("c_fc", std::make_shared<Linear>(config.n_embd, 4 * config.n_embd, config.bias));
  gelu = register_module("gelu", std::make_shared<GELU>(GeluApprox::Tanh));
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * config.n_embd, config.n_embd, config.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(config.dropout));
}

// With biases and GPT-2's tanh GELU, c_fc, the GELU and c_proj run as gelu_mlp: two GEMMs with
// epilogues, forward and backward. Otherwise the three modules in turn.
Tensor MLP::forward(const Tensor& x) {
  const bool fused = c_fc->bias.defined() && c_proj->bias.defined() && gelu->approximate == GeluApprox::Tanh;
  if (fused) {
    // gelu_mlp reads the Linears' tensors without calling the modules: their hooks run here.
    c_fc->run_forward_pre_hooks();
    gelu->run_forward_pre_hooks();
    c_proj->run_forward_pre_hooks();
    return (*dropout)(gelu_mlp(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias));
  }
  return (*dropout)((*c_proj)((*gelu)((*c_fc)(x))));
}

// --- TransformerBlock ----------------------------------------------------------------------------

TransformerBlock::TransformerBlock(const GPTConfig& config) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(config.n_embd, 1e-5, true, config.bias));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(config));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(config.n_embd, 1e-5, true, config.bias));
  mlp = register_module("mlp", std::make_shared<MLP>(config));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  Tensor y = x + (*attn)((*ln_1)(x));
  return y + (*mlp)((*ln_2)(y));
}

// --- GPT -------------------------------------------------------------------------------------------

GPT::GPT(const GPTConfig& config) : config_(config) {
  check_config(config);
  const int64_t c = config.n_embd;
  transformer = register_module("transformer", std::make_shared<ModuleDict>());
  wte = std::make_shared<Embedding>(config.vocab_size, c);
  wpe = std::make_shared<Embedding>(config.block_size, c);
  drop = std::make_shared<Dropout>(config.dropout);
  h_list = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < config.n_layer; ++i) {
    h.push_back(std::make_shared<TransformerBlock>(config));
    h_list->push_back(h.back());
  }
  ln_f = std::make_shared<LayerNorm>(c, 1e-5, true, config.bias);
  transformer->insert("wte", wte);
  transformer->insert("wpe", wpe);
  transformer->insert("drop", drop);
  transformer->insert("h", h_list);
  transformer->insert("ln_f", ln_f);
  lm_head = register_module("lm_head", std::make_shared<Linear>(c, config.vocab_size, false));
  // Weight tying: both modules hold one Tensor, so one gradient accumulates from both uses.
  lm_head->set_parameter("weight", wte->weight);
  lm_head->weight = wte->weight;

  // nanoGPT's init: N(0, 0.02) for every Linear and Embedding weight, zero biases, then the
  // residual projections (every *c_proj.weight) scaled down by sqrt(2 * n_layer).
  for (const auto& [name, m] : named_modules()) {
    if (auto* lin = dynamic_cast<Linear*>(m.get())) {
      init::normal_(lin->weight, 0.0, 0.02);
      if (lin->bias.defined()) init::zeros_(lin->bias);
    } else if (auto* emb = dynamic_cast<Embedding*>(m.get())) {
      init::normal_(emb->weight, 0.0, 0.02);
    }
  }
  if (config.n_layer > 0) {
    const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
    for (auto& [name, p] : named_parameters())
      if (ends_with(name, "c_proj.weight")) init::normal_(p, 0.0, proj_std);
  }
}

Tensor GPT::forward(const Tensor& idx) {
  if (idx.dim() != 2) throw ShapeError("GPT: idx must be 2-d [B, T], got shape " + shape_str(idx.sizes()));
  if (idx.dtype() != DType::Int64 && idx.dtype() != DType::Int32) {
    throw DTypeError(std::string("GPT: idx must hold int64 token ids, got ") + dtype_name(idx.dtype()));
  }
  const int64_t t = idx.size(1);
  if (t > config_.block_size) {
    throw ShapeError("GPT: cannot forward a sequence of length " + std::to_string(t) + ", block_size is only " +
                     std::to_string(config_.block_size) + " (idx " + shape_str(idx.sizes()) + ")");
  }
  Tensor pos = arange(0, t, 1, TensorOptions(DType::Int64, idx.device()));
  Tensor x = (*drop)((*wte)(idx) + (*wpe)(pos));
  // A block draws random numbers only for dropout in training; without any, the recompute need not
  // save and restore the random state.
  CheckpointOptions recompute;
  recompute.preserve_rng_state = config_.dropout > 0.0 && is_training();
  for (const auto& block : h) x = config_.recompute ? checkpoint(block, x, recompute) : (*block)(x);
  return (*lm_head)((*ln_f)(x));
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) {
  if (targets.sizes() != idx.sizes()) {
    throw ShapeError("GPT::loss: targets of shape " + shape_str(targets.sizes()) + " do not match idx of shape " +
                     shape_str(idx.sizes()));
  }
  Tensor logits = (*this)(idx);
  return cross_entropy(logits.reshape({-1, config_.vocab_size}), targets.reshape({-1}), Reduction::Mean, -1);
}

Tensor filter_top_p(const Tensor& logits, double top_p) {
  if (!logits.defined() || logits.dim() == 0 || !is_floating(logits.dtype())) {
    throw ShapeError("filter_top_p: logits must be a floating tensor [..., vocab], got " +
                     (logits.defined() ? std::string(dtype_name(logits.dtype())) + " " + shape_str(logits.sizes())
                                       : std::string("an undefined tensor")));
  }
  if (!(top_p > 0.0 && top_p <= 1.0)) {
    throw Error("filter_top_p: top_p must be in (0, 1], got " + num_str(top_p) + " (logits " +
                shape_str(logits.sizes()) + ")");
  }
  NoGradGuard no_grad;
  const Tensor probs = softmax(logits.to(DType::Float32), -1);
  const Tensor sorted = sort(probs, -1, /*descending=*/true).first;
  // What the likelier tokens hold before each one: a token is kept while that is below top_p.
  const Tensor before = cumsum(sorted, -1) - sorted;
  const Tensor kept = sum(lt(before, top_p).to(DType::Int64), {-1}, /*keepdim=*/true);  // >= 1
  const Tensor smallest_kept = gather(sorted, -1, kept - 1);
  return masked_fill(logits, lt(probs, smallest_kept), -std::numeric_limits<double>::infinity());
}

Tensor GPT::generate(const Tensor& idx, int64_t max_new_tokens, double temperature, std::optional<int64_t> top_k,
                     std::optional<double> top_p) {
  if (idx.dim() != 2 || idx.size(1) == 0) {
    throw ShapeError("GPT::generate: idx must be [B, T] with T >= 1, got shape " + shape_str(idx.sizes()));
  }
  if (max_new_tokens < 0) throw Error("GPT::generate: max_new_tokens must be non-negative, got " + std::to_string(max_new_tokens));
  if (!(temperature > 0.0)) throw Error("GPT::generate: temperature must be positive, got " + num_str(temperature));
  if (top_k && *top_k <= 0) throw Error("GPT::generate: top_k must be positive, got " + std::to_string(*top_k));
  if (top_p && !(*top_p > 0.0 && *top_p <= 1.0)) {
    throw Error("GPT::generate: top_p must be in (0, 1], got " + num_str(*top_p));
  }
  NoGradGuard no_grad;
  // At 1e-30 every logit difference a float32 can hold goes to -inf already (a greedy draw); below it
  // the temperature itself would round to 0 in float32, and 0 / 0 is NaN for the largest logit.
  const double divisor = std::max(temperature, 1e-30);
  Tensor out = idx;
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    const int64_t t = out.size(1);
    Tensor context = t <= config_.block_size ? out : out.slice(1, t - config_.block_size, t);
    // [B, vocab], the largest logit of each row 0 before the division: a tiny temperature then sends
    // the others to -inf (a greedy draw) instead of every logit to +-inf (NaN in the softmax).
    Tensor last = (*this)(context).select(1, context.size(1) - 1);
    Tensor logits = (last - amax(last, {-1}, /*keepdim=*/true)) / divisor;
    if (top_k) {
      const int64_t k = std::min(*top_k, config_.vocab_size);
      Tensor kth = topk(logits, k, -1).first.narrow(1, k - 1, 1);  // [B, 1]: the k-th largest
      logits = masked_fill(logits, lt(logits, kth), -std::numeric_limits<double>::infinity());
    }
    if (top_p) logits = filter_top_p(logits, *top_p);
    Tensor next = multinomial(softmax(logits, -1), 1);  // [B, 1]
    out = cat({out, next.to(out.dtype())}, 1);
  }
  return out;
}

int64_t GPT::get_num_params(bool non_embedding) const {
  int64_t n = num_parameters();
  if (non_embedding) n -= wpe->weight.numel();
  return n;
}

}  // namespace kiln::nn
