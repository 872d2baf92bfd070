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
#include <utility>
#include <vector>

#include "kernels/cuda/pipeline.cuh"
#include "kernels/cuda/wgmma.cuh"
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
  // The swizzle mode in bits 62-63; advancing keeps it.
  STATIC_REQUIRE(descriptor(0x1230, 128, 2048, kSwizzle128) == 0x4000008000080123ull);
  STATIC_REQUIRE(swizzle_of(advance(descriptor(0x1230, 128, 2048, kSwizzle128), 32)) == kSwizzle128);
  STATIC_REQUIRE(swizzle_of(d) == 0);
  // The 128-byte swizzle: address 0x1234 is chunk 3 of row 4 (of 8 rows of 128 bytes), which goes to
  // chunk 3 ^ 4 = 7: 0x1274. Row 0 of each 1024 bytes stays in place.
  STATIC_REQUIRE(swizzle128(0x1234) == 0x1274);
  STATIC_REQUIRE(swizzle128(0x1030) == 0x1030);
}

TEST_CASE("wgmma layout: a staged tile holds every element once, in core matrices or swizzled rows", "[wgmma]") {
  const int64_t W = GENERATE(int64_t{16}, int64_t{64}, int64_t{128});
  const int64_t rows = GENERATE(int64_t{64}, int64_t{128});
  const Order order = GENERATE(Order::kRowGroups, Order::kPieces, Order::kSwizzled);
  if (order == Order::kSwizzled && W % 64 != 0) return;  // rows of 64 elements
  const Staging s{order == Order::kRowGroups ? 0 : rows, W, order};
  INFO("W " << W << ", rows " << rows << ", " << order_name(order));
  std::set<int64_t> seen;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < W; ++c) {
      const int64_t at = s.offset(r, c);
      REQUIRE(at >= 0);
      REQUIRE(at < rows * W);
      seen.insert(at);
      if (order == Order::kRowGroups) CHECK(at == stage_offset(r, c, W));
      if (order == Order::kSwizzled) {
        // A 16-byte chunk of 8 elements stays whole, in row r's 128 bytes of its 64-column block, at
        // chunk (c / 8) ^ (r % 8).
        CHECK(at - s.offset(r, c / kCore * kCore) == c % kCore);
        CHECK(at / 64 == c / 64 * rows + r);
        CHECK(at % 64 / kCore == ((c % 64 / kCore) ^ (r % kCore)));
        continue;
      }
      // A core matrix: 8 elements of a row side by side (16 bytes), its 8 rows 16 bytes apart.
      const int64_t core = s.offset(r / kCore * kCore, c / kCore * kCore);
      CHECK(at - core == (r % kCore) * kCore + c % kCore);
      CHECK(core % (kCore * kCore) == 0);
    }
  }
  CHECK(static_cast<int64_t>(seen.size()) == rows * W);
  // The pieces in memory order: not swizzled, piece i is the i-th 16 bytes; swizzled, it is in the
  // i / 8-th 128 bytes, at chunk (i % 8) ^ (row % 8).
  for (int64_t i = 0; i < rows * W / kCore; ++i) {
    const int64_t r = s.piece_row(i), c = s.piece_col(i);
    REQUIRE(r < rows);
    REQUIRE(c < W);
    REQUIRE(c % kCore == 0);
    const int64_t expected = order == Order::kSwizzled ? i / kCore * kCore + ((i % kCore) ^ (r % kCore)) : i;
    CHECK(s.offset(r, c) == expected * kCore);
  }
  if (order == Order::kPieces) {
    // What a tensor copy writes from a box of [8 elements, rows, W / 8 pieces]: element e of row r of
    // piece c at (c * rows + r) * 8 + e.
    CHECK(s.offset(5, 19) == (2 * rows + 5) * 8 + 3);
    CHECK(s.offset(rows - 1, W - 1) == rows * W - 1);
  }
  if (order == Order::kSwizzled) {
    // Row 5's chunk 2 (columns 16 .. 23) sits at chunk 2 ^ 5 = 7 of its row.
    CHECK(s.offset(5, 19) == 5 * 64 + 7 * 8 + 3);
  }
}

