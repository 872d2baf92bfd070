// The flash-attention backward on Hopper's warpgroup mma (wgmma, sm_90a, through
// kernels/cuda/wgmma.cuh): the two kernels of the mma.sync backward (attention_tc_backward.cuh, which
// says what they compute) with their products on wgmma. Same shapes, same outputs, deterministic
// alike: each output row is one block's fixed-order sum.
//
// - dq kernel: a warpgroup takes 64 query rows, a block one or two warpgroups (two at head dim 64,
//   sharing each key tile, as the forward's blocks do), and streams tiles of 64 keys. Per tile,
//   S = Q K^T and dP = dO V^T are E / 16 instructions each of 64 x 64 x 16 with both operands in
//   shared memory; dS replaces S in registers; dQ += dS K is 4 instructions of 64 x E x 16, dS from
//   registers and K read MN-major (its keys along the contraction).
// - dk/dv kernel: a block takes 64 key rows and streams tiles of 64 queries (32 at head dim 128, where
//   dK and dV take 128 floats a lane). S^T = K Q^T and dP^T = V dO^T come from shared memory, P^T and
//   dS^T replace them in registers, and dV += P^T dO and dK += dS^T Q read dO and Q MN-major.
// Q, K, V and dO are staged in wgmma's core-matrix layout (kernels/wgmma_layout.h); one staged tile
// serves as a K-major operand in the score products and as an MN-major one in the gradient products.
// The elementwise steps, D and the gradients' stores are the mma.sync kernels' own functions.
// At head dim 128 both kernels overlap those steps with their products, as the forward overlaps its
// softmax (kWgmmaDeferGradients): a tile's gradient products are issued with the next tile's scores.
//
// And a third way, the fused kernel (AttentionArgs::fused_backward): the dk/dv kernel's blocks also
// compute their share of dQ, dQ^T = K^T dS^T over the block's 64 keys, and add it to a float32
// accumulator; P^T and dS^T go through shared memory, where dV += P^T dO, dK += dS^T Q and dQ^T read
// them. Five tile products where the two kernels take seven, and one pass over the operands; the
// price is the adds to the accumulator, whose order varies, so dQ's last bits vary from run to run.
// The adds are tensor reductions (TMA's cp.reduce.async.bulk.tensor): per query tile the block stages
// its share of dQ in shared memory and one thread hands it to the copy engine, which adds it to the
// accumulator while the block goes on (AttentionArgs::wgmma_dq_reduce; else, or where the map cannot
// be made, each thread adds its elements with atomics, as on mma.sync).
//
// Selected with the forward on wgmma (AttentionArgs::wgmma) and built with it (attention_wgmma.cu,
// sm_90a). The CPU tests run the kernels on the emulator (tests/kernels/test_attention_tc_simt.cpp).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_tc_backward.cuh"
#include "kernels/cuda/attention_wgmma_forward.cuh"

