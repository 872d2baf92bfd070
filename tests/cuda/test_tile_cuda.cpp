// The tensor-core tiles (kernels/cuda/tile.cuh) on the GPU: one warp loads A, K^T and V, runs
// mma.sync and stores the products, and re-reads two C tiles as an A tile, in bfloat16 and float16.
// Small integers make every product and sum exact in both types and in float32, so the results must
// equal the CPU's exactly: a wrong lane map shows as a wrong element, not as noise.
#include <catch2/catch.hpp>

#include <vector>

#include "core/cuda/runtime.h"
#include "tests/cuda/tile_selftest.h"

using kiln::test::product;
using kiln::test::run_tile_selftest;
using kiln::test::tile_ints;

TEST_CASE("tensor-core tiles: mma.sync through the tile maps equals the CPU's products", "[cuda][tile]") {
  REQUIRE(kiln::cuda::is_available());
  const bool bf16 = GENERATE(true, false);
  INFO((bf16 ? "bfloat16" : "float16"));
  const std::vector<float> a = tile_ints(16, 16, 1), k = tile_ints(16, 16, 2), v = tile_ints(16, 8, 3);
  const kiln::test::TileSelftest got = run_tile_selftest(bf16, a, k, v);
  const std::vector<float> s = product(a, k, 16, 16, 16, true);
  CHECK(got.s == s);
  CHECK(got.av == product(a, v, 16, 8, 16, false));
  // |S| <= 16 * 16 = 256: an integer both 16-bit types hold exactly, so re-reading S as an A tile
  // loses nothing and S @ V is exact too.
  CHECK(got.sv == product(s, v, 16, 8, 16, false));
}
