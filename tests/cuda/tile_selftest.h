// One warp through the tensor-core tiles of kernels/cuda/tile.cuh, on the GPU, for
// tests/cuda/test_tile_cuda.cpp (a .cu of its own: the Catch2 test stays plain C++). The same kernel
// (tests/cuda/tile_selftest_kernel.cuh) runs on the CPU's emulator in tests/kernels/test_simt.cpp,
// against the same inputs and products below.
#pragma once

#include <string>
#include <vector>

#include "tests/cuda/probe_report.h"

namespace kiln::test {

// Inputs: A [16, 16], K [16, 16] and V [16, 8], row-major host floats, rounded to bfloat16 (or
// float16) on the way in. Outputs, row-major floats: S = A @ K^T [16, 16] (two C tiles, K's rows
// 0-7 and 8-15 through load_b_transposed), AV = A @ V [16, 8] (load_b), and SV = S @ V [16, 8] with
// S re-read as an A tile (a_from_c, rounded to the 16-bit type), as attention computes P @ V, and KT =
// K^T @ A^T [16, 16] with K^T loaded as the A operand (load_a_transposed, the fused backward's K^T).
struct TileSelftest {
  std::vector<float> s, av, sv, kt;
};
inline constexpr int kTileSelftestFloats = 256 + 128 + 128 + 256;  // s, av, sv, kt one after another
inline TileSelftest split_tile_selftest(const std::vector<float>& all) {
  const auto part = [&](int from, int to) { return std::vector<float>(all.begin() + from, all.begin() + to); };
  return {part(0, 256), part(256, 384), part(384, 512), part(512, 768)};
}
TileSelftest run_tile_selftest(bool bf16, const std::vector<float>& a, const std::vector<float>& k,
                               const std::vector<float>& v);

// The identity probe, for a diagnosis when the products are wrong: a = I, k and v hold ids (k[n][j] =
// 16 n + j - 128, v[j][n] = 8 j + n - 64: integers both 16-bit types hold exactly), so s = k^T, kt = k^T
// and av = v exactly, and an element in the wrong place names the element that the lanes' fragment maps
// delivered instead.
inline std::vector<float> tile_identity() {
  std::vector<float> m(16 * 16, 0.f);
  for (int i = 0; i < 16; ++i) m[static_cast<size_t>(i * 16 + i)] = 1.f;
  return m;
}
inline std::vector<float> tile_ids(int rows, int cols) {
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (int i = 0; i < rows * cols; ++i) m[static_cast<size_t>(i)] = static_cast<float>(i - rows * cols / 2);
  return m;
}
// The probe's misreads ("s[m][n] = k(n, m) read k(n', j')", "av[j][n] = v(j, n) read ..."), at most
// `limit`, then the count of wrong elements per output; empty when all are right.
inline std::vector<std::string> tile_probe_misreads(const TileSelftest& got, size_t limit = 12) {
  const auto name = [](const char* what, int cols, int count) {
    return [what, cols, count](float id, int) {
      const int x = static_cast<int>(id) + count / 2;
      if (static_cast<float>(x - count / 2) != id || x < 0 || x >= count) return "non-id " + std::to_string(id);
      return std::string(what) + "(" + std::to_string(x / cols) + ", " + std::to_string(x % cols) + ")";
    };
  };
  std::vector<float> s_ids(16 * 16);
  const std::vector<float> k_ids = tile_ids(16, 16), v_ids = tile_ids(16, 8);
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) s_ids[static_cast<size_t>(r * 16 + c)] = k_ids[static_cast<size_t>(c * 16 + r)];
  }
  std::vector<std::string> out;
  report_misreads(out, "s", got.s, s_ids, 16, name("k", 16, 256), limit);
  report_misreads(out, "kt", got.kt, s_ids, 16, name("k", 16, 256), limit);
  report_misreads(out, "av", got.av, v_ids, 8, name("v", 8, 128), limit);
  return out;
}

// Small integers in [-4, 4]: every product and sum of the self-test is exact in both 16-bit types.
inline std::vector<float> tile_ints(int rows, int cols, int seed) {
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      m[static_cast<size_t>(r * cols + c)] = static_cast<float>((seed + 5 * r + 3 * c) % 9 - 4);
    }
  }
  return m;
}

// out[r][c] = sum_k x[r][k] * y[k][c] (y_transposed: y[c][k]).
inline std::vector<float> product(const std::vector<float>& x, const std::vector<float>& y, int m, int n, int kk,
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

// x [rows, cols] transposed, row-major.
inline std::vector<float> transposed(const std::vector<float>& x, int rows, int cols) {
  std::vector<float> out(x.size());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) out[static_cast<size_t>(c * rows + r)] = x[static_cast<size_t>(r * cols + c)];
  }
  return out;
}

}  // namespace kiln::test