namespace kiln::attention_tc {

// Queries per tile of the dk/dv kernel on wgmma: 64, or 32 at head dim 128.
template <int D> inline constexpr int kWgmmaQueryTileFor = D == 128 ? 32 : 64;

// Warpgroups per dq block, each with 64 query rows, sharing each key tile of K and V: two at head dim
// 64, one at 128, where a warpgroup's registers would leave room for one block of two per SM. The
// dk/dv kernel's blocks are one warpgroup.
template <int D> inline constexpr int kWgmmaDqGroups = D == 64 ? 2 : 1;
template <int D> inline constexpr int kWgmmaDqThreads = kWgmmaDqGroups<D> * wgmma::kThreads;
template <int D> inline constexpr int kWgmmaDqRows = kWgmmaDqGroups<D> * wgmma::kM;

// Whether the gradient products of a streamed tile wait for the next tile's pass (DeferredProduct,
// below), as the forward's P V does: at head dim 128. There the A tiles they keep cost up to 16
// registers more per thread and no block per SM (ptxas: dq 170 and 218 with dropout, from 155 and
// 202; dk/dv 212 and 248, from 212 and 234; two blocks per SM either way). At head dim 64 they would:
// the dq kernel's blocks of two warpgroups would go from 126 registers to 146 and from two blocks per
// SM to one, the dk/dv kernel's from 166 to 193 and from three blocks to two, and with dropout it would
// spill. There each product is waited for in its own pass.
template <int D> inline constexpr bool kWgmmaDeferGradients = D == 128;

// Buffers of each streamed operand that a gradient product reads (K in the dq kernel, Q and dO in the
// dk/dv kernel): stream_tiles's kStages, and one more where the product is deferred, since tile t's is
// then still read during tile t + 1's pass, when stream_tiles starts copying tile t + kStages.
template <int D> inline constexpr int kWgmmaGradBuffers = kStages + (kWgmmaDeferGradients<D> ? 1 : 0);

// The dq kernel's shared memory: the block's Q and dO rows, kWgmmaGradBuffers key tiles of K and
// kStages of V, all staged.
template <typename T, int D> struct WgmmaDqSmem {
  static constexpr int kTileElems = kWgmmaKeyTile * D;
  T* q;
  T* dout;
  T* k;
  T* v;
  KILN_HD explicit WgmmaDqSmem(tile::SmemCarver& c)
      : q(c.take<T>(kWgmmaDqRows<D> * D, wgmma::kCoreBytes)),
        dout(c.take<T>(kWgmmaDqRows<D> * D, wgmma::kCoreBytes)),
        k(c.take<T>(kWgmmaGradBuffers<D> * kTileElems, wgmma::kCoreBytes)),
        v(c.take<T>(kStages * kTileElems, wgmma::kCoreBytes)) {}
};

// The dk/dv kernel's: the block's kKeys rows of K and V, kGradBuffers query tiles each of Q and dO
// (staged; kWgmmaGradBuffers, or the fused kernel's count), and kStages of each tile's log-sum-exp
// (base 2) and D.
template <typename T, int D, int kBuffers = kWgmmaGradBuffers<D>, int kBlockKeys = kBlockRows>
struct WgmmaDkvSmemFor {
  static constexpr int kTileElems = kWgmmaQueryTileFor<D> * D;
  static constexpr int kGradBuffers = kBuffers;
  static constexpr int kKeys = kBlockKeys;
  T* k;
  T* v;
  T* q;
  T* dout;
  float* lse;
  float* d;
  KILN_HD explicit WgmmaDkvSmemFor(tile::SmemCarver& c)
      : k(c.take<T>(kKeys * D, wgmma::kCoreBytes)),
        v(c.take<T>(kKeys * D, wgmma::kCoreBytes)),
        q(c.take<T>(kGradBuffers * kTileElems, wgmma::kCoreBytes)),
        dout(c.take<T>(kGradBuffers * kTileElems, wgmma::kCoreBytes)),
        lse(c.take<float>(kStages * kWgmmaQueryTileFor<D>)),
        d(c.take<float>(kStages * kWgmmaQueryTileFor<D>)) {}
};
template <typename T, int D> using WgmmaDkvSmem = WgmmaDkvSmemFor<T, D>;

// Whether the fused kernel defers its gradient products to the next tile's pass, as the two kernels
// do at head dim 128 (kWgmmaDeferGradients): no. Its passes hold five products, so the elementwise
// steps are a smaller share of them, and deferred at 128 it held 255 registers (with dropout, 28 bytes
// of spills) against 211 (246) with each product waited for in its pass (ptxas, sm_90a). For a GPU
// run to compare: true takes the deferred order, with two buffers of P^T and dS^T.
inline constexpr bool kFusedDefer = false;

// Warpgroups per block of the fused kernel, each with 64 keys: two at head dim 128, one at 64. Two
// share each query tile of Q and dO (half the tiles' traffic per key) and sum dQ^T over the block's
// 128 keys, each warpgroup 64 of its rows, so a block adds its share of dQ once for 128 keys (half
// the atomic adds) and each thread holds half the dQ^T accumulators. At 128 this keeps the warps an
// SM holds (a block of two warpgroups in the registers two blocks of one took); at 64 one warpgroup
// at 168 registers fits three blocks an SM, which blocks of two would cut to one.
template <int D> inline constexpr int kFusedGroups = D == 128 ? 2 : 1;
template <int D> inline constexpr int kFusedThreads = kFusedGroups<D> * wgmma::kThreads;
template <int D> inline constexpr int kFusedKeys = kFusedGroups<D> * wgmma::kM;

// The fused kernel's shared memory: the dk/dv kernel's for kFusedKeys keys (with a buffer more of Q
// and dO where deferred, kWgmmaGradBuffers' reason), and P^T and dS^T [keys, query tile] staged by row
// groups, kScoreBuffers each: the A operands of dV += P^T dO and dK += dS^T Q (K-major), and dS^T the
// B operand of dQ^T = K^T dS^T (MN-major). Deferred, two, so that tile t's are written while tile
// t - 1's products may still read theirs; else one, which the products have read when the pass ends
// (stream_tiles' barrier).
// And dQ's share of a query tile, float32 [query tile, D], staged for the tensor reductions
// (stage_dq_share), 16 KiB: at head dim 64 over P^T and dS^T (the products have read them by then,
// and the next tile writes them after the reductions have read dQ), since a buffer more would cost
// blocks an SM holds (three of 66 KiB fit in an H100's 227 KiB, of 82 two); at 128, where a block's
// registers already keep an SM to one block (of 114 KiB, or 130 with the buffer), in a buffer of its
// own, which takes the tile one barrier more where sharing takes three (below). Deferred, P^T and
// dS^T are still read when dQ is staged: its own buffer too.
inline constexpr int kScoreBuffers = kFusedDefer ? 2 : 1;
template <typename T, int D>
struct WgmmaFusedSmem : WgmmaDkvSmemFor<T, D, kStages + (kFusedDefer ? 1 : 0), kFusedKeys<D>> {
  using Base = WgmmaDkvSmemFor<T, D, kStages + (kFusedDefer ? 1 : 0), kFusedKeys<D>>;
  static constexpr int kScoreElems = kFusedKeys<D> * kWgmmaQueryTileFor<D>;
  static constexpr int kDqFloats = kWgmmaQueryTileFor<D> * D;
  static constexpr bool kDqOverScores = kScoreBuffers == 1 && D == 64;
  static_assert(!kDqOverScores || 2 * kScoreElems * sizeof(T) >= kDqFloats * sizeof(float), "dQ fits P^T, dS^T");
  static_assert(kScoreElems * sizeof(T) % wgmma::kCoreBytes == 0, "dS^T's buffer right after P^T's");
  T* pt;
  T* ds;
  float* dq;
  KILN_HD explicit WgmmaFusedSmem(tile::SmemCarver& c)
      : Base(c),
        pt(c.take<T>(kScoreBuffers * kScoreElems, kDqOverScores ? 1024 : wgmma::kCoreBytes)),
        ds(c.take<T>(kScoreBuffers * kScoreElems, wgmma::kCoreBytes)),
        dq(kDqOverScores ? reinterpret_cast<float*>(pt) : c.take<float>(kDqFloats, 1024)) {}
};

// The fused kernel's way to add dQ (a __grid_constant__ parameter): with `on`, tensor reductions
// through `map`, the accumulator float32 [batch, L, D] as boxes of [32 columns, query tile rows, one
// batch entry] with the 128-byte swizzle (rows past L are outside the tensor: the copy engine leaves
// them out); else atomic adds.
struct WgmmaDqReduce {
  tma::Map map;
  bool on;
};
inline constexpr int kDqBoxCols = 32;  // 128 bytes of float32: the swizzle's row

// The map for dq_acc (host code); off when not wanted or when the driver cannot make it.
template <int D> WgmmaDqReduce make_dq_reduce(const TcParams& p, float* dq_acc, bool want) {
  WgmmaDqReduce r{};
  if (!want) return r;
  tma::Box b;
  b.base = dq_acc;
  b.dims[0] = static_cast<uint64_t>(D);
  b.dims[1] = static_cast<uint64_t>(p.L);
  b.dims[2] = static_cast<uint64_t>(p.batch);
  b.strides[0] = sizeof(float);
  b.strides[1] = static_cast<uint64_t>(D) * sizeof(float);
  b.strides[2] = static_cast<uint64_t>(p.L * D) * sizeof(float);
  b.strides[3] = b.strides[4] = 16;
  b.box[0] = kDqBoxCols;
  b.box[1] = kWgmmaQueryTileFor<D>;
  b.swizzle128 = true;
  b.float32 = true;
  r.on = tma::encode(b, &r.map);
  return r;
}

// Stages this warp's elements of a [64, 8 N] block of dQ^T held as accumulators (its rows dQ's columns
// col0 + 16 (warp % 4) on, its columns the tile's queries) in `stage`, dQ [N * 8 queries, D] laid out
// as the tensor reduction reads it: kDqBoxCols columns at a time, each block [queries, 32] with the
// 128-byte swizzle (chunk c of row r at c ^ (r % 8)). A lane's elements are one float each, 8 queries
// (1024 bytes, the swizzle's period) apart from tile to tile; a warp's 32 stores of one element land
// in 32 banks: its 8 columns x 4 query pairs are 2 chunks x 4 rows, spread over all 8 by the swizzle.
template <int N>
__device__ __forceinline__ void stage_dq_share(float* stage, const tile::CTile (&x)[N], int col0) {
  using namespace tile;
  constexpr int kBlockFloats = N * 8 * kDqBoxCols;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const Coord c = c_coord(lane_id(), 0);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int d = col0 + warp % wgmma::kWarps * kM + c.row + 8 * h, q = c.col + e;
      float* const first = stage + d / kDqBoxCols * kBlockFloats +
                           wgmma::swizzle128(static_cast<uint32_t>(q * 128 + d % kDqBoxCols * 4)) / 4;
#pragma unroll
      for (int n = 0; n < N; ++n) first[n * 8 * kDqBoxCols] = x[n].r[2 * h + e];
    }
  }
}

