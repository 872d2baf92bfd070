// The flash-attention backward kernels on tensor cores (mma.sync through kernels/cuda/tile.cuh), for the
// shapes the tensor-core forward takes (attention_tc_fits): float16 or bfloat16, E = Ev = 64 or
// 128, no mask, causal or not, dropout or not, any L and S. It rebuilds the probabilities from the
// forward's log-sum-exp, P = exp(scale * Q K^T - lse), and with Z the dropout factors (1 / (1 - p)
// or 0, drawn as the forward drew them; all 1 without dropout) computes
//   dV = (P Z)^T dO,   dP = dO V^T,   dS = P * (dP Z - D)  with D_i = dO_i . O_i,
//   dQ = scale * dS K,   dK = scale * dS^T Q.
//
// Two kernels, as the scalar backward (kernels/cuda/attention.cu): each output row is one block's
// fixed-order sum, so the gradients are deterministic without atomics. The price is computing the
// scores and dP twice (seven tile products where a single kernel with atomic dQ needs five). kiln has
// that kernel too, the fused backward: below (attention_backward_fused_tc_kernel, the dk/dv kernel's
// blocks adding their share of dQ) and on wgmma (attention_wgmma_backward.cuh), with the row kernels
// and the launch they share at the end of this file.
//
// - dq kernel: a block of 4 warps takes 64 query rows, each warp 16, keeps the block's Q and dO rows
//   in shared memory, and streams key tiles (64 keys, 32 at head dim 128) through it as well.
//   Per tile a warp computes S = Q K^T and dP = dO V^T, turns them into dS in registers, and adds
//   dS K with dS re-read as A operands (a_from_c). It first computes D for its rows (dO . O) and
//   writes it for the second kernel.
// - dk/dv kernel: a block takes 64 key rows, each warp 16, and streams query tiles (64 queries, 16
//   at head dim 128) with their lse and D. It works on the transposes, so keys stay the rows of every
//   tile: S^T = K Q^T and dP^T = V dO^T, then P^T and dS^T in registers, then dV += P^T dO and
//   dK += dS^T Q, both with A operands re-read from the accumulators. Nothing goes through memory
//   between the products.
//
// Probabilities and dS enter their products rounded to the element type, as in FlashAttention.
//
// The kernels are in a header so that the CPU tests compile them too, on the emulator of
// kernels/simt/simt.h (tests/kernels/test_attention_tc_simt.cpp); attention_tc_backward.cu launches
// them.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/cuda/attention_tc.cuh"
#if defined(__CUDACC__)
#include <string>

#include "kernels/cuda/common.cuh"
#endif

