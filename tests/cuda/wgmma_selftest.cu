// The kernel's launcher for tests/cuda/wgmma_selftest.h. Built for sm_90a alone (tests/CMakeLists.txt).
#include "tests/cuda/wgmma_selftest.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>

#include "tests/cuda/selftest_upload.cuh"
#include "tests/cuda/wgmma_selftest_kernel.cuh"

namespace kiln::test {
namespace {

constexpr const char* kTest = "wgmma selftest";

void check(cudaError_t e, const char* what) { selftest_check(e, kTest, what); }

template <typename T> T* upload(const std::vector<float>& host) { return selftest_upload<T>(host, kTest); }

template <typename T>
WgmmaSelftest run(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& v,
                  wgmma::Order order) {
  T *da = upload<T>(a), *db = upload<T>(b), *dv = upload<T>(v);
  constexpr size_t kS = kWgRows * kWgRows, kAv = kWgRows * kWgN, kHi = kWgRows * kWgRows, kSv = kWgRows * kWgN;
  constexpr size_t kTb = kWgRows * kWgRows, kAll = kS + kAv + kHi + kSv + kTb;
  float* out = nullptr;
  check(cudaMalloc(&out, kAll * sizeof(float)), "cudaMalloc");
  tile::SmemCarver sizes;
  const WgmmaSelftestSmem<T> pieces(sizes);
  (void)pieces;
  wgmma_selftest_kernel<T><<<1, wgmma::kThreads, sizes.bytes()>>>(da, db, dv, out, out + kS, out + kS + kAv,
                                                                     out + kS + kAv + kHi, out + kS + kAv + kHi + kSv,
                                                                     order);
  check(cudaGetLastError(), "launch");
  std::vector<float> all(kAll);
  check(cudaMemcpy(all.data(), out, all.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy back");
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dv), static_cast<void*>(out)}) {
    check(cudaFree(p), "cudaFree");
  }
  const auto at = [&](size_t from, size_t n) {
    return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(from),
                              all.begin() + static_cast<std::ptrdiff_t>(from + n));
  };
  return {at(0, kS), at(kS, kAv), at(kS + kAv, kHi), at(kS + kAv + kHi, kSv), at(kS + kAv + kHi + kSv, kTb)};
}

}  // namespace

bool wgmma_selftest_runs_here() {
  int device = 0, major = 0, minor = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "compute capability");
  return major == 9 && minor == 0;
}

WgmmaSelftest run_wgmma_selftest(bool bf16, const std::vector<float>& a, const std::vector<float>& b,
                                 const std::vector<float>& v, wgmma::Order order) {
  if (a.size() != kWgRows * kWgK || b.size() != kWgRows * kWgK || v.size() != kWgK * kWgN) {
    throw std::invalid_argument("wgmma selftest: sizes");
  }
  return bf16 ? run<__nv_bfloat16>(a, b, v, order) : run<__half>(a, b, v, order);
}

}  // namespace kiln::test