// Stages this warp's 16 rows of a [16 warps, N] tile held as accumulators (the transposed scores: keys
// by queries; warp w's rows from 16 w on, across the block's warpgroups) in `tile`, by row groups,
// rounded to T. A lane's two columns of a row are adjacent there:
// one 4-byte store each. From the lane's first pair on, 8 rows further is the next row of core
// matrices (N / 8 of 64 elements), 8 columns the next core matrix: constant steps. Offsets computed
// per pair were held through the kernel's loop, and took the fused kernel at head dim 64 to 255
// registers with spills (ptxas, sm_90a).
template <typename T, int N>
__device__ __forceinline__ void stage_accumulators(T* tile, const tile::CTile (&x)[N / 8]) {
  using namespace tile;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const Coord c = c_coord(lane_id(), 0);
  T* const first = tile + static_cast<int>(wgmma::stage_offset(warp * kM + c.row, c.col, N));
#pragma unroll
  for (int n = 0; n < N / 8; ++n) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      *reinterpret_cast<uint32_t*>(first + h * N * wgmma::kCore + n * wgmma::kCore * wgmma::kCore) =
          pack2(static_cast<T>(x[n].r[2 * h]), static_cast<T>(x[n].r[2 * h + 1]));
    }
  }
}

// Issues s = A B^T and t = A2 B2^T for the warpgroup's 64 rows of A and A2 and the N rows of B and B2,
// all staged [rows, D] (descriptors rows_by_k): D / 16 steps each, one group, committed and not
// waited for.
template <typename T, int D, int N>
__device__ __forceinline__ void wgmma_score_pair(tile::CTile (&s)[N / 8], uint64_t a, uint64_t b,
                                                 tile::CTile (&t)[N / 8], uint64_t a2, uint64_t b2) {
  wgmma::fence();  // the accumulators of the last pass, read and rewritten since, before the products
#pragma unroll
  for (int d = 0; d < D / wgmma::kK; ++d) {
    const uint32_t step = static_cast<uint32_t>(d) * wgmma::k_step_bytes();
    wgmma::mma_ss<T, N>(s, wgmma::advance(a, step), wgmma::advance(b, step), d > 0);
  }
#pragma unroll
  for (int d = 0; d < D / wgmma::kK; ++d) {
    const uint32_t step = static_cast<uint32_t>(d) * wgmma::k_step_bytes();
    wgmma::mma_ss<T, N>(t, wgmma::advance(a2, step), wgmma::advance(b2, step), d > 0);
  }
  wgmma::commit();
}

