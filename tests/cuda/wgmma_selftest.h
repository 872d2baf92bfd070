// One warpgroup through Hopper's wgmma (kernels/cuda/wgmma.cuh), on the GPU, for
// tests/cuda/test_tile_cuda.cpp (a .cu of its own, built for sm_90a: the Catch2 test stays plain
// C++). The same kernel (tests/cuda/wgmma_selftest_kernel.cuh) runs on the CPU's emulator in
// tests/kernels/test_wgmma.cpp, against the same inputs and products.
#pragma once

#include <string>
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

// The identity probe, for a diagnosis when the products are wrong: in float16, a = I, and b and v
// hold ids (b[n][k] = 64 n + k - 2048, v[k][n] = 64 k + n % 64 - 2048: integers float16 holds
// exactly, unique in b and in each 64-column half of v). Then s = b^T, av = v and av_hi = v[:, 64:]
// exactly, and an element in the wrong place names the element that the instruction read instead.
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
  std::vector<std::string> out;
  const auto name = [](const char* what, float id, int col_base) {
    const int x = static_cast<int>(id) + 2048;
    if (static_cast<float>(x - 2048) != id || x < 0 || x >= 4096) return std::string("non-id ") + std::to_string(id);
    return std::string(what) + "(" + std::to_string(x / 64) + ", " + std::to_string(x % 64 + col_base) + ")";
  };
  const auto scan = [&](const char* output, const std::vector<float>& m, int cols, const char* what, int col_base,
                        auto want_at) {
    int wrong = 0;
    for (int r = 0; r < 64; ++r) {
      for (int c = 0; c < cols; ++c) {
        const float want = want_at(r, c), have = m[static_cast<size_t>(r * cols + c)];
        if (have == want) continue;
        ++wrong;
        if (out.size() < limit) {
          const int base = c >= 64 ? 64 : col_base;
          out.push_back(std::string(output) + "[" + std::to_string(r) + "][" + std::to_string(c) + "] = " +
                        name(what, want, base) + " read " + name(what, have, base));
        }
      }
    }
    if (wrong > 0) out.push_back(std::string(output) + ": " + std::to_string(wrong) + " elements wrong");
  };
  // s[m][n] = b[n][m]: its id names (n, k = m). v's ids name (k, n % 64), n's half from the column.
  scan("s", got.s, 64, "b", 0, [](int r, int c) { return static_cast<float>(64 * c + r - 2048); });
  scan("av", got.av, 128, "v", 0, [](int r, int c) { return static_cast<float>(64 * r + c % 64 - 2048); });
  scan("av_hi", got.av_hi, 64, "v", 64, [](int r, int c) { return static_cast<float>(64 * r + c - 2048); });
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
