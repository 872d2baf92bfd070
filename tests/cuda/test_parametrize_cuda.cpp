// Parametrizations on the GPU: weight_norm, spectral_norm and orthogonal on a CUDA Linear give the
// CPU twin's weight, output and gradients of the originals, from the same state dict (so spectral
// norm's vectors and orthogonal's base are the same). tests/nn/test_parametrize.cpp checks the
// rules on the CPU; these ops have CUDA twins, so only parity is left to check here.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <string>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/parametrize.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;

namespace {

double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(Device::cpu()).to(DType::Float64) - b.to(Device::cpu()).to(DType::Float64))).item<double>();
}

}  // namespace

TEST_CASE("cuda parametrizations: weight_norm, spectral_norm and orthogonal match the CPU twin",
          "[cuda][parametrize]") {
  test::require_cuda();
  const Device gpu = Device::cuda(0);
  const std::pair<const char*, std::function<void(nn::Linear&)>> cases[] = {
      {"weight_norm", [](nn::Linear& l) { nn::weight_norm(l); }},
      {"spectral_norm", [](nn::Linear& l) { nn::spectral_norm(l, 2); }},
      {"orthogonal householder", [](nn::Linear& l) { nn::orthogonal(l); }},
      {"orthogonal cayley", [](nn::Linear& l) { nn::orthogonal(l, nn::OrthogonalMap::Cayley); }},
  };
  for (const auto& [name, parametrize] : cases) {
    INFO(name);
    manual_seed(21);
    nn::Linear cpu(6, 4), cuda(6, 4);
    cpu.to(DType::Float64);
    cuda.to(DType::Float64);
    parametrize(cpu);
    parametrize(cuda);
    cuda.load_state_dict(cpu.state_dict());
    cuda.to(gpu);
    const Tensor x = randn({3, 6}, DType::Float64);
    const Tensor y_cpu = cpu(x), y_gpu = cuda(x.to(gpu));
    CHECK(y_gpu.device() == gpu);
    CHECK(cuda.weight.device() == gpu);
    CHECK(max_diff(cuda.weight, cpu.weight) < 1e-12);
    CHECK(max_diff(y_gpu, y_cpu) < 1e-12);
    (y_cpu * y_cpu).sum().backward();
    (y_gpu * y_gpu).sum().backward();
    const TensorList oc = nn::parametrization_list(cpu, "weight")->originals();
    const TensorList og = nn::parametrization_list(cuda, "weight")->originals();
    REQUIRE(oc.size() == og.size());
    for (size_t i = 0; i < oc.size(); ++i) {
      REQUIRE(og[i].grad().defined());
      CHECK(og[i].grad().device() == gpu);
      CHECK(max_diff(og[i].grad(), oc[i].grad()) < 1e-10);
    }
  }
}

TEST_CASE("cuda geqrf and householder_product give qr's Q on the GPU as on the CPU", "[cuda][linalg]") {
  test::require_cuda();
  const Device gpu = Device::cuda(0);
  manual_seed(22);
  const Tensor A = randn({2, 5, 3}, DType::Float64);
  const GeqrfResult c = geqrf(A), g = geqrf(A.to(gpu));
  CHECK(g.a.device() == gpu);
  CHECK(max_diff(g.a, c.a) < 1e-12);
  CHECK(max_diff(g.tau, c.tau) < 1e-12);
  CHECK(max_diff(householder_product(g.a, g.tau), qr(A).Q) < 1e-12);
}