TEST_CASE("wgmma descriptors: K-major and MN-major reads of a staged tile find its elements", "[wgmma]") {
  const int64_t W = GENERATE(int64_t{64}, int64_t{128});
  const int64_t rows = GENERATE(int64_t{64}, int64_t{128});
  const Order order = GENERATE(Order::kRowGroups, Order::kPieces, Order::kSwizzled);
  const Staging s{order == Order::kRowGroups ? 0 : rows, W, order};
  const uint32_t base = 4096;  // on 1024 bytes, as a swizzled tile must be
  INFO("W " << W << ", rows " << rows << ", " << order_name(order));
  const auto addr = [&](int64_t r, int64_t c) { return base + 2 * static_cast<uint32_t>(s.offset(r, c)); };
  // Rows along M/N, W along K: element (mn, k) of K step t is the tile's (mn, 16 t + k); a descriptor
  // started at row r0 (a warpgroup's 64 rows of a taller tile) reads from there.
  for (const int64_t r0 : {int64_t{0}, rows - 64}) {
    const uint64_t by_k = rows_by_k(base + s.position(r0, 0), s);
    for (int t = 0; t < W / kK; ++t) {
      const uint64_t d = advance(by_k, s.position(0, 16 * t));
      for (int mn = 0; mn < 64; ++mn) {
        for (int k = 0; k < kK; ++k) REQUIRE(k_major_address(d, mn, k) == addr(r0 + mn, 16 * t + k));
      }
    }
  }
  // Rows along K, W along N: element (n, k) of K step t is the tile's (16 t + k, n).
  const uint64_t by_n = rows_by_n(base, s);
  for (int t = 0; t < rows / kK; ++t) {
    const uint64_t d = advance(by_n, static_cast<uint32_t>(t) * row_step_bytes(s));
    for (int n = 0; n < W; ++n) {
      for (int k = 0; k < kK; ++k) REQUIRE(mn_major_address(d, n, k) == addr(16 * t + k, n));
    }
  }
  // Not swizzled, the K steps are k_step_bytes apart; swizzled, within a block of 64 columns.
  CHECK(s.position(0, 32) == 2 * k_step_bytes(s));
  if (order != Order::kRowGroups) return;
  // The forms for a tile by row groups give the same descriptors.
  CHECK(rows_by_k(base, W) == rows_by_k(base, s));
  CHECK(rows_by_n(base, W) == by_n);
  CHECK(k_step_bytes() == k_step_bytes(s));
  CHECK(row_step_bytes(W) == row_step_bytes(s));
  // Advanced by 8 core matrices along N, the MN-major descriptor starts at column 64.
  const uint64_t hi = advance(by_n, 8 * next_cols_bytes());
  CHECK(mn_major_address(hi, 0, 0) == addr(0, 64));
  CHECK(mn_major_address(hi, 9, 3) == addr(3, 73));
}

namespace {

// The self-test kernel on the emulator, as tests/cuda/wgmma_selftest.cu runs it on the GPU.
template <typename T>
test::WgmmaSelftest run_emulated(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& v,
                                 simt::Schedule schedule, int64_t& collectives, Order order = Order::kRowGroups) {
  auto rounded = [](const std::vector<float>& x) {
    std::vector<T> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = static_cast<T>(x[i]);
    return r;
  };
  const std::vector<T> ra = rounded(a), rb = rounded(b), rv = rounded(v);
  test::WgmmaSelftest out{std::vector<float>(64 * 64, std::nanf("")), std::vector<float>(64 * 128, std::nanf("")),
                          std::vector<float>(64 * 64, std::nanf("")), std::vector<float>(64 * 128, std::nanf("")),
                          std::vector<float>(64 * 64, std::nanf(""))};
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
                                   out.sv.data(), out.tb.data(), order);
  });
  collectives = stats.collectives_in("kernels/cuda/wgmma.cuh");
  return out;
}

}  // namespace

TEST_CASE("wgmma, emulated: the self-test's products through the descriptors are exact", "[wgmma][simt]") {
  const bool bf16 = GENERATE(true, false);
  const simt::Schedule schedule = GENERATE(simt::Schedule::Lowest, simt::Schedule::Highest);
  const Order order = GENERATE(Order::kRowGroups, Order::kPieces, Order::kSwizzled);
  INFO((bf16 ? "bfloat16" : "float16") << ", staged " << order_name(order));
  const std::vector<float> a = test::wgmma_ints(64, 64, 1), b = test::wgmma_ints(64, 64, 2);
  const std::vector<float> v = test::wgmma_ints(64, 128, 3);
  int64_t collectives = 0;
  const test::WgmmaSelftest got = bf16 ? run_emulated<BFloat16>(a, b, v, schedule, collectives, order)
                                       : run_emulated<Half>(a, b, v, schedule, collectives, order);
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
  CHECK(got.tb == test::product(test::transposed(a, 64, 64), b, 64, 64, 64, false));
  // 4 K steps each of s, av, av_hi, sv and tb: 20 instructions, each issued by the 4 warps.
  CHECK(collectives == 20 * 4);
}

