// The tensor-core tiles (kernels/cuda/tile.cuh) on the GPU: one warp loads A, K^T and V, runs
// mma.sync and stores the products, and re-reads two C tiles as an A tile, in bfloat16 and float16.
// Small integers make every product and sum exact in both types and in float32, so the results must
// equal the CPU's exactly: a wrong lane map shows as a wrong element, not as noise.
#include <catch2/catch.hpp>

#include <vector>

#include "core/cuda/runtime.h"
#include "tests/cuda/tile_selftest.h"

using kiln::test::run_tile_selftest;

namespace {

std::vector<float> ints(int rows, int cols, int seed) {
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      m[static_cast<size_t>(r * cols + c)] = static_cast<float>((seed + 5 * r + 3 * c) % 9 - 4);
    }
  }
  return m;
}

// out[r][c] = sum_k x[r][k] * y[k][c] (y_transposed: y[c][k]).
std::vector<float> product(const std::vector<float>& x, const std::vector<float>& y, int m, int n, int kk,
                           bool y_transposed) {
  std::vector<float> out(static_cast<size_t>(m * n), 0.0f);
  for (int r = 0; r < m; ++r) {
    for (int c = 0; c < n; ++c) {
      double s = 0;
      for (int k = 0; k < kk; ++k) {
        s += static_cast<double>(x[static_cast<size_t>(r * kk + k)]) *
             y[static_cast<size_t>(y_transposed ? c * kk + k : k * n + c)];
      }
      out[static_cast<size_t>(r * n + c)] = static_cast<float>(s);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("tensor-core tiles: mma.sync through the tile maps equals the CPU's products", "[cuda][tile]") {
  REQUIRE(kiln::cuda::is_available());
  const bool bf16 = GENERATE(true, false);
  INFO((bf16 ? "bfloat16" : "float16"));
  const std::vector<float> a = ints(16, 16, 1), k = ints(16, 16, 2), v = ints(16, 8, 3);
  const kiln::test::TileSelftest got = run_tile_selftest(bf16, a, k, v);
  const std::vector<float> s = product(a, k, 16, 16, 16, true);
  CHECK(got.s == s);
  CHECK(got.av == product(a, v, 16, 8, 16, false));
  // |S| <= 16 * 16 = 256: an integer both 16-bit types hold exactly, so re-reading S as an A tile
  // loses nothing and S @ V is exact too.
  CHECK(got.sv == product(s, v, 16, 8, 16, false));
}