namespace kiln::attention_tc {

// Queries per tile of the dk/dv kernel: 64, or 16 at head dim 128, where the dK and dV accumulators
// take 128 floats a lane (32 queries spill).
template <int D> constexpr int kQueryTileFor = D == 128 ? 16 : 64;

// The dq kernel's shared memory: the block's Q and dO rows, and kStages key tiles each of K and V.
template <typename T, int D> struct DqSmem {
  static constexpr int kTileElems = kStreamTileFor<D> * kLdFor<D>;
  T* q;
  T* dout;
  T* k;
  T* v;
  KILN_HD explicit DqSmem(tile::SmemCarver& c)
      : q(c.take<T>(kBlockRows * kLdFor<D>)),
        dout(c.take<T>(kBlockRows * kLdFor<D>)),
        k(c.take<T>(kStages * kTileElems)),
        v(c.take<T>(kStages * kTileElems)) {}
};

// The dk/dv kernel's: the block's K and V rows, kStages query tiles each of Q and dO, and each
// tile's log-sum-exp (base 2; +inf where a query has no probabilities) and D.
template <typename T, int D> struct DkvSmem {
  static constexpr int kTileElems = kQueryTileFor<D> * kLdFor<D>;
  T* k;
  T* v;
  T* q;
  T* dout;
  float* lse;
  float* d;
  KILN_HD explicit DkvSmem(tile::SmemCarver& c)
      : k(c.take<T>(kBlockRows * kLdFor<D>)),
        v(c.take<T>(kBlockRows * kLdFor<D>)),
        q(c.take<T>(kStages * kTileElems)),
        dout(c.take<T>(kStages * kTileElems)),
        lse(c.take<float>(kStages * kQueryTileFor<D>)),
        d(c.take<float>(kStages * kQueryTileFor<D>)) {}
};

// Batch entry b's offsets, computed by the block's first thread into shared memory and read from there
// after a barrier. Held in registers through a backward kernel's loop, the offsets of q, dout, dk and
// dv pushed the dk/dv kernel at head dim 64 into register spills (ptxas -v, sm_90).
__device__ __forceinline__ const AttentionOffsets& shared_offsets(const TcParams& p, int64_t b) {
  KILN_SHARED(AttentionOffsets, offs);
  if (threadIdx.x == 0) offs = attention_offsets(p.layout, b);
  __syncthreads();
  return offs;
}

// The sum of v over the warp, in every lane.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = tile::kWarp / 2; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// This lane's part of D = dO . O for one query row: elements l, l + 32, ... for lane l; warp_sum
// adds the parts. One function for the dq kernels and the fused backward's row kernel, so both give
// the dk/dv kernels the same bits.
template <int D, typename T>
__device__ __forceinline__ float lane_dout_dot_out(const T* o_row, const T* g_row) {
  float part = 0.f;
  for (int e = tile::lane_id(); e < D; e += tile::kWarp) {
    part += static_cast<float>(o_row[e]) * static_cast<float>(g_row[e]);
  }
  return part;
}

// What a dq kernel (on mma.sync below, on wgmma in attention_wgmma_backward.cuh) keeps for a lane's
// two query rows of its warp's 16 (group and group + 8): the rows, their lse in base 2 (+inf where a
// row has no probabilities: past L, or no visible key) and D = dO . O.
struct DqRows {
  int64_t rows[2];
  float lse2[2], d_row[2];
};

// DqRows for the block of query rows from i0 on; D is also written to d_rows for the dk/dv kernel.
template <int D, typename T>
__device__ __forceinline__ DqRows dq_rows(float* d_rows, const T* dout, const T* out, const float* lse,
                                          const TcParams& p, const AttentionOffsets& offs, int64_t b, int64_t i0) {
  using namespace tile;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = lane_id();
  DqRows r{{i0 + warp * kM + lane / 4, i0 + warp * kM + lane / 4 + 8}, {0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = r.rows[h] < p.L ? lse[b * p.L + r.rows[h]] : -INFINITY;
    r.lse2[h] = l == -INFINITY ? INFINITY : l * kLog2e;
  }
  for (int row = 0; row < kM; ++row) {
    const int64_t i = i0 + warp * kM + row;
    float part = 0.f;
    if (i < p.L) part = lane_dout_dot_out<D>(out + offs.o + i * p.o_rs, dout + offs.o + i * p.o_rs);
    part = warp_sum(part);
    if (row == lane / 4) r.d_row[0] = part;
    if (row == lane / 4 + 8) r.d_row[1] = part;
    if (lane == 0 && i < p.L) d_rows[b * p.L + i] = part;
  }
  return r;
}

// dS = P * (dP Z - D) into the score tiles s (S = Q K^T for the keys from j0 on; dp = dO V^T); 0
// where the key is not visible.
template <bool kDropout, int N>
__device__ __forceinline__ void dq_scores_to_ds(tile::CTile (&s)[N], const tile::CTile (&dp)[N], const DqRows& r,
                                                const TcParams& p, const PhiloxState& st, int64_t b, int64_t j0) {
  using namespace tile;
  const int lane = lane_id();
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < kCElems; ++e) {
      const int h = e / 2;
      const int64_t j = j0 + n * kN + c_coord(lane, e).col;
      const float pe = visible(p, r.rows[h], j) ? exp2f(s[n].r[e] * p.scale_log2 - r.lse2[h]) : 0.f;
      float dpz = dp[n].r[e];
      if constexpr (kDropout) dpz *= keep_factor(p, st, b, r.rows[h], j);
      s[n].r[e] = pe * (dpz - r.d_row[h]);
    }
  }
}

