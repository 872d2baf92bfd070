// Mixed precision on whole models: a GPT under bfloat16 autocast against the computation cast by
// hand, gradient accumulation with and without a GradScaler, and a channels-last ResNet under
// autocast without hidden layout copies.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>

#include "core/kiln.h"
#include "core/ops/layout_stats.h"
#include "nn/amp/grad_scaler.h"
#include "nn/layers.h"
#include "nn/optim/adamw.h"
#include "nn/optim/sgd.h"
#include "nn/resnet.h"
#include "nn/transformer.h"
#include "tests/bitwise.h"

using namespace kiln;
using kiln::test::bitwise_equal;

TEST_CASE("autocast: a GPT forward and backward under bfloat16 equals the computation cast by hand", "[autocast]") {
  nn::GPTConfig cfg;
  cfg.vocab_size = 11;
  cfg.block_size = 8;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 16;
  manual_seed(11);
  nn::GPT auto_model(cfg), manual_model(cfg);
  manual_model.load_state_dict(auto_model.state_dict());
  Tensor idx = randint(0, cfg.vocab_size, {2, 8}, TensorOptions(DType::Int64));
  Tensor targets = randint(0, cfg.vocab_size, {2, 8}, TensorOptions(DType::Int64));

  Tensor auto_loss;
  {
    AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
    auto_loss = auto_model.loss(idx, targets);
  }
  auto_loss.backward();

  const DType lp = DType::BFloat16, f32 = DType::Float32;
  nn::GPT& m = manual_model;
  auto lin = [&](const nn::Linear& l, const Tensor& x) {
    return linear(x.to(lp), l.weight.to(lp), l.bias.defined() ? l.bias.to(lp) : Tensor());
  };
  auto ln = [&](const nn::LayerNorm& l, const Tensor& x) {
    return layer_norm(x.to(f32), {cfg.n_embd}, l.weight.to(f32), l.bias.to(f32), l.eps);
  };
  const int64_t B = 2, T = 8, C = cfg.n_embd, H = cfg.n_head;
  Tensor pos = arange(0, T, 1, TensorOptions(DType::Int64));
  Tensor x = embedding(m.wte->weight, idx) + embedding(m.wpe->weight, pos);
  for (const auto& blk : m.h) {
    TensorList qkv = split(lin(*blk->attn->c_attn, ln(*blk->ln_1, x)), C, 2);
    auto heads = [&](const Tensor& p) { return p.view({B, T, H, C / H}).transpose(1, 2); };
    Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), Tensor(), 0.0, true);
    x = x + lin(*blk->attn->c_proj, y.transpose(1, 2).reshape({B, T, C}));
    Tensor h = gelu(lin(*blk->mlp->c_fc, ln(*blk->ln_2, x)), GeluApprox::Tanh);
    x = x + lin(*blk->mlp->c_proj, h);
  }
  Tensor logits = lin(*m.lm_head, ln(*m.ln_f, x));
  Tensor manual_loss = cross_entropy(logits.reshape({-1, cfg.vocab_size}).to(f32), targets.reshape({-1}),
                                     Reduction::Mean, -1);
  manual_loss.backward();

  CHECK(auto_loss.dtype() == DType::Float32);
  CHECK(bitwise_equal(auto_loss.detach(), manual_loss.detach()));
  const auto auto_params = auto_model.named_parameters();
  const auto manual_params = manual_model.named_parameters();
  REQUIRE(auto_params.size() == manual_params.size());
  for (size_t i = 0; i < auto_params.size(); ++i) {
    INFO(auto_params[i].first);
    REQUIRE(auto_params[i].second.grad().defined());
    CHECK(auto_params[i].second.grad().dtype() == DType::Float32);
    CHECK(bitwise_equal(auto_params[i].second.grad(), manual_params[i].second.grad()));
  }
  // And it is not simply the float32 computation.
  Tensor f32_loss = manual_model.loss(idx, targets);
  CHECK_FALSE(bitwise_equal(f32_loss.detach(), auto_loss.detach()));
}

