// The kernel and launcher of tests/cuda/tile_selftest.h.
#include "tests/cuda/tile_selftest.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/tile.cuh"

namespace kiln::test {
namespace {

template <typename T>
__global__ void tile_selftest_kernel(const T* a, const T* k, const T* v, float* s, float* av, float* sv) {
  using namespace kiln::tile;
  ATile<T> ta;
  BTile<T> k0, k1, tv;
  load_a(ta, a, 16);
  load_b_transposed(k0, k, 16);
  load_b_transposed(k1, k + 8 * 16, 16);
  load_b(tv, v, 8);
  CTile c0, c1, d_av, d_sv;
  fill(c0, 0.0f);
  fill(c1, 0.0f);
  fill(d_av, 0.0f);
  fill(d_sv, 0.0f);
  mma(c0, ta, k0);
  mma(c1, ta, k1);
  mma(d_av, ta, tv);
  store_c(c0, s, 16);
  store_c(c1, s + 8, 16);
  store_c(d_av, av, 8);
  ATile<T> p;
  a_from_c(p, c0, c1);
  mma(d_sv, p, tv);
  store_c(d_sv, sv, 8);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("tile selftest: ") + what + ": " + cudaGetErrorString(e));
}

template <typename T> T* upload(const std::vector<float>& host) {
  std::vector<T> rounded(host.size());
  for (size_t i = 0; i < host.size(); ++i) rounded[i] = static_cast<T>(host[i]);
  T* dev = nullptr;
  check(cudaMalloc(&dev, rounded.size() * sizeof(T)), "cudaMalloc");
  check(cudaMemcpy(dev, rounded.data(), rounded.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return dev;
}

template <typename T>
TileSelftest run(const std::vector<float>& a, const std::vector<float>& k, const std::vector<float>& v) {
  T *da = upload<T>(a), *dk = upload<T>(k), *dv = upload<T>(v);
  float* out = nullptr;
  check(cudaMalloc(&out, (256 + 128 + 128) * sizeof(float)), "cudaMalloc");
  tile_selftest_kernel<T><<<1, 32>>>(da, dk, dv, out, out + 256, out + 384);
  check(cudaGetLastError(), "launch");
  std::vector<float> all(512);
  check(cudaMemcpy(all.data(), out, all.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy back");
  for (void* p : {static_cast<void*>(da), static_cast<void*>(dk), static_cast<void*>(dv), static_cast<void*>(out)}) {
    check(cudaFree(p), "cudaFree");
  }
  return {std::vector<float>(all.begin(), all.begin() + 256), std::vector<float>(all.begin() + 256, all.begin() + 384),
          std::vector<float>(all.begin() + 384, all.end())};
}

}  // namespace

TileSelftest run_tile_selftest(bool bf16, const std::vector<float>& a, const std::vector<float>& k,
                               const std::vector<float>& v) {
  if (a.size() != 256 || k.size() != 256 || v.size() != 128) throw std::invalid_argument("tile selftest: sizes");
  return bf16 ? run<__nv_bfloat16>(a, k, v) : run<__half>(a, k, v);
}

}  // namespace kiln::test