// dQ = scale * acc for the lane's two rows.
template <typename T, int OUT>
__device__ __forceinline__ void write_dq(T* dq, const TcParams& p, const AttentionOffsets& offs, const DqRows& r,
                                         const tile::CTile (&acc)[OUT]) {
  using namespace tile;
  const int lane = lane_id();
  T* const dq_b = dq + offs.dq;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (r.rows[h] >= p.L) continue;
    T* g = dq_b + r.rows[h] * p.dq_rs;
#pragma unroll
    for (int t = 0; t < OUT; ++t) {
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) g[t * kN + c_coord(lane, e).col] = static_cast<T>(acc[t].r[e] * p.scale);
    }
  }
}

// A dk/dv kernel's query tile from i0 on: each query's lse in base 2 (+inf where it has no
// probabilities) and D, into shared memory.
template <int kQueryTile>
__device__ __forceinline__ void stage_query_stats(float* lse_s, float* d_s, const float* lse, const float* d_rows,
                                                  const TcParams& p, int64_t b, int64_t i0) {
  for (int t = static_cast<int>(threadIdx.x); t < kQueryTile; t += blockDim.x) {
    const int64_t i = i0 + t;
    const float l = i < p.L ? lse[b * p.L + i] : -INFINITY;
    lse_s[t] = l == -INFINITY ? INFINITY : l * kLog2e;
    d_s[t] = i < p.L ? d_rows[b * p.L + i] : 0.f;
  }
}

// A dk/dv kernel's transposed tiles, for the warp's 16 keys from key0 on and the queries from i0 on:
// (P Z)^T into s (S^T = K Q^T), dS^T = P^T * (dP^T Z - D) into dp (dP^T = V dO^T). A tile's columns
// are queries.
template <bool kDropout, int N>
__device__ __forceinline__ void dkv_scores_to_p_ds(tile::CTile (&s)[N], tile::CTile (&dp)[N], const TcParams& p,
                                                   const PhiloxState& st, int64_t b, int64_t i0, int64_t key0,
                                                   const float* lse_s, const float* d_s) {
  using namespace tile;
  const int lane = lane_id();
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < kCElems; ++e) {
      const Coord c = c_coord(lane, e);
      const int col = n * kN + c.col;
      const int64_t j = key0 + c.row;
      const float pe = visible(p, i0 + col, j) ? exp2f(s[n].r[e] * p.scale_log2 - lse_s[col]) : 0.f;
      float z = 1.f;
      if constexpr (kDropout) z = keep_factor(p, st, b, i0 + col, j);
      s[n].r[e] = pe * z;
      dp[n].r[e] = pe * (dp[n].r[e] * z - d_s[col]);
    }
  }
}

// dK = scale * acc_k and dV = acc_v for the lane's two keys of the warp's 16 from key0 on.
template <typename T, int OUT>
__device__ __forceinline__ void write_dkv(T* dk, T* dv, const TcParams& p, const AttentionOffsets& offs, int64_t key0,
                                          const tile::CTile (&acc_k)[OUT], const tile::CTile (&acc_v)[OUT]) {
  using namespace tile;
  const int lane = lane_id();
  const int64_t keys[2] = {key0 + lane / 4, key0 + lane / 4 + 8};
  T* const dk_b = dk + offs.dk;
  T* const dv_b = dv + offs.dv;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (keys[h] >= p.S) continue;
    T* gk = dk_b + keys[h] * p.dk_rs;
    T* gv = dv_b + keys[h] * p.dv_rs;
#pragma unroll
    for (int t = 0; t < OUT; ++t) {
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        const int col = t * kN + c_coord(lane, e).col;
        gk[col] = static_cast<T>(acc_k[t].r[e] * p.scale);
        gv[col] = static_cast<T>(acc_v[t].r[e]);
      }
    }
  }
}

