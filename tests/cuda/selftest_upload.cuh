// What the GPU self-tests of the tensor-core tiles share (tests/cuda/tile_selftest.cu,
// wgmma_selftest.cu): CUDA errors as exceptions, and host floats uploaded as a 16-bit type.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::test {

inline void selftest_check(cudaError_t e, const char* test, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(test) + ": " + what + ": " + cudaGetErrorString(e));
}

// A device copy of `host` rounded to T; the caller frees it.
template <typename T> T* selftest_upload(const std::vector<float>& host, const char* test) {
  std::vector<T> rounded(host.size());
  for (size_t i = 0; i < host.size(); ++i) rounded[i] = static_cast<T>(host[i]);
  T* dev = nullptr;
  selftest_check(cudaMalloc(&dev, rounded.size() * sizeof(T)), test, "cudaMalloc");
  selftest_check(cudaMemcpy(dev, rounded.data(), rounded.size() * sizeof(T), cudaMemcpyHostToDevice), test,
                 "cudaMemcpy");
  return dev;
}

}  // namespace kiln::test