// A gradient product acc += C B of one streamed tile, issued in the tile's own pass or, where
// kWgmmaDeferGradients, in the next tile's: C is [64, N] (dS, P^T, dS^T), kept as A tiles in registers
// (rounded to T) until the instructions that read them have landed; B is the tile's staged [N, D]
// operand, read MN-major (descriptor rows_by_n).
template <typename T, int D, int N> struct DeferredProduct {
  tile::ATile<T> a[N / 16];

  __device__ __forceinline__ void keep(const tile::CTile (&c)[N / 8]) {
#pragma unroll
    for (int kk = 0; kk < N / 16; ++kk) tile::a_from_c(a[kk], c[2 * kk], c[2 * kk + 1]);
  }
  // Issues the product into the caller's group (the caller fences before and commits after).
  __device__ __forceinline__ void issue(tile::CTile (&acc)[D / 8], uint64_t b) const {
#pragma unroll
    for (int kk = 0; kk < N / 16; ++kk) {
      wgmma::mma_rs<T, D, true>(acc, a[kk], wgmma::advance(b, static_cast<uint32_t>(kk) * wgmma::row_step_bytes(D)),
                                true);
    }
  }
};

// The order of both backward kernels' passes, their gradient products deferred (kDefer,
// kWgmmaDeferGradients) or not. The kernel's steps for tile t:
//   issue_scores()   S and dP (or S^T and dP^T), issued as one committed group;
//   elementwise()    settles them and turns them into dS (or P^T and dS^T);
//   keep()           takes the A tiles of the gradient products from them (DeferredProduct::keep);
//   issue_grads(u)   fences, issues tile u's gradient products and commits them, one group;
//   settle_grads(u)  settles their accumulators once they have landed.
// Deferred, tile t - 1's gradient products go out with tile t's scores (or an empty group, at the
// first tile), only the scores are waited for before elementwise(), and the products before keep()
// overwrites the A tiles they read; finish() issues the last tile's after the loop. Otherwise each
// product is waited for in tile t's pass.
template <bool kDefer> struct GradientPasses {
  bool pending = false;  // deferred: tile `last`'s gradient products are still to be issued
  int last = 0;

  template <typename IssueScores, typename Elementwise, typename Keep, typename IssueGrads, typename SettleGrads>
  __device__ __forceinline__ void pass(int t, IssueScores&& issue_scores, Elementwise&& elementwise, Keep&& keep,
                                       IssueGrads&& issue_grads, SettleGrads&& settle_grads) {
    issue_scores();
    if constexpr (kDefer) {
      if (pending) issue_grads(last);
      else wgmma::commit();  // an empty group: the same wait either way
      wgmma::wait<1>();      // the scores: the last tile's gradient products may still run
    } else {
      wgmma::wait<0>();
    }
    elementwise();
    if constexpr (kDefer) {
      wgmma::wait<0>();
      if (pending) settle_grads(last);
      keep();
      pending = true;
      last = t;
    } else {
      keep();
      issue_grads(t);
      wgmma::wait<0>();
      settle_grads(t);
    }
  }
  template <typename IssueGrads, typename SettleGrads>
  __device__ __forceinline__ void finish(IssueGrads&& issue_grads, SettleGrads&& settle_grads) {
    if (kDefer && pending) {
      issue_grads(last);
      wgmma::wait<0>();
      settle_grads(last);
    }
  }
};

