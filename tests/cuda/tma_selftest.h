// A tensor copy (TMA, kernels/cuda/tma.cuh) on the GPU, for tests/cuda/test_tile_cuda.cpp (a .cu of
// its own, built for sm_90a). The same kernel (tests/cuda/tma_selftest_kernel.cuh) runs on the CPU's
// emulator in tests/kernels/test_simt.cpp, on the same cases, against the same expected tile. So one
// GPU run tells whether the emulator's model of the copy (the box walked innermost first, zeros past
// the tensor's ends, the bytes completing the barrier's phase, the 128-byte swizzle) and the views the
// attention forward uses hold on the hardware: by pieces (a matrix as [8 elements, rows, W / 8
// pieces], the pieces 16 bytes apart) and swizzled (the matrix as it is, a box of 64 columns).
// And the other way, shared to global memory: a tile of float32 in shared memory, staged as the box
// lands, stored into a float32 tensor (tma::store_box, as the wgmma forward stores its output) or added
// to it (tma::reduce_add_box, the fused wgmma backward's adds of dQ).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tma_box.h"
#include "kernels/wgmma_layout.h"

namespace kiln::test {

// `batches` matrices of [rows, W] 16-bit values, one after another; the box at row `row0` (which may
// run past either end) of matrix `batch`: without the swizzle a box of [8, box_rows, W / 8] over the
// matrices viewed by pieces, with it a box of [64, box_rows] at column col0 over the matrices as they
// are, landing as a 64-column block of a swizzled tile (wgmma::swizzled).
struct TmaSelftestCase {
  int rows = 40, W = 64, batches = 2, box_rows = 64;
  int32_t row0 = 0, batch = 1;
  bool swizzle = false;
  int32_t col0 = 0;
};

// The box's coordinates, and the columns it covers.
struct TmaAt {
  int32_t at[tma::kRank];
};
inline TmaAt tma_coordinates(const TmaSelftestCase& c) {
  if (c.swizzle) return {{c.col0, c.row0, c.batch, 0, 0}};
  return {{0, c.row0, 0, c.batch, 0}};
}
inline int tma_box_cols(const TmaSelftestCase& c) { return c.swizzle ? 64 : c.W; }

// The matrices' values: their index plus one (so a zero is a fill), modulo 2^16.
inline std::vector<uint16_t> tma_matrices(const TmaSelftestCase& c) {
  std::vector<uint16_t> m(static_cast<size_t>(c.batches) * c.rows * c.W);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint16_t>(i + 1);
  return m;
}

// The view of the matrices at `base` with the case's box: by pieces, the matrices as dimension 3, as
// the attention forward builds its maps (make_forward_maps); or, swizzled, [W, rows, batches].
inline tma::Box tma_selftest_box(const void* base, const TmaSelftestCase& c) {
  const auto W = static_cast<uint64_t>(c.W), matrix_bytes = static_cast<uint64_t>(c.rows) * W * 2;
  if (c.swizzle) {
    tma::Box b = tma::swizzled_view(base, static_cast<uint64_t>(c.rows), W * 2, static_cast<uint32_t>(c.W),
                                    static_cast<uint32_t>(c.box_rows));
    b.dims[2] = static_cast<uint64_t>(c.batches);
    b.strides[2] = matrix_bytes;
    return b;
  }
  tma::Box b = tma::pieces_view(base, static_cast<uint64_t>(c.rows), W * 2, static_cast<uint32_t>(c.W),
                                static_cast<uint32_t>(c.box_rows));
  b.dims[3] = static_cast<uint64_t>(c.batches);
  b.strides[3] = matrix_bytes;
  return b;
}

// The tile the copy lands, as kiln stages it (kernels/wgmma_layout.h): the matrix's (row0 + r,
// col0 + j) at by_pieces(box_rows, W).offset(r, j) (element e of row r of piece p at
// (p * box_rows + r) * 8 + e), or at swizzled(box_rows, 64).offset(r, j); zero where that row is
// outside the matrix.
inline std::vector<uint16_t> tma_expected(const TmaSelftestCase& c) {
  const std::vector<uint16_t> m = tma_matrices(c);
  const int cols = tma_box_cols(c);
  const wgmma::Staging s = c.swizzle ? wgmma::swizzled(c.box_rows, cols) : wgmma::by_pieces(c.box_rows, cols);
  std::vector<uint16_t> out(static_cast<size_t>(c.box_rows) * cols, 0);
  for (int r = 0; r < c.box_rows; ++r) {
    const int row = c.row0 + r;
    if (row < 0 || row >= c.rows) continue;
    for (int j = 0; j < cols; ++j) {
      out[static_cast<size_t>(s.offset(r, j))] = m[(static_cast<size_t>(c.batch) * c.rows + row) * c.W + c.col0 + j];
    }
  }
  return out;
}

// The cases both tests run: rows past the end, before the start, a 128-row box, head dim 128; and
// swizzled, the second 64 columns of 128, rows past the end, and the attention forward's box of Q at
// head dim 128 (128 rows, 16 periods of the swizzle), from row 5.
inline std::vector<TmaSelftestCase> tma_selftest_cases() {
  std::vector<TmaSelftestCase> cases(7);
  cases[1].row0 = -8;
  cases[2].box_rows = 128;
  cases[2].row0 = 5;
  cases[3].W = 128;
  cases[3].row0 = 30;
  cases[3].batch = 0;
  cases[4].swizzle = true;
  cases[5].swizzle = true;
  cases[5].W = 128;
  cases[5].col0 = 64;
  cases[5].row0 = 3;
  cases[6].swizzle = true;
  cases[6].W = 128;
  cases[6].rows = 150;
  cases[6].box_rows = 128;
  cases[6].row0 = 5;
  return cases;
}

// What the GPU run gives: whether the driver encoded the map, and the landed tile.
struct TmaSelftest {
  bool encoded = false;
  std::vector<uint16_t> tile;
};
TmaSelftest run_tma_selftest(const TmaSelftestCase& c);

// `batches` float32 matrices of [rows, W], one after another, as the fused backward's dQ accumulator
// [batch, L, D]; a box of [32 columns, box_rows] at column col0, row row0 (which may run past either
// end) of matrix `batch`, with the 128-byte swizzle (the backward's) or without; added (a reduction)
// or stored.
struct TmaWriteCase {
  int rows = 40, W = 64, batches = 2, box_rows = 64;
  int32_t row0 = 0, batch = 1, col0 = 0;
  bool swizzle = true, add = true;
};
inline constexpr int kTmaWriteCols = 32;

inline TmaAt tma_write_coordinates(const TmaWriteCase& c) { return {{c.col0, c.row0, c.batch, 0, 0}}; }

// The matrices' values before the writes: their index plus a half (exact in float32).
inline std::vector<float> tma_write_matrices(const TmaWriteCase& c) {
  std::vector<float> m(static_cast<size_t>(c.batches) * c.rows * c.W);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i) + 0.5f;
  return m;
}

