// A whole training step (forward, backward, gradient clipping, AdamW) captured once as a CUDA graph
// in thread-local capture mode and replayed, for a small MLP and a transformer block (with dropout
// too). Any hidden host synchronization or cudaMalloc in the step makes the capture fail, so this
// guards the no-sync rule (docs/architecture.md); the replays must match the same number of eager
// steps bit for bit, random draws included.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>

#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/optim/adamw.h"
#include "nn/optim/clip.h"
#include "nn/transformer.h"

using namespace kiln;

namespace {

struct Run {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<nn::optim::AdamW> opt;
  std::function<Tensor()> loss;  // builds the loss of one step from static inputs
};

// One training step; gradients are zeroed in place (not set to none) so their buffers stay put.
void step(Run& r) {
  r.opt->zero_grad(false);
  Tensor loss = r.loss();
  loss.backward();
  nn::optim::clip_grad_norm_(r.model->parameters(), 1.0);
  r.opt->step();
}

// One transformer block on [4, 16, 32] inputs.
nn::GPTConfig tiny_block(double dropout) {
  nn::GPTConfig cfg;
  cfg.vocab_size = 32;
  cfg.block_size = 16;
  cfg.n_layer = 1;
  cfg.n_head = 2;
  cfg.n_embd = 32;
  cfg.dropout = dropout;
  return cfg;
}

void compare_params(const nn::Module& a, const nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].first);
    std::vector<float> x = pa[i].second.to_vector<float>(), y = pb[i].second.to_vector<float>();
    // The graph replays exactly the kernels of the eager step on the same data.
    CHECK(x == y);
  }
}

// Builds a run: the model on the GPU, AdamW, and three warm-up steps, which create optimizer state,
// gradient buffers, library handles and the allocator cache outside any capture.
template <typename MakeModel, typename MakeLoss> void prepare(Run& r, MakeModel& make_model, MakeLoss& make_loss) {
  manual_seed(7);
  r.model = make_model();
  r.model->to(Device::cuda());
  r.opt = std::make_unique<nn::optim::AdamW>(r.model->parameters(), 1e-3);
  r.loss = make_loss(*r.model);
  for (int i = 0; i < 3; ++i) step(r);
}

// Eager steps first, then the graphed run from the same seed: both draw their random numbers
// (dropout) from the one default generator of the device, so they must not interleave.
template <typename MakeModel, typename MakeLoss>
void check_capture(MakeModel make_model, MakeLoss make_loss, int steps = 5) {
  REQUIRE(cuda::is_available());
  Run eager, graphed;
  prepare(eager, make_model, make_loss);
  for (int i = 0; i < steps; ++i) step(eager);
  cuda::synchronize();
  const PhiloxState after_eager = default_generator(Device::cuda()).state();

  prepare(graphed, make_model, make_loss);
  cuda::synchronize();
  const PhiloxState before_capture = default_generator(Device::cuda()).state();
  cuda::CudaGraph graph;
  graph.capture([&] { step(graphed); }, size_t{256} << 20);
  // Capturing draws nothing from the generator: the replays do.
  CHECK(default_generator(Device::cuda()).state().offset == before_capture.offset);
  for (int i = 0; i < steps; ++i) graph.replay();
  cuda::synchronize();
  compare_params(*eager.model, *graphed.model);
  // The replays advanced the generator exactly as the eager steps did.
  CHECK(default_generator(Device::cuda()).state().offset == after_eager.offset);
}

// A transformer block trained on fixed random [4, 16, 32] inputs toward a fixed random target.
void check_block(const nn::GPTConfig& cfg, uint64_t seed, int steps) {
  manual_seed(seed);
  Tensor x = randn({4, 16, 32}).to(Device::cuda());
  Tensor target = randn({4, 16, 32}).to(Device::cuda());
  check_capture([&] { return std::static_pointer_cast<nn::Module>(std::make_shared<nn::TransformerBlock>(cfg)); },
                [&](nn::Module& m) {
                  auto* block = dynamic_cast<nn::TransformerBlock*>(&m);
                  return std::function<Tensor()>([block, &x, &target] { return mse_loss(block->forward(x), target); });
                },
                steps);
}

}  // namespace

TEST_CASE("cuda graph: an MLP training step captured and replayed matches eager steps", "[cuda][graph]") {
  manual_seed(1);
  Tensor x = randn({64, 32}).to(Device::cuda());
  Tensor y = randint(0, 10, {64}).to(Device::cuda());
  check_capture(
      [] {
        auto m = std::make_shared<nn::Sequential>();
        m->push_back(std::make_shared<nn::Linear>(32, 64));
        m->push_back(std::make_shared<nn::GELU>());
        m->push_back(std::make_shared<nn::Linear>(64, 10));
        return std::static_pointer_cast<nn::Module>(m);
      },
      [&](nn::Module& m) {
        auto* seq = dynamic_cast<nn::Sequential*>(&m);
        return std::function<Tensor()>([seq, &x, &y] { return cross_entropy(seq->forward(x), y); });
      });
}

TEST_CASE("cuda graph: a transformer block training step captured and replayed matches eager steps",
          "[cuda][graph]") {
  check_block(tiny_block(0.0), 2, 5);
}

TEST_CASE("cuda graph: a transformer block step with dropout 0.1 replays three eager steps bit for bit",
          "[cuda][graph]") {
  // Attention and residual dropout: three random ops per step forward.
  check_block(tiny_block(0.1), 3, 3);
}

TEST_CASE("cuda graph: consecutive replays draw different dropout masks", "[cuda][graph]") {
  REQUIRE(cuda::is_available());
  manual_seed(11);
  Tensor ones_in = ones({4096}, TensorOptions(DType::Float32, Device::cuda()));
  Tensor out = zeros({4096}, TensorOptions(DType::Float32, Device::cuda()));
  (void)dropout(ones_in, 0.5);  // warm-up: kernels loaded, allocator cache filled
  cuda::synchronize();
  cuda::CudaGraph graph;
  graph.capture([&] { out.copy_(dropout(ones_in, 0.5)); });
  graph.replay();
  const std::vector<float> first = out.to_vector<float>();
  graph.replay();
  const std::vector<float> second = out.to_vector<float>();
  CHECK(first != second);
  // Each replay's mask is the eager mask of the offset it took: replay the generator by hand.
  const PhiloxState now = default_generator(Device::cuda()).state();
  default_generator(Device::cuda()).set_state(PhiloxState{now.seed, now.offset - 1});
  CHECK(dropout(ones_in, 0.5).to_vector<float>() == second);
}

TEST_CASE("cuda graph: a host synchronization inside the capture is refused", "[cuda][graph]") {
  REQUIRE(cuda::is_available());
  Tensor x = ones({8}).to(Device::cuda());
  cuda::CudaGraph graph;
  CHECK_THROWS_AS(graph.capture([&] { (void)sum(x).item<float>(); }), Error);
}
