// One warp through the tensor-core tiles of kernels/cuda/tile.cuh, on the GPU, for
// tests/cuda/test_tile_cuda.cpp (a .cu of its own: the Catch2 test stays plain C++).
#pragma once

#include <vector>

namespace kiln::test {

// Inputs: A [16, 16], K [16, 16] and V [16, 8], row-major host floats, rounded to bfloat16 (or
// float16) on the way in. Outputs, row-major floats: S = A @ K^T [16, 16] (two C tiles, K's rows
// 0-7 and 8-15 through load_b_transposed), AV = A @ V [16, 8] (load_b), and SV = S @ V [16, 8] with
// S re-read as an A tile (a_from_c, rounded to the 16-bit type), as attention computes P @ V.
struct TileSelftest {
  std::vector<float> s, av, sv;
};
TileSelftest run_tile_selftest(bool bf16, const std::vector<float>& a, const std::vector<float>& k,
                               const std::vector<float>& v);

}  // namespace kiln::test