template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kWgmmaDqThreads<D>)
    attention_backward_dq_wgmma_kernel(T* dq, float* d_rows, const T* dout, const T* out, const float* lse,
                                       const T* q, const T* k, const T* v, const __grid_constant__ TcParams p) {
  using namespace tile;
  constexpr int kRows = kWgmmaDqRows<D>;
  constexpr int kScoreTiles = kWgmmaKeyTile / kN;
  constexpr int kOutTiles = D / kN;
  SmemCarver carve(dynamic_smem());
  using Smem = WgmmaDqSmem<T, D>;
  const Smem smem(carve);

  const BlockWork work = block_work(p, true);
  if (work.b >= p.batch) return;  // past the batch in the grid's last section (tc_grid)
  const int64_t b = work.b;
  const int64_t i0 = work.block * kRows;
  const int group = kWgmmaDqGroups<D> == 1 ? 0 : static_cast<int>(threadIdx.x) / wgmma::kThreads;
  const AttentionOffsets& offs = shared_offsets(p, b);
  const PhiloxState st = kDropout ? philox_resolve(p.philox) : PhiloxState{};

  // The pipeline of the forward (stream_tiles): key tile t's K and V into their buffers, the block's
  // Q and dO landing with tile 0. The block streams the key tiles its last row sees, and with causal
  // a warpgroup skips those past its own last row.
  const int64_t tiles = tile_count(0, block_key_end(p, i0, kRows), kWgmmaKeyTile);
  const int64_t group_j_end = block_key_end(p, i0 + group * wgmma::kM, wgmma::kM);
  const auto fetch = [&](int t) {
    const int64_t j0 = static_cast<int64_t>(t) * kWgmmaKeyTile;
    const int n = t < tiles ? kWgmmaKeyTile : 0;
    stage_cores<T, D>(stage_buffer<kWgmmaGradBuffers<D>>(smem.k, Smem::kTileElems, t), k + offs.k, p.k_rs, j0, p.S,
                      n, p.wide);
    stage_cores<T, D>(stage_buffer(smem.v, Smem::kTileElems, t), v + offs.v, p.v_rs, j0, p.S, n, p.wide);
  };
  stage_cores<T, D>(smem.q, q + offs.q, p.q_rs, i0, p.L, kRows, p.wide);
  stage_cores<T, D>(smem.dout, dout + offs.o, p.o_rs, i0, p.L, kRows, p.wide);
  commit_copies();
  const DqRows rows = dq_rows<D>(d_rows, dout, out, lse, p, offs, b, i0);  // 16 rows a warp, in order

  // This warpgroup's 64 rows of Q and dO; K and V (and K MN-major) for the first buffer.
  const uint64_t q_desc = wgmma::rows_by_k(wgmma::smem_address(smem.q + group * wgmma::kM * D), D);
  const uint64_t do_desc = wgmma::rows_by_k(wgmma::smem_address(smem.dout + group * wgmma::kM * D), D);
  const uint64_t k_desc = wgmma::rows_by_k(wgmma::smem_address(smem.k), D);
  const uint64_t v_desc = wgmma::rows_by_k(wgmma::smem_address(smem.v), D);
  const uint64_t k_mn_desc = wgmma::rows_by_n(wgmma::smem_address(smem.k), D);

  // Per key tile, S and dP, then dS, then dQ += dS K (GradientPasses). Deferred, the forward's
  // overlap within a warpgroup: S and dP of tile t are issued with dQ += dS K of tile t - 1, and dS
  // of tile t is computed while that product runs. The last one is issued after the loop (also for a
  // warpgroup that skips the block's last tile: no later fetch refills its K).
  constexpr int kElems = Smem::kTileElems;
  CTile acc[kOutTiles];
#pragma unroll
  for (int t = 0; t < kOutTiles; ++t) fill(acc[t], 0.f);
  DeferredProduct<T, D, kWgmmaKeyTile> ds;
  GradientPasses<kWgmmaDeferGradients<D>> passes;
  const auto issue_dq = [&](int t) {
    wgmma::fence();  // dS's A tiles and the accumulators, written since the pass's first fence
    ds.issue(acc, stage_descriptor<T, kWgmmaGradBuffers<D>>(k_mn_desc, kElems, t));
    wgmma::commit();
  };
  const auto settle_dq = [&](int) { wgmma::settle(acc); };
  stream_tiles(tiles, fetch, [] { wgmma::fence_async_smem(); }, [&](int t) {
    const int64_t j0 = static_cast<int64_t>(t) * kWgmmaKeyTile;
    if (j0 >= group_j_end) return;  // the same for the whole warpgroup, and for every later tile
    CTile s[kScoreTiles], dp[kScoreTiles];
    passes.pass(
        t,
        [&] {
          wgmma_score_pair<T, D, kWgmmaKeyTile>(s, q_desc,
                                                stage_descriptor<T, kWgmmaGradBuffers<D>>(k_desc, kElems, t), dp,
                                                do_desc, stage_descriptor<T>(v_desc, kElems, t));
        },
        [&] {
          wgmma::settle(s);
          wgmma::settle(dp);
          dq_scores_to_ds<kDropout>(s, dp, rows, p, st, b, j0);
        },
        [&] { ds.keep(s); }, issue_dq, settle_dq);
  });
  passes.finish(issue_dq, settle_dq);

  write_dq(dq, p, offs, rows, acc);
}