// The view of the matrices at `base`: [W, rows, batches] of float32, the box [32, box_rows].
inline tma::Box tma_write_box(const void* base, const TmaWriteCase& c) {
  tma::Box b;
  b.base = base;
  b.dims[0] = static_cast<uint64_t>(c.W);
  b.dims[1] = static_cast<uint64_t>(c.rows);
  b.dims[2] = static_cast<uint64_t>(c.batches);
  b.strides[0] = 4;
  b.strides[1] = static_cast<uint64_t>(c.W) * 4;
  b.strides[2] = static_cast<uint64_t>(c.rows) * c.W * 4;
  b.strides[3] = b.strides[4] = 16;
  b.box[0] = kTmaWriteCols;
  b.box[1] = static_cast<uint32_t>(c.box_rows);
  b.swizzle128 = c.swizzle;
  b.float32 = true;
  return b;
}

// The tile in shared memory, as the kernel stages it: box element (r, j), 1000 (r + 1) + j, at float
// r * 32 + j, or with the swizzle at swizzle128 of that byte (each row of the box is 128 bytes).
inline std::vector<float> tma_write_source(const TmaWriteCase& c) {
  std::vector<float> tile(static_cast<size_t>(c.box_rows) * kTmaWriteCols);
  for (int r = 0; r < c.box_rows; ++r) {
    for (int j = 0; j < kTmaWriteCols; ++j) {
      const auto byte = static_cast<uint32_t>((r * kTmaWriteCols + j) * 4);
      tile[(c.swizzle ? wgmma::swizzle128(byte) : byte) / 4] = static_cast<float>(1000 * (r + 1) + j);
    }
  }
  return tile;
}

// The matrices after the write: box element (r, j) added to (or stored at) (row0 + r, col0 + j) of
// matrix `batch` where that lies within the matrices; every other element as it was.
inline std::vector<float> tma_write_expected(const TmaWriteCase& c) {
  std::vector<float> m = tma_write_matrices(c);
  for (int r = 0; r < c.box_rows; ++r) {
    const int row = c.row0 + r;
    if (row < 0 || row >= c.rows) continue;
    for (int j = 0; j < kTmaWriteCols; ++j) {
      float& e = m[(static_cast<size_t>(c.batch) * c.rows + row) * c.W + c.col0 + j];
      e = (c.add ? e : 0.f) + static_cast<float>(1000 * (r + 1) + j);
    }
  }
  return m;
}

// The cases both tests run: the fused backward's boxes at head dim 64 (64 query rows) and 128 (32, the
// second and fourth blocks of 32 columns), rows past the end (its last query tile) and before the start,
// and one without the swizzle; and stores, swizzled with rows past the end, and not.
inline std::vector<TmaWriteCase> tma_write_cases() {
  std::vector<TmaWriteCase> cases(7);
  cases[1].W = 128;
  cases[1].box_rows = 32;
  cases[1].col0 = 32;
  cases[1].row0 = 20;
  cases[2].W = 128;
  cases[2].box_rows = 32;
  cases[2].col0 = 96;
  cases[2].batch = 0;
  cases[3].row0 = -5;
  cases[3].col0 = 32;
  cases[4].swizzle = false;
  cases[4].row0 = 10;
  cases[5].add = false;
  cases[5].row0 = 20;
  cases[5].col0 = 32;
  cases[6].add = false;
  cases[6].swizzle = false;
  cases[6].row0 = -3;
  return cases;
}

// What the GPU run gives: whether the driver encoded the map, and the matrices after the write.
struct TmaWriteSelftest {
  bool encoded = false;
  std::vector<float> matrices;
};
TmaWriteSelftest run_tma_write_selftest(const TmaWriteCase& c);

}  // namespace kiln::test
