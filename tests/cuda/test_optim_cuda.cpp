// The optimizers on the GPU against the same optimizers on the CPU: SGD (momentum, Nesterov,
// maximize), Adam (L2 decay, amsgrad, maximize) and AdamW (amsgrad), five steps from the same
// weights and gradients, float32 parameters and bfloat16/float16 ones with float32 state (the
// mixed (parameter, state) pairs the op table's parity rows do not reach), per-group options and a
// parameter without a gradient in some steps. Both devices run one element function; they differ
// where nvcc contracts a multiply and an add into an FMA. Then the eight optimizers composed of
// tensor ops (RMSprop, Adagrad, Adamax, RAdam, NAdam, Adadelta, Rprop, ASGD), their scalar states
// included, under the same comparison; and LBFGS's line search on the GPU against the CPU's.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "core/kiln.h"
#include "nn/optim/adam.h"
#include "nn/optim/adamw.h"
#include "nn/optim/classic.h"
#include "nn/optim/composed.h"
#include "nn/optim/lbfgs.h"
#include "nn/optim/sgd.h"
#include "tests/cuda/require_cuda.h"
#include "tests/nn/optim_checks.h"

using namespace kiln;
using namespace kiln::nn::optim;
using kiln::test::require_cuda;

namespace {

const Device kCuda = Device::cuda(0);

using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

// The largest difference between the CPU's and the GPU's parameters and states, relative to the
// CPU's magnitude (1 below it).
double run_both(DType dtype, const Factory& make) {
  manual_seed(5);
  const std::vector<Shape> shapes = {{7, 33}, {70000}, {5}};
  TensorList cpu, gpu;
  for (const Shape& s : shapes) {
    Tensor p = randn(s).to(dtype);
    Tensor q = p.to(kCuda);
    p.set_requires_grad(true);
    q.set_requires_grad(true);
    cpu.push_back(p);
    gpu.push_back(q);
  }
  auto groups = [](const TensorList& ps) {
    ParamGroup a{{ps[0], ps[1]}, 0.01, 0.05, {}}, b{{ps[2]}, 0.02, 0.0, {{"maximize", 1.0}}};
    return std::vector<ParamGroup>{a, b};
  };
  std::unique_ptr<Optimizer> oc = make(groups(cpu)), og = make(groups(gpu));
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < cpu.size(); ++i) {
      // Parameter 2 has no gradient in steps 1 and 2: its state and step count stay behind.
      const bool none = i == 2 && (step == 1 || step == 2);
      Tensor g = none ? Tensor() : (randn(shapes[i]) * (1.0 + step)).to(dtype);
      cpu[i].set_grad(g);
      gpu[i].set_grad(none ? Tensor() : g.to(kCuda));
    }
    oc->step();
    og->step();
  }
  double worst = 0.0;
  auto compare = [&](const Tensor& a, const Tensor& b) {
    const Tensor x = a.to(DType::Float64), y = b.to(Device::cpu()).to(DType::Float64);
    const double d = max(abs(x - y) / (abs(x) + 1.0)).item<double>();
    worst = std::max(worst, d);
  };
  for (size_t i = 0; i < cpu.size(); ++i) compare(cpu[i], gpu[i]);
  const auto sc = oc->state_dict(), sg = og->state_dict();
  REQUIRE(sc.size() == sg.size());
  for (const auto& [name, t] : sc) {
    INFO(name);
    REQUIRE(sg.count(name) == 1);
    if (name.rfind("state.", 0) == 0) compare(t, sg.at(name));
  }
  return worst;
}

}  // namespace