// The dk/dv kernel's work for one block of keys and, with kDq (the fused kernel), dQ's share of those
// keys: per query tile, P^T and dS^T (rounded to T) are staged in shared memory, where dV += P^T dO
// and dK += dS^T Q read them, and dQ^T = K^T dS^T (D x query tile, both operands MN-major: K's rows
// and dS^T's rows are keys) goes out with those two, its accumulators added to dq_acc once it
// lands: with tensor reductions through `dq_map` (WgmmaDqReduce), or without it with atomics. A
// fused block is kFusedGroups<D> warpgroups of 64 keys each (warp w's 16 keys from 16 w on), and
// warpgroup g computes the 64-row blocks m of dQ^T with m % kFusedGroups == g, over all the block's
// keys.
template <typename T, int D, bool kDropout, bool kDq>
__device__ __forceinline__ void dkv_wgmma_block(T* dk, T* dv, float* dq_acc, const tma::Map* dq_map,
                                                const T* dout, const float* lse, const float* d_rows, const T* q,
                                                const T* k, const T* v, const TcParams& p) {
  using namespace tile;
  constexpr int kQueryTile = kWgmmaQueryTileFor<D>;
  constexpr int kScoreTiles = kQueryTile / kN;
  constexpr int kOutTiles = D / kN;
  SmemCarver carve(dynamic_smem());
  using Smem = std::conditional_t<kDq, WgmmaFusedSmem<T, D>, WgmmaDkvSmem<T, D>>;
  const Smem smem(carve);
  constexpr int kGroups = Smem::kKeys / wgmma::kM;

  const int warp = static_cast<int>(threadIdx.x) / kWarp;  // its keys: 16 from j_first + 16 warp on
  const int group = kGroups == 1 ? 0 : warp / wgmma::kWarps;
  const BlockWork work = block_work(p, false);
  if (work.b >= p.batch) return;  // past the batch in the grid's last section (tc_grid)
  const int64_t b = work.b;
  const int64_t j_first = work.block * Smem::kKeys;
  const AttentionOffsets& offs = shared_offsets(p, b);
  const PhiloxState st = kDropout ? philox_resolve(p.philox) : PhiloxState{};

  // The pipeline of the mma.sync dk/dv kernel (attention_tc_backward.cuh, stream_tiles): query tile t's
  // Q and dO copied, its lse and D stored; the block's K and V land with tile 0. Causal: queries
  // before the block's first key see none of its keys.
  const int64_t i_begin = p.causal ? j_first / kQueryTile * kQueryTile : 0;
  const int64_t tiles = tile_count(i_begin, p.L, kQueryTile);
  const auto fetch = [&](int t) {
    const int64_t i0 = i_begin + static_cast<int64_t>(t) * kQueryTile;
    const int n = t < tiles ? kQueryTile : 0;
    stage_cores<T, D>(stage_buffer<Smem::kGradBuffers>(smem.q, Smem::kTileElems, t), q + offs.q, p.q_rs, i0, p.L,
                      n, p.wide);
    stage_cores<T, D>(stage_buffer<Smem::kGradBuffers>(smem.dout, Smem::kTileElems, t), dout + offs.o, p.o_rs, i0,
                      p.L, n, p.wide);
    stage_query_stats<kQueryTile>(stage_buffer(smem.lse, kQueryTile, t), stage_buffer(smem.d, kQueryTile, t), lse,
                                  d_rows, p, b, i0);
  };
  stage_cores<T, D>(smem.k, k + offs.k, p.k_rs, j_first, p.S, Smem::kKeys, p.wide);
  stage_cores<T, D>(smem.v, v + offs.v, p.v_rs, j_first, p.S, Smem::kKeys, p.wide);
  commit_copies();

  // This warpgroup's 64 rows of K and V (a block of rows is contiguous: 64 D elements); Q and dO
  // (K-major and MN-major) for the first buffer.
  const uint64_t k_desc = wgmma::rows_by_k(wgmma::smem_address(smem.k + group * wgmma::kM * D), D);
  const uint64_t v_desc = wgmma::rows_by_k(wgmma::smem_address(smem.v + group * wgmma::kM * D), D);
  const uint64_t q_desc = wgmma::rows_by_k(wgmma::smem_address(smem.q), D);
  const uint64_t do_desc = wgmma::rows_by_k(wgmma::smem_address(smem.dout), D);
  const uint64_t q_mn_desc = wgmma::rows_by_n(wgmma::smem_address(smem.q), D);
  const uint64_t do_mn_desc = wgmma::rows_by_n(wgmma::smem_address(smem.dout), D);

  // Per query tile, S^T and dP^T, then P^T and dS^T, then dV += P^T dO and dK += dS^T Q
  // (GradientPasses). Deferred, the forward's overlap within a warpgroup: S^T and dP^T of tile t are
  // issued with the gradient products of tile t - 1, and P^T and dS^T of tile t are computed while
  // those run. The last two are issued after the loop.
  constexpr int kElems = Smem::kTileElems;
  CTile acc_k[kOutTiles], acc_v[kOutTiles];
#pragma unroll
  for (int t = 0; t < kOutTiles; ++t) {
    fill(acc_k[t], 0.f);
    fill(acc_v[t], 0.f);
  }
  DeferredProduct<T, D, kQueryTile> pt, dst;  // the two kernels' A tiles
  GradientPasses<kDq ? kFusedDefer : kWgmmaDeferGradients<D>> passes;
  // Fused: this warpgroup's blocks of 64 rows of dQ^T for the tile (K's columns m 64 .., m % kGroups ==
  // group), D / 64 / kGroups of them.
  constexpr int kQBlocks = kDq ? D / wgmma::kM / kGroups : 1;
  CTile acc_q[kQBlocks][kScoreTiles];
  const auto issue_dkv = [&](int t) {
    if constexpr (kDq) {
      // Zeros, though the first step overwrites them: the instruction's operands are read-write, and
      // without them the last tile's values would stay live through the pass. Before the fence,
      // which orders the registers' writes before the instructions read them.
#pragma unroll
      for (int m = 0; m < kQBlocks; ++m) {
#pragma unroll
        for (int n = 0; n < kScoreTiles; ++n) fill(acc_q[m][n], 0.f);
      }
    }
    wgmma::fence();  // the A tiles and the accumulators, written since the pass's first fence
    const uint64_t do_mn = stage_descriptor<T, Smem::kGradBuffers>(do_mn_desc, kElems, t);
    const uint64_t q_mn = stage_descriptor<T, Smem::kGradBuffers>(q_mn_desc, kElems, t);
    if constexpr (kDq) {
      using Fused = WgmmaFusedSmem<T, D>;
      const auto staged = [&](T* first, bool k_major) {
        const uint32_t at = wgmma::smem_address(first);
        return stage_descriptor<T, kScoreBuffers>(
            k_major ? wgmma::rows_by_k(at, kQueryTile) : wgmma::rows_by_n(at, kQueryTile), Fused::kScoreElems, t);
      };
      // P^T's and dS^T's rows of this warpgroup's keys as A; all of dS^T as B.
      const int rows = group * wgmma::kM * kQueryTile;
      const uint64_t pt_k = staged(smem.pt + rows, true), ds_k = staged(smem.ds + rows, true);
      const uint64_t ds_n = staged(smem.ds, false);
#pragma unroll
      for (int kk = 0; kk < kQueryTile / wgmma::kK; ++kk) {
        const uint32_t a_step = static_cast<uint32_t>(kk) * wgmma::k_step_bytes();
        const uint32_t b_step = static_cast<uint32_t>(kk) * wgmma::row_step_bytes(D);
        wgmma::mma_ss<T, D, false, true>(acc_v, wgmma::advance(pt_k, a_step), wgmma::advance(do_mn, b_step), true);
        wgmma::mma_ss<T, D, false, true>(acc_k, wgmma::advance(ds_k, a_step), wgmma::advance(q_mn, b_step), true);
      }
      // dQ^T = K^T dS^T over the block's keys: A is K read MN-major (its rows, the keys, along the
      // contraction), the block of its columns from 64 m on; B is dS^T, MN-major too.
      const uint64_t k_t = wgmma::rows_by_n(wgmma::smem_address(smem.k), D);
#pragma unroll
      for (int mm = 0; mm < kQBlocks; ++mm) {
        const int m = mm * kGroups + group;
#pragma unroll
        for (int kk = 0; kk < Smem::kKeys / wgmma::kK; ++kk) {
          const uint32_t a_at = wgmma::by_row_groups(D).position(kk * wgmma::kK, m * wgmma::kM);
          wgmma::mma_ss<T, kQueryTile, true, true>(
              acc_q[mm], wgmma::advance(k_t, a_at),
              wgmma::advance(ds_n, static_cast<uint32_t>(kk) * wgmma::row_step_bytes(kQueryTile)), kk > 0);
        }
      }
    } else {
      pt.issue(acc_v, do_mn);
      dst.issue(acc_k, q_mn);
    }
    wgmma::commit();
  };
  const auto settle_dkv = [&](int t) {
    wgmma::settle(acc_v);
    wgmma::settle(acc_k);
    if constexpr (kDq) {
      // This warp's 16 rows of each of the warpgroup's blocks of dQ^T: dQ's columns 64 m + 16 (warp % 4)
      // on, for the tile's query rows of dq_acc.
      const int64_t i0 = i_begin + static_cast<int64_t>(t) * kQueryTile;
#pragma unroll
      for (int mm = 0; mm < kQBlocks; ++mm) wgmma::settle(acc_q[mm]);
      if (dq_map == nullptr) {
#pragma unroll
        for (int mm = 0; mm < kQBlocks; ++mm) {
          const int m = mm * kGroups + group;
          add_dq_transposed<D>(dq_acc, acc_q[mm], p, b, i0, m * wgmma::kM + warp % wgmma::kWarps * kM);
        }
        return;
      }
      // Staged, then one thread starts the reductions, a box per 32 columns. Over P^T and dS^T the
      // staging waits for every warpgroup's products to have read them. In a buffer of its own the
      // last tile's reductions have read it: thread 0 waited with the scores, and the barrier after
      // P^T and dS^T passed that on; deferred, the last tile's products settle after the loop, with no
      // scores before them, so thread 0 waits here, and a barrier passes it on.
      using Fused = WgmmaFusedSmem<T, D>;
      if constexpr (Fused::kDqOverScores || kFusedDefer) {
        if (!Fused::kDqOverScores && threadIdx.x == 0) tma::wait_bulk_read<0>();
        __syncthreads();
      }
#pragma unroll
      for (int mm = 0; mm < kQBlocks; ++mm) {
        stage_dq_share(smem.dq, acc_q[mm], (mm * kGroups + group) * wgmma::kM);
      }
      wgmma::fence_async_smem();  // for the copy engine
      __syncthreads();
      if (threadIdx.x == 0) {
        int32_t at[tma::kRank] = {0, static_cast<int32_t>(i0), static_cast<int32_t>(b), 0, 0};
#pragma unroll
        for (int c = 0; c < D / kDqBoxCols; ++c) {
          at[0] = c * kDqBoxCols;
          tma::reduce_add_box(*dq_map, at, smem.dq + c * kQueryTile * kDqBoxCols);
        }
        tma::commit_bulk();
      }
    }
  };
  stream_tiles(tiles, fetch, [] { wgmma::fence_async_smem(); }, [&](int t) {
    const int64_t i0 = i_begin + static_cast<int64_t>(t) * kQueryTile;
    CTile s[kScoreTiles], dp[kScoreTiles];
    passes.pass(
        t,
        [&] {
          wgmma_score_pair<T, D, kQueryTile>(s, k_desc, stage_descriptor<T, Smem::kGradBuffers>(q_desc, kElems, t),
                                             dp, v_desc,
                                             stage_descriptor<T, Smem::kGradBuffers>(do_desc, kElems, t));
          // While they run, thread 0 waits for the last tile's reductions to have read dQ's staging.
          if (kDq && dq_map != nullptr && t > 0 && threadIdx.x == 0) tma::wait_bulk_read<0>();
        },
        [&] {
          wgmma::settle(s);
          wgmma::settle(dp);
          dkv_scores_to_p_ds<kDropout>(s, dp, p, st, b, i0, j_first + warp * kM,
                                       stage_buffer(smem.lse, kQueryTile, t), stage_buffer(smem.d, kQueryTile, t));
          if constexpr (kDq) {
            // Thread 0 has waited for the last tile's reductions to read dQ's staging, which the
            // barrier passes on: over P^T and dS^T one of its own before they are stored; in a
            // buffer of its own the one below, before the next staging.
            if (WgmmaFusedSmem<T, D>::kDqOverScores && dq_map != nullptr && t > 0) __syncthreads();
            // P^T and dS^T to this tile's buffers, rounded to T as the A tiles would be; the products
            // read them after the proxy fence and the barrier.
            stage_accumulators<T, kQueryTile>(stage_buffer<kScoreBuffers>(smem.pt, Smem::kScoreElems, t), s);
            stage_accumulators<T, kQueryTile>(stage_buffer<kScoreBuffers>(smem.ds, Smem::kScoreElems, t), dp);
            wgmma::fence_async_smem();
            __syncthreads();
          }
        },
        [&] {
          if constexpr (!kDq) {
            pt.keep(s);
            dst.keep(dp);
          }
        },
        issue_dkv, settle_dkv);
  });
  passes.finish(issue_dkv, settle_dkv);
  // The reductions done before the block's shared memory goes.
  if (kDq && dq_map != nullptr && threadIdx.x == 0) tma::wait_bulk<0>();

  write_dkv(dk, dv, p, offs, j_first + warp * kM, acc_k, acc_v);
}