template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kBlockThreads)
    attention_backward_dq_tc_kernel(T* dq, float* d_rows, const T* dout, const T* out, const float* lse, const T* q,
                                    const T* k, const T* v, const __grid_constant__ TcParams p) {
  using namespace tile;
  constexpr int kKeyTile = kStreamTileFor<D>;
  constexpr int kScoreTiles = kKeyTile / kN;
  constexpr int kOutTiles = D / kN;  // accumulator tiles along E
  SmemCarver carve(dynamic_smem());
  using Smem = DqSmem<T, D>;
  const Smem smem(carve);

  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const BlockWork work = block_work(p, true);
  if (work.b >= p.batch) return;  // past the batch in the grid's last section (tc_grid)
  const int64_t b = work.b;
  const int64_t i0 = work.block * kBlockRows;
  const AttentionOffsets& offs = shared_offsets(p, b);
  const PhiloxState st = kDropout ? philox_resolve(p.philox) : PhiloxState{};

  // Key tile t's K and V into their buffers, zero rows past the last (the forward's pipeline,
  // stream_tiles); the block's Q and dO land with tile 0.
  const int64_t tiles = tile_count(0, block_key_end(p, i0), kKeyTile);
  const auto fetch = [&](int t) {
    const int64_t j0 = static_cast<int64_t>(t) * kKeyTile;
    const int n = t < tiles ? kKeyTile : 0;
    stage<T, D>(stage_buffer(smem.k, Smem::kTileElems, t), k + offs.k, p.k_rs, j0, p.S, n, p.wide);
    stage<T, D>(stage_buffer(smem.v, Smem::kTileElems, t), v + offs.v, p.v_rs, j0, p.S, n, p.wide);
  };
  stage<T, D>(smem.q, q + offs.q, p.q_rs, i0, p.L, kBlockRows, p.wide);
  stage<T, D>(smem.dout, dout + offs.o, p.o_rs, i0, p.L, kBlockRows, p.wide);
  commit_copies();
  const T* q_w = smem.q + warp * kM * kLdFor<D>;  // this warp's 16 query rows
  const T* do_w = smem.dout + warp * kM * kLdFor<D>;

  const DqRows rows = dq_rows<D>(d_rows, dout, out, lse, p, offs, b, i0);  // while the copies fly

  CTile acc[kOutTiles];
#pragma unroll
  for (int t = 0; t < kOutTiles; ++t) fill(acc[t], 0.f);
  stream_tiles(tiles, fetch, [] {}, [&](int t) {
    const T* k_s = stage_buffer(smem.k, Smem::kTileElems, t);
    const T* v_s = stage_buffer(smem.v, Smem::kTileElems, t);
    // S = Q K^T and dP = dO V^T, 16 x kKeyTile each.
    CTile s[kScoreTiles], dp[kScoreTiles];
    score_pair<T, D>(s, q_w, k_s, dp, do_w, v_s);
    dq_scores_to_ds<kDropout>(s, dp, rows, p, st, b, static_cast<int64_t>(t) * kKeyTile);
    // dQ += dS K, 16 keys at a time: two dS tiles side by side are one A operand.
    add_product<T, D>(acc, s, k_s);
  });

  write_dq(dq, p, offs, rows, acc);
}

// The fused backward's shared memory on mma.sync: the dk/dv kernel's, then dS^T [64 keys, query tile]
// (row-major, rows padded as the staged tiles'), written by each warp for its keys and read by all as
// the B operand of dQ^T = K^T dS^T.
template <int D> inline constexpr int kFusedLdFor = kQueryTileFor<D> + kPadElems;
template <typename T, int D> struct FusedSmem : DkvSmem<T, D> {
  T* ds;
  KILN_HD explicit FusedSmem(tile::SmemCarver& c)
      : DkvSmem<T, D>(c), ds(c.take<T>(kBlockRows * kFusedLdFor<D>)) {}
};

// Adds this lane's elements of a [16, 8 N] block of dQ^T, held as accumulator tiles, to dq_acc with
// atomic adds: the block's rows are dQ's columns from col0 on, its columns the queries from i0 on
// (of batch entry b); queries from L on are not there. From the lane's first element on, element e of
// tile n is e % 2 queries, 8 n queries and 8 (e / 2) columns further. Both fused backwards' adds.
template <int D, int N>
__device__ __forceinline__ void add_dq_transposed(float* dq_acc, const tile::CTile (&x)[N], const TcParams& p,
                                                  int64_t b, int64_t i0, int col0) {
  using namespace tile;
  const Coord c = c_coord(lane_id(), 0);
  const int64_t i = i0 + c.col;
  float* const first = dq_acc + (b * p.L + i) * D + col0 + c.row;
  const int64_t queries_left = p.L - i;
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < kCElems; ++e) {
      const int q = n * kN + e % 2;
      if (q < queries_left) atomicAdd(first + q * D + (e / 2) * 8, x[n].r[e]);
    }
  }
}

