// CUDA parity of the shared Philox: random_cuda must give the same integer draws as random_cpu and
// floats equal to rounding. Runs only on a machine with a GPU (label "cuda").
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "kernels/random.h"

using namespace kiln;

namespace {

template <typename T> std::vector<T> draw_cuda(int64_t n, DType dtype, RandomDist dist, double a, double b) {
  T* d = nullptr;
  REQUIRE(cudaMalloc(&d, static_cast<size_t>(n) * sizeof(T)) == cudaSuccess);
  StridedArg arg;
  arg.data = d;
  arg.dtype = dtype;
  arg.ndim = 1;
  arg.sizes[0] = n;
  arg.strides[0] = 1;
  random_cuda(arg, dist, a, b, PhiloxState{1234, 7}, KernelContext{});
  std::vector<T> host(static_cast<size_t>(n));
  REQUIRE(cudaMemcpy(host.data(), d, host.size() * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(d);
  return host;
}

template <typename T> std::vector<T> draw_cpu(int64_t n, DType dtype, RandomDist dist, double a, double b) {
  std::vector<T> host(static_cast<size_t>(n));
  StridedArg arg;
  arg.data = host.data();
  arg.dtype = dtype;
  arg.ndim = 1;
  arg.sizes[0] = n;
  arg.strides[0] = 1;
  random_cpu(arg, dist, a, b, PhiloxState{1234, 7}, KernelContext{});
  return host;
}

}  // namespace

TEST_CASE("cuda: integer draws are bit-identical to the CPU's", "[cuda]") {
  const int64_t n = 100003;
  CHECK(draw_cuda<int64_t>(n, DType::Int64, RandomDist::RandInt, -50, 1000) ==
        draw_cpu<int64_t>(n, DType::Int64, RandomDist::RandInt, -50, 1000));
}

TEST_CASE("cuda: uniform and normal floats agree with the CPU to rounding", "[cuda]") {
  const int64_t n = 100003;
  for (RandomDist dist : {RandomDist::Uniform, RandomDist::Normal}) {
    std::vector<float> g = draw_cuda<float>(n, DType::Float32, dist, 0, 1);
    std::vector<float> c = draw_cpu<float>(n, DType::Float32, dist, 0, 1);
    for (size_t i = 0; i < g.size(); ++i) {
      INFO("element " << i);
      REQUIRE(std::fabs(g[i] - c[i]) <= 1e-5f * (1 + std::fabs(c[i])));
    }
  }
}
