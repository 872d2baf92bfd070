// The kernel's launcher for tests/cuda/tma_selftest.h. Built for sm_90a alone (tests/CMakeLists.txt),
// with the wgmma self-test.
#include "tests/cuda/tma_selftest.h"

#include <cuda_runtime.h>

#include "tests/cuda/selftest_upload.cuh"
#include "tests/cuda/tma_selftest_kernel.cuh"

namespace kiln::test {

TmaSelftest run_tma_selftest(const TmaSelftestCase& c) {
  constexpr const char* kTest = "tma selftest";
  const auto check = [&](cudaError_t e, const char* what) { selftest_check(e, kTest, what); };
  const std::vector<uint16_t> m = tma_matrices(c);
  uint16_t *dm = nullptr, *out = nullptr;
  const size_t elems = static_cast<size_t>(c.box_rows) * tma_box_cols(c);
  check(cudaMalloc(&dm, m.size() * sizeof(uint16_t)), "cudaMalloc");
  check(cudaMalloc(&out, elems * sizeof(uint16_t)), "cudaMalloc");
  check(cudaMemcpy(dm, m.data(), m.size() * sizeof(uint16_t), cudaMemcpyHostToDevice), "cudaMemcpy");
  const tma::Box box = tma_selftest_box(dm, c);
  TmaSelftest got;
  tma::Map map{};
  got.encoded = tma::encode(box, &map);
  if (got.encoded) {
    tile::SmemCarver sizes;
    const TmaSelftestSmem pieces(sizes, static_cast<int>(elems));
    (void)pieces;
    tma_selftest_kernel<<<1, 128, sizes.bytes()>>>(map, tma_coordinates(c), box.box_bytes(), out);
    check(cudaGetLastError(), "launch");
    got.tile.resize(elems);
    check(cudaMemcpy(got.tile.data(), out, elems * sizeof(uint16_t), cudaMemcpyDeviceToHost), "cudaMemcpy back");
  }
  check(cudaFree(dm), "cudaFree");
  check(cudaFree(out), "cudaFree");
  return got;
}

TmaWriteSelftest run_tma_write_selftest(const TmaWriteCase& c) {
  constexpr const char* kTest = "tma write selftest";
  const auto check = [&](cudaError_t e, const char* what) { selftest_check(e, kTest, what); };
  const std::vector<float> m = tma_write_matrices(c), source = tma_write_source(c);
  float *dm = nullptr, *dsource = nullptr;
  check(cudaMalloc(&dm, m.size() * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&dsource, source.size() * sizeof(float)), "cudaMalloc");
  check(cudaMemcpy(dm, m.data(), m.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(dsource, source.data(), source.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  TmaWriteSelftest got;
  tma::Map map{};
  got.encoded = tma::encode(tma_write_box(dm, c), &map);
  if (got.encoded) {
    const int elems = static_cast<int>(source.size());
    tile::SmemCarver sizes;
    const TmaWriteSmem pieces(sizes, elems);
    (void)pieces;
    tma_write_selftest_kernel<<<1, 128, sizes.bytes()>>>(map, tma_write_coordinates(c), dsource, elems, c.add);
    check(cudaGetLastError(), "launch");
    got.matrices.resize(m.size());
    check(cudaMemcpy(got.matrices.data(), dm, m.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy back");
  }
  check(cudaFree(dm), "cudaFree");
  check(cudaFree(dsource), "cudaFree");
  return got;
}

}  // namespace kiln::test
