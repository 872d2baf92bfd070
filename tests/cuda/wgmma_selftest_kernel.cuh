// The kernel of the wgmma self-test: one warpgroup stages A [64, 64], B [64, 64] and V [64, 128] in
// shared memory (kernels/wgmma_layout.h, in `order`: by row groups as the backward stages its tiles,
// by pieces as the forward does, or swizzled), runs wgmma with both operands there and with A in
// registers, and re-reads accumulators as A tiles (tests/cuda/wgmma_selftest.h says what it
// computes). The GPU test launches it (tests/cuda/wgmma_selftest.cu, built for sm_90a), and the CPU
// test runs it on the emulator of kernels/simt/simt.h (tests/kernels/test_wgmma.cpp).
#pragma once

#include "kernels/cuda/wgmma.cuh"

namespace kiln::test {

inline constexpr int kWgRows = 64, kWgK = 64, kWgN = 128;

// The dynamic shared memory the kernel carves: the three staged operands.
template <typename T> struct WgmmaSelftestSmem {
  T* a;
  T* b;
  T* v;
  KILN_HD explicit WgmmaSelftestSmem(tile::SmemCarver& c)
      : a(c.take<T>(kWgRows * kWgK, 1024)),  // on 1024 bytes, as a swizzled tile must be
        b(c.take<T>(kWgRows * kWgK, 1024)),
        v(c.take<T>(kWgK * kWgN, 1024)) {}
};

// An A tile from a row-major [16, 16] block in global memory, through the fragment map (tile.cuh's
// load_a reads shared memory, with ldmatrix): mma_rs's A in registers, as mma.sync's A tile.
template <typename T> __device__ __forceinline__ void a_tile_from(tile::ATile<T>& t, const T* src, int ld) {
  const int lane = tile::lane_id();
  for (int j = 0; j < tile::kAElems / 2; ++j) {
    const tile::Coord lo = tile::a_coord(lane, 2 * j), hi = tile::a_coord(lane, 2 * j + 1);
    t.r[j] = tile::pack2(src[lo.row * ld + lo.col], src[hi.row * ld + hi.col]);
  }
}

// Writes this thread's accumulator tiles of a [64, 8 N] product to row-major `out` (leading dim ld).
template <int N> __device__ __forceinline__ void store_accumulators(const tile::CTile (&d)[N], float* out, int ld) {
  const int warp = static_cast<int>(threadIdx.x) / tile::kWarp;
  for (int t = 0; t < N; ++t) tile::store_c(d[t], out + warp * tile::kM * ld + t * tile::kN, ld);
}

// Row-major inputs a [64, 64], b [64, 64] (B = b^T: b's rows are B's columns, K-major), v [64, 128]
// (K rows of N, MN-major). Outputs, row-major: s = a b^T [64, 64] (mma_ss, 4 K steps), av = a v [64,
// 128] (mma_rs at N = 128, A from registers), av_hi = a v[:, 64:] [64, 64] (mma_rs at N = 64, V's
// descriptor advanced along N), sv = s v [64, 128] (s re-read as A tiles, a_from_c), tb = a^T b
// [64, 64] (mma_ss with both operands MN-major: a's and b's rows along K, the transpose flags set).
template <typename T>
__global__ void wgmma_selftest_kernel(const T* a, const T* b, const T* v, float* s, float* av, float* av_hi,
                                      float* sv, float* tb, wgmma::Order order) {
  using namespace kiln::tile;
  tile::SmemCarver carve(dynamic_smem());
  const WgmmaSelftestSmem<T> smem(carve);
  const wgmma::Staging sk{kWgRows, kWgK, order}, sn{kWgK, kWgN, order};
  for (int i = static_cast<int>(threadIdx.x); i < kWgRows * kWgK; i += static_cast<int>(blockDim.x)) {
    smem.a[sk.offset(i / kWgK, i % kWgK)] = a[i];
    smem.b[sk.offset(i / kWgK, i % kWgK)] = b[i];
  }
  for (int i = static_cast<int>(threadIdx.x); i < kWgK * kWgN; i += static_cast<int>(blockDim.x)) {
    smem.v[sn.offset(i / kWgN, i % kWgN)] = v[i];
  }
  wgmma::fence_async_smem();
  __syncthreads();
  const uint64_t da = wgmma::rows_by_k(wgmma::smem_address(smem.a), sk);
  const uint64_t db = wgmma::rows_by_k(wgmma::smem_address(smem.b), sk);
  const uint64_t dv = wgmma::rows_by_n(wgmma::smem_address(smem.v), sn);
  const uint64_t dv_hi = wgmma::advance(dv, sn.position(0, 64));  // columns 64..127
  const uint64_t da_t = wgmma::rows_by_n(wgmma::smem_address(smem.a), sk);  // a's rows along K
  const uint64_t db_t = wgmma::rows_by_n(wgmma::smem_address(smem.b), sk);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  constexpr int kSteps = kWgK / wgmma::kK;
  ATile<T> ra[kSteps];
  for (int k = 0; k < kSteps; ++k) a_tile_from(ra[k], a + warp * kM * kWgK + k * kK, kWgK);

  CTile cs[kWgRows / kN], cav[kWgN / kN], chi[kWgRows / kN], csv[kWgN / kN], ctb[kWgRows / kN];
  wgmma::fence();
  for (int k = 0; k < kSteps; ++k) {
    const uint32_t step = sk.position(0, k * wgmma::kK);
    wgmma::mma_ss<T, 64>(cs, wgmma::advance(da, step), wgmma::advance(db, step), k > 0);
  }
  for (int k = 0; k < kSteps; ++k) {
    const uint32_t step = sn.position(k * wgmma::kK, 0);
    wgmma::mma_rs<T, 128, true>(cav, ra[k], wgmma::advance(dv, step), k > 0);
    wgmma::mma_rs<T, 64, true>(chi, ra[k], wgmma::advance(dv_hi, step), k > 0);
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::settle(cs);
  wgmma::settle(cav);
  wgmma::settle(chi);
  store_accumulators(cs, s, kWgRows);
  store_accumulators(cav, av, kWgN);
  store_accumulators(chi, av_hi, kWgRows);

  ATile<T> rs[kSteps];
  for (int k = 0; k < kSteps; ++k) a_from_c(rs[k], cs[2 * k], cs[2 * k + 1]);
  wgmma::fence();
  for (int k = 0; k < kSteps; ++k) {
    const uint32_t step = sn.position(k * wgmma::kK, 0);
    wgmma::mma_rs<T, 128, true>(csv, rs[k], wgmma::advance(dv, step), k > 0);
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::settle(csv);
  store_accumulators(csv, sv, kWgN);

  // A group of its own: with the others' accumulators live, ptxas would serialize the instructions.
  wgmma::fence();
  for (int k = 0; k < kSteps; ++k) {
    const uint32_t step = sk.position(k * wgmma::kK, 0);
    wgmma::mma_ss<T, 64, true, true>(ctb, wgmma::advance(da_t, step), wgmma::advance(db_t, step), k > 0);
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::settle(ctb);
  store_accumulators(ctb, tb, kWgRows);
}

}  // namespace kiln::test