// The fused backward's share of dQ for one query tile from i0 on: dQ^T = K^T dS^T over the block's
// 64 keys (K staged at k_s, dS^T at ds_s), this warp's rows of it (dQ's columns 16 (kRowTiles warp + r)
// on, r < kRowTiles: all of D over the 4 warps), added to dq_acc's rows b L + i with atomic adds;
// queries from L on are not there. K^T is the A operand (load_a_transposed), dS^T the B.
template <typename T, int D>
__device__ __forceinline__ void add_dq_share(float* dq_acc, const T* k_s, const T* ds_s, const TcParams& p, int64_t b,
                                             int64_t i0) {
  using namespace tile;
  constexpr int kQueryTile = kQueryTileFor<D>;
  constexpr int kScoreTiles = kQueryTile / kN;
  constexpr int kRowTiles = D / kM / kWarps;
  constexpr int kLd = kLdFor<D>, kDsLd = kFusedLdFor<D>;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  CTile acc[kRowTiles][kScoreTiles];
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) fill(acc[r][n], 0.f);
  }
#pragma unroll
  for (int kk = 0; kk < kBlockRows / kK; ++kk) {
    ATile<T> x[kRowTiles];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
      load_a_transposed(x[r], k_s + kk * kK * kLd + (warp * kRowTiles + r) * kM, kLd);
    }
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
      BTile<T> y;
      load_b(y, ds_s + kk * kK * kDsLd + n * kN, kDsLd);
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) mma(acc[r][n], x[r], y);
    }
  }
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) add_dq_transposed<D>(dq_acc, acc[r], p, b, i0, (warp * kRowTiles + r) * kM);
}

