// The CPU emulator of CUDA's threads (kernels/simt/simt.h): indices, the block barrier, shuffles,
// static shared variables, the tensor-core tiles of kernels/cuda/tile.cuh, asynchronous copies,
// shared-memory barriers (mbarrier), named barriers, and the faults it must report rather than hide (a
// missing barrier, a divergent one, a collective missing a lane, a deadlock, shared memory past the
// hardware's limits, bad copies and barriers).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/pipeline.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/simt/simt.h"
#include "kernels/tile_layout.h"
#include "tests/cuda/tile_selftest.h"
#include "tests/cuda/tile_selftest_kernel.cuh"
#include "tests/cuda/tma_selftest.h"
#include "tests/cuda/tma_selftest_kernel.cuh"

using namespace kiln;
using Catch::Matchers::Contains;
using simt::LaunchConfig;
using simt::Schedule;

namespace {

LaunchConfig config(simt::Dim3 grid, simt::Dim3 block, Schedule schedule, size_t smem = 0) {
  LaunchConfig c;
  c.grid = grid;
  c.block = block;
  c.schedule = schedule;
  c.dynamic_smem = smem;
  return c;
}

// out[b * n + t] = shared[(t + 1) % n] after every thread t of block b wrote t + 100 b there, with
// or without a barrier between the write and the read.
std::vector<float> neighbours(Schedule schedule, bool barrier) {
  const unsigned n = 64, blocks = 3;
  std::vector<float> out(n * blocks, -1.f);
  simt::launch(config({blocks, 1, 1}, {n, 1, 1}, schedule, n * sizeof(float)), [&] {
    float* s = static_cast<float*>(simt::dynamic_smem());
    const unsigned t = threadIdx.x;
    s[t] = static_cast<float>(t + 100 * blockIdx.x);
    if (barrier) __syncthreads();
    out[blockIdx.x * n + t] = s[(t + 1) % n];
  });
  return out;
}

// A device function's static shared variable: one per instantiation.
template <typename T> T* shared_of() {
  KILN_SHARED(T, v, [4]);
  return v;
}

// The tile self-test kernel on the emulator, as tests/cuda/tile_selftest.cu runs it on the GPU.
template <typename T>
test::TileSelftest run_tile_selftest(const std::vector<float>& a, const std::vector<float>& k,
                                     const std::vector<float>& v) {
  auto rounded = [](const std::vector<float>& x) {
    std::vector<T> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = static_cast<T>(x[i]);
    return r;
  };
  const std::vector<T> ra = rounded(a), rk = rounded(k), rv = rounded(v);
  std::vector<float> out(test::kTileSelftestFloats, std::nanf(""));
  const simt::LaunchStats stats = simt::launch(config({1, 1, 1}, {32, 1, 1}, Schedule::Lowest), [&] {
    test::tile_selftest_kernel<T>(ra.data(), rk.data(), rv.data(), out.data(), out.data() + 256, out.data() + 384,
                                  out.data() + 512);
  });
  CHECK(stats.warp_collectives == 6 + 7 + 1);  // the six mma, the seven tile loads (ldmatrix), __syncwarp
  CHECK(stats.collectives_in("kernels/cuda/tile.cuh") == 6);
  return test::split_tile_selftest(out);
}

}  // namespace

TEST_CASE("simt: every thread of every block runs once and sees its indices", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  const unsigned per_block = 8 * 4 * 2, blocks = 3 * 2;
  std::vector<int> seen(per_block * blocks, 0);
  const simt::LaunchStats stats = simt::launch(config({3, 2, 1}, {8, 4, 2}, schedule), [&] {
    CHECK(blockDim.x == 8);
    CHECK(gridDim.y == 2);
    const unsigned block = blockIdx.x + gridDim.x * blockIdx.y;
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    CHECK(simt::lane() == static_cast<int>(t % 32));
    ++seen[block * per_block + t];
  });
  CHECK(stats.blocks == blocks);
  CHECK(stats.threads == per_block * blocks);
  CHECK(std::count(seen.begin(), seen.end(), 1) == static_cast<long>(seen.size()));
}

TEST_CASE("simt: a barrier orders shared memory, and without it each schedule reads unwritten memory", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  const std::vector<float> with = neighbours(schedule, true), without = neighbours(schedule, false);
  for (unsigned b = 0; b < 3; ++b) {
    for (unsigned t = 0; t < 64; ++t) CHECK(with[b * 64 + t] == static_cast<float>((t + 1) % 64 + 100 * b));
  }
  // A thread runs until it must wait. With no barrier, the threads run one after another, and a
  // thread that runs before its neighbour reads the all-ones bytes a block's shared memory starts
  // as: all but the last of each block from the lowest, only the first (thread 63 reads thread 0's
  // slot) from the highest.
  const auto unwritten = std::count_if(without.begin(), without.end(), [](float x) { return std::isnan(x); });
  CHECK(unwritten == (schedule == Schedule::Lowest ? 3 * 63 : 3));
}

TEST_CASE("simt: a static shared variable is the block's, and starts as all-ones bytes in every block", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  const unsigned n = 64, blocks = 3;
  std::vector<uint32_t> before(n * blocks, 0), neighbour(n * blocks, 0);
  std::vector<float> scalar(n * blocks, 0.f);
  std::vector<int> distinct(n * blocks, 0);
  const simt::LaunchStats stats = simt::launch(config({blocks, 1, 1}, {n, 1, 1}, schedule), [&] {
    KILN_SHARED(uint32_t, s, [64]);
    KILN_SHARED(float, f);
    KILN_SHARED(uint32_t, other, [64]);
    const unsigned t = threadIdx.x, i = blockIdx.x * n + t;
    before[i] = s[t];  // every thread reads its slot before any thread of the block writes it
    __syncthreads();
    s[t] = t + 1000 * blockIdx.x;
    if (t == 0) f = static_cast<float>(blockIdx.x);
    __syncthreads();
    neighbour[i] = s[(t + 1) % n];
    scalar[i] = f;
    // Two declarations of one type are two variables; so are two instantiations of one declaration,
    // and one instantiation is the same variable at every call.
    distinct[i] = static_cast<const void*>(s) != static_cast<const void*>(other) &&
                  static_cast<void*>(shared_of<uint32_t>()) != static_cast<void*>(shared_of<float>()) &&
                  shared_of<uint32_t>() == shared_of<uint32_t>();
  });
  for (unsigned b = 0; b < blocks; ++b) {
    INFO("block " << b);
    for (unsigned t = 0; t < n; ++t) {
      CHECK(before[b * n + t] == 0xFFFFFFFFu);  // not the last block's value, nor zero
      CHECK(neighbour[b * n + t] == (t + 1) % n + 1000 * b);
      CHECK(scalar[b * n + t] == static_cast<float>(b));
      CHECK(distinct[b * n + t] == 1);
    }
  }
  CHECK(stats.static_smem == 2 * 64 * sizeof(uint32_t) + sizeof(float) + 4 * sizeof(uint32_t) + 4 * sizeof(float));
}

