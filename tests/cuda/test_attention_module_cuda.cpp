// MultiheadAttention and the Transformer on the GPU against the same modules on the CPU, in
// float32: both attention paths (need_weights on: the scores as tensors; off: the fused attention
// kernel), every mask kind MultiheadAttention takes, a query that sees no key, and the gradients of
// every parameter through a Transformer step. The CPU modules have exact tests of their own
// (tests/nn/test_attention_module.cpp, test_encoder_decoder.cpp); this checks the CUDA kernels
// they are made of agree.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "nn/attention.h"
#include "nn/encoder_decoder.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;

namespace {

double max_diff(const Tensor& gpu, const Tensor& cpu) {
  return max(abs(gpu.to(Device::cpu()).to(DType::Float64) - cpu.to(DType::Float64))).item<double>();
}

}  // namespace

TEST_CASE("cuda MultiheadAttention equals the CPU's on both paths, with every mask kind", "[cuda][attention]") {
  test::require_cuda();
  const Device gpu = Device::cuda(0);
  manual_seed(5);
  nn::MultiheadAttention cpu(16, 4, {.kdim = 12, .vdim = 8});
  nn::MultiheadAttention dev(16, 4, {.kdim = 12, .vdim = 8});
  dev.load_state_dict(cpu.state_dict());
  dev.to(gpu);
  const Tensor q = randn({5, 3, 16}), k = randn({7, 3, 12}), v = randn({7, 3, 8});  // [L, N, E]
  Tensor pad = zeros({3, 7}, TensorOptions(DType::Bool));
  pad.narrow(0, 1, 1).narrow(1, 5, 2).fill_(true);
  pad.narrow(0, 2, 1).fill_(true);  // batch 2 sees no key
  const Tensor additive = randn({5, 7});
  const Tensor per_head = gt(randn({12, 5, 7}), Scalar(1.0));
  struct Case {
    std::string name;
    Tensor key_padding, attn;
    bool causal;
  };
  const std::vector<Case> cases = {{"no mask", Tensor(), Tensor(), false},
                                   {"bool padding", pad, Tensor(), false},
                                   {"float [L, S] and padding", pad, additive, false},
                                   {"bool [N*H, L, S]", Tensor(), per_head, false},
                                   {"causal", Tensor(), Tensor(), true}};
  for (const Case& c : cases) {
    for (const bool need_weights : {true, false}) {
      INFO(c.name << ", need_weights " << need_weights);
      auto on = [&](const Tensor& t) { return t.defined() ? t.to(gpu) : t; };
      Tensor qc = q.clone().set_requires_grad(true), qg = q.to(gpu).set_requires_grad(true);
      auto [out_c, w_c] = cpu.forward(qc, k, v, c.key_padding, need_weights, c.attn, true, c.causal);
      auto [out_g, w_g] = dev.forward(qg, on(k), on(v), on(c.key_padding), need_weights, on(c.attn), true, c.causal);
      CHECK(out_g.device() == gpu);
      CHECK(max_diff(out_g, out_c) < 1e-4);
      if (need_weights) CHECK(max_diff(w_g, w_c) < 1e-5);
      out_c.sum().backward();
      out_g.sum().backward();
      CHECK(max_diff(qg.grad(), qc.grad()) < 1e-4);
    }
  }
}

TEST_CASE("cuda Transformer: a training step's loss and every gradient equal the CPU's", "[cuda][attention]") {
  test::require_cuda();
  const Device gpu = Device::cuda(0);
  manual_seed(9);
  const nn::TransformerOptions options{.d_model = 16,
                                       .nhead = 4,
                                       .num_encoder_layers = 2,
                                       .num_decoder_layers = 2,
                                       .layer = {.dim_feedforward = 32, .dropout = 0.0, .batch_first = true}};
  nn::Transformer cpu(options), dev(options);
  dev.load_state_dict(cpu.state_dict());
  dev.to(gpu);
  const Tensor src = randn({4, 6, 16}), tgt = randn({4, 5, 16});
  Tensor pad = zeros({4, 6}, TensorOptions(DType::Bool));
  pad.narrow(0, 3, 1).narrow(1, 4, 2).fill_(true);
  const Tensor causal = nn::Transformer::generate_square_subsequent_mask(5);
  const Tensor loss_c = cpu.forward(src, tgt, Tensor(), causal, Tensor(), pad, Tensor(), pad).pow(2).mean();
  const Tensor loss_g =
      dev.forward(src.to(gpu), tgt.to(gpu), Tensor(), causal.to(gpu), Tensor(), pad.to(gpu), Tensor(), pad.to(gpu))
          .pow(2)
          .mean();
  CHECK(std::abs(loss_g.item<double>() - loss_c.item<double>()) < 1e-4);
  loss_c.backward();
  loss_g.backward();
  const auto pc = cpu.named_parameters(), pg = dev.named_parameters();
  REQUIRE(pc.size() == pg.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    INFO(pc[i].first);
    REQUIRE(pg[i].second.grad().defined());
    const double scale = max(abs(pc[i].second.grad())).item<double>() + 1e-6;
    CHECK(max_diff(pg[i].second.grad(), pc[i].second.grad()) < 1e-3 * scale);
  }
}