template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kBlockThreads)
    attention_backward_dkv_wgmma_kernel(T* dk, T* dv, const T* dout, const float* lse, const float* d_rows,
                                        const T* q, const T* k, const T* v, const __grid_constant__ TcParams p) {
  dkv_wgmma_block<T, D, kDropout, false>(dk, dv, nullptr, nullptr, dout, lse, d_rows, q, k, v, p);
}

// The fused backward's kernel: dK and dV of a block of keys, and their share of dQ added to dq_acc
// (float32 [batch, L, D], zeroed, with d_rows, by attention_backward_rows_kernel; rounded into dq by
// attention_backward_dq_finish_kernel) by tensor reductions through `reduce` (or atomics). Five tile
// products where the two kernels take seven, at the price of adds whose order varies between runs on
// a GPU: dQ's last bits are not deterministic.
template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kFusedThreads<D>)
    attention_backward_fused_wgmma_kernel(T* dk, T* dv, float* dq_acc, const T* dout, const float* lse,
                                          const float* d_rows, const T* q, const T* k, const T* v,
                                          const __grid_constant__ TcParams p,
                                          const __grid_constant__ WgmmaDqReduce reduce) {
  dkv_wgmma_block<T, D, kDropout, true>(dk, dv, dq_acc, reduce.on ? &reduce.map : nullptr, dout, lse, d_rows, q, k,
                                        v, p);
}

}  // namespace kiln::attention_tc