TEST_CASE("simt: shared memory past CUDA's limits is an error naming the declaration", "[simt]") {
  const simt::Dim3 one{1, 1, 1}, warp{32, 1, 1};
  // 48 KiB of static variables, and 227 KiB with the dynamic memory, are the most a block has.
  const auto at_limits = [] {
    KILN_SHARED(unsigned char, a, [24 << 10]);
    KILN_SHARED(unsigned char, b, [24 << 10]);
    a[threadIdx.x] = b[threadIdx.x] = 1;
  };
  CHECK(simt::launch(config(one, warp, Schedule::Lowest, size_t{179} << 10), at_limits).static_smem == 48 << 10);
  const auto past_static = [] {
    KILN_SHARED(unsigned char, a, [24 << 10]);
    KILN_SHARED(unsigned char, b, [(24 << 10) + 1]);
    a[threadIdx.x] = b[threadIdx.x] = 1;
  };
  CHECK_THROWS_WITH(simt::launch(config(one, warp, Schedule::Lowest), past_static),
                    Contains("49153 bytes") && Contains("48 KiB") && Contains("test_simt.cpp:"));
  CHECK_THROWS_WITH(simt::launch(config(one, warp, Schedule::Lowest, (size_t{179} << 10) + 1), at_limits),
                    Contains("227 KiB") && Contains("test_simt.cpp:"));
  bool ran = false;
  CHECK_THROWS_WITH(simt::launch(config(one, warp, Schedule::Lowest, (size_t{227} << 10) + 1), [&] { ran = true; }),
                    Contains("232449 bytes of dynamic shared memory"));
  CHECK_FALSE(ran);
  CHECK_THROWS_WITH(shared_of<int>(), Contains("outside a kernel"));
}

TEST_CASE("simt: barriers with a vote count the predicates of the threads that have not exited", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  const unsigned n = 96;
  std::vector<int> count(n, -1), any(n, -1), all(n, -1), again(n, -1), after_exit(n, -1);
  simt::launch(config({2, 1, 1}, {n, 1, 1}, schedule), [&] {
    const unsigned t = threadIdx.x;
    if (blockIdx.x == 0) {
      count[t] = __syncthreads_count(t % 3 == 0);  // 32 of 96
      any[t] = __syncthreads_or(t == 77);
      all[t] = __syncthreads_and(t != 5);
      // Each barrier's count is its own: the fast threads' next vote does not reach the slow ones.
      again[t] = __syncthreads_count(t < 10);
      return;
    }
    if (t >= 64) return;  // the last warp exits; the others vote without it
    const int all_of_64 = __syncthreads_and(1);
    const int any_of_64 = __syncthreads_or(0);
    after_exit[t] = all_of_64 + 2 * any_of_64 + 4 * __syncthreads_count(1);
  });
  for (unsigned t = 0; t < n; ++t) {
    CHECK(count[t] == 32);
    CHECK(any[t] == 1);
    CHECK(all[t] == 0);
    CHECK(again[t] == 10);
    CHECK(after_exit[t] == (t < 64 ? 1 + 4 * 64 : -1));
  }
}

TEST_CASE("simt: shuffles move values between the lanes of each warp", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  std::vector<float> sums(96), broadcast(96);
  std::vector<double> wide(96);
  std::vector<int> down(96), down8(96), up(96), up4(96);
  const simt::LaunchStats stats = simt::launch(config({1, 1, 1}, {96, 1, 1}, schedule), [&] {
    const unsigned t = threadIdx.x;
    float v = static_cast<float>(t);
    for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
    sums[t] = v;
    broadcast[t] = __shfl_sync(0xffffffffu, static_cast<float>(t) * 2.f, 5);
    wide[t] = __shfl_sync(0xffffffffu, 0.5 + t, 31 - simt::lane());
    down[t] = __shfl_down_sync(0xffffffffu, static_cast<int>(t), 3);
    down8[t] = __shfl_down_sync(0xffffffffu, static_cast<int>(t), 3, 8);  // in segments of 8 lanes
    up[t] = __shfl_up_sync(0xffffffffu, static_cast<int>(t), 5);
    up4[t] = __shfl_up_sync(0xffffffffu, static_cast<int>(t), 1, 4);
  });
  for (unsigned t = 0; t < 96; ++t) {
    const unsigned warp = t / 32;
    CHECK(sums[t] == static_cast<float>(32 * 32 * warp + 31 * 32 / 2));
    CHECK(broadcast[t] == static_cast<float>(2 * (32 * warp + 5)));
    CHECK(wide[t] == 0.5 + (32 * warp + 31 - t % 32));
    // A lane whose source is past the end of the warp, or of its segment, keeps its own value.
    CHECK(down[t] == static_cast<int>(t % 32 + 3 < 32 ? t + 3 : t));
    CHECK(down8[t] == static_cast<int>(t % 8 + 3 < 8 ? t + 3 : t));
    // Up: a lane whose source is before the start of the warp, or of its segment, keeps its own.
    CHECK(up[t] == static_cast<int>(t % 32 >= 5 ? t - 5 : t));
    CHECK(up4[t] == static_cast<int>(t % 4 >= 1 ? t - 1 : t));
  }
  CHECK(stats.warp_collectives == 3 * 11);
  CHECK(stats.collectives_in("tests/kernels/test_simt.cpp") == 3 * 11);
  CHECK(stats.collectives_at.size() == 7);  // the xor shuffle's call, and the six others
  CHECK(stats.collectives_in("tile.cuh") == 0);
}

TEST_CASE("simt: the tensor-core tiles on the emulator equal the exact products", "[simt][tile]") {
  const bool bf16 = GENERATE(true, false);
  INFO((bf16 ? "bfloat16" : "float16"));
  const std::vector<float> a = test::tile_ints(16, 16, 1), k = test::tile_ints(16, 16, 2);
  const std::vector<float> v = test::tile_ints(16, 8, 3);
  const test::TileSelftest got = bf16 ? run_tile_selftest<BFloat16>(a, k, v) : run_tile_selftest<Half>(a, k, v);
  const std::vector<float> s = test::product(a, k, 16, 16, 16, true);
  CHECK(got.s == s);
  CHECK(got.av == test::product(a, v, 16, 8, 16, false));
  CHECK(got.sv == test::product(s, v, 16, 8, 16, false));
  CHECK(got.kt == test::product(test::transposed(k, 16, 16), a, 16, 16, 16, true));  // K^T A^T
}

// The identity probe (tests/cuda/tile_selftest.h): with A = I each output element is one element of K
// or V, so a wrong fragment map would be reported element by element. The GPU test runs the same.
TEST_CASE("simt: the tensor-core tiles' identity probe reads K and V where the maps put them", "[simt][tile]") {
  const bool bf16 = GENERATE(true, false);
  INFO((bf16 ? "bfloat16" : "float16"));
  const std::vector<float> a = test::tile_identity(), k = test::tile_ids(16, 16), v = test::tile_ids(16, 8);
  const test::TileSelftest got = bf16 ? run_tile_selftest<BFloat16>(a, k, v) : run_tile_selftest<Half>(a, k, v);
  const std::vector<std::string> misreads = test::tile_probe_misreads(got);
  for (const std::string& m : misreads) UNSCOPED_INFO(m);
  CHECK(misreads.empty());
  // The report names what was read: s[0][1] should be k(1, 0), and here it reads k(2, 0).
  test::TileSelftest wrong = got;
  wrong.s[1] = got.s[2];
  const std::vector<std::string> one = test::tile_probe_misreads(wrong);
  REQUIRE(one.size() == 2);
  CHECK(one[0] == "s[0][1] = k(1, 0) read k(2, 0)");
  CHECK(one[1] == "s: 1 elements wrong");
}

