// The tensor-core tiles (kernels/cuda/tile.cuh) on the GPU: one warp loads A, K^T and V, runs
// mma.sync and stores the products, and re-reads two C tiles as an A tile, in bfloat16 and float16;
// in builds for sm_90, one warpgroup does the same through wgmma (kernels/cuda/wgmma.cuh).
// Small integers make every product and sum exact in both types and in float32, so the results must
// equal the CPU's exactly: a wrong lane map shows as a wrong element, not as noise.
#include <catch2/catch.hpp>

#include <string>
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
  CHECK(got.kt == product(kiln::test::transposed(k, 16, 16), a, 16, 16, 16, true));  // K^T loaded as A
}

// The identity probe (tests/cuda/tile_selftest.h): A = I, so each output element is one element of K
// or V, and a wrong fragment map is reported as the element the lanes delivered instead.
TEST_CASE("tensor-core tiles: mma.sync's identity probe reads K and V where the maps put them", "[cuda][tile]") {
  REQUIRE(kiln::cuda::is_available());
  const bool bf16 = GENERATE(true, false);
  INFO((bf16 ? "bfloat16" : "float16"));
  const kiln::test::TileSelftest got = run_tile_selftest(bf16, kiln::test::tile_identity(),
                                                         kiln::test::tile_ids(16, 16), kiln::test::tile_ids(16, 8));
  const std::vector<std::string> misreads = kiln::test::tile_probe_misreads(got);
  for (const std::string& m : misreads) UNSCOPED_INFO(m);
  CHECK(misreads.empty());
}

#if defined(KILN_WITH_SM90A)
#include "tests/cuda/wgmma_selftest.h"

// Hopper's wgmma through kiln's descriptors and staged layouts (kernels/wgmma_layout.h: by row groups
// as the backward stages its tiles, by pieces as the forward does, and with the 128-byte swizzle in
// the descriptors' swizzle mode, which no kernel uses yet): both operands in shared memory
// (K-major, and both MN-major with the transpose flags), A in registers with B MN-major at N = 128 and, advanced along N, at N = 64, and
// accumulators re-read as A tiles. Exact on small integers, as above. Needs a device of compute
// capability 9.0 (H100, H200): on others run the tests with ~[hopper].
TEST_CASE("tensor-core tiles: wgmma through the descriptors equals the CPU's products", "[cuda][tile][hopper]") {
  REQUIRE(kiln::cuda::is_available());
  REQUIRE(kiln::test::wgmma_selftest_runs_here());
  const bool bf16 = GENERATE(true, false);
  using kiln::wgmma::Order;
  const Order order = GENERATE(Order::kRowGroups, Order::kPieces, Order::kSwizzled);
  INFO((bf16 ? "bfloat16" : "float16") << ", staged " << kiln::wgmma::order_name(order));
  using kiln::test::wgmma_ints;
  const std::vector<float> a = wgmma_ints(64, 64, 1), b = wgmma_ints(64, 64, 2), v = wgmma_ints(64, 128, 3);
  const kiln::test::WgmmaSelftest got = kiln::test::run_wgmma_selftest(bf16, a, b, v, order);
  const std::vector<float> s = product(a, b, 64, 64, 64, true);
  CHECK(got.s == s);
  const std::vector<float> av = product(a, v, 64, 128, 64, false);
  CHECK(got.av == av);
  std::vector<float> av_hi(64 * 64);
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < 64; ++c) av_hi[static_cast<size_t>(r * 64 + c)] = av[static_cast<size_t>(r * 128 + 64 + c)];
  }
  CHECK(got.av_hi == av_hi);
  CHECK(got.sv == product(s, v, 64, 128, 64, false));
  CHECK(got.tb == product(kiln::test::transposed(a, 64, 64), b, 64, 64, 64, false));
}

