// The flash-attention forward kernel on tensor cores (mma.sync through kernels/cuda/tile.cuh), for
// the shapes training runs most: float16 or bfloat16, head dims E = Ev = 64 or 128, no mask, causal
// or not, dropout or not, any L and S (tails masked). It writes the same output and log-sum-exp as the
// scalar kernel (kernels/cuda/attention.cu), so either backward (attention_tc_backward.cu or the
// scalar one) reads them.
//
// Work split: a block of 4 warps takes 64 query rows of one batch entry, each warp 16 of them (one
// A-tile row of Q, kept in registers for the whole pass). Key tiles of 64 rows (32 at head dim 128)
// stream through shared memory. For each, every warp computes its scores S = Q K^T as 8 accumulator
// tiles (16 x 64), updates the running row maximum and sum (online softmax, in base 2), rescales its output
// accumulators, and adds P V with P re-read from the score tiles as A operands (a_from_c), never
// leaving registers. A lane holds rows `group` and `group + 8` of its warp's 16; a row's maximum and
// sum are reduced across the 4 lanes of the group with two shuffles.
//
// Selected by AttentionArgs::tensor_cores (cuda::math_switches().attention_tensor_cores); off by
// default until a GPU run has checked it against the CPU (tests/cuda/test_attention_tc_cuda.cpp).
//
// The kernel is in a header so that the CPU tests compile it too, on the emulator of
// kernels/simt/simt.h (tests/kernels/test_attention_tc_simt.cpp); attention_tc.cu launches it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cuda/attention_tc.cuh"

namespace kiln::attention_tc {

// The forward's shared memory: the block's query rows, and one key tile each of K and V.
template <typename T, int D> struct ForwardSmem {
  T* q;
  T* k;
  T* v;
  KILN_HD explicit ForwardSmem(tile::SmemCarver& c)
      : q(c.take<T>(kBlockRows * kLdFor<D>)),
        k(c.take<T>(kStreamTileFor<D> * kLdFor<D>)),
        v(c.take<T>(kStreamTileFor<D> * kLdFor<D>)) {}
};

template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kBlockThreads)
    attention_forward_tc_kernel(T* out, float* lse, const T* q, const T* k, const T* v,
                                const __grid_constant__ TcParams p) {
  using namespace tile;
  constexpr int kLd = kLdFor<D>;
  constexpr int kKeyTile = kStreamTileFor<D>;
  constexpr int kScoreTiles = kKeyTile / kN;
  constexpr int kDTiles = D / kK;    // A tiles of Q along E (k steps of the score product)
  constexpr int kOutTiles = D / kN;  // accumulator tiles along Ev
  SmemCarver carve(dynamic_smem());
  const ForwardSmem<T, D> smem(carve);
  T *const q_s = smem.q, *const k_s = smem.k, *const v_s = smem.v;

  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = lane_id();
  const int64_t b = blockIdx.y;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const AttentionOffsets offs = attention_offsets(p.layout, b);
  const PhiloxState st = kDropout ? philox_resolve(p.philox) : PhiloxState{};

  stage<T, D>(q_s, q + offs.q, p.q_rs, i0, p.L, kBlockRows);
  __syncthreads();
  ATile<T> qa[kDTiles];
#pragma unroll
  for (int d = 0; d < kDTiles; ++d) load_a(qa[d], q_s + warp * kM * kLd + d * kK, kLd);

  CTile acc[kOutTiles];
#pragma unroll
  for (int t = 0; t < kOutTiles; ++t) fill(acc[t], 0.f);
  // This lane's two rows (group and group + 8 of the warp's 16): running max (base 2) and sum.
  const int64_t row_lo = i0 + warp * kM + lane / 4, row_hi = row_lo + 8;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  const int64_t block_last = cuda_detail::min_i64(p.L - 1, i0 + kBlockRows - 1);
  const int64_t j_end = p.causal ? cuda_detail::min_i64(p.S, block_last + 1) : p.S;
  for (int64_t j0 = 0; j0 < j_end; j0 += kKeyTile) {
    __syncthreads();  // every warp is done with the previous key tile
    stage<T, D>(k_s, k + offs.k, p.k_rs, j0, p.S, kKeyTile);
    stage<T, D>(v_s, v + offs.v, p.v_rs, j0, p.S, kKeyTile);
    __syncthreads();

    CTile s[kScoreTiles];
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
      fill(s[n], 0.f);
#pragma unroll
      for (int d = 0; d < kDTiles; ++d) {
        BTile<T> kb;
        load_b_transposed(kb, k_s + n * kN * kLd + d * kK, kLd);
        mma(s[n], qa[d], kb);
      }
    }
    // Scale to base 2 and mask: keys past S, and with causal keys after the query.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
      for (int e = 0; e < kCElems; ++e) {
        const Coord c = c_coord(lane, e);
        const int64_t j = j0 + n * kN + c.col;
        const int64_t i = e < 2 ? row_lo : row_hi;
        const float x = visible(p, i, j) ? s[n].r[e] * p.scale_log2 : -INFINITY;
        s[n].r[e] = x;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], x);
      }
    }
    float alpha[2], m_use[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      const float m_new = fmaxf(m_run[h], tile_max[h]);
      // While nothing is visible the row's state stays (m -inf, l 0): exp2 of -inf - -inf is NaN.
      m_use[h] = m_new == -INFINITY ? 0.f : m_new;
      alpha[h] = exp2f(m_run[h] - m_use[h]);
      m_run[h] = m_new;
    }
    // The row sums take the probabilities before dropout; P V takes them after (as the scalar kernel).
    float row_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
      for (int e = 0; e < kCElems; ++e) {
        const float pe = exp2f(s[n].r[e] - m_use[e / 2]);  // 0 for masked scores
        row_sum[e / 2] += pe;
        if constexpr (kDropout) {
          const int64_t j = j0 + n * kN + c_coord(lane, e).col;
          s[n].r[e] = pe * keep_factor(p, st, b, e < 2 ? row_lo : row_hi, j);
        } else {
          s[n].r[e] = pe;
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
      row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
      l_run[h] = l_run[h] * alpha[h] + row_sum[h];
    }
#pragma unroll
    for (int t = 0; t < kOutTiles; ++t) {
#pragma unroll
      for (int e = 0; e < kCElems; ++e) acc[t].r[e] *= alpha[e / 2];
    }
    // acc += P V, 16 keys at a time: two score tiles side by side are one A operand.
    add_product<T, D>(acc, s, v_s);
  }

  // out = acc / l; lse in natural log. A row with no visible key: zeros and -inf, as the scalar kernel.
  const int64_t rows[2] = {row_lo, row_hi};
  // The output's offset is found here, not with q's, k's and v's above: held through the key loop
  // it costs registers (sm_90 at head dim 64 with dropout: spills). Offsets kept in shared memory
  // instead, as the backward kernels keep theirs, spill at head dim 64 without dropout.
  T* const out_b = out + attention_batch_offset(p.layout, p.layout.o, b);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t i = rows[h];
    if (i >= p.L) continue;
    const bool none = m_run[h] == -INFINITY;
    const float inv = none ? 0.f : 1.f / l_run[h];
    T* o = out_b + i * p.o_rs;
#pragma unroll
    for (int t = 0; t < kOutTiles; ++t) {
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        o[t * kN + c_coord(lane, e).col] = static_cast<T>(acc[t].r[e] * inv);
      }
    }
    if (lane % 4 == 0) lse[b * p.L + i] = none ? -INFINITY : (m_run[h] + log2f(l_run[h])) / kLog2e;
  }
}


}  // namespace kiln::attention_tc
