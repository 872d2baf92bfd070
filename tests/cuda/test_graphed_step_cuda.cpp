// --cuda-graph as the examples run it (examples/graphed_step.h): the examples' TrainStep (autocast,
// GradScaler, gradient accumulation, clipping, AdamW with a warmup-cosine schedule) on a small GPT
// with dropout, run eagerly and through GraphedStep from the same seed. The graphed run must give
// the eager run's losses and weights bit for bit, including the eager step it takes for a batch of
// another shape in the middle, and must really have replayed a graph; also under DDP over NCCL.
#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "dist/ddp.h"
#include "dist/process_group.h"
#include "examples/graphed_step.h"
#include "examples/mixed_precision.h"
#include "nn/optim/adamw.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/transformer.h"

using namespace kiln;

namespace {

constexpr int kSteps = 9;
constexpr int kShortStep = 6;  // this step's batch has 6 rows instead of 8: an eager step

nn::GPTConfig small_gpt() {
  nn::GPTConfig cfg;
  cfg.vocab_size = 40;
  cfg.block_size = 16;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 32;
  cfg.dropout = 0.1;
  return cfg;
}

struct Outcome {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
  int64_t replays = 0, eager_steps = 0, optimizer_steps = 0;
  size_t nodes = 0;
};

// kSteps batches of 8 rows of 16 tokens (inputs, targets), the kShortStep-th of 6 rows.
std::vector<std::pair<Tensor, Tensor>> token_batches(uint64_t seed) {
  manual_seed(seed);
  std::vector<std::pair<Tensor, Tensor>> batches;
  const TensorOptions i64(DType::Int64, Device::cuda());
  for (int i = 1; i <= kSteps; ++i) {
    const int64_t rows = i == kShortStep ? 6 : 8;
    batches.emplace_back(randint(0, 40, {rows, 16}, i64), randint(0, 40, {rows, 16}, i64));
  }
  return batches;
}

// kSteps steps over `batches`, eagerly or through a GraphedStep, from seed 11; with `group`, under
// DistributedDataParallel over it (small buckets: several all-reduces per backward).
Outcome train(const examples::PrecisionOptions& p, const std::vector<std::pair<Tensor, Tensor>>& batches,
              bool graph, dist::ProcessGroup* group = nullptr) {
  const Device cuda = Device::cuda();
  manual_seed(11);
  auto model = std::make_shared<nn::GPT>(small_gpt());
  model->to(cuda);
  model->train();
  std::optional<dist::DistributedDataParallel> ddp;
  if (group) {
    dist::DDPOptions o;
    o.bucket_bytes = 16 << 10;
    ddp.emplace(model, *group, o);
    REQUIRE(ddp->buckets().size() > 2);
  }
  nn::optim::AdamW optimizer(nn::optim::decay_groups(model->named_parameters(), 3e-3, 0.1), {0.9, 0.95});
  nn::optim::WarmupCosine schedule(optimizer, 3e-3, 2, kSteps, 3e-4);
  examples::TrainStep train_step(p, cuda, optimizer, model->parameters(), /*grad_clip=*/1.0);
  if (ddp) train_step.set_ddp(&*ddp);
  std::optional<examples::GraphedStep> graphed;
  if (graph) graphed.emplace(cuda, examples::kGraphWarmupSteps, [&optimizer] { optimizer.count_replayed_step(); });
  auto step = [&](const std::vector<Tensor>& in) {
    return train_step.run(in[0].size(0), [&](int64_t start, int64_t len) {
      return model->loss(in[0].narrow(0, start, len), in[1].narrow(0, start, len));
    });
  };
  Outcome out;
  for (const auto& [x, y] : batches) {
    const Tensor loss = graphed ? graphed->run({x, y}, step) : step({x, y});
    schedule.step();
    out.losses.push_back(loss.item<float>());
  }
  for (const auto& [name, w] : model->named_parameters()) out.weights.push_back(w.to_vector<float>());
  out.optimizer_steps = optimizer.step_count();
  if (graphed) {
    out.replays = graphed->replays();
    out.eager_steps = graphed->eager_steps();
    out.nodes = graphed->graph_nodes();
  }
  return out;
}

}  // namespace

TEST_CASE("GraphedStep: a graphed training run equals the eager one bit for bit", "[cuda][graph]") {
  REQUIRE(cuda::is_available());
  const std::string amp = GENERATE(std::string("off"), std::string("bf16"), std::string("fp16"));
  const int64_t accum = GENERATE(int64_t{1}, int64_t{2});
  INFO("amp " << amp << ", grad-accum " << accum);
  examples::PrecisionOptions p;
  p.amp = amp;
  p.grad_accum = accum;
  p.cuda_graph = true;

  const std::vector<std::pair<Tensor, Tensor>> batches = token_batches(5);
  const Outcome eager = train(p, batches, /*graph=*/false);
  const Outcome graphed = train(p, batches, /*graph=*/true);
  CHECK(graphed.losses == eager.losses);
  REQUIRE(graphed.weights.size() == eager.weights.size());
  for (size_t i = 0; i < eager.weights.size(); ++i) {
    INFO("parameter " << i);
    CHECK(graphed.weights[i] == eager.weights[i]);
  }
  // The host's step count (saved in checkpoints) follows the replays.
  CHECK(eager.optimizer_steps == kSteps);
  CHECK(graphed.optimizer_steps == eager.optimizer_steps);
  // Steps 1-3 warm up, 4 captures and replays, 6 runs eagerly, the rest replay.
  CHECK(graphed.replays == kSteps - examples::kGraphWarmupSteps - 1);
  CHECK(graphed.eager_steps == 1);
  CHECK(graphed.nodes > 10);
}

// The same under DDP over NCCL (a group of one: NCCL takes one rank per GPU). The graph captures
// the all-reduces with the step: each is forked onto the communication stream by an event and
// joined back by another, which capture records as edges of the graph. A group of one averages
// over one rank, so the gradients, and the run, must equal the eager DDP run bit for bit.
TEST_CASE("GraphedStep: a graphed DDP run over NCCL equals the eager one bit for bit", "[cuda][graph][nccl]") {
  REQUIRE(cuda::is_available());
  REQUIRE(dist::nccl_available());
  dist::ProcessGroup& group = dist::nccl_world();
  const int64_t accum = GENERATE(int64_t{1}, int64_t{2});
  INFO("grad-accum " << accum);
  examples::PrecisionOptions p;
  p.amp = "bf16";
  p.grad_accum = accum;
  p.cuda_graph = true;
  const std::vector<std::pair<Tensor, Tensor>> batches = token_batches(6);
  const Outcome eager = train(p, batches, /*graph=*/false, &group);
  const Outcome graphed = train(p, batches, /*graph=*/true, &group);
  CHECK(graphed.losses == eager.losses);
  REQUIRE(graphed.weights.size() == eager.weights.size());
  for (size_t i = 0; i < eager.weights.size(); ++i) {
    INFO("parameter " << i);
    CHECK(graphed.weights[i] == eager.weights[i]);
  }
  CHECK(graphed.replays == kSteps - examples::kGraphWarmupSteps - 1);
  CHECK(graphed.eager_steps == 1);
}

TEST_CASE("GraphedStep: refuses the CPU and a warm-up of no steps", "[cuda][graph]") {
  CHECK_THROWS_AS(examples::GraphedStep(Device::cpu(), 3), DeviceError);
  CHECK_THROWS_AS(examples::GraphedStep(Device::cuda(), 0), Error);
}