// The dk/dv kernel's block (kDq false), or the fused backward's (kDq: its share of dQ too, into dq_acc).
template <typename T, int D, bool kDropout, bool kDq>
__device__ __forceinline__ void dkv_tc_block(T* dk, T* dv, float* dq_acc, const T* dout, const float* lse,
                                             const float* d_rows, const T* q, const T* k, const T* v,
                                             const TcParams& p) {
  using namespace tile;
  constexpr int kQueryTile = kQueryTileFor<D>;
  constexpr int kScoreTiles = kQueryTile / kN;
  constexpr int kOutTiles = D / kN;
  SmemCarver carve(dynamic_smem());
  using Smem = std::conditional_t<kDq, FusedSmem<T, D>, DkvSmem<T, D>>;
  const Smem smem(carve);

  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const BlockWork work = block_work(p, false);
  if (work.b >= p.batch) return;  // past the batch in the grid's last section (tc_grid)
  const int64_t b = work.b;
  const int64_t j_first = work.block * kBlockRows;
  const AttentionOffsets& offs = shared_offsets(p, b);
  const PhiloxState st = kDropout ? philox_resolve(p.philox) : PhiloxState{};

  // Query tile t (from i_begin on) into its buffers: Q and dO copied (zero rows past the last tile,
  // stream_tiles), the lse and D stored. The block's K and V land with tile 0. Causal: queries before
  // the block's first key see none of its keys.
  const int64_t i_begin = p.causal ? j_first / kQueryTile * kQueryTile : 0;
  const int64_t tiles = tile_count(i_begin, p.L, kQueryTile);
  const auto fetch = [&](int t) {
    const int64_t i0 = i_begin + static_cast<int64_t>(t) * kQueryTile;
    const int n = t < tiles ? kQueryTile : 0;
    stage<T, D>(stage_buffer(smem.q, Smem::kTileElems, t), q + offs.q, p.q_rs, i0, p.L, n, p.wide);
    stage<T, D>(stage_buffer(smem.dout, Smem::kTileElems, t), dout + offs.o, p.o_rs, i0, p.L, n, p.wide);
    stage_query_stats<kQueryTile>(stage_buffer(smem.lse, kQueryTile, t), stage_buffer(smem.d, kQueryTile, t), lse,
                                  d_rows, p, b, i0);
  };
  stage<T, D>(smem.k, k + offs.k, p.k_rs, j_first, p.S, kBlockRows, p.wide);
  stage<T, D>(smem.v, v + offs.v, p.v_rs, j_first, p.S, kBlockRows, p.wide);
  commit_copies();
  const T* k_w = smem.k + warp * kM * kLdFor<D>;  // this warp's 16 keys
  const T* v_w = smem.v + warp * kM * kLdFor<D>;

  CTile acc_k[kOutTiles], acc_v[kOutTiles];
#pragma unroll
  for (int t = 0; t < kOutTiles; ++t) {
    fill(acc_k[t], 0.f);
    fill(acc_v[t], 0.f);
  }
  stream_tiles(tiles, fetch, [] {}, [&](int t) {
    const int64_t i0 = i_begin + static_cast<int64_t>(t) * kQueryTile;
    const T* q_s = stage_buffer(smem.q, Smem::kTileElems, t);
    const T* do_s = stage_buffer(smem.dout, Smem::kTileElems, t);
    // S^T = K Q^T and dP^T = V dO^T, 16 keys x kQueryTile queries each.
    CTile s[kScoreTiles], dp[kScoreTiles];
    score_pair<T, D>(s, k_w, q_s, dp, v_w, do_s);
    dkv_scores_to_p_ds<kDropout>(s, dp, p, st, b, i0, j_first + warp * kM, stage_buffer(smem.lse, kQueryTile, t),
                                 stage_buffer(smem.d, kQueryTile, t));
    if constexpr (kDq) {
      // This warp's 16 rows of dS^T, rounded to T as the A tiles below are, for dQ^T.
      T* const ds_w = smem.ds + warp * kM * kFusedLdFor<D>;
#pragma unroll
      for (int n = 0; n < kScoreTiles; ++n) store_c(dp[n], ds_w + n * kN, kFusedLdFor<D>);
    }
    // dV += P^T dO and dK += dS^T Q, 16 queries at a time.
    add_product<T, D>(acc_v, s, do_s);
    add_product<T, D>(acc_k, dp, q_s);
    if constexpr (kDq) {
      __syncthreads();  // every warp's rows of dS^T are in (stream_tiles' barrier after this pass
                        // keeps the next tile's from overwriting them while they are read)
      add_dq_share<T, D>(dq_acc, smem.k, smem.ds, p, b, i0);
    }
  });

  write_dkv(dk, dv, p, offs, j_first + warp * kM, acc_k, acc_v);
}

template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kBlockThreads)
    attention_backward_dkv_tc_kernel(T* dk, T* dv, const T* dout, const float* lse, const float* d_rows, const T* q,
                                     const T* k, const T* v, const __grid_constant__ TcParams p) {
  dkv_tc_block<T, D, kDropout, false>(dk, dv, nullptr, dout, lse, d_rows, q, k, v, p);
}

// The fused backward's kernel on mma.sync: dK and dV of a block of 64 keys, and their share of dQ
// added to dq_acc (float32 [batch, L, D], zeroed, with d_rows, by attention_backward_rows_kernel;
// rounded into dq by attention_backward_dq_finish_kernel), as the fused kernel on wgmma
// (attention_wgmma_backward.cuh) does: five tile products where the two kernels take seven, and dQ's
// last bits vary from run to run on a GPU.
template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kBlockThreads)
    attention_backward_fused_tc_kernel(T* dk, T* dv, float* dq_acc, const T* dout, const float* lse,
                                       const float* d_rows, const T* q, const T* k, const T* v,
                                       const __grid_constant__ TcParams p) {
  dkv_tc_block<T, D, kDropout, true>(dk, dv, dq_acc, dout, lse, d_rows, q, k, v, p);
}

