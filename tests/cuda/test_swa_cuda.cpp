// Weight averaging with the GPU: an EMA kept on the GPU equals the same EMA kept on the CPU, a
// float64 average on the CPU follows a float32 model on the GPU, and update_bn recomputes a GPU
// BatchNorm's statistics as the CPU's. tests/nn/test_swa.cpp checks the rules exactly on the CPU.
#include <catch2/catch.hpp>

#include <memory>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/norm.h"
#include "nn/optim/swa.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;

namespace {

double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(Device::cpu()).to(DType::Float64) - b.to(Device::cpu()).to(DType::Float64))).item<double>();
}

std::shared_ptr<nn::Sequential> net() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(4, 6), std::make_shared<nn::BatchNorm1d>(6), std::make_shared<nn::Linear>(6, 2)});
}

}  // namespace

TEST_CASE("cuda AveragedModel's EMA on the GPU equals it on the CPU, and a CPU average follows a GPU model",
          "[cuda][swa]") {
  test::require_cuda();
  const Device gpu = Device::cuda(0);
  manual_seed(11);
  auto model = net(), model_gpu = net();
  model_gpu->load_state_dict(model->state_dict());
  model_gpu->to(gpu);
  auto avg_cpu = net(), avg_gpu = net(), avg_f64 = net();
  avg_gpu->to(gpu);
  avg_f64->to(DType::Float64);
  nn::optim::AveragedModel ema_cpu(avg_cpu, nn::optim::ema_average(0.9));
  nn::optim::AveragedModel ema_gpu(avg_gpu, nn::optim::ema_average(0.9));
  nn::optim::AveragedModel ema_f64(avg_f64, nn::optim::ema_average(0.9));  // on the CPU, fed the GPU model
  for (int step = 0; step < 4; ++step) {
    {
      NoGradGuard g;
      for (Tensor p : model->parameters()) p.add_(randn(p.sizes()) * 0.1);
      model_gpu->load_state_dict(model->state_dict());
    }
    ema_cpu.update_parameters(*model);
    ema_gpu.update_parameters(*model_gpu);
    ema_f64.update_parameters(*model_gpu);
  }
  const auto pc = avg_cpu->named_parameters(), pg = avg_gpu->named_parameters(), pf = avg_f64->named_parameters();
  for (size_t i = 0; i < pc.size(); ++i) {
    INFO(pc[i].first);
    CHECK(pg[i].second.device() == gpu);
    CHECK(max_diff(pg[i].second, pc[i].second) < 1e-6);
    CHECK(pf[i].second.dtype() == DType::Float64);
    CHECK(max_diff(pf[i].second, pc[i].second) < 1e-6);
  }
}

TEST_CASE("cuda update_bn recomputes a GPU BatchNorm's statistics as the CPU's", "[cuda][swa]") {
  test::require_cuda();
  const Device gpu = Device::cuda(0);
  manual_seed(12);
  auto cpu = net(), dev = net();
  dev->load_state_dict(cpu->state_dict());
  dev->to(gpu);
  TensorList batches, batches_gpu;
  for (int b = 0; b < 3; ++b) {
    batches.push_back(randn({16, 4}) * static_cast<double>(b + 1));
    batches_gpu.push_back(batches.back().to(gpu));
  }
  nn::optim::update_bn(*cpu, batches);
  nn::optim::update_bn(*dev, batches_gpu);
  const auto bc = cpu->named_buffers(), bg = dev->named_buffers();
  REQUIRE(bc.size() == bg.size());
  for (size_t i = 0; i < bc.size(); ++i) {
    INFO(bc[i].first);
    CHECK(max_diff(bg[i].second, bc[i].second) < 1e-4);
  }
}
