// GradScaler on the GPU: the skip, backoff and growth, scaled-equals-unscaled and state_dict checks
// of tests/nn/grad_scaler_checks.h (which the CPU test runs too) on CUDA tensors; CPU-vs-GPU parity
// of the check-and-unscale op (every floating dtype, chunk boundaries, a non-finite value in each
// bucket) and of the scale update; and a whole training step with the scaler (forward, scale,
// backward, unscale_, clip, step, update) captured as a CUDA graph: a capture fails on any host
// synchronization, so it proves the scaler never waits on the host, and replays, some with an
// overflowing loss, must match eager steps bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "core/ops/foreach.h"
#include "nn/amp/grad_scaler.h"
#include "nn/layers.h"
#include "nn/optim/adamw.h"
#include "nn/optim/clip.h"
#include "nn/optim/sgd.h"
#include "tests/nn/grad_scaler_checks.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;
using kiln::nn::amp::GradScaler;
using namespace kiln::test;

namespace {

const Device kCuda = Device::cuda(0);

}  // namespace

TEST_CASE("cuda GradScaler: a non-finite gradient skips the step bitwise and halves the scale", "[cuda][amp]") {
  require_cuda();
  const double bad = GENERATE(values({kInf, -kInf, kNaN}));
  const bool unscale_first = GENERATE(false, true);
  test::check_non_finite_grad_skips_the_step(kCuda, bad, unscale_first);
}

TEST_CASE("cuda GradScaler: the scale grows after growth_interval clean steps and backs off", "[cuda][amp]") {
  require_cuda();
  test::check_scale_growth_and_backoff(kCuda);
}

TEST_CASE("cuda GradScaler: scaled training equals the same unscaled training bit for bit", "[cuda][amp]") {
  require_cuda();
  test::check_scaled_training_matches_unscaled(kCuda, /*unscale_first=*/true, /*clip=*/true);
}

TEST_CASE("cuda foreach_non_finite_check_and_unscale_ matches the CPU", "[cuda][amp][foreach]") {
  require_cuda();
  manual_seed(12);
  const std::vector<DType> dtypes = {DType::Float32, DType::Float16, DType::BFloat16,
                                     DType::Float64, DType::Float32, DType::Float16};
  // 70000 and 140000 elements cross chunk boundaries; odd sizes, a 0-d and an empty tensor.
  const std::vector<Shape> shapes = {{70000}, {3, 5}, {7}, {2, 2}, {}, {140000}, {0, 4}};
  const std::vector<DType> dt = {dtypes[0], dtypes[1], dtypes[2], dtypes[3], dtypes[4], dtypes[5], DType::Float32};
  const int bad = GENERATE(-1, 0, 1, 2, 3, 4, 5);
  const bool unscale = GENERATE(true, false);
  INFO("bad value in tensor " << bad << (unscale ? ", unscale" : ", check only"));
  TensorList cpu, gpu;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor t = mul(randn(shapes[i]), 1000.0).to(dt[i]);
    if (static_cast<int>(i) == bad) t.view({-1}).narrow(0, t.numel() - 1, 1).fill_(i % 2 ? kNaN : -kInf);
    cpu.push_back(t);
    gpu.push_back(t.to(kCuda));
  }
  // 1/3 is not a power of two: the products round, the same way on both devices.
  Tensor inv_cpu = full({}, 1.0 / 3.0), found_cpu = zeros({});
  Tensor inv_gpu = inv_cpu.to(kCuda), found_gpu = zeros({}, TensorOptions(DType::Float32, kCuda));
  foreach_non_finite_check_and_unscale_(cpu, found_cpu, unscale ? inv_cpu : Tensor());
  foreach_non_finite_check_and_unscale_(gpu, found_gpu, unscale ? inv_gpu : Tensor());
  CHECK(found_cpu.item<float>() == (bad >= 0 ? 1.0f : 0.0f));
  CHECK(same_bits(found_cpu, found_gpu));
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("tensor " << i << " " << dtype_name(dt[i]));
    CHECK(same_bits(cpu[i], gpu[i]));
  }
}

TEST_CASE("cuda amp_update_scale_ matches the CPU", "[cuda][amp][foreach]") {
  require_cuda();
  struct Case {
    float scale;
    int32_t tracker;
    float found;
  };
  // Growth, backoff, an ordinary count, and a growth that would overflow float32.
  const std::vector<Case> cases = {{1024, 4, 0}, {1024, 4, 1}, {3.0f, 1, 0}, {3e38f, 4, 0}, {1e-30f, 2, 1}};
  for (const Case& c : cases) {
    INFO("scale " << c.scale << " tracker " << c.tracker << " found_inf " << c.found);
    Tensor s_cpu = full({}, c.scale), t_cpu = full({}, c.tracker, DType::Int32), f_cpu = full({}, c.found);
    Tensor s_gpu = s_cpu.to(kCuda), t_gpu = t_cpu.to(kCuda), f_gpu = f_cpu.to(kCuda);
    amp_update_scale_(s_cpu, t_cpu, f_cpu, 3.0, 0.3, 5);
    amp_update_scale_(s_gpu, t_gpu, f_gpu, 3.0, 0.3, 5);
    CHECK(same_bits(s_cpu, s_gpu));
    CHECK(same_bits(t_cpu, t_gpu));
  }
}