// The fused backward (above, and attention_wgmma_backward.cuh) sums dQ over its blocks of keys in
// float32 with atomic adds, into `dq_acc` ([batch, L, D], dense), around one kernel that computes
// everything else:
//   attention_backward_rows_kernel       before: D_i = dO_i . O_i per query row into d_rows
//                                        (lane_dout_dot_out, as the dq kernels) and the row's dq_acc
//                                        zeroed;
//   attention_backward_dq_finish_kernel  after: dQ = scale * dq_acc, rounded to T, into dq.
// One warp per query row, kRowWarps rows a block (row r = b L + i of the batch's rows).
inline constexpr int kRowWarps = 4;

template <typename T, int D>
__global__ void __launch_bounds__(kRowWarps * tile::kWarp)
    attention_backward_rows_kernel(float* d_rows, float* dq_acc, const T* dout, const T* out,
                                   const __grid_constant__ TcParams p) {
  using namespace tile;
  const int lane = lane_id();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowWarps + static_cast<int>(threadIdx.x) / kWarp;
  if (r >= p.batch * p.L) return;
  const int64_t b = r / p.L, i = r % p.L;
  const int64_t o = attention_batch_offset(p.layout, p.layout.o, b) + i * p.o_rs;
  const float part = warp_sum(lane_dout_dot_out<D>(out + o, dout + o));
  if (lane == 0) d_rows[r] = part;
  for (int e = lane; e < D; e += kWarp) dq_acc[r * D + e] = 0.f;
}

template <typename T, int D>
__global__ void __launch_bounds__(kRowWarps * tile::kWarp)
    attention_backward_dq_finish_kernel(T* dq, const float* dq_acc, const __grid_constant__ TcParams p) {
  using namespace tile;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowWarps + static_cast<int>(threadIdx.x) / kWarp;
  if (r >= p.batch * p.L) return;
  const int64_t b = r / p.L, i = r % p.L;
  T* const row = dq + attention_batch_offset(p.layout, p.layout.dq, b) + i * p.dq_rs;
  for (int e = lane_id(); e < D; e += kWarp) row[e] = static_cast<T>(dq_acc[r * D + e] * p.scale);
}

#if defined(__CUDACC__)
// Launches a backward's two kernels: the dq kernel over blocks of query rows, then the dk/dv kernel
// over blocks of key rows, each with the dynamic shared memory its DqS<T, D> or DkvS<T, D> carves.
// Kernels::dq<T, D, kDropout>() and Kernels::dkv<T, D, kDropout>() name them (dropout is a template
// flag: without it they hold none of its code or registers), Kernels::dq_threads<D>(), dq_rows<D>()
// and dkv_threads<D>(), dkv_rows<D>() their blocks' threads and rows. `d_rows` holds D_i = dO_i . O_i per
// query row, written by the first and read by the second. The mma.sync backward
// (attention_tc_backward.cu) and the one on wgmma (attention_wgmma.cu) launch alike.
template <template <typename, int> class DqS, template <typename, int> class DkvS, typename Kernels>
void launch_backward(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse, const void* q,
                     const void* k, const void* v, float* d_rows, const AttentionArgs& a, const KernelContext& ctx) {
  const TcParams p = make_tc_params(a, q, k, v, dout);
  const cudaStream_t s = cuda_detail::raw_stream(ctx.stream);
  const char* op = "scaled_dot_product_attention backward";
  dispatch(a.dtype, a.E, [&]<typename T, int D>() {
    const auto go = [&]<bool kDropout>() {
      const std::string what = "head dim " + std::to_string(D);
      const auto dq_kernel = Kernels::template dq<T, D, kDropout>();
      const auto dkv_kernel = Kernels::template dkv<T, D, kDropout>();
      const size_t dq_bytes = smem_bytes<DqS<T, D>>(), dkv_bytes = smem_bytes<DkvS<T, D>>();
      cuda_detail::allow_dynamic_smem(dq_kernel, dq_bytes, op, what);
      cuda_detail::allow_dynamic_smem(dkv_kernel, dkv_bytes, op, what);
      const auto blocks = [&](int64_t rows, int per_block) {
        const TcGrid g = tc_grid(p, rows, per_block);
        return dim3(g.x, g.y, g.z);
      };
      dq_kernel<<<blocks(p.L, Kernels::template dq_rows<D>()), Kernels::template dq_threads<D>(), dq_bytes, s>>>(
          static_cast<T*>(dq), d_rows, static_cast<const T*>(dout), static_cast<const T*>(out),
          static_cast<const float*>(lse), static_cast<const T*>(q), static_cast<const T*>(k),
          static_cast<const T*>(v), p);
      cuda_detail::check_launch(op);
      dkv_kernel<<<blocks(p.S, Kernels::template dkv_rows<D>()), Kernels::template dkv_threads<D>(), dkv_bytes,
                   s>>>(
          static_cast<T*>(dk), static_cast<T*>(dv), static_cast<const T*>(dout), static_cast<const float*>(lse),
          d_rows, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), p);
      cuda_detail::check_launch(op);
    };
    if (p.dropout) go.template operator()<true>();
    else go.template operator()<false>();
  });
}