// The identity probe (tests/cuda/wgmma_selftest.h): with A = I, every output element is one element of
// B or V, so a wrong descriptor or layout would be reported element by element, naming the element
// read instead. The GPU test runs the same probe on the real instruction.
TEST_CASE("wgmma, emulated: the identity probe reads every element of B and V where the layout puts it",
          "[wgmma][simt]") {
  const Order order = GENERATE(Order::kRowGroups, Order::kPieces, Order::kSwizzled);
  INFO("staged " << order_name(order));
  int64_t collectives = 0;
  const test::WgmmaSelftest got = run_emulated<Half>(test::wgmma_identity(), test::wgmma_b_ids(), test::wgmma_v_ids(),
                                                     simt::Schedule::Lowest, collectives, order);
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

// The emulator's model of the instruction's asynchrony (kernels/cuda/wgmma.cuh): an instruction is
// computed when a wait lands it, reading shared memory as it is then; its accumulators read as NaN until
// that wait; wait<1> lands all groups but the newest; and it faults on an instruction issued with no
// fence since the last wait, on A registers changed before the wait, and on a thread that exits with
// instructions in flight. One warpgroup, A = all ones [64, 16], B[c][k] = c [32, 16]: A B^T = 16 c.
namespace {

struct AsyncCase {
  float s_before = 0, s_landed = 0, t_after_one_wait = 0, t_landed = 0, u_landed = 0;
};

// Thread 0 stages A (ones) and B (column c all c), fenced for the async proxy unless `fence_staging` is
// false, then the warpgroup runs body(A's descriptor, B, B's descriptor).
// launch_threads: the same with a block of `threads`.
template <typename Body> simt::LaunchStats launch_threads(int threads, Body&& body, bool fence_staging = true) {
  simt::LaunchConfig cfg;
  cfg.grid = simt::Dim3{1, 1, 1};
  cfg.block = simt::Dim3{static_cast<unsigned>(threads), 1, 1};
  cfg.dynamic_smem = (64 + 32) * 16 * sizeof(Half);
  return simt::launch(cfg, [&] {
    Half* a = reinterpret_cast<Half*>(tile::dynamic_smem());
    Half* b = a + 64 * 16;
    if (threadIdx.x == 0) {
      for (int r = 0; r < 64; ++r) {
        for (int k = 0; k < 16; ++k) a[stage_offset(r, k, 16)] = Half(1.f);
      }
      for (int c = 0; c < 32; ++c) {
        for (int k = 0; k < 16; ++k) b[stage_offset(c, k, 16)] = Half(static_cast<float>(c));
      }
    }
    if (fence_staging) fence_async_smem();
    __syncthreads();
    body(rows_by_k(smem_address(a), 16), b, rows_by_k(smem_address(b), 16));
  });
}
template <typename Body> simt::LaunchStats launch_warpgroup(Body&& body, bool fence_staging = true) {
  return launch_threads(kThreads, std::forward<Body>(body), fence_staging);
}

}  // namespace

TEST_CASE("wgmma, emulated: results land at the wait, read shared memory then, and are NaN before", "[wgmma][simt]") {
  std::vector<AsyncCase> got(kThreads);
  launch_warpgroup([&](uint64_t da, Half* b, uint64_t db) {
    AsyncCase& g = got[threadIdx.x];
    // This thread's element 0 of tile 0: column c_coord(lane, 0).col of the product.
    CTile s[4], t[4], u[4];
    fence();
    mma_ss<Half, 32>(s, da, db, false);
    commit();
    mma_ss<Half, 32>(t, da, db, false);
    mma_ss<Half, 32>(t, da, db, true);  // t = 2 A B^T, two instructions in one group
    commit();
    g.s_before = s[0].r[0];
    wait<1>();  // s's group lands, t's does not
    g.s_landed = s[0].r[0];
    g.t_after_one_wait = t[0].r[0];
    wait<0>();
    g.t_landed = t[0].r[0];
    // u is issued, then B is doubled (and fenced) before the wait: the instruction reads B until it
    // completes.
    fence();
    mma_ss<Half, 32>(u, da, db, false);
    commit();
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int c = 0; c < 32; ++c) {
        for (int k = 0; k < 16; ++k) b[stage_offset(c, k, 16)] = Half(2.f * static_cast<float>(c));
      }
      fence_async_smem();
    }
    __syncthreads();
    wait<0>();
    g.u_landed = u[0].r[0];
  });
  for (int i = 0; i < kThreads; ++i) {
    INFO("thread " << i);
    const float col = static_cast<float>(tile::c_coord(i % 32, 0).col);
    CHECK(std::isnan(got[i].s_before));
    CHECK(got[i].s_landed == 16.f * col);
    CHECK(std::isnan(got[i].t_after_one_wait));
    CHECK(got[i].t_landed == 32.f * col);
    CHECK(got[i].u_landed == 32.f * col);
  }
}

