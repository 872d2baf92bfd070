// Hopper's wgmma on the CPU: the staged layout and the descriptors of kernels/wgmma_layout.h against
// each other, and the self-test kernel of tests/cuda/wgmma_selftest_kernel.cuh on the emulator of
// kernels/simt/simt.h, against exact products. What this cannot check is the layout against the
// hardware: the emulator reads operands through the same descriptor functions that the kernels
// build. tests/cuda/test_tile_cuda.cpp runs the same self-test on a GPU of compute capability 9.0.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "kernels/half.h"
#include "kernels/simt/simt.h"
#include "kernels/wgmma_layout.h"
#include "tests/cuda/tile_selftest.h"
#include "tests/cuda/wgmma_selftest.h"
#include "tests/cuda/wgmma_selftest_kernel.cuh"

using namespace kiln;
using namespace kiln::wgmma;

TEST_CASE("wgmma descriptors: the fields sit in bits 0-13, 16-29 and 32-45 in 16-byte units", "[wgmma]") {
  // start 0x1230 -> 0x123, LBO 128 -> 8, SBO 2048 -> 128; no base offset, no swizzle.
  constexpr uint64_t d = descriptor(0x1230, 128, 2048);
  STATIC_REQUIRE(d == 0x0000008000080123ull);
  STATIC_REQUIRE(start_of(d) == 0x1230);
  STATIC_REQUIRE(lbo_of(d) == 128);
  STATIC_REQUIRE(sbo_of(d) == 2048);
  STATIC_REQUIRE(start_of(advance(d, 256)) == 0x1330);
  STATIC_REQUIRE(lbo_of(advance(d, 256)) == 128);
  // The largest start the 14 bits hold: 256 KiB - 16, past an H100's 227 KiB of shared memory per block.
  STATIC_REQUIRE(start_of(descriptor(256 * 1024 - 16, 16, 16)) == 256 * 1024 - 16);
}

TEST_CASE("wgmma layout: a staged tile holds every element once, in core matrices of 128 contiguous bytes",
          "[wgmma]") {
  const int64_t W = GENERATE(int64_t{16}, int64_t{64}, int64_t{128});
  const int64_t rows = 64;
  INFO("W " << W);
  std::set<int64_t> seen;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < W; ++c) {
      const int64_t at = stage_offset(r, c, W);
      REQUIRE(at >= 0);
      REQUIRE(at < rows * W);
      seen.insert(at);
      // A core matrix: 8 elements of a row side by side (16 bytes), its 8 rows 16 bytes apart.
      const int64_t core = stage_offset(r / kCore * kCore, c / kCore * kCore, W);
      CHECK(at - core == (r % kCore) * kCore + c % kCore);
      CHECK(core % (kCore * kCore) == 0);
    }
  }
  CHECK(static_cast<int64_t>(seen.size()) == rows * W);
}

TEST_CASE("wgmma descriptors: K-major and MN-major reads of a staged tile find its elements", "[wgmma]") {
  const int64_t W = GENERATE(int64_t{64}, int64_t{128});
  const int64_t rows = 64;
  const uint32_t base = 4096;
  INFO("W " << W);
  const auto addr = [&](int64_t r, int64_t c) { return base + 2 * static_cast<uint32_t>(stage_offset(r, c, W)); };
  // Rows along M/N, W along K: element (mn, k) of K step s is the tile's (mn, 16 s + k).
  const uint64_t by_k = rows_by_k(base, W);
  for (int s = 0; s < W / kK; ++s) {
    const uint64_t d = advance(by_k, static_cast<uint32_t>(s) * k_step_bytes());
    for (int mn = 0; mn < rows; ++mn) {
      for (int k = 0; k < kK; ++k) REQUIRE(k_major_address(d, mn, k) == addr(mn, 16 * s + k));
    }
  }
  // Rows along K, W along N: element (n, k) of K step s is the tile's (16 s + k, n).
  const uint64_t by_n = rows_by_n(base, W);
  for (int s = 0; s < rows / kK; ++s) {
    const uint64_t d = advance(by_n, static_cast<uint32_t>(s) * row_step_bytes(W));
    for (int n = 0; n < W; ++n) {
      for (int k = 0; k < kK; ++k) REQUIRE(mn_major_address(d, n, k) == addr(16 * s + k, n));
    }
  }
  // Advanced by 8 core matrices along N, the MN-major descriptor starts at column 64.
  const uint64_t hi = advance(by_n, 8 * next_cols_bytes());
  CHECK(mn_major_address(hi, 0, 0) == addr(0, 64));
  CHECK(mn_major_address(hi, 9, 3) == addr(3, 73));
}

