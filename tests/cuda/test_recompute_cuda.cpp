// Activation recompute on the GPU: a GPT (with dropout) and a ResNet get the same gradient bits with
// and without recompute, the device's random stream ends where it would, the peak of allocated
// memory over a training step drops, and a captured training step with recompute replays the
// eager steps bit for bit (with dropout too: the recompute rewinds the capture's draw count and
// draws forward's masks again).
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "nn/checkpoint.h"
#include "nn/optim/adamw.h"
#include "nn/resnet.h"
#include "nn/transformer.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;
using kiln::test::require_cuda;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  return a.to(Device::cpu()).to_vector<float>() == b.to(Device::cpu()).to_vector<float>();
}

void check_same_grads(const nn::Module& a, const nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].first);
    REQUIRE(pa[i].second.grad().defined());
    REQUIRE(pb[i].second.grad().defined());
    CHECK(same_bits(pa[i].second.grad(), pb[i].second.grad()));
  }
}

nn::GPTConfig gpt_config(int64_t n_layer, int64_t n_embd, int64_t block_size, double dropout) {
  nn::GPTConfig c;
  c.vocab_size = 64;
  c.block_size = block_size;
  c.n_layer = n_layer;
  c.n_head = 4;
  c.n_embd = n_embd;
  c.dropout = dropout;
  return c;
}

// A plain GPT and a recomputing twin with its weights, both on the GPU.
std::pair<std::shared_ptr<nn::GPT>, std::shared_ptr<nn::GPT>> twin_gpts(nn::GPTConfig cfg, uint64_t seed) {
  manual_seed(seed);
  cfg.recompute = false;
  auto plain = std::make_shared<nn::GPT>(cfg);
  cfg.recompute = true;
  auto recomputed = std::make_shared<nn::GPT>(cfg);
  recomputed->load_state_dict(plain->state_dict());
  plain->to(Device::cuda());
  recomputed->to(Device::cuda());
  return {plain, recomputed};
}

}  // namespace

TEST_CASE("recompute on CUDA: a GPT with dropout gets the same gradient bits and random stream", "[cuda][recompute]") {
  require_cuda();
  auto [plain, recomputed] = twin_gpts(gpt_config(3, 64, 32, 0.1), 4);
  Tensor idx = randint(0, 64, {4, 32}).to(Device::cuda());
  Tensor targets = randint(0, 64, {4, 32}).to(Device::cuda());

  manual_seed(40);
  Tensor loss_plain = plain->loss(idx, targets);
  loss_plain.backward();
  Tensor after_plain = randn({64}, TensorOptions(DType::Float32, Device::cuda()));
  manual_seed(40);
  Tensor loss_recomputed = recomputed->loss(idx, targets);
  loss_recomputed.backward();
  Tensor after_recomputed = randn({64}, TensorOptions(DType::Float32, Device::cuda()));

  CHECK(same_bits(loss_plain, loss_recomputed));
  check_same_grads(*plain, *recomputed);
  CHECK(same_bits(after_plain, after_recomputed));
}

TEST_CASE("recompute on CUDA: a ResNet gets the same gradient bits and BatchNorm statistics", "[cuda][recompute]") {
  require_cuda();
  nn::ResNetConfig cfg;
  cfg.widths = {8, 16, 16};
  cfg.blocks = {2, 1, 1};
  manual_seed(6);
  auto plain = std::make_shared<nn::ResNet>(cfg);
  cfg.recompute = true;
  auto recomputed = std::make_shared<nn::ResNet>(cfg);
  recomputed->load_state_dict(plain->state_dict());
  plain->to(Device::cuda());
  recomputed->to(Device::cuda());
  Tensor x = randn({8, 3, 32, 32}).to(Device::cuda());
  Tensor labels = randint(0, 10, {8}).to(Device::cuda());
  Tensor xa = x.clone().set_requires_grad(true), xb = x.clone().set_requires_grad(true);

  cross_entropy(plain->forward(xa), labels).backward();
  cross_entropy(recomputed->forward(xb), labels).backward();
  REQUIRE(xb.grad().defined());
  CHECK(same_bits(xa.grad(), xb.grad()));
  check_same_grads(*plain, *recomputed);
  auto ba = plain->named_buffers(), bb = recomputed->named_buffers();
  REQUIRE(ba.size() == bb.size());
  for (size_t i = 0; i < ba.size(); ++i) {
    INFO(ba[i].first);
    CHECK(ba[i].second.to(Device::cpu()).to_vector_double() == bb[i].second.to(Device::cpu()).to_vector_double());
  }
}