// The tile loads (ldmatrix, one warp collective each) against the fragment maps: every register of
// every lane holds the two elements a_coord or b_coord place there, read straight from the block,
// for blocks of rows padded as the attention kernels' are, and the warp's loads are done when the
// first lane goes on (which clears the block here). And the faults: a row not on 16 bytes, a block
// outside shared memory, lanes at two different loads.
TEST_CASE("simt: the tile loads through ldmatrix hold what the fragment maps say", "[simt][tile]") {
  using tile::a_coord;
  using tile::b_coord;
  constexpr int kLd = 24;  // a row of 16 elements and the padding, 48 bytes
  constexpr int kLoads = 4;
  // Per lane: load_a's 4 registers, load_a_transposed's 4, load_b_transposed's 2, load_b's 2.
  std::vector<uint32_t> got(32 * 12, 0);
  std::vector<uint16_t> block(16 * kLd);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<uint16_t>(0x3C00 + i);  // distinct ids
  const auto id = [&](int r, int c) { return static_cast<uint32_t>(block[static_cast<size_t>(r * kLd + c)]); };
  const simt::LaunchStats stats =
      simt::launch(config({1, 1, 1}, {32, 1, 1}, Schedule::Lowest, block.size() * 2), [&] {
        auto* m = static_cast<Half*>(simt::dynamic_smem());
        const int lane = tile::lane_id();
        auto* bytes = static_cast<unsigned char*>(simt::dynamic_smem());
        for (int i = lane; i < 16 * kLd; i += 32) std::memcpy(bytes + 2 * i, &block[static_cast<size_t>(i)], 2);
        __syncwarp();
        tile::ATile<Half> a, at;
        tile::BTile<Half> bt, b;
        tile::load_a(a, m, kLd);
        tile::load_a_transposed(at, m, kLd);
        tile::load_b_transposed(bt, m, kLd);
        tile::load_b(b, m, kLd);
        if (lane == 0) std::memset(bytes, 0, 16 * kLd * 2);  // the first lane to go on, under Lowest
        uint32_t* out = &got[static_cast<size_t>(lane * 12)];
        std::memcpy(out, a.r, 16);
        std::memcpy(out + 4, at.r, 16);
        std::memcpy(out + 8, bt.r, 8);
        std::memcpy(out + 10, b.r, 8);
      });
  CHECK(stats.warp_collectives == kLoads + 1);
  CHECK(stats.collectives_in("kernels/cuda/tile.cuh") == 0);  // ldmatrix counts as the emulator's own
  int wrong = 0;
  for (int lane = 0; lane < 32; ++lane) {
    const uint32_t* r = &got[static_cast<size_t>(lane * 12)];
    for (int j = 0; j < 4; ++j) {
      const tile::Coord lo = a_coord(lane, 2 * j), hi = a_coord(lane, 2 * j + 1);
      wrong += r[j] != (id(lo.row, lo.col) | id(hi.row, hi.col) << 16);          // A
      wrong += r[4 + j] != (id(lo.col, lo.row) | id(hi.col, hi.row) << 16);      // A = M^T
    }
    for (int j = 0; j < 2; ++j) {
      const tile::Coord lo = b_coord(lane, 2 * j), hi = b_coord(lane, 2 * j + 1);
      wrong += r[8 + j] != (id(lo.col, lo.row) | id(hi.col, hi.row) << 16);   // B = M^T, M [8, 16]
      wrong += r[10 + j] != (id(lo.row, lo.col) | id(hi.row, hi.col) << 16);  // B
    }
  }
  CHECK(wrong == 0);

  const auto load_at = [&](auto where) {
    simt::launch(config({1, 1, 1}, {32, 1, 1}, Schedule::Lowest, 1024), [&] {
      auto* m = static_cast<Half*>(simt::dynamic_smem());
      tile::ATile<Half> a;
      where(a, m);
    });
  };
  CHECK_THROWS_WITH(load_at([](tile::ATile<Half>& a, Half* m) { tile::load_a(a, m + 4, 24); }),
                    Contains("not aligned to 16 bytes") && Contains("tile.cuh"));
  CHECK_THROWS_WITH(load_at([](tile::ATile<Half>& a, Half* m) { tile::load_a(a, m, 40); }),
                    Contains("not in the block's shared memory"));
  std::vector<Half> global(16 * 16);
  CHECK_THROWS_WITH(load_at([&](tile::ATile<Half>& a, Half*) { tile::load_a(a, global.data(), 16); }),
                    Contains("not in the block's shared memory"));
  CHECK_THROWS_WITH(load_at([](tile::ATile<Half>& a, Half* m) {
                      if (tile::lane_id() < 16) tile::load_a(a, m, 16);
                      else tile::load_a_transposed(a, m, 16);
                    }),
                    Contains("divergent ldmatrix"));
}

// cp.async on the emulator (kernels/cuda/async_copy.cuh): a copy lands when its thread waits for its
// group, and until then its destination reads as NaN; a wait for all but the n newest groups lands
// the older ones only; another thread sees a copy after the copier's wait and a barrier.
TEST_CASE("simt: asynchronous copies land at their thread's wait, and read as NaN before it", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  std::vector<float> global(64);
  for (size_t i = 0; i < global.size(); ++i) global[i] = static_cast<float>(i + 1);
  // Per thread of one warp: what it read of its own slots, before and after each wait, and what it
  // read of its neighbour's after a barrier.
  constexpr int kReads = 6;
  std::vector<float> seen(32 * kReads, -1.f);
  const simt::LaunchStats stats = simt::launch(config({1, 1, 1}, {32, 1, 1}, schedule, 32 * 12 * sizeof(float)), [&] {
    float* s = static_cast<float*>(simt::dynamic_smem());
    const int t = static_cast<int>(threadIdx.x);
    float* mine = s + 12 * t;          // three 16-byte slots
    float* out = seen.data() + kReads * t;
    tile::copy_piece_async(mine, global.data() + 4 * (t % 16), true, true);      // group 0
    tile::commit_copies();
    tile::copy_piece_async(mine + 4, global.data() + 4 * (t % 16), false, true);  // group 1: zeros
    tile::copy_piece_async(mine + 8, global.data() + 4 * (t % 16), true, false);  // four 4-byte copies
    tile::commit_copies();
    out[0] = mine[0];  // NaN: nothing landed
    tile::wait_copies<1>();
    out[1] = mine[0];  // group 0 landed
    out[2] = mine[4];  // group 1 has not
    tile::wait_copies<0>();
    out[3] = mine[4];
    out[4] = mine[11];
    __syncthreads();
    out[5] = s[12 * ((t + 1) % 32)];  // the neighbour's first slot
  });
  for (int t = 0; t < 32; ++t) {
    INFO("thread " << t);
    const float* got = seen.data() + kReads * t;
    const float first = static_cast<float>(4 * (t % 16) + 1);
    CHECK(std::isnan(got[0]));
    CHECK(got[1] == first);
    CHECK(std::isnan(got[2]));
    CHECK(got[3] == 0.f);
    CHECK(got[4] == first + 3.f);
    CHECK(got[5] == static_cast<float>(4 * ((t + 1) % 32 % 16) + 1));
  }
  CHECK(stats.async_copies == 32 * 6);
  CHECK(stats.async_copy_bytes == 32 * 48);
}