namespace {

// The self-test kernel on the emulator, as tests/cuda/wgmma_selftest.cu runs it on the GPU.
template <typename T>
test::WgmmaSelftest run_emulated(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& v,
                                 simt::Schedule schedule, int64_t& collectives) {
  auto rounded = [](const std::vector<float>& x) {
    std::vector<T> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = static_cast<T>(x[i]);
    return r;
  };
  const std::vector<T> ra = rounded(a), rb = rounded(b), rv = rounded(v);
  test::WgmmaSelftest out{std::vector<float>(64 * 64, std::nanf("")), std::vector<float>(64 * 128, std::nanf("")),
                          std::vector<float>(64 * 64, std::nanf("")), std::vector<float>(64 * 128, std::nanf(""))};
  tile::SmemCarver sizes;
  const test::WgmmaSelftestSmem<T> pieces(sizes);
  (void)pieces;
  simt::LaunchConfig cfg;
  cfg.grid = simt::Dim3{1, 1, 1};
  cfg.block = simt::Dim3{static_cast<unsigned>(kThreads), 1, 1};
  cfg.schedule = schedule;
  cfg.dynamic_smem = sizes.bytes();
  const simt::LaunchStats stats = simt::launch(cfg, [&] {
    test::wgmma_selftest_kernel<T>(ra.data(), rb.data(), rv.data(), out.s.data(), out.av.data(), out.av_hi.data(),
                                   out.sv.data());
  });
  collectives = stats.collectives_in("kernels/cuda/wgmma.cuh");
  return out;
}

}  // namespace

TEST_CASE("wgmma, emulated: the self-test's products through the descriptors are exact", "[wgmma][simt]") {
  const bool bf16 = GENERATE(true, false);
  const simt::Schedule schedule = GENERATE(simt::Schedule::Lowest, simt::Schedule::Highest);
  INFO((bf16 ? "bfloat16" : "float16"));
  const std::vector<float> a = test::wgmma_ints(64, 64, 1), b = test::wgmma_ints(64, 64, 2);
  const std::vector<float> v = test::wgmma_ints(64, 128, 3);
  int64_t collectives = 0;
  const test::WgmmaSelftest got = bf16 ? run_emulated<BFloat16>(a, b, v, schedule, collectives)
                                       : run_emulated<Half>(a, b, v, schedule, collectives);
  const std::vector<float> s = test::product(a, b, 64, 64, 64, true);
  CHECK(got.s == s);
  const std::vector<float> av = test::product(a, v, 64, 128, 64, false);
  CHECK(got.av == av);
  std::vector<float> av_hi(64 * 64);
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < 64; ++c) av_hi[static_cast<size_t>(r * 64 + c)] = av[static_cast<size_t>(r * 128 + 64 + c)];
  }
  CHECK(got.av_hi == av_hi);
  CHECK(got.sv == test::product(s, v, 64, 128, 64, false));
  // 4 K steps each of s, av, av_hi and sv: 16 instructions, each issued by the 4 warps.
  CHECK(collectives == 16 * 4);
}

// The identity probe (tests/cuda/wgmma_selftest.h): with A = I, every output element is one element of
// B or V, so a wrong descriptor or layout would be reported element by element, naming the element
// read instead. The GPU test runs the same probe on the real instruction.
TEST_CASE("wgmma, emulated: the identity probe reads every element of B and V where the layout puts it",
          "[wgmma][simt]") {
  int64_t collectives = 0;
  const test::WgmmaSelftest got = run_emulated<Half>(test::wgmma_identity(), test::wgmma_b_ids(), test::wgmma_v_ids(),
                                                     simt::Schedule::Lowest, collectives);
  const std::vector<std::string> misreads = test::wgmma_probe_misreads(got);
  for (const std::string& m : misreads) UNSCOPED_INFO(m);
  CHECK(misreads.empty());
  // The report names what was read: s[0][1] should be b(1, 0), and here it reads b(2, 0).
  test::WgmmaSelftest wrong = got;
  wrong.s[1] = got.s[2];
  const std::vector<std::string> one = test::wgmma_probe_misreads(wrong);
  REQUIRE(one.size() == 2);
  CHECK(one[0] == "s[0][1] = b(1, 0) read b(2, 0)");
  CHECK(one[1] == "s: 1 elements wrong");
}