TEST_CASE("recompute on CUDA: the peak of allocated memory over a GPT step drops", "[cuda][recompute]") {
  require_cuda();
  auto [plain, recomputed] = twin_gpts(gpt_config(8, 256, 256, 0.0), 5);
  Tensor idx = randint(0, 64, {8, 256}).to(Device::cuda());
  Tensor targets = randint(0, 64, {8, 256}).to(Device::cuda());

  // Bytes allocated at the peak of one forward and backward, above what was allocated before it
  // (the parameters): activations kept for backward, gradients, and the backward's temporaries.
  auto step_peak = [&](nn::GPT& m) {
    m.zero_grad();
    cuda::synchronize();
    const int64_t before = cuda::memory_stats().allocated_bytes;
    cuda::reset_peak_memory_stats();
    m.loss(idx, targets).backward();
    cuda::synchronize();
    return cuda::memory_stats().peak_allocated_bytes - before;
  };
  step_peak(*plain);  // warm-up: library handles, workspaces and cached algorithms outside the count
  step_peak(*recomputed);
  const int64_t peak_plain = step_peak(*plain);
  const int64_t peak_recomputed = step_peak(*recomputed);
  INFO("step peak above the parameters: " << peak_plain << " bytes without recompute, " << peak_recomputed
                                          << " with");
  CHECK(peak_recomputed > 0);
  CHECK(2 * peak_recomputed < peak_plain);
  check_same_grads(*plain, *recomputed);
}

namespace {

// Trains `model` with AdamW on a fixed batch: `steps` eager steps, or `steps` replays of one
// captured step after three eager warm-up steps (optimizer state, gradient buffers, handles and the
// allocator cache are created outside the capture). Returns the parameters afterwards, on the host.
std::vector<std::vector<float>> train(nn::GPT& model, const Tensor& idx, const Tensor& targets, int steps,
                                      bool graphed) {
  nn::optim::AdamW opt(model.parameters(), 1e-3);
  auto step = [&] {
    opt.zero_grad(false);  // in place, so the gradient buffers stay where the graph wrote them
    model.loss(idx, targets).backward();
    opt.step();
  };
  if (!graphed) {
    for (int i = 0; i < steps + 3; ++i) step();
  } else {
    for (int i = 0; i < 3; ++i) step();
    cuda::synchronize();
    cuda::CudaGraph graph;
    graph.capture(step, size_t{256} << 20);
    for (int i = 0; i < steps; ++i) graph.replay();
  }
  cuda::synchronize();
  std::vector<std::vector<float>> out;
  for (const Tensor& p : model.parameters()) out.push_back(p.to(Device::cpu()).to_vector<float>());
  return out;
}

void check_captured_recompute(double dropout) {
  require_cuda();
  auto [plain, recomputed] = twin_gpts(gpt_config(2, 32, 16, dropout), 9);
  Tensor idx = randint(0, 64, {4, 16}).to(Device::cuda());
  Tensor targets = randint(0, 64, {4, 16}).to(Device::cuda());
  manual_seed(90);
  const auto eager = train(*plain, idx, targets, 3, false);
  const PhiloxState after_eager = default_generator(Device::cuda()).state();
  manual_seed(90);
  const auto graphed = train(*recomputed, idx, targets, 3, true);
  REQUIRE(eager.size() == graphed.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    INFO("parameter " << i);
    CHECK(eager[i] == graphed[i]);
  }
  CHECK(default_generator(Device::cuda()).state().offset == after_eager.offset);
}

}  // namespace

TEST_CASE("recompute on CUDA: a captured GPT step recomputes its blocks and replays eager steps bit for bit",
          "[cuda][recompute][graph]") {
  // Without dropout the blocks draw nothing: the recompute runs inside the capture.
  check_captured_recompute(0.0);
}

TEST_CASE("recompute on CUDA: a captured GPT step with dropout replays eager steps bit for bit",
          "[cuda][recompute][graph]") {
  // With dropout the recompute inside the capture rewinds the capture's draw count
  // (Generator::position) and replays forward's masks; the graph draws exactly what the eager
  // steps (with recompute) do.
  check_captured_recompute(0.1);
}