TEST_CASE("simt: a copy read with no wait, or with no barrier after another thread's wait, reads NaN", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  const std::vector<float> global(4 * 64, 2.5f);
  // Thread t copies slot t and reads slot t + 1 (the neighbour's), with or without each step.
  const auto run = [&](bool wait, bool barrier) {
    std::vector<float> seen(64, -1.f);
    simt::launch(config({1, 1, 1}, {64, 1, 1}, schedule, 64 * 16), [&] {
      float* s = static_cast<float*>(simt::dynamic_smem());
      const int t = static_cast<int>(threadIdx.x);
      tile::copy_piece_async(s + 4 * t, global.data() + 4 * t, true, true);
      tile::commit_copies();
      if (wait) tile::wait_copies<0>();
      if (barrier) __syncthreads();
      seen[static_cast<size_t>(t)] = s[4 * ((t + 1) % 64)];
      if (!wait) {  // every thread has read before any waits (and none exits with the copy pending)
        __syncthreads();
        tile::wait_copies<0>();
      }
    });
    return std::count_if(seen.begin(), seen.end(), [](float x) { return std::isnan(x); });
  };
  CHECK(run(true, true) == 0);
  CHECK(run(false, true) == 64);
  // With no barrier a thread runs to its exit before the next starts: from the lowest each reads a
  // neighbour that has not started (all but the last), from the highest only thread 63 (thread 0's).
  CHECK(run(true, false) == (schedule == Schedule::Lowest ? 63 : 1));
}

TEST_CASE("simt: bad asynchronous copies are errors naming the copy", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  alignas(16) static float global[8] = {};
  const auto launch_one = [&](const std::function<void(float*)>& body) {
    simt::launch(config({1, 1, 1}, {32, 1, 1}, schedule, 256),
                 [&] { body(static_cast<float*>(simt::dynamic_smem())); });
  };
  CHECK_THROWS_WITH(launch_one([](float* s) { tile::copy_piece_async(s + 1, global, true, true); }),
                    Contains("aligned to the copy's size") && Contains("async_copy.cuh"));
  CHECK_THROWS_WITH(launch_one([](float* s) { tile::copy_piece_async(s, global + 1, true, true); }),
                    Contains("aligned to the copy's size"));
  CHECK_THROWS_WITH(launch_one([](float*) { tile::copy_piece_async(global, global + 4, true, true); }),
                    Contains("destination is not in the block's shared memory"));
  CHECK_THROWS_WITH(launch_one([](float* s) { tile::copy_piece_async(s, s + 4, true, true); }),
                    Contains("source is in shared memory"));
  CHECK_THROWS_WITH(launch_one([](float* s) { simt::copy_async(s, global, 12, 12); }), Contains("4, 8 or 16 bytes"));
  CHECK_THROWS_WITH(launch_one([](float* s) {
                      tile::copy_piece_async(s + 4 * (threadIdx.x % 16), global, true, true);
                      tile::commit_copies();
                    }),
                    Contains("exited with 1 asynchronous copies it never waited for") && Contains("async_copy.cuh"));
}

// A producer warp hands a consumer warp three rounds of values through one shared slot per lane, with
// two barriers: `full` (the producer's 32 lanes arrive after writing) and `empty` (the consumer's
// arrive after reading). Rounds alternate the phases' parity.
std::vector<float> handed_over(Schedule schedule, simt::LaunchStats& stats) {
  constexpr int kRounds = 3;
  std::vector<float> seen(32 * kRounds, -1.f);
  stats = simt::launch(config({1, 1, 1}, {64, 1, 1}, schedule, 2 * 8 + 32 * 4), [&] {
    auto* bars = static_cast<uint64_t*>(simt::dynamic_smem());
    uint64_t *full = bars, *empty = bars + 1;
    float* slot = reinterpret_cast<float*>(bars + 2);
    const int t = static_cast<int>(threadIdx.x), lane = t % 32;
    if (t == 0) {
      pipeline::mbarrier_init(full, 32);
      pipeline::mbarrier_init(empty, 32);
    }
    __syncthreads();
    for (int r = 0; r < kRounds; ++r) {
      if (t >= 32) {  // the producer: wait until the slot is free (at once the first time), fill it
        pipeline::mbarrier_wait(empty, 1 - pipeline::pipeline_parity<1>(r));
        slot[lane] = static_cast<float>(100 * r + lane);
        pipeline::mbarrier_arrive(full);
      } else {
        pipeline::mbarrier_wait(full, pipeline::pipeline_parity<1>(r));
        seen[static_cast<size_t>(32 * r + lane)] = slot[lane];
        pipeline::mbarrier_arrive(empty);
      }
    }
  });
  return seen;
}

TEST_CASE("simt: an mbarrier completes a phase every count arrivals, and a wait returns once its phase has", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  simt::LaunchStats stats;
  const std::vector<float> seen = handed_over(schedule, stats);
  for (int r = 0; r < 3; ++r) {
    for (int lane = 0; lane < 32; ++lane) {
      INFO("round " << r << ", lane " << lane);
      CHECK(seen[static_cast<size_t>(32 * r + lane)] == static_cast<float>(100 * r + lane));
    }
  }
  CHECK(stats.mbarrier_phases == 6);  // three of `full`, three of `empty`
  CHECK(stats.block_barriers == 1);
  // A consumer that does not wait for `full` reads the slot before it is written when the consumers
  // run first (the lowest-numbered), as it may on a GPU.
  std::vector<float> early(32, -1.f);
  simt::launch(config({1, 1, 1}, {64, 1, 1}, schedule, 8 + 32 * 4), [&] {
    auto* full = static_cast<uint64_t*>(simt::dynamic_smem());
    float* slot = reinterpret_cast<float*>(full + 1);
    const int t = static_cast<int>(threadIdx.x);
    if (t == 0) pipeline::mbarrier_init(full, 32);
    __syncthreads();
    if (t >= 32) {
      slot[t - 32] = 1.f;
      pipeline::mbarrier_arrive(full);
    } else {
      early[static_cast<size_t>(t)] = slot[t];
    }
  });
  const auto unwritten = std::count_if(early.begin(), early.end(), [](float x) { return std::isnan(x); });
  CHECK(unwritten == (schedule == Schedule::Lowest ? 32 : 0));
}

TEST_CASE("simt: a wait for parity 1 passes right after the init, and one for parity 0 blocks", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  int passed = 0, after_arrival = 0;
  bool arrived = false;
  simt::launch(config({1, 1, 1}, {32, 1, 1}, schedule, 8), [&] {
    auto* bar = static_cast<uint64_t*>(simt::dynamic_smem());
    if (threadIdx.x == 0) pipeline::mbarrier_init(bar, 1);
    __syncthreads();
    pipeline::mbarrier_wait(bar, 1);
    ++passed;
    __syncthreads();
    if (threadIdx.x == 5) {  // the one arrival phase 0 expects: every wait for parity 0 returns
      arrived = true;
      pipeline::mbarrier_arrive(bar);
    }
    pipeline::mbarrier_wait(bar, 0);
    after_arrival += arrived;
  });
  CHECK(passed == 32);
  CHECK(after_arrival == 32);  // threads that reached the wait before thread 5 arrived waited for it
}