// Launches the fused backward: the row kernel (D and the zeroed float32 dQ accumulator per query
// row, in the op's workspace), Kernels::fused<T, D, kDropout>() over blocks of Kernels::fused_keys<D>()
// keys with Kernels::fused_threads<D>() threads each and the shared memory FusedS<T, D> carves, then the
// finish kernel (dQ rounded from the accumulator). On mma.sync (attention_tc_backward.cu) and on wgmma
// (attention_wgmma.cu) alike. The fused kernel's parameters end with what
// Kernels::fused_extra<D>(a, p, dq_acc) returns, a tuple (on wgmma the map of its dQ reductions), which
// this returns.
template <template <typename, int> class FusedS, typename Kernels>
auto launch_fused_backward(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                           const void* q, const void* k, const void* v, float* d_rows, const AttentionArgs& a,
                           const KernelContext& ctx) {
  const TcParams p = make_tc_params(a, q, k, v, dout);
  const cudaStream_t s = cuda_detail::raw_stream(ctx.stream);
  const char* op = "scaled_dot_product_attention backward";
  auto* dq_acc = static_cast<float*>(ctx.workspace(static_cast<size_t>(a.batch * a.L * a.E) * sizeof(float)));
  const auto row_blocks = static_cast<unsigned>((a.batch * a.L + kRowWarps - 1) / kRowWarps);
  constexpr int kRowThreads = kRowWarps * tile::kWarp;
  decltype(Kernels::template fused_extra<64>(a, p, dq_acc)) extra{};
  dispatch(a.dtype, a.E, [&]<typename T, int D>() {
    attention_backward_rows_kernel<T, D><<<row_blocks, kRowThreads, 0, s>>>(
        d_rows, dq_acc, static_cast<const T*>(dout), static_cast<const T*>(out), p);
    cuda_detail::check_launch(op);
    extra = Kernels::template fused_extra<D>(a, p, dq_acc);
    const auto go = [&]<bool kDropout>() {
      const auto kernel = Kernels::template fused<T, D, kDropout>();
      const size_t bytes = smem_bytes<FusedS<T, D>>();
      cuda_detail::allow_dynamic_smem(kernel, bytes, op, "head dim " + std::to_string(D));
      const TcGrid g = tc_grid(p, p.S, Kernels::template fused_keys<D>());
      std::apply(
          [&](const auto&... more) {
            kernel<<<dim3(g.x, g.y, g.z), Kernels::template fused_threads<D>(), bytes, s>>>(
                static_cast<T*>(dk), static_cast<T*>(dv), dq_acc, static_cast<const T*>(dout),
                static_cast<const float*>(lse), d_rows, static_cast<const T*>(q), static_cast<const T*>(k),
                static_cast<const T*>(v), p, more...);
          },
          extra);
      cuda_detail::check_launch(op);
    };
    if (p.dropout) go.template operator()<true>();
    else go.template operator()<false>();
    attention_backward_dq_finish_kernel<T, D><<<row_blocks, kRowThreads, 0, s>>>(static_cast<T*>(dq), dq_acc, p);
    cuda_detail::check_launch(op);
  });
  return extra;
}
#endif

}  // namespace kiln::attention_tc
