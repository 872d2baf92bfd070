// The Transformer's layers, stacks and model (nn/encoder_decoder.h) against their wiring (post-norm
// and pre-norm, each block's residual) over the modules they are made of, MultiheadAttention and
// LayerNorm, which have tests of their own; the expected values go through the attention's other
// path (the scores as tensors) where the layers run the fused attention op. PyTorch's names, the
// stacks' copied first layer, gradients by gradcheck, and a small Transformer that learns to
// reverse sequences (the whole model trained end to end, masks included).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "core/gradcheck.h"
#include "core/kiln.h"
#include "nn/encoder_decoder.h"
#include "nn/optim/adamw.h"

using namespace kiln;
using nn::TransformerActivation;

namespace {

Tensor randn64(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, TensorOptions(DType::Float64), g);
}

double max_diff(const Tensor& a, const Tensor& b) { return max(abs(a - b)).item<double>(); }

// LayerNorms start alike (weight 1, bias 0), so a layer that used norm2 where norm1 belongs would
// pass: each gets weights of its own.
void distinct_norms(nn::Module& m) {
  NoGradGuard no_grad;
  uint64_t seed = 90;
  for (const auto& [name, p] : m.named_parameters()) {
    if (name.find("norm") != std::string::npos) p.detach().copy_(randn64(p.sizes(), ++seed).to(p.dtype()));
  }
}

}  // namespace

TEST_CASE("TransformerEncoderLayer: post-norm and pre-norm, relu and gelu, its masks reach the attention",
          "[attention][nn]") {
  for (const bool norm_first : {false, true}) {
    for (const TransformerActivation act : {TransformerActivation::ReLU, TransformerActivation::GELU}) {
      INFO("norm_first " << norm_first << ", gelu " << (act == TransformerActivation::GELU));
      manual_seed(40);
      nn::TransformerEncoderLayer layer(
          8, 2, {.dim_feedforward = 12, .dropout = 0.25, .activation = act, .norm_first = norm_first});
      layer.to(DType::Float64);
      layer.eval();
      distinct_norms(layer);
      const Tensor x = randn64({3, 2, 8}, 41);  // [S, N, E]
      const Tensor mask = randn64({3, 3}, 42);
      Tensor pad = zeros({2, 3}, TensorOptions(DType::Bool));
      pad.narrow(0, 1, 1).narrow(1, 2, 1).fill_(true);
      // The expected value through the attention's other path (the scores as tensors): the layer
      // runs the fused attention op.
      auto sa = [&](const Tensor& t) { return layer.self_attn->forward(t, t, t, pad, true, mask).first; };
      auto ff = [&](const Tensor& t) {
        const Tensor hidden = layer.linear1->forward(t);
        return layer.linear2->forward(act == TransformerActivation::GELU ? gelu(hidden) : relu(hidden));
      };
      Tensor want;
      if (norm_first) {
        const Tensor x1 = x + sa(layer.norm1->forward(x));
        want = x1 + ff(layer.norm2->forward(x1));
      } else {
        const Tensor x1 = layer.norm1->forward(x + sa(x));
        want = layer.norm2->forward(x1 + ff(x1));
      }
      const Tensor got = layer.forward(x, mask, pad);
      CHECK(max_diff(got, want) < 1e-12);
      layer.train();  // dropout 0.25 in three places
      CHECK(max_diff(layer.forward(x, mask, pad), want) > 1e-3);
    }
  }
  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(8, 2, {.dim_feedforward = 0}), Catch::Contains("dim_feedforward"));
  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(8, 3), Catch::Contains("multiple of num_heads"));
}

