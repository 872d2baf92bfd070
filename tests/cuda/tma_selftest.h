// A tensor copy (TMA, kernels/cuda/tma.cuh) on the GPU, for tests/cuda/test_tile_cuda.cpp (a .cu of
// its own, built for sm_90a). The same kernel (tests/cuda/tma_selftest_kernel.cuh) runs on the CPU's
// emulator in tests/kernels/test_simt.cpp, on the same cases, against the same expected tile. So one
// GPU run tells whether the emulator's model of the copy (the box walked innermost first, zeros past
// the tensor's ends, the bytes completing the barrier's phase) and the view the attention forward uses
// (a matrix as [8 elements, rows, W / 8 pieces], the pieces 16 bytes apart) hold on the hardware.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tma_box.h"

namespace kiln::test {

// `batches` matrices of [rows, W] 16-bit values, one after another; the box of [8, box_rows, W / 8]
// at row `row0` (which may run past either end) of matrix `batch`.
struct TmaSelftestCase {
  int rows = 40, W = 64, batches = 2, box_rows = 64;
  int32_t row0 = 0, batch = 1;
};

// The matrices' values: their index plus one (so a zero is a fill), modulo 2^16.
inline std::vector<uint16_t> tma_matrices(const TmaSelftestCase& c) {
  std::vector<uint16_t> m(static_cast<size_t>(c.batches) * c.rows * c.W);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint16_t>(i + 1);
  return m;
}

// The view of the matrices at `base` by pieces, with the case's box and the matrices as dimension 3,
// as the attention forward builds its maps (make_forward_maps).
inline tma::Box tma_pieces_box(const void* base, const TmaSelftestCase& c) {
  const auto W = static_cast<uint64_t>(c.W);
  tma::Box b = tma::pieces_view(base, static_cast<uint64_t>(c.rows), W * 2, static_cast<uint32_t>(c.W),
                                static_cast<uint32_t>(c.box_rows));
  b.dims[3] = static_cast<uint64_t>(c.batches);
  b.strides[3] = static_cast<uint64_t>(c.rows) * W * 2;
  return b;
}

// The tile the copy lands: element e of row r of piece p at (p * box_rows + r) * 8 + e, the matrix's
// (row0 + r, 8 p + e), zero where that row is outside it.
inline std::vector<uint16_t> tma_expected(const TmaSelftestCase& c) {
  const std::vector<uint16_t> m = tma_matrices(c);
  std::vector<uint16_t> out(static_cast<size_t>(c.box_rows) * c.W, 0);
  for (int p = 0; p < c.W / 8; ++p) {
    for (int r = 0; r < c.box_rows; ++r) {
      const int row = c.row0 + r;
      if (row < 0 || row >= c.rows) continue;
      for (int e = 0; e < 8; ++e) {
        out[static_cast<size_t>((p * c.box_rows + r) * 8 + e)] =
            m[(static_cast<size_t>(c.batch) * c.rows + row) * c.W + 8 * p + e];
      }
    }
  }
  return out;
}

// The cases both tests run: rows past the end, before the start, a 128-row box, head dim 128.
inline std::vector<TmaSelftestCase> tma_selftest_cases() {
  std::vector<TmaSelftestCase> cases(4);
  cases[1].row0 = -8;
  cases[2].box_rows = 128;
  cases[2].row0 = 5;
  cases[3].W = 128;
  cases[3].row0 = 30;
  cases[3].batch = 0;
  return cases;
}

// What the GPU run gives: whether the driver encoded the map, and the landed tile.
struct TmaSelftest {
  bool encoded = false;
  std::vector<uint16_t> tile;
};
TmaSelftest run_tma_selftest(const TmaSelftestCase& c);

}  // namespace kiln::test
