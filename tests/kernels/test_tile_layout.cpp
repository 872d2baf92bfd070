// The tensor-core fragment maps (kernels/tile_layout.h) on the CPU: each covers its tile exactly
// once, pairs are adjacent along the dimension the loads read as one word, a warp emulated lane by
// lane multiplies matrices through them, and two C tiles re-read as an A tile (tile.cuh's a_from_c)
// form the matrix [C0 | C1]. The CUDA test (tests/cuda/test_tile_cuda.cpp) runs the instruction.
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/tile_layout.h"

using namespace kiln::tile;

namespace {

template <typename Map> void check_cover(Map map, int rows, int cols, int elems) {
  std::vector<int> hits(static_cast<size_t>(rows * cols), 0);
  for (int lane = 0; lane < kWarp; ++lane) {
    for (int i = 0; i < elems; ++i) {
      const Coord c = map(lane, i);
      INFO("lane " << lane << " element " << i << " -> (" << c.row << ", " << c.col << ")");
      REQUIRE(c.row >= 0);
      REQUIRE(c.row < rows);
      REQUIRE(c.col >= 0);
      REQUIRE(c.col < cols);
      ++hits[static_cast<size_t>(c.row * cols + c.col)];
    }
  }
  for (int h : hits) CHECK(h == 1);
}

// Deterministic small integers: products and sums of them are exact in double.
double value(int seed, int r, int c) { return static_cast<double>((seed * 31 + r * 7 + c * 13) % 11 - 5); }

}  // namespace

TEST_CASE("tile layout: every fragment covers its tile exactly once", "[kernels][tile]") {
  check_cover(a_coord, kM, kK, kAElems);
  check_cover(b_coord, kK, kN, kBElems);
  check_cover(c_coord, kM, kN, kCElems);
}

TEST_CASE("tile layout: a register's two elements are adjacent where the loads read one word", "[kernels][tile]") {
  for (int lane = 0; lane < kWarp; ++lane) {
    for (int j = 0; j < kAElems / 2; ++j) {  // A: along a row
      CHECK(a_coord(lane, 2 * j + 1).row == a_coord(lane, 2 * j).row);
      CHECK(a_coord(lane, 2 * j + 1).col == a_coord(lane, 2 * j).col + 1);
      CHECK(a_coord(lane, 2 * j).col % 2 == 0);  // a 4-byte aligned word when ld is even
    }
    for (int j = 0; j < kBElems / 2; ++j) {  // B: along k, a row of the [n, k] matrix B transposes
      CHECK(b_coord(lane, 2 * j + 1).col == b_coord(lane, 2 * j).col);
      CHECK(b_coord(lane, 2 * j + 1).row == b_coord(lane, 2 * j).row + 1);
      CHECK(b_coord(lane, 2 * j).row % 2 == 0);
    }
    for (int j = 0; j < kCElems / 2; ++j) {  // C: along a row
      CHECK(c_coord(lane, 2 * j + 1).row == c_coord(lane, 2 * j).row);
      CHECK(c_coord(lane, 2 * j + 1).col == c_coord(lane, 2 * j).col + 1);
    }
  }
}

TEST_CASE("tile layout: a warp emulated through the maps computes A @ B", "[kernels][tile]") {
  // Each lane's registers, filled as the loads fill them.
  std::array<std::array<double, kAElems>, kWarp> a{};
  std::array<std::array<double, kBElems>, kWarp> b{};
  for (int lane = 0; lane < kWarp; ++lane) {
    for (int i = 0; i < kAElems; ++i) a[lane][i] = value(1, a_coord(lane, i).row, a_coord(lane, i).col);
    for (int i = 0; i < kBElems; ++i) b[lane][i] = value(2, b_coord(lane, i).row, b_coord(lane, i).col);
  }
  // The instruction's contract: lane L's D element i is sum_k A(r, k) B(k, c) for (r, c) = c_coord(L, i),
  // with A and B gathered from whichever lanes hold them.
  double A[kM][kK] = {}, B[kK][kN] = {};
  for (int lane = 0; lane < kWarp; ++lane) {
    for (int i = 0; i < kAElems; ++i) A[a_coord(lane, i).row][a_coord(lane, i).col] = a[lane][i];
    for (int i = 0; i < kBElems; ++i) B[b_coord(lane, i).row][b_coord(lane, i).col] = b[lane][i];
  }
  for (int lane = 0; lane < kWarp; ++lane) {
    for (int i = 0; i < kCElems; ++i) {
      const Coord c = c_coord(lane, i);
      double d = 0, expect = 0;
      for (int k = 0; k < kK; ++k) {
        d += A[c.row][k] * B[k][c.col];
        expect += value(1, c.row, k) * value(2, k, c.col);
      }
      CHECK(d == expect);
    }
  }
}

TEST_CASE("tile layout: two C tiles re-read as one A tile are C0 and C1 side by side", "[kernels][tile]") {
  // a_from_c takes, in each lane, A element i from C0's element i (i < 4) or C1's element i - 4.
  for (int lane = 0; lane < kWarp; ++lane) {
    for (int i = 0; i < kAElems; ++i) {
      const Coord from = c_coord(lane, i % kCElems);
      const Coord to = a_coord(lane, i);
      INFO("lane " << lane << " element " << i);
      CHECK(to.row == from.row);
      CHECK(to.col == from.col + (i < kCElems ? 0 : kN));
    }
  }
}

TEST_CASE("tile layout: SmemCarver aligns each piece and counts the bytes", "[kernels][tile]") {
  SmemCarver sizes;  // a null base: the host's byte count
  auto* q = sizes.take<uint16_t>(3);
  auto* k = sizes.take<uint16_t>(5);
  auto* l = sizes.take<float>(2, 64);
  CHECK(reinterpret_cast<uintptr_t>(q) == 0);
  CHECK(reinterpret_cast<uintptr_t>(k) == 16);
  CHECK(reinterpret_cast<uintptr_t>(l) == 64);
  // 72 bytes from a null base, and 48 of slack: a 64-byte piece from a base that is only 16-byte
  // aligned may start 48 bytes later.
  CHECK(sizes.bytes() == 72 + 48);
  alignas(64) static unsigned char buffer[256];
  SmemCarver carve(buffer);
  CHECK(carve.take<uint16_t>(3) == reinterpret_cast<uint16_t*>(buffer));
  CHECK(carve.take<uint16_t>(5) == reinterpret_cast<uint16_t*>(buffer + 16));
  CHECK(carve.take<float>(2, 64) == reinterpret_cast<float*>(buffer + 64));
  CHECK(carve.bytes() == sizes.bytes());
  // The worst base: 16 bytes past a 64-byte boundary. The pieces still fit in sizes.bytes().
  SmemCarver shifted(buffer + 16);
  shifted.take<uint16_t>(3);
  shifted.take<uint16_t>(5);
  auto* last = shifted.take<float>(2, 64);
  CHECK(reinterpret_cast<uintptr_t>(last) % 64 == 0);
  CHECK(static_cast<size_t>(reinterpret_cast<unsigned char*>(last + 2) - (buffer + 16)) <= sizes.bytes());
  // With only base-aligned pieces there is no slack.
  SmemCarver plain;
  plain.take<uint16_t>(3);
  plain.take<float>(5);
  CHECK(plain.bytes() == 16 + 20);
}