TEST_CASE("TransformerEncoder: PyTorch's names, layers that start as copies, a final norm, gradients",
          "[attention][nn]") {
  manual_seed(50);
  nn::TransformerEncoder enc(8, 2, 3, {.dim_feedforward = 16, .dropout = 0.0, .batch_first = true, .norm_first = true},
                             /*final_norm=*/true);
  const auto sd = enc.state_dict();
  CHECK(sd.size() == 3 * 12 + 2);
  for (const char* key : {"layers.0.self_attn.in_proj_weight", "layers.0.self_attn.out_proj.weight",
                          "layers.1.linear1.weight", "layers.2.linear2.bias", "layers.2.norm2.weight", "norm.bias"}) {
    INFO(key);
    CHECK(sd.count(key) == 1);
  }
  for (const auto& [key, t] : enc.layers[0]->state_dict()) {  // PyTorch deep-copies one layer
    INFO(key);
    CHECK(max_diff(sd.at("layers.2." + key), t) == 0.0);
  }
  const Tensor x = randn({2, 5, 8});  // batch_first
  Tensor want = x;
  for (const auto& l : enc.layers) want = l->forward(want, Tensor(), Tensor(), true);
  want = enc.norm->forward(want);
  CHECK(max_diff(enc.forward(x, Tensor(), Tensor(), true), want) == 0.0);
  CHECK_THROWS_WITH(nn::TransformerEncoder(8, 2, 0), Catch::Contains("num_layers must be positive"));

  // Gradients of a small post-norm stack in float64, with a padding mask.
  manual_seed(51);
  nn::TransformerEncoder small(4, 2, 2, {.dim_feedforward = 6, .dropout = 0.0});
  small.to(DType::Float64);
  Tensor src = randn64({3, 2, 4}, 52).set_requires_grad(true);
  Tensor pad = zeros({2, 3}, TensorOptions(DType::Bool));
  pad.narrow(0, 0, 1).narrow(1, 0, 1).fill_(true);
  TensorList inputs = {src};
  for (const Tensor& p : small.parameters()) inputs.push_back(p);
  const GradcheckResult r =
      gradcheck([&](const TensorList&) { return TensorList{small.forward(src, Tensor(), pad)}; }, inputs);
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("TransformerDecoderLayer: post-norm and pre-norm, masks to the self-attention and to the memory",
          "[attention][nn]") {
  for (const bool norm_first : {false, true}) {
    INFO("norm_first " << norm_first);
    manual_seed(60);
    nn::TransformerDecoderLayer layer(8, 2,
                                      {.dim_feedforward = 12,
                                       .dropout = 0.25,
                                       .activation = TransformerActivation::GELU,
                                       .batch_first = true,
                                       .norm_first = norm_first});
    layer.to(DType::Float64);
    layer.eval();
    distinct_norms(layer);
    const Tensor tgt = randn64({2, 3, 8}, 61), memory = randn64({2, 4, 8}, 62);  // [N, T, E], [N, S, E]
    const Tensor tgt_mask = nn::Transformer::generate_square_subsequent_mask(3).to(DType::Float64);
    const Tensor memory_mask = randn64({3, 4}, 63);
    Tensor memory_pad = zeros({2, 4}, TensorOptions(DType::Bool));
    memory_pad.narrow(0, 0, 1).narrow(1, 3, 1).fill_(true);
    auto sa = [&](const Tensor& x) { return layer.self_attn->forward(x, x, x, Tensor(), true, tgt_mask).first; };
    auto mha = [&](const Tensor& x) {
      return layer.multihead_attn->forward(x, memory, memory, memory_pad, true, memory_mask).first;
    };
    auto ff = [&](const Tensor& x) { return layer.linear2->forward(gelu(layer.linear1->forward(x))); };
    Tensor want;
    if (norm_first) {
      Tensor x = tgt + sa(layer.norm1->forward(tgt));
      x = x + mha(layer.norm2->forward(x));
      want = x + ff(layer.norm3->forward(x));
    } else {
      Tensor x = layer.norm1->forward(tgt + sa(tgt));
      x = layer.norm2->forward(x + mha(x));
      want = layer.norm3->forward(x + ff(x));
    }
    CHECK(max_diff(layer.forward(tgt, memory, tgt_mask, memory_mask, Tensor(), memory_pad), want) < 1e-12);
    // tgt_is_causal gives the square subsequent mask's result.
    CHECK(max_diff(layer.forward(tgt, memory, Tensor(), memory_mask, Tensor(), memory_pad, /*tgt_is_causal=*/true),
                   want) < 1e-12);
  }
}

TEST_CASE("Transformer: the encoder's output is the decoder's memory, PyTorch's names and init, gradients",
          "[attention][nn]") {
  manual_seed(70);
  nn::Transformer model({.d_model = 8,
                         .nhead = 2,
                         .num_encoder_layers = 2,
                         .num_decoder_layers = 3,
                         .layer = {.dim_feedforward = 16, .dropout = 0.0}});
  const auto sd = model.state_dict();
  CHECK(sd.size() == 2 * 12 + 2 + 3 * 18 + 2);
  for (const char* key :
       {"encoder.layers.1.self_attn.in_proj_weight", "encoder.norm.weight",
        "decoder.layers.2.multihead_attn.out_proj.bias", "decoder.layers.0.norm3.weight", "decoder.norm.bias"}) {
    INFO(key);
    CHECK(sd.count(key) == 1);
  }
  // PyTorch's _reset_parameters: xavier_uniform_ on every matrix, after the stacks copied their
  // first layer, so the layers differ from one another.
  CHECK(max_diff(sd.at("decoder.layers.0.linear1.weight"), sd.at("decoder.layers.1.linear1.weight")) > 0.0);
  CHECK(max(abs(sd.at("decoder.layers.0.linear1.weight"))).item<double>() <= std::sqrt(6.0 / (8 + 16)));
  const Tensor src = randn({5, 2, 8}), tgt = randn({3, 2, 8});
  const Tensor tgt_mask = nn::Transformer::generate_square_subsequent_mask(3);
  const Tensor memory = model.encoder->forward(src);
  CHECK(max_diff(model.forward(src, tgt, Tensor(), tgt_mask), model.decoder->forward(tgt, memory, tgt_mask)) == 0.0);
  CHECK_THROWS_WITH(model.forward(src, randn({3, 4, 8})), Catch::Contains("must have one batch size"));
  CHECK_THROWS_WITH(model.forward(src, randn({3, 2, 6})), Catch::Contains("must be d_model = 8"));
  CHECK(nn::Transformer::generate_square_subsequent_mask(3).to_vector<float>() ==
        std::vector<float>{0, -INFINITY, -INFINITY, 0, 0, -INFINITY, 0, 0, 0});

  manual_seed(71);
  nn::Transformer small({.d_model = 4,
                         .nhead = 2,
                         .num_encoder_layers = 1,
                         .num_decoder_layers = 1,
                         .layer = {.dim_feedforward = 6, .dropout = 0.0, .norm_first = true}});
  small.to(DType::Float64);
  Tensor s64 = randn64({3, 2, 4}, 72).set_requires_grad(true), t64 = randn64({2, 2, 4}, 73).set_requires_grad(true);
  TensorList inputs = {s64, t64};
  for (const Tensor& p : small.parameters()) inputs.push_back(p);
  const GradcheckResult r = gradcheck(
      [&](const TensorList&) {
        return TensorList{
            small.forward(s64, t64, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), false, true)};
      },
      inputs);
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("Transformer: a small one learns to reverse sequences, teacher-forced with the causal mask",
          "[attention][nn]") {
  // Tokens 1..8, sequences of 6; the decoder reads BOS (0) and the reversed sequence shifted right,
  // and must predict the reversed sequence. Learned position embeddings; AdamW, 300 steps.
  constexpr int64_t kVocab = 9, kLen = 6, kBatch = 32, kWidth = 32;
  manual_seed(80);
  nn::Transformer model({.d_model = kWidth,
                         .nhead = 4,
                         .num_encoder_layers = 2,
                         .num_decoder_layers = 2,
                         .layer = {.dim_feedforward = 64, .dropout = 0.0, .batch_first = true}});
  nn::Embedding embed(kVocab, kWidth);
  nn::Linear head(kWidth, kVocab);
  Tensor positions = (randn({kLen, kWidth}) * 0.1).set_requires_grad(true);
  TensorList params = model.parameters();
  for (const Tensor& p : embed.parameters()) params.push_back(p);
  for (const Tensor& p : head.parameters()) params.push_back(p);
  params.push_back(positions);
  nn::optim::AdamW opt(params, 3e-3, {0.9, 0.98}, 1e-9, 0.0);
  const Tensor causal = nn::Transformer::generate_square_subsequent_mask(kLen);
  Generator data(81);
  auto batch = [&] {
    const Tensor src = randint(1, kVocab, {kBatch, kLen}, TensorOptions(DType::Int64), data);
    const Tensor target = index_select(src, 1, arange(kLen - 1, -1, -1, TensorOptions(DType::Int64)));
    const Tensor shifted = cat({zeros({kBatch, 1}, TensorOptions(DType::Int64)), target.narrow(1, 0, kLen - 1)}, 1);
    return std::tuple{src, shifted, target};
  };
  auto logits_of = [&](const Tensor& src, const Tensor& shifted) {
    const Tensor h =
        model.forward(embed.forward(src) + positions, embed.forward(shifted) + positions, Tensor(), causal);
    return head.forward(h);
  };
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < 300; ++step) {
    auto [src, shifted, target] = batch();
    opt.zero_grad();
    const Tensor loss = cross_entropy(logits_of(src, shifted).reshape({-1, kVocab}), target.reshape({-1}));
    loss.backward();
    opt.step();
    (step == 0 ? first_loss : last_loss) = loss.item<double>();
  }
  INFO("loss " << first_loss << " -> " << last_loss);
  CHECK(first_loss > 1.8);  // about ln 8 at the start
  CHECK(last_loss < 0.2);
  NoGradGuard no_grad;
  auto [src, shifted, target] = batch();
  const Tensor predicted = max(logits_of(src, shifted), -1).second;
  const double accuracy = mean(eq(predicted, target).to(DType::Float64)).item<double>();
  INFO("held-out token accuracy " << accuracy);
  CHECK(accuracy > 0.95);
}
