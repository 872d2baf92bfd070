// The kernel and launcher of tests/cuda/tile_selftest.h.
#include "tests/cuda/tile_selftest.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>

#include "tests/cuda/selftest_upload.cuh"
#include "tests/cuda/tile_selftest_kernel.cuh"

namespace kiln::test {
namespace {

constexpr const char* kTest = "tile selftest";

void check(cudaError_t e, const char* what) { selftest_check(e, kTest, what); }

template <typename T> T* upload(const std::vector<float>& host) { return selftest_upload<T>(host, kTest); }

template <typename T>
TileSelftest run(const std::vector<float>& a, const std::vector<float>& k, const std::vector<float>& v) {
  T *da = upload<T>(a), *dk = upload<T>(k), *dv = upload<T>(v);
  float* out = nullptr;
  check(cudaMalloc(&out, kTileSelftestFloats * sizeof(float)), "cudaMalloc");
  tile_selftest_kernel<T><<<1, 32>>>(da, dk, dv, out, out + 256, out + 384, out + 512);
  check(cudaGetLastError(), "launch");
  std::vector<float> all(kTileSelftestFloats);
  check(cudaMemcpy(all.data(), out, all.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy back");
  for (void* p : {static_cast<void*>(da), static_cast<void*>(dk), static_cast<void*>(dv), static_cast<void*>(out)}) {
    check(cudaFree(p), "cudaFree");
  }
  return split_tile_selftest(all);
}

}  // namespace

TileSelftest run_tile_selftest(bool bf16, const std::vector<float>& a, const std::vector<float>& k,
                               const std::vector<float>& v) {
  if (a.size() != 256 || k.size() != 256 || v.size() != 128) throw std::invalid_argument("tile selftest: sizes");
  return bf16 ? run<__nv_bfloat16>(a, k, v) : run<__half>(a, k, v);
}

}  // namespace kiln::test