TEST_CASE("cuda optimizers: SGD, Adam and AdamW steps equal the CPU's, amsgrad and maximize included",
          "[cuda][optim]") {
  require_cuda();
  const std::vector<std::pair<const char*, Factory>> optimizers = {
      {"SGD nesterov", [](std::vector<ParamGroup> g) { return std::make_unique<SGD>(std::move(g), 0.9, 0.0, true); }},
      {"SGD maximize with dampening",
       [](std::vector<ParamGroup> g) { return std::make_unique<SGD>(std::move(g), 0.9, 0.2, false, true); }},
      {"Adam with L2 decay and amsgrad",
       [](std::vector<ParamGroup> g) {
         return std::make_unique<Adam>(std::move(g), std::make_pair(0.9, 0.6), 1e-8, true);
       }},
      {"Adam maximize",
       [](std::vector<ParamGroup> g) {
         return std::make_unique<Adam>(std::move(g), std::make_pair(0.9, 0.99), 1e-8, false, true);
       }},
      {"AdamW amsgrad",
       [](std::vector<ParamGroup> g) {
         return std::make_unique<AdamW>(std::move(g), std::make_pair(0.9, 0.6), 1e-8, true);
       }},
  };
  for (const auto& [name, make] : optimizers) {
    // float32: FMA contraction only. 16-bit parameters are rounded after each step, so a
    // contracted ulp may round to the neighbouring 16-bit value: one ulp of bfloat16 (2^-8) or
    // float16 (2^-11) relative.
    for (const auto& [dtype, tol] : {std::pair{DType::Float32, 1e-5}, std::pair{DType::BFloat16, 1.0 / 128},
                                     std::pair{DType::Float16, 1.0 / 1024}}) {
      INFO(name << ", " << dtype_name(dtype));
      CHECK(run_both(dtype, make) <= tol);
    }
  }
}

TEST_CASE("cuda optimizers: the composed optimizers' steps equal the CPU's, scalar states included", "[cuda][optim]") {
  require_cuda();
  using Groups = std::vector<ParamGroup>;
  const std::vector<std::pair<const char*, Factory>> optimizers = {
      {"RMSprop centered with momentum",
       [](Groups g) { return std::make_unique<RMSprop>(std::move(g), 0.9, 1e-8, 0.5, true); }},
      {"Adagrad with lr_decay", [](Groups g) { return std::make_unique<Adagrad>(std::move(g), 0.1, 0.25); }},
      {"Adamax", [](Groups g) { return std::make_unique<Adamax>(std::move(g)); }},
      // beta2 0.6: rho_t passes 5 within the five steps, so both of RAdam's branches run.
      {"RAdam decoupled",
       [](Groups g) { return std::make_unique<RAdam>(std::move(g), std::make_pair(0.9, 0.6), 1e-8, true); }},
      {"NAdam decoupled",
       [](Groups g) { return std::make_unique<NAdam>(std::move(g), std::make_pair(0.9, 0.99), 1e-8, 0.4, true); }},
      {"Adadelta", [](Groups g) { return std::make_unique<Adadelta>(std::move(g)); }},
      {"Rprop",
       [](Groups g) {
         for (ParamGroup& group : g) group.weight_decay = 0.0;  // Rprop has none
         return std::make_unique<Rprop>(std::move(g));
       }},
      {"ASGD averaging from step 3", [](Groups g) { return std::make_unique<ASGD>(std::move(g), 0.1, 0.75, 2.0); }},
  };
  for (const auto& [name, make] : optimizers) {
    // float32: each op rounds once on either device, a few ulps over a step's dozen ops; 16-bit
    // parameters as above.
    for (const auto& [dtype, tol] : {std::pair{DType::Float32, 1e-5}, std::pair{DType::BFloat16, 1.0 / 128},
                                     std::pair{DType::Float16, 1.0 / 1024}}) {
      INFO(name << ", " << dtype_name(dtype));
      CHECK(run_both(dtype, make) <= tol);
    }
  }
}

TEST_CASE("cuda optimizers: LBFGS with its line search follows the CPU's iterations", "[cuda][optim]") {
  require_cuda();
  // Rosenbrock's function from (-1.5, 2) in float64, three steps of five iterations: the GPU's
  // dot products sum in another order, so the points differ by rounding only while every branch
  // of the line search goes the same way.
  std::vector<std::vector<double>> result;
  for (const Device device : {Device::cpu(), kCuda}) {
    Tensor x = tensor(std::vector<double>{-1.5, 2.0}).to(device);
    x.set_requires_grad(true);
    LBFGS opt({x}, 1.0, 5, 20, 1e-10, 1e-12, 4, LineSearch::StrongWolfe);
    for (int s = 0; s < 3; ++s) opt.step([&] { return kiln::test::rosenbrock(opt, x); });
    CHECK(opt.state_dict().at("lbfgs.d").device() == device);
    result.push_back(x.to_vector<double>());
  }
  for (size_t i = 0; i < 2; ++i) CHECK(result[1][i] == Approx(result[0][i]).epsilon(1e-9));
}