TEST_CASE("simt: bad mbarriers are errors naming the call, and arrivals that do not add up a deadlock", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  alignas(8) static uint64_t global_bar = 0;
  const auto launch_one = [&](const std::function<void(uint64_t*)>& body) {
    simt::launch(config({1, 1, 1}, {32, 1, 1}, schedule, 64),
                 [&] { body(static_cast<uint64_t*>(simt::dynamic_smem())); });
  };
  CHECK_THROWS_WITH(launch_one([](uint64_t*) { pipeline::mbarrier_init(&global_bar, 1); }),
                    Contains("not in the block's shared memory") && Contains("test_simt.cpp:"));
  CHECK_THROWS_WITH(launch_one([](uint64_t* s) {
                      pipeline::mbarrier_init(reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(s) + 4), 1);
                    }),
                    Contains("not aligned to 8 bytes"));
  CHECK_THROWS_WITH(launch_one([](uint64_t* s) { pipeline::mbarrier_init(s, 0); }), Contains("count 0"));
  CHECK_THROWS_WITH(launch_one([](uint64_t* s) { pipeline::mbarrier_init(s, 1 << 20); }),
                    Contains("outside 1 .. 2^20 - 1"));
  CHECK_THROWS_WITH(launch_one([](uint64_t* s) { pipeline::mbarrier_init(s + threadIdx.x % 2, 32); }),
                    Contains("initialized already"));
  CHECK_THROWS_WITH(launch_one([](uint64_t* s) { pipeline::mbarrier_arrive(s); }),
                    Contains("mbarrier arrive") && Contains("not initialized"));
  CHECK_THROWS_WITH(launch_one([](uint64_t* s) { pipeline::mbarrier_wait(s, 0); }),
                    Contains("mbarrier wait") && Contains("not initialized"));
  CHECK_THROWS_WITH(launch_one([](uint64_t* s) {
                      if (threadIdx.x == 0) {
                        pipeline::mbarrier_init(s, 32);
                        s[0] = 0;  // a plain store over the barrier
                      }
                      __syncthreads();
                      pipeline::mbarrier_arrive(s);
                    }),
                    Contains("were overwritten"));
  // One arrival short: every thread waits for a phase that never completes.
  CHECK_THROWS_WITH(launch_one([](uint64_t* s) {
                      if (threadIdx.x == 0) pipeline::mbarrier_init(s, 32);
                      __syncthreads();
                      if (threadIdx.x != 7) pipeline::mbarrier_arrive(s);
                      pipeline::mbarrier_wait(s, 0);
                    }),
                    Contains("deadlock") && Contains("threads 0 to 31 wait at") &&
                        Contains("for the phase of parity 0 of the mbarrier initialized at") &&
                        Contains("(dynamic shared byte 0): phase 0, 1 of 32 arrivals missing"));
}

// A tensor copy (kernels/cuda/tma.cuh) of a [10, 16] matrix of 16-bit values viewed as
// [8 elements, 10 rows, 2 pieces]: a box of [8, 16, 2] at row `row0` lands staged by pieces, element
// (r, c) of the box at (c / 8 * 16 + r) * 8 + c % 8, zeros for rows past the matrix (or before it).
// Warp 1 issues it (one thread: the expected bytes with its arrival, then the copy), warp 0 reads the
// destination before and after waiting on the barrier.
struct TensorCopySeen {
  std::vector<uint16_t> before, after;
  simt::LaunchStats stats;
};
constexpr int kCopyRows = 10, kCopyCols = 16, kBoxRows = 16;
tma::Box matrix_box(const uint16_t* m) {
  tma::Box b;
  b.base = m;
  b.dims[0] = 8;
  b.dims[1] = kCopyRows;
  b.dims[2] = kCopyCols / 8;
  b.strides[0] = 2;
  b.strides[1] = kCopyCols * 2;
  b.strides[2] = b.strides[3] = b.strides[4] = 16;
  b.box[0] = 8;
  b.box[1] = kBoxRows;
  b.box[2] = kCopyCols / 8;
  return b;
}
// dynamic shared memory: the barrier, then the destination at the first 128-byte boundary past it.
uint16_t* copy_destination(uint64_t* bar) {
  const auto at = (reinterpret_cast<uintptr_t>(bar + 1) + 127) / 128 * 128;
  return reinterpret_cast<uint16_t*>(at);
}
// The barrier's init is fenced for the copy engine (fence_barrier_init) unless `fence_init` is false.
TensorCopySeen tensor_copy(Schedule schedule, const std::function<void(uint64_t*, uint16_t*)>& issue,
                           bool fence_init = true) {
  constexpr int kElems = kBoxRows * kCopyCols;
  TensorCopySeen seen;
  seen.before.assign(kElems, 1);
  seen.after.assign(kElems, 1);
  seen.stats = simt::launch(config({1, 1, 1}, {64, 1, 1}, schedule, 8 + 128 + kElems * 2), [&] {
    auto* bar = static_cast<uint64_t*>(simt::dynamic_smem());
    uint16_t* dst = copy_destination(bar);
    const int t = static_cast<int>(threadIdx.x);
    if (t == 0) {
      pipeline::mbarrier_init(bar, 1);
      if (fence_init) pipeline::fence_barrier_init();
    }
    __syncthreads();
    if (t == 32) issue(bar, dst);
    if (t < 32) {
      for (int i = t; i < kElems; i += 32) seen.before[static_cast<size_t>(i)] = dst[i];
      __syncwarp();  // every lane has read before the first wait lands the copy
      pipeline::mbarrier_wait(bar, 0);
      for (int i = t; i < kElems; i += 32) seen.after[static_cast<size_t>(i)] = dst[i];
    }
  });
  return seen;
}

TEST_CASE("simt: a tensor copy lands at the wait on its barrier, staged by pieces, zeros past the matrix", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  const int row0 = GENERATE(0, 3, -2);
  INFO("row0 " << row0);
  std::vector<uint16_t> m(kCopyRows * kCopyCols);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint16_t>(1000 + i);
  const tma::Box box = matrix_box(m.data());
  REQUIRE(tma::invalid(box).empty());
  tma::Map map;
  REQUIRE(tma::encode(box, &map));
  CHECK(box.box_bytes() == kBoxRows * kCopyCols * 2);
  const TensorCopySeen seen = tensor_copy(schedule, [&](uint64_t* bar, uint16_t* dst) {
    pipeline::mbarrier_arrive_expect_tx(bar, box.box_bytes());
    const int32_t at[tma::kRank] = {0, row0, 0, 0, 0};
    tma::copy_box(dst, map, at, bar);
  });
  for (int r = 0; r < kBoxRows; ++r) {
    for (int c = 0; c < kCopyCols; ++c) {
      INFO("box row " << r << ", column " << c);
      const size_t at = static_cast<size_t>((c / 8 * kBoxRows + r) * 8 + c % 8);
      const int row = row0 + r;
      const uint16_t want = row >= 0 && row < kCopyRows ? m[static_cast<size_t>(row * kCopyCols + c)] : 0;
      CHECK(seen.after[at] == want);
      // Before its wait warp 0 reads all-ones (NaN): under Lowest, where it runs first, the block's
      // shared memory as it starts; under Highest the copy's destination, undefined until it lands.
      CHECK(seen.before[at] == 0xFFFF);
    }
  }
  CHECK(seen.stats.bulk_copies == 1);
  CHECK(seen.stats.bulk_copy_bytes == kBoxRows * kCopyCols * 2);
  CHECK(seen.stats.mbarrier_phases == 1);
}

