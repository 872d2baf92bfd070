// One warpgroup through Hopper's wgmma (kernels/cuda/wgmma.cuh), on the GPU, for
// tests/cuda/test_tile_cuda.cpp (a .cu of its own, built for sm_90a: the Catch2 test stays plain
// C++). The same kernel (tests/cuda/wgmma_selftest_kernel.cuh) runs on the CPU's emulator in
// tests/kernels/test_wgmma.cpp, against the same inputs and products.
#pragma once

#include <vector>

namespace kiln::test {

// Inputs, row-major host floats rounded to bfloat16 (or float16) on the way in: a [64, 64], b [64,
// 64], v [64, 128]. Outputs, row-major floats: s = a b^T, av = a v, av_hi = a v[:, 64:], sv = s v
// (s rounded to the 16-bit type, as attention rounds P).
struct WgmmaSelftest {
  std::vector<float> s, av, av_hi, sv;
};
// Whether this build and the current device run the self-test: built for sm_90a, compute
// capability 9.0.
bool wgmma_selftest_runs_here();
WgmmaSelftest run_wgmma_selftest(bool bf16, const std::vector<float>& a, const std::vector<float>& b,
                                 const std::vector<float>& v);

// Small integers in [-2, 2]: with K = 64, every entry of s is at most 256 in magnitude (exact in
// both 16-bit types), and every sum is exact in float32.
inline std::vector<float> wgmma_ints(int rows, int cols, int seed) {
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) m[static_cast<size_t>(r * cols + c)] = static_cast<float>((seed + 3 * r + 7 * c) % 5 - 2);
  }
  return m;
}

}  // namespace kiln::test
