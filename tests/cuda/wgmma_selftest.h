// One warpgroup through Hopper's wgmma (kernels/cuda/wgmma.cuh), on the GPU, for
// tests/cuda/test_tile_cuda.cpp (a .cu of its own, built for sm_90a: the Catch2 test stays plain
// C++). The same kernel (tests/cuda/wgmma_selftest_kernel.cuh) runs on the CPU's emulator in
// tests/kernels/test_wgmma.cpp, against the same inputs and products.
#pragma once

#include <string>
#include <vector>

#include "kernels/wgmma_layout.h"
#include "tests/cuda/probe_report.h"

namespace kiln::test {

// Inputs, row-major host floats rounded to bfloat16 (or float16) on the way in: a [64, 64], b [64,
// 64], v [64, 128]. Outputs, row-major floats: s = a b^T, av = a v, av_hi = a v[:, 64:], sv = s v
// (s rounded to the 16-bit type, as attention rounds P), tb = a^T b (both operands MN-major, as the
// fused attention backward reads K and dS^T for dQ^T = K^T dS^T).
struct WgmmaSelftest {
  std::vector<float> s, av, av_hi, sv, tb;
};
// Whether this build and the current device run the self-test: built for sm_90a, compute
// capability 9.0. The operands are staged in `order` (kernels/wgmma_layout.h): by row groups (the
// backward's layout), by pieces (the forward's) or swizzled (128-byte rows, the descriptors' swizzle
// mode): the descriptors differ, the products must not.
bool wgmma_selftest_runs_here();
WgmmaSelftest run_wgmma_selftest(bool bf16, const std::vector<float>& a, const std::vector<float>& b,
                                 const std::vector<float>& v, wgmma::Order order = wgmma::Order::kRowGroups);

// The identity probe, for a diagnosis when the products are wrong: in float16, a = I, and b and v
// hold ids (b[n][k] = 64 n + k - 2048, v[k][n] = 64 k + n % 64 - 2048: integers float16 holds
// exactly, unique in b and in each 64-column half of v). Then s = b^T, av = v, av_hi = v[:, 64:] and
// tb = b exactly, and an element in the wrong place names the element that the instruction read instead.
inline std::vector<float> wgmma_identity() {
  std::vector<float> m(64 * 64, 0.f);
  for (int i = 0; i < 64; ++i) m[static_cast<size_t>(i * 64 + i)] = 1.f;
  return m;
}
inline std::vector<float> wgmma_b_ids() {
  std::vector<float> m(64 * 64);
  for (int i = 0; i < 64 * 64; ++i) m[static_cast<size_t>(i)] = static_cast<float>(i - 2048);
  return m;
}
inline std::vector<float> wgmma_v_ids() {
  std::vector<float> m(64 * 128);
  for (int k = 0; k < 64; ++k) {
    for (int n = 0; n < 128; ++n) m[static_cast<size_t>(k * 128 + n)] = static_cast<float>(64 * k + n % 64 - 2048);
  }
  return m;
}

// The probe's misreads, at most `limit` of them, each as "s[m][n] = b(n, k) read b(n', k')" (or
// v(k, n) for av and av_hi), followed by the count of wrong elements per output; empty when all are
// right.
inline std::vector<std::string> wgmma_probe_misreads(const WgmmaSelftest& got, size_t limit = 12) {
  // An id names (row, column) of b, or of v within the half of its columns that `col` is in.
  const auto name = [](const char* what, int col_base) {
    return [what, col_base](float id, int col) {
      const int x = static_cast<int>(id) + 2048;
      if (static_cast<float>(x - 2048) != id || x < 0 || x >= 4096) return "non-id " + std::to_string(id);
      const int base = col >= 64 ? 64 : col_base;
      return std::string(what) + "(" + std::to_string(x / 64) + ", " + std::to_string(x % 64 + base) + ")";
    };
  };
  std::vector<float> s_ids(64 * 64), v_ids = wgmma_v_ids(), hi_ids(64 * 64);
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < 64; ++c) {
      s_ids[static_cast<size_t>(r * 64 + c)] = static_cast<float>(64 * c + r - 2048);  // s[m][n] = b[n][m]
      hi_ids[static_cast<size_t>(r * 64 + c)] = v_ids[static_cast<size_t>(r * 128 + 64 + c)];
    }
  }
  std::vector<std::string> out;
  report_misreads(out, "s", got.s, s_ids, 64, name("b", 0), limit);
  report_misreads(out, "av", got.av, v_ids, 128, name("v", 0), limit);
  report_misreads(out, "av_hi", got.av_hi, hi_ids, 64, name("v", 64), limit);
  report_misreads(out, "tb", got.tb, wgmma_b_ids(), 64, name("b", 0), limit);
  return out;
}

// Small integers in [-2, 2]: with K = 64, every entry of s is at most 256 in magnitude (exact in
// both 16-bit types), and every sum is exact in float32.
inline std::vector<float> wgmma_ints(int rows, int cols, int seed) {
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      m[static_cast<size_t>(r * cols + c)] = static_cast<float>((seed + 3 * r + 7 * c) % 5 - 2);
    }
  }
  return m;
}

}  // namespace kiln::test