// The identity probe (tests/cuda/wgmma_selftest.h): A = I, so each output element is one element of B
// or V, and a misread is reported as the element the instruction read instead.
TEST_CASE("tensor-core tiles: wgmma's identity probe reads B and V where the layout puts them",
          "[cuda][tile][hopper]") {
  REQUIRE(kiln::cuda::is_available());
  REQUIRE(kiln::test::wgmma_selftest_runs_here());
  using kiln::wgmma::Order;
  const Order order = GENERATE(Order::kRowGroups, Order::kPieces, Order::kSwizzled);
  INFO("staged " << kiln::wgmma::order_name(order));
  const kiln::test::WgmmaSelftest got = kiln::test::run_wgmma_selftest(
      false, kiln::test::wgmma_identity(), kiln::test::wgmma_b_ids(), kiln::test::wgmma_v_ids(), order);
  const std::vector<std::string> misreads = kiln::test::wgmma_probe_misreads(got);
  for (const std::string& m : misreads) UNSCOPED_INFO(m);
  CHECK(misreads.empty());
}

#include "tests/cuda/tma_selftest.h"

// Tensor copies (TMA, tests/cuda/tma_selftest.h) of a matrix viewed by pieces, as the wgmma forward's
// producer copies its tiles: the driver encodes the view (its pieces' stride, 16 bytes, is smaller
// than its rows'), and the box lands as wgmma's core matrices with zeros past the matrix's ends. And
// with the 128-byte swizzle, which must land as kiln's swizzle128 places it (what the swizzled wgmma
// self-test reads). The emulator runs the same cases (tests/kernels/test_simt.cpp). If the driver
// refuses the view by pieces, the forward copies with cp.async instead, which this test reports.
TEST_CASE("tensor-core tiles: tensor copies land boxes by pieces and swizzled, zeros past the ends",
          "[cuda][tile][hopper]") {
  REQUIRE(kiln::cuda::is_available());
  REQUIRE(kiln::test::wgmma_selftest_runs_here());
  for (const kiln::test::TmaSelftestCase& c : kiln::test::tma_selftest_cases()) {
    INFO("W " << c.W << ", box rows " << c.box_rows << ", row " << c.row0 << " of " << c.rows << ", batch " << c.batch
              << (c.swizzle ? ", swizzled from column " + std::to_string(c.col0) : std::string()));
    const kiln::test::TmaSelftest got = kiln::test::run_tma_selftest(c);
    const std::string broken = kiln::tma::invalid(kiln::test::tma_selftest_box(nullptr, c));
    INFO("if the driver refused the map, kiln's check of its rules says: "
         << (broken.empty() ? "none broken" : broken));
    REQUIRE(got.encoded);
    CHECK(got.tile == kiln::test::tma_expected(c));
  }
}

// Tensor reductions and stores (tests/cuda/tma_selftest.h), as the fused wgmma backward adds its shares
// of dQ and the wgmma forward stores its output: a float32 tile staged in shared memory as kiln reads
// the box's layout (swizzled: swizzle128 on rows of 128 bytes) is added to the tensor, or stored, the
// elements outside it left out, every other element untouched. The emulator runs the same cases.
TEST_CASE("tensor-core tiles: tensor reductions and stores write swizzled boxes, leaving out what is past the ends",
          "[cuda][tile][hopper]") {
  REQUIRE(kiln::cuda::is_available());
  REQUIRE(kiln::test::wgmma_selftest_runs_here());
  for (const kiln::test::TmaWriteCase& c : kiln::test::tma_write_cases()) {
    INFO("W " << c.W << ", box rows " << c.box_rows << ", row " << c.row0 << " of " << c.rows << ", batch " << c.batch
              << ", from column " << c.col0 << (c.swizzle ? ", swizzled" : "") << (c.add ? ", added" : ", stored"));
    const kiln::test::TmaWriteSelftest got = kiln::test::run_tma_write_selftest(c);
    const std::string broken = kiln::tma::invalid(kiln::test::tma_write_box(nullptr, c));
    INFO("if the driver refused the map, kiln's check of its rules says: "
         << (broken.empty() ? "none broken" : broken));
    REQUIRE(got.encoded);
    CHECK(got.matrices == kiln::test::tma_write_expected(c));
  }
}
#endif