TEST_CASE("wgmma, emulated: a missing fence, A registers changed in flight and a missing wait are faults",
          "[wgmma][simt]") {
  using Catch::Matchers::Contains;
  // Operands staged with plain stores and no fence_async_smem: the tensor cores may not see them.
  const auto one_product = [](uint64_t da, Half*, uint64_t db) {
    CTile s[4];
    fence();
    mma_ss<Half, 32>(s, da, db, false);
    commit();
    wait<0>();
  };
  CHECK_THROWS_WITH(launch_warpgroup(one_product, false),
                    Contains("async-proxy read") && Contains("after the block's last fence.proxy.async"));
  CHECK_NOTHROW(launch_warpgroup(one_product, true));
  // One element of B rewritten after a product read it, and read again with no fence since the store:
  // none at all, or one before the store, which does not cover it (a fence publishes what was stored
  // before it).
  enum class Fence { kNone, kBeforeStore, kAfterStore };
  const auto rewritten = [&](Fence fence) {
    return launch_warpgroup([&, fence](uint64_t da, Half* b, uint64_t db) {
      one_product(da, b, db);
      __syncthreads();
      if (threadIdx.x == 0) {
        if (fence == Fence::kBeforeStore) fence_async_smem();
        b[stage_offset(5, 3, 16)] = Half(-1.f);
        if (fence == Fence::kAfterStore) fence_async_smem();
      }
      __syncthreads();
      one_product(da, b, db);
    });
  };
  CHECK_THROWS_WITH(rewritten(Fence::kNone), Contains("async-proxy read") && Contains("tests/kernels/test_wgmma.cpp"));
  CHECK_THROWS_WITH(rewritten(Fence::kBeforeStore), Contains("async-proxy read"));
  CHECK_NOTHROW(rewritten(Fence::kAfterStore));
  // B copied anew by every thread with cp.async (one 16-byte piece each, 32 rows x 16 columns), and
  // fenced by thread 0 only: each copying thread must fence its own copies.
  std::vector<Half> fresh(32 * 16, Half(3.f));
  const auto copied = [&](bool all_fence) {
    return launch_warpgroup([&, all_fence](uint64_t da, Half* b, uint64_t db) {
      one_product(da, b, db);
      __syncthreads();
      if (threadIdx.x < 64) {
        simt::copy_async(b + 8 * threadIdx.x, fresh.data() + 8 * threadIdx.x, 16, 16);
        simt::commit_copies();
        simt::wait_copies(0);
      }
      if (all_fence || threadIdx.x == 0) fence_async_smem();
      __syncthreads();
      one_product(da, b, db);
    });
  };
  CHECK_THROWS_WITH(copied(false), Contains("cp.async landed there") && Contains("has not run fence.proxy.async"));
  CHECK_NOTHROW(copied(true));
  CHECK_THROWS_WITH(launch_warpgroup([](uint64_t da, Half*, uint64_t db) {
                      CTile s[4];
                      mma_ss<Half, 32>(s, da, db, false);
                    }),
                    Contains("no wgmma::fence() since the thread's last wait"));
  CHECK_THROWS_WITH(launch_warpgroup([](uint64_t da, Half*, uint64_t db) {
                      CTile s[4];
                      fence();
                      mma_ss<Half, 32>(s, da, db, false);
                      commit();
                      wait<0>();
                      mma_ss<Half, 32>(s, da, db, true);  // after a wait, the registers may have been written
                    }),
                    Contains("no wgmma::fence()"));
  CHECK_THROWS_WITH(launch_warpgroup([](uint64_t, Half*, uint64_t db) {
                      CTile acc[8];
                      tile::ATile<Half> x{};
                      fence();
                      mma_rs<Half, 64, true>(acc, x, db, false);
                      commit();
                      x.r[0] = 1;  // reused before the wait
                      wait<0>();
                    }),
                    Contains("A registers of an instruction changed before the wait"));
  CHECK_THROWS_WITH(launch_warpgroup([](uint64_t da, Half*, uint64_t db) {
                      CTile s[4];
                      fence();
                      mma_ss<Half, 32>(s, da, db, false);
                      commit();
                    }),
                    Contains("exited with 1 wgmma instructions it never waited for"));
}