TEST_CASE("cuda GradScaler: tensors on another device than the scale are refused", "[cuda][amp]") {
  require_cuda();
  GradScaler scaler;
  Tensor w = ones({2}).set_requires_grad(true);  // on the CPU
  nn::optim::SGD opt({w}, 0.5);
  (void)scaler.scale(ones({}, TensorOptions(DType::Float32, kCuda)));  // the scale goes to the GPU
  w.set_grad(ones({2}));
  CHECK_THROWS_AS(scaler.unscale_(opt), DeviceError);
  CHECK_THROWS_WITH(scaler.unscale_(opt),
                    Catch::Contains("GradScaler::unscale_") && Catch::Contains("cpu") && Catch::Contains("cuda:0"));
  CHECK_THROWS_WITH(scaler.step(opt), Catch::Contains("GradScaler::step") && Catch::Contains("cuda:0"));
  CHECK_THROWS_AS(scaler.scale(ones({})), DeviceError);
  CHECK(w.to_vector_double() == std::vector<double>{1.0, 1.0});
}

TEST_CASE("cuda GradScaler: a state_dict from the GPU resumes on the GPU", "[cuda][amp]") {
  require_cuda();
  GradScaler resumed;
  test::check_state_dict_round_trip(kCuda, resumed);
}

namespace {

// One captured or eager step of the scaler's whole loop. `overflow` is a 0-d device factor of the
// loss: 1, or inf to make every gradient non-finite; it is set between replays, never captured.
struct ScaledRun {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<nn::optim::AdamW> opt;
  std::unique_ptr<GradScaler> scaler;
  Tensor overflow;
};

void scaled_step(ScaledRun& r, const Tensor& x, const Tensor& y) {
  r.opt->zero_grad(false);  // in place: the gradient buffers stay where the graph expects them
  Tensor loss = mul(cross_entropy(r.model->forward(x), y), r.overflow);
  r.scaler->scale(loss).backward();
  r.scaler->unscale_(*r.opt);
  nn::optim::clip_grad_norm_(r.model->parameters(), 1.0);
  r.scaler->step(*r.opt);
  r.scaler->update();
}

void prepare(ScaledRun& r, const Tensor& x, const Tensor& y) {
  manual_seed(7);
  r.model = make_mlp(32, 64, 10);
  r.model->to(kCuda);
  r.opt = std::make_unique<nn::optim::AdamW>(r.model->parameters(), 1e-3);
  r.scaler = std::make_unique<GradScaler>(small_interval(2));
  r.overflow = ones({}, TensorOptions(DType::Float32, kCuda));
  // Warm-up outside any capture: optimizer state, gradient buffers, the scaler's device tensors
  // and per-optimizer flag, library handles and the allocator cache.
  for (int i = 0; i < 3; ++i) scaled_step(r, x, y);
}

}  // namespace

TEST_CASE("cuda graph: a training step with GradScaler captured and replayed matches eager steps",
          "[cuda][graph][amp]") {
  require_cuda();
  manual_seed(1);
  const Tensor x = randn({64, 32}).to(kCuda);
  const Tensor y = randint(0, 10, {64}).to(kCuda);
  // Steps 2 and 5 overflow: the scale backs off there and grows after two clean steps otherwise.
  const std::vector<bool> overflow = {false, false, true, false, false, true, false, false};

  ScaledRun eager, graphed;
  prepare(eager, x, y);
  for (bool o : overflow) {
    eager.overflow.fill_(o ? kInf : 1.0);
    scaled_step(eager, x, y);
  }
  cuda::synchronize();

  prepare(graphed, x, y);
  cuda::synchronize();
  const TensorList before = clones(graphed.model->parameters());
  cuda::CudaGraph graph;
  graph.capture([&] { scaled_step(graphed, x, y); }, size_t{256} << 20);
  REQUIRE(graph.captured());
  // Capturing ran nothing: the parameters are still those of the warm-up.
  CHECK(same_bits(graphed.model->parameters(), before));
  std::vector<double> scales;
  for (bool o : overflow) {
    graphed.overflow.fill_(o ? kInf : 1.0);
    graph.replay();
    scales.push_back(graphed.scaler->get_scale());
  }
  cuda::synchronize();
  CHECK(same_bits(eager.model->parameters(), graphed.model->parameters()));
  CHECK(same_bits(eager.opt->state_dict(), graphed.opt->state_dict(), "step"));
  CHECK(same_bits(eager.scaler->state_dict(), graphed.scaler->state_dict()));
  // After the warm-up (3 clean steps at interval 2): scale 2048, tracker 1. Each replay then
  // updates the scale on the device as an eager step would.
  const std::vector<double> expected = {4096, 4096, 2048, 2048, 4096, 2048, 2048, 4096};
  CHECK(scales == expected);
}