TEST_CASE("simt: tensor copies whose bytes do not add up, that never land, or that break a rule are errors",
          "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  std::vector<uint16_t> m(kCopyRows * kCopyCols, 7);
  const tma::Box box = matrix_box(m.data());
  tma::Map map;
  REQUIRE(tma::encode(box, &map));
  const int32_t at[tma::kRank] = {};
  // Expecting more bytes than the copy brings: the phase never completes.
  CHECK_THROWS_WITH(tensor_copy(schedule,
                                [&](uint64_t* bar, uint16_t* dst) {
                                  pipeline::mbarrier_arrive_expect_tx(bar, box.box_bytes() + 16);
                                  tma::copy_box(dst, map, at, bar);
                                }),
                    Contains("deadlock") && Contains("16 transaction bytes missing"));
  // Fewer: the copy overshoots the phase.
  CHECK_THROWS_WITH(tensor_copy(schedule,
                                [&](uint64_t* bar, uint16_t* dst) {
                                  pipeline::mbarrier_arrive_expect_tx(bar, box.box_bytes() - 16);
                                  tma::copy_box(dst, map, at, bar);
                                }),
                    Contains("brought 16 bytes more than it expects"));
  // A second arrival while the phase waits for its bytes: more than its count of 1.
  CHECK_THROWS_WITH(tensor_copy(schedule,
                                [&](uint64_t* bar, uint16_t*) {
                                  pipeline::mbarrier_arrive_expect_tx(bar, box.box_bytes());
                                  pipeline::mbarrier_arrive(bar);
                                }),
                    Contains("more arrivals than the count of 1"));
  // A destination off the 128-byte boundary a tensor copy asks for.
  CHECK_THROWS_WITH(tensor_copy(schedule,
                                [&](uint64_t* bar, uint16_t* dst) {
                                  pipeline::mbarrier_arrive_expect_tx(bar, box.box_bytes());
                                  tma::copy_box(dst + 8, map, at, bar);
                                }),
                    Contains("tensor copy at") && Contains("not aligned to 128 bytes"));
  // A swizzled box at 128 bytes past a 1024-byte boundary (copy_destination's place): the swizzle
  // repeats every 1024 bytes, and a swizzled tile starts on one.
  tma::Box swizzled = box;
  swizzled.swizzle128 = true;
  tma::Map swizzled_map;
  REQUIRE(tma::encode(swizzled, &swizzled_map));
  CHECK_THROWS_WITH(tensor_copy(schedule,
                                [&](uint64_t* bar, uint16_t* dst) {
                                  pipeline::mbarrier_arrive_expect_tx(bar, box.box_bytes());
                                  tma::copy_box(dst, swizzled_map, at, bar);
                                }),
                    Contains("not aligned to 1024 bytes"));
  // A barrier whose init no proxy fence followed: the copy engine may not see it.
  CHECK_THROWS_WITH(tensor_copy(
                        schedule,
                        [&](uint64_t* bar, uint16_t* dst) {
                          pipeline::mbarrier_arrive_expect_tx(bar, box.box_bytes());
                          tma::copy_box(dst, map, at, bar);
                        },
                        false),
                    Contains("no fence.proxy.async since its init"));
  // A copy nobody waits for.
  CHECK_THROWS_WITH(simt::launch(config({1, 1, 1}, {32, 1, 1}, schedule, 8 + 128 + 1024),
                                 [&] {
                                   auto* bar = static_cast<uint64_t*>(simt::dynamic_smem());
                                   if (threadIdx.x == 0) {
                                     pipeline::mbarrier_init(bar, 1);
                                     pipeline::fence_barrier_init();
                                   }
                                   __syncthreads();
                                   if (threadIdx.x == 0) tma::copy_box(copy_destination(bar), map, at, bar);
                                 }),
                    Contains("1 bulk copies that never landed") && Contains("no thread waited on their mbarrier"));
  // The driver's rules, which the emulator keeps: encode refuses what breaks one.
  const auto refused = [&](const std::function<void(tma::Box&)>& change) {
    tma::Box b = box;
    change(b);
    tma::Map unused;
    CHECK_FALSE(tma::encode(b, &unused));
    return tma::invalid(b);
  };
  CHECK(refused([](tma::Box& b) { b.base = static_cast<const char*>(b.base) + 8; }) ==
        "the base is not aligned to 16 bytes");
  CHECK(refused([](tma::Box& b) { b.strides[1] = 40; }) == "dimension 1: stride 40 bytes");
  CHECK(refused([](tma::Box& b) { b.box[1] = 257; }) == "dimension 1: box extent 257");
  CHECK(refused([](tma::Box& b) { b.dims[2] = 0; }) == "dimension 2: size 0");
  CHECK(refused([](tma::Box& b) { b.box[0] = 4; }) == "the box's innermost extent is not a multiple of 16 bytes");
  CHECK(refused([](tma::Box& b) { b.strides[0] = 3; }) == "elements of 3 bytes");
  CHECK(refused([](tma::Box& b) {
          b.swizzle128 = true;
          b.box[0] = 72;
        }) == "the box's innermost extent is over the swizzle's 128 bytes");
}

// The TMA self-test (tests/cuda/tma_selftest.h) on the emulator: the cases the GPU test runs on the
// hardware, through the same kernel, land the same expected tiles here.
TEST_CASE("simt: the TMA self-test's boxes land by pieces and swizzled, as the GPU test expects them", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  for (const test::TmaSelftestCase& c : test::tma_selftest_cases()) {
    INFO("W " << c.W << ", box rows " << c.box_rows << ", row " << c.row0 << ", batch " << c.batch
              << (c.swizzle ? ", swizzled from column " : "") << (c.swizzle ? std::to_string(c.col0) : ""));
    const std::vector<uint16_t> m = test::tma_matrices(c);
    const tma::Box box = test::tma_selftest_box(m.data(), c);
    tma::Map map;
    REQUIRE(tma::encode(box, &map));
    const int elems = c.box_rows * test::tma_box_cols(c);
    std::vector<uint16_t> got(static_cast<size_t>(elems), 1);
    tile::SmemCarver sizes;
    const test::TmaSelftestSmem pieces(sizes, elems);
    (void)pieces;
    const simt::LaunchStats stats = simt::launch(config({1, 1, 1}, {128, 1, 1}, schedule, sizes.bytes()), [&] {
      test::tma_selftest_kernel(map, test::tma_coordinates(c), box.box_bytes(), got.data());
    });
    CHECK(got == test::tma_expected(c));
    CHECK(stats.bulk_copies == 1);
    CHECK(stats.bulk_copy_bytes == elems * 2);
  }
}