// On a GPU the 128 threads of a warpgroup issue every wgmma operation together (.sync.aligned); the
// emulator, which runs them one by one, holds each thread's k-th operation to its warpgroup's and,
// at the block's end, every thread to as many operations. A warp that skips a product, a descriptor
// or flag that depends on the warp, the same operation reached at two source lines, a lane that skips
// a commit, a warp that stops early and setmaxnreg (.sync.aligned as well) with another count or
// skipped are faults; warpgroups that differ from each other are not.
TEST_CASE("wgmma, emulated: the threads of a warpgroup issue the same operations in the same order",
          "[wgmma][simt]") {
  using Catch::Matchers::Contains;
  const auto warp = [] { return static_cast<int>(threadIdx.x) / 32; };
  const auto together = Contains("issue each of these operations together");
  CHECK_THROWS_WITH(launch_warpgroup([&](uint64_t da, Half*, uint64_t db) {
                      CTile s[4];
                      fence();
                      if (warp() != 3) mma_ss<Half, 32>(s, da, db, false);
                      commit();
                      wait<0>();
                    }),
                    together && Contains("wgmma.commit_group") && Contains("wgmma.mma_async 64x32x16 f16"));
  CHECK_THROWS_WITH(launch_warpgroup([&](uint64_t da, Half*, uint64_t db) {
                      CTile s[4];
                      fence();
                      mma_ss<Half, 32>(s, da, warp() == 1 ? db + 1 : db, false);  // 16 bytes further
                      commit();
                      wait<0>();
                    }),
                    together && Contains("B at descriptor"));
  CHECK_THROWS_WITH(launch_warpgroup([&](uint64_t da, Half*, uint64_t db) {
                      CTile s[4];
                      fence();
                      mma_ss<Half, 32>(s, da, db, warp() == 2);
                      commit();
                      wait<0>();
                    }),
                    together && Contains("accumulating") && Contains("overwriting"));
  // (Out of the CHECK's macro, whose lines are all one line to __builtin_LINE.)
  const auto two_lines = [&](uint64_t, Half*, uint64_t) {
    if (warp() == 0) {
      fence();
    } else {
      fence();
    }
  };
  CHECK_THROWS_WITH(launch_warpgroup(two_lines), together && Contains("wgmma.fence at"));
  CHECK_THROWS_WITH(launch_warpgroup([&](uint64_t da, Half*, uint64_t db) {
                      CTile s[4];
                      fence();
                      mma_ss<Half, 32>(s, da, db, false);
                      if (threadIdx.x != 5) commit();
                      wait<0>();
                    }),
                    together && Contains("thread 5 issued") && Contains("wgmma.wait_group 0"));
  // Warp 3 stops before the second product: at the block's end it has issued 4 operations, the
  // others 8.
  CHECK_THROWS_WITH(launch_warpgroup([&](uint64_t da, Half*, uint64_t db) {
                      CTile s[4];
                      for (int pass = 0; pass < 2; ++pass) {
                        if (pass == 1 && warp() == 3) return;
                        fence();
                        mma_ss<Half, 32>(s, da, db, pass > 0);
                        commit();
                        wait<0>();
                      }
                    }),
                    Contains("in warpgroup 0, thread 96 issued 4 warpgroup operations") &&
                        Contains("and thread 0 8") &&
                        Contains("the first the one lacks: wgmma.fence"));
  // Two warpgroups, each agreeing within itself: the second issues a product the first does not.
  CHECK_NOTHROW(launch_threads(2 * kThreads, [&](uint64_t da, Half*, uint64_t db) {
    CTile s[4];
    fence();
    if (threadIdx.x >= kThreads) mma_ss<Half, 32>(s, da, db, false);
    commit();
    wait<0>();
  }));
  // setmaxnreg is .sync.aligned too: a warp asking for other registers, or skipping the call.
  CHECK_THROWS_WITH(launch_warpgroup([&](uint64_t, Half*, uint64_t) {
                      if (warp() == 2) pipeline::grow_registers<240>();
                      else pipeline::grow_registers<232>();
                    }),
                    together && Contains("setmaxnreg.inc 240") && Contains("setmaxnreg.inc 232"));
  CHECK_THROWS_WITH(launch_warpgroup([&](uint64_t, Half*, uint64_t) {
                      if (warp() != 1) pipeline::shrink_registers<40>();
                    }),
                    Contains("thread 32 issued 0 warpgroup operations") && Contains("setmaxnreg.dec 40"));
  // Half a warpgroup.
  CHECK_THROWS_WITH(launch_threads(64, [](uint64_t, Half*, uint64_t) { fence(); }),
                    Contains("wgmma.fence") && Contains("of a block of 64 threads") && Contains("is not whole"));
}