namespace {

// A small MLP's parameters after one optimizer step over `x` [N, 6] -> targets `y` [N], the batch
// computed as `k` micro-batches whose mean losses are each weighted by their share of the rows;
// with `scaler`, the losses are scaled and the step goes through it.
// Returns the parameters before the step, then after it.
std::pair<TensorList, TensorList> step_with_accumulation(const Tensor& x, const Tensor& y, int64_t k, bool adamw,
                                                         bool scaler) {
  manual_seed(5);
  nn::Sequential model;
  model.push_back(std::make_shared<nn::Linear>(6, 16));
  model.push_back(std::make_shared<nn::ReLU>());
  model.push_back(std::make_shared<nn::Linear>(16, 3));
  std::unique_ptr<nn::optim::Optimizer> opt;
  if (adamw) {
    opt = std::make_unique<nn::optim::AdamW>(model.parameters(), 1e-2);
  } else {
    opt = std::make_unique<nn::optim::SGD>(model.parameters(), 0.1, 0.9);
  }
  nn::amp::GradScaler gs;
  TensorList before;
  for (const Tensor& p : model.parameters()) before.push_back(p.detach().clone());
  const int64_t n = x.size(0);
  for (int64_t i = 0, start = 0; i < k; ++i) {
    const int64_t len = n / k + (i < n % k ? 1 : 0);
    Tensor loss = cross_entropy(model.forward(x.narrow(0, start, len)), y.narrow(0, start, len));
    if (k > 1) loss = loss * (static_cast<double>(len) / static_cast<double>(n));
    (scaler ? gs.scale(loss) : loss).backward();
    start += len;
  }
  if (scaler) {
    gs.step(*opt);
    gs.update();
  } else {
    opt->step();
  }
  TensorList after;
  for (const Tensor& p : model.parameters()) after.push_back(p.detach().clone());
  return {before, after};
}

double max_abs_diff(const Tensor& a, const Tensor& b) { return max((a - b).abs()).item<double>(); }

}  // namespace

TEST_CASE("gradient accumulation: K micro-batches give the update of one K-times larger batch", "[amp]") {
  manual_seed(21);
  Tensor x = randn({12, 6});
  Tensor y = randint(0, 3, {12}, TensorOptions(DType::Int64));
  for (bool adamw : {false, true}) {
    for (bool scaler : {false, true}) {
      const auto [initial, whole] = step_with_accumulation(x, y, 1, adamw, scaler);
      for (int64_t k : {2, 3, 5}) {  // 5 does not divide 12: micro-batches of 3 and 2 rows
        INFO((adamw ? "AdamW" : "SGD") << (scaler ? " with GradScaler" : "") << ", K = " << k);
        const TensorList accumulated = step_with_accumulation(x, y, k, adamw, scaler).second;
        REQUIRE(accumulated.size() == whole.size());
        for (size_t i = 0; i < whole.size(); ++i) {
          // The step moved the parameter by far more than the difference the summation order makes.
          CHECK(max_abs_diff(whole[i], initial[i]) > 1e-3);
          CHECK(max_abs_diff(accumulated[i], whole[i]) < 1e-6);
        }
      }
    }
  }
}

TEST_CASE("a channels-last ResNet step under bfloat16 autocast makes no hidden layout copies", "[amp]") {
  manual_seed(4);
  nn::ResNetConfig cfg;
  cfg.widths = {8, 16};
  cfg.blocks = {1, 1};
  auto net = std::make_shared<nn::ResNet>(cfg);
  net->to(MemoryFormat::ChannelsLast);
  nn::optim::AdamW opt(net->parameters(), 1e-3);
  Tensor x = randn({4, 3, 8, 8}).contiguous(MemoryFormat::ChannelsLast);
  Tensor y = tensor<int64_t>({1, 0, 3, 2});
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    reset_layout_copy_count();
    Tensor loss;
    {
      AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
      loss = cross_entropy(net->forward(x), y);
    }
    loss.backward();
    opt.step();
    INFO("copies by op: " << [] {
      std::string s;
      for (const auto& [what, n] : layout_copy_counts()) s += what + "=" + std::to_string(n) + " ";
      return s;
    }());
    CHECK(layout_copy_count() == 0);
    // The bfloat16 casts of the weights kept their layout, and the gradients arrive in float32 and
    // channels-last, as the weights are.
    for (const auto& [name, p] : net->named_parameters()) {
      INFO(name);
      REQUIRE(p.grad().defined());
      CHECK(p.grad().dtype() == DType::Float32);
      if (p.dim() == 4) CHECK(p.grad().is_contiguous(MemoryFormat::ChannelsLast));
    }
    opt.zero_grad();
  }
}