// The tensor stores' and reductions' self-test on the emulator, the cases and kernel of the GPU test.
TEST_CASE("simt: the TMA self-test's stores and reductions write boxes as the GPU test expects them", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  for (const test::TmaWriteCase& c : test::tma_write_cases()) {
    INFO("W " << c.W << ", box rows " << c.box_rows << ", row " << c.row0 << ", batch " << c.batch << ", column "
              << c.col0 << (c.swizzle ? ", swizzled" : "") << (c.add ? ", added" : ", stored"));
    std::vector<float> m = test::tma_write_matrices(c);
    const std::vector<float> source = test::tma_write_source(c);
    const tma::Box box = test::tma_write_box(m.data(), c);
    tma::Map map;
    REQUIRE(tma::encode(box, &map));
    const int elems = static_cast<int>(source.size());
    tile::SmemCarver sizes;
    const test::TmaWriteSmem pieces(sizes, elems);
    (void)pieces;
    const simt::LaunchStats stats = simt::launch(config({1, 1, 1}, {128, 1, 1}, schedule, sizes.bytes()), [&] {
      test::tma_write_selftest_kernel(map, test::tma_write_coordinates(c), source.data(), elems, c.add);
    });
    CHECK(m == test::tma_write_expected(c));
    CHECK(stats.bulk_reductions == (c.add ? 1 : 0));
    CHECK(stats.bulk_stores == (c.add ? 0 : 1));
    CHECK(stats.bulk_reduction_bytes + stats.bulk_store_bytes == elems * 4);
  }
}

// A [16, 32] float32 tile in the block's shared memory (on 1024 bytes) reduced into a [10, 32] matrix
// of zeros (rows 10 to 15 outside it) by the 64 threads' `body`; the matrix after.
std::vector<float> tensor_reduce(Schedule schedule, bool float32,
                                 const std::function<void(const tma::Map&, float*)>& body) {
  std::vector<float> m(10 * 32, 0.f);
  test::TmaWriteCase c;
  c.rows = 10;
  c.W = 32;
  c.batches = 1;
  c.box_rows = 16;
  tma::Box box = test::tma_write_box(m.data(), c);
  box.float32 = float32;
  tma::Map map;
  REQUIRE(tma::encode(box, &map));
  simt::launch(config({1, 1, 1}, {64, 1, 1}, schedule, 16 * 32 * 4),
               [&] { body(map, static_cast<float*>(simt::dynamic_smem())); });
  return m;
}
void fill_tile(float* tile) {
  for (int i = static_cast<int>(threadIdx.x); i < 16 * 32; i += 64) tile[i] = 1.f;
}
// The block fills the tile and fences it for the async proxy; thread 0 starts the reduction of the
// box at `at` from it (and gets true).
bool start_reduction(const tma::Map& map, float* tile, const int32_t (&at)[tma::kRank]) {
  fill_tile(tile);
  wgmma::fence_async_smem();
  __syncthreads();
  if (threadIdx.x != 0) return false;
  tma::reduce_add_box(map, at, tile);
  return true;
}

TEST_CASE("simt: tensor reductions that read unfenced stores, change their source in flight or are never waited "
          "for are errors",
          "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  const int32_t at[tma::kRank] = {};
  // Done right: rows 0 to 9 get their ones, the rest of the box is outside the matrix.
  CHECK(tensor_reduce(schedule, true, [&](const tma::Map& map, float* tile) {
          if (!start_reduction(map, tile, at)) return;
          tma::commit_bulk();
          tma::wait_bulk_read<0>();
        }) == std::vector<float>(10 * 32, 1.f));
  // The tile's stores without the proxy fence.
  CHECK_THROWS_WITH(tensor_reduce(schedule, true,
                                  [&](const tma::Map& map, float* tile) {
                                    fill_tile(tile);
                                    __syncthreads();
                                    if (threadIdx.x == 0) tma::reduce_add_box(map, at, tile);
                                  }),
                    Contains("changed them after the block's last fence.proxy.async"));
  // The source overwritten before the wait that says the engine has read it.
  CHECK_THROWS_WITH(tensor_reduce(schedule, true,
                                  [&](const tma::Map& map, float* tile) {
                                    if (!start_reduction(map, tile, at)) return;
                                    tma::commit_bulk();
                                    tile[5] = 2.f;
                                    tma::wait_bulk_read<0>();
                                  }),
                    Contains("its source in shared memory changed before the wait"));
  // No wait, and a wait for a group never committed: the thread exits with the reduction in flight.
  for (const bool commit : {true, false}) {
    CHECK_THROWS_WITH(tensor_reduce(schedule, true,
                                    [&](const tma::Map& map, float* tile) {
                                      if (!start_reduction(map, tile, at)) return;
                                      if (commit) tma::commit_bulk();
                                      else tma::wait_bulk<0>();
                                    }),
                      Contains("exited with 1 bulk stores or reductions it never waited for"));
  }
  // A map of bits, which the engine would add as integers, and a swizzled source off 1024 bytes.
  CHECK_THROWS_WITH(tensor_reduce(schedule, false,
                                  [&](const tma::Map& map, float* tile) {
                                    if (threadIdx.x == 0) tma::reduce_add_box(map, at, tile);
                                  }),
                    Contains("not of float32 elements"));
  CHECK_THROWS_WITH(tensor_reduce(schedule, true,
                                  [&](const tma::Map& map, float* tile) {
                                    if (threadIdx.x == 0) tma::reduce_add_box(map, at, tile + 32);
                                  }),
                    Contains("tensor reduction at") && Contains("the source is not aligned to 1024 bytes"));
  tma::Box halves = test::tma_write_box(nullptr, test::TmaWriteCase{});
  alignas(16) static const float storage[4] = {};
  halves.base = storage;
  halves.strides[0] = 2;
  halves.box[0] = 64;
  CHECK(tma::invalid(halves).find("float32 elements of 2 bytes") != std::string::npos);
}

// Two warps take turns appending their number to a log, three turns each, with the protocol of the
// wgmma forward's ping-pong: warp w syncs on named barrier 1 + w (64 threads: its own 32 and the
// other warp's arrival) before its turn, and arrives on the other's after it. Warp 0's first turn is
// opened by its own arrival; warp 1's last turn opens none.
std::vector<int> turns_taken(Schedule schedule, bool turns, simt::LaunchStats& stats) {
  constexpr int kTurns = 3;
  std::vector<int> log;
  stats = simt::launch(config({1, 1, 1}, {64, 1, 1}, schedule), [&] {
    const int w = static_cast<int>(threadIdx.x) / 32;
    if (turns && w == 0) pipeline::named_barrier_arrive(1, 64);
    for (int t = 0; t < kTurns; ++t) {
      if (turns) pipeline::named_barrier_sync(1 + w, 64);
      if (threadIdx.x % 32 == 0) log.push_back(w);
      if (turns && (w == 0 || t < kTurns - 1)) pipeline::named_barrier_arrive(2 - w, 64);
    }
  });
  return log;
}

TEST_CASE("simt: named barriers let two warps take turns, and without them one warp runs ahead", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  simt::LaunchStats stats;
  CHECK(turns_taken(schedule, true, stats) == std::vector<int>{0, 1, 0, 1, 0, 1});
  CHECK(stats.named_barrier_phases == 6);  // three turns each
  CHECK(stats.block_barriers == 0);
  const std::vector<int> ahead = turns_taken(schedule, false, stats);
  const std::vector<int> lowest_first{0, 0, 0, 1, 1, 1}, highest_first{1, 1, 1, 0, 0, 0};
  CHECK(ahead == (schedule == Schedule::Lowest ? lowest_first : highest_first));
  CHECK(stats.named_barrier_phases == 0);
  // A phase may complete with arrivals alone: no thread waits, and nothing is left over.
  stats = simt::launch(config({1, 1, 1}, {64, 1, 1}, schedule), [] { pipeline::named_barrier_arrive(5, 64); });
  CHECK(stats.named_barrier_phases == 1);
}

TEST_CASE("simt: bad named barriers are errors naming the call, and counts that do not add up are caught", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  const auto launch_64 = [&](const std::function<void()>& body) {
    simt::launch(config({1, 1, 1}, {64, 1, 1}, schedule), body);
  };
  CHECK_THROWS_WITH(launch_64([] { pipeline::named_barrier_sync(0, 64); }),
                    Contains("named barrier sync at") && Contains("test_simt.cpp:") &&
                        Contains("the id must be 1 .. 15 (0 is __syncthreads')"));
  CHECK_THROWS_WITH(launch_64([] { pipeline::named_barrier_arrive(16, 64); }),
                    Contains("named barrier arrive at") && Contains("the id must be 1 .. 15"));
  CHECK_THROWS_WITH(launch_64([] { pipeline::named_barrier_sync(1, 48); }),
                    Contains("a positive multiple of 32, at most the block's 64"));
  CHECK_THROWS_WITH(launch_64([] { pipeline::named_barrier_sync(1, 96); }),
                    Contains("a positive multiple of 32, at most the block's 64"));
  // Counts that disagree within a phase (whichever half arrives first, the other's count differs).
  CHECK_THROWS_WITH(
      simt::launch(config({1, 1, 1}, {128, 1, 1}, schedule),
                   [] { pipeline::named_barrier_sync(1, threadIdx.x < 64 ? 128 : 96); }),
      Contains("the phase's first arrival, at") && Contains("test_simt.cpp:"));
  // Half of warp 0 and half of warp 1 make the count of 32: on a GPU each warp counts as a whole.
  CHECK_THROWS_WITH(launch_64([] {
                      if (threadIdx.x % 32 < 16) pipeline::named_barrier_sync(1, 32);
                    }),
                    Contains("completes a phase with 16 arrivals from warp") && Contains("a warp arrives whole"));
  // Half of a block of 128 threads arrives, the other half exits. Arrivals that no sync completes are
  // left over when the block ends, and a sync whose count is never reached waits for ever.
  const auto half_of_128 = [&](const std::function<void()>& body) {
    simt::launch(config({1, 1, 1}, {128, 1, 1}, schedule), [&] {
      if (threadIdx.x < 64) body();
    });
  };
  CHECK_THROWS_WITH(half_of_128([] { pipeline::named_barrier_arrive(2, 128); }),
                    Contains("ended with named barrier 2 partly arrived: 64 of 128 threads, the phase's first at") &&
                        Contains("test_simt.cpp:"));
  CHECK_THROWS_WITH(half_of_128([] { pipeline::named_barrier_sync(3, 128); }),
                    Contains("deadlock") && Contains("threads 0 to 63 wait at named barrier 3 (sync), ") &&
                        Contains(": 64 of 128 threads arrived"));
}

TEST_CASE("simt: faults are reported with the place in the source", "[simt]") {
  const Schedule schedule = GENERATE(Schedule::Lowest, Schedule::Highest);
  const simt::Dim3 one{1, 1, 1}, warp{32, 1, 1};
  SECTION("threads at two different barriers") {
    const auto two_barriers = [] {
      if (threadIdx.x < 16) {
        __syncthreads();
      } else {
        __syncthreads();
      }
    };
    CHECK_THROWS_WITH(simt::launch(config(one, warp, schedule), two_barriers),
                      Contains("divergent __syncthreads") && Contains("test_simt.cpp:"));
  }
  SECTION("a shuffle with a lane of the warp gone") {
    // The first lane to run exits (lane 0, or 31 from the highest): the others then arrive.
    const auto first_exits = [] {
      if (threadIdx.x == 0 || threadIdx.x == 31) return;
      (void)__shfl_xor_sync(0xffffffffu, 1.f, 1);
    };
    const char* gone = schedule == Schedule::Lowest ? "lane 0 of warp 0 has exited" : "lane 31 of warp 0 has exited";
    CHECK_THROWS_WITH(simt::launch(config(one, warp, schedule), first_exits), Contains(gone));
    // Lane 3 exits while lanes before it (or after it) already wait.
    const auto third_exits = [] {
      if (threadIdx.x == 3) return;
      (void)__shfl_xor_sync(0xffffffffu, 1.f, 1);
    };
    CHECK_THROWS_WITH(simt::launch(config(one, warp, schedule), third_exits),
                      Contains("thread 3 exited while lanes of its warp wait") && Contains("test_simt.cpp:"));
  }
  SECTION("lanes at a shuffle and at a barrier wait for each other forever") {
    CHECK_THROWS_WITH(simt::launch(config(one, warp, schedule),
                                   [] {
                                     if (threadIdx.x == 0) (void)__shfl_xor_sync(0xffffffffu, 1.f, 1);
                                     __syncthreads();
                                   }),
                      Contains("deadlock") && Contains("thread 0 waits at a warp collective (warp 0)") &&
                          Contains("threads 1 to 31 wait at __syncthreads"));
  }
  SECTION("a shuffle in a partial warp, or with a partial mask") {
    CHECK_THROWS_WITH(simt::launch(config(one, {48, 1, 1}, schedule),
                                   [] { (void)__shfl_xor_sync(0xffffffffu, 1.f, 1); }),
                      Contains("partial warp"));
    CHECK_THROWS_WITH(simt::launch(config(one, warp, schedule), [] { (void)__shfl_xor_sync(0xffffu, 1.f, 1); }),
                      Contains("mask 0xffff"));
  }
  SECTION("an exception a thread throws reaches the launch") {
    CHECK_THROWS_WITH(simt::launch(config({2, 1, 1}, {64, 1, 1}, schedule),
                                   [] {
                                     __syncthreads();
                                     if (blockIdx.x == 1 && threadIdx.x == 40) throw ShapeError("thread 40 refuses");
                                     __syncthreads();
                                   }),
                      "thread 40 refuses");
  }
  SECTION("bad launch shapes, and the emulator's calls outside a launch") {
    CHECK_THROWS_AS(simt::launch(config(one, {0, 1, 1}, schedule), [] {}), Error);
    CHECK_THROWS_WITH(simt::launch(config(one, {1025, 1, 1}, schedule), [] {}), Contains("at most 1024"));
    CHECK_THROWS_WITH(simt::thread_idx(), Contains("outside a kernel"));
    const auto nested = [&] { simt::launch(config(one, warp, schedule), [] {}); };
    CHECK_THROWS_WITH(simt::launch(config(one, warp, schedule), nested), Contains("already running"));
  }
}
