// The flash-attention forward kernel on tensor cores (mma.sync through kernels/cuda/tile.cuh), for
// the shapes training runs most: float16 or bfloat16, head dims E = Ev = 64 or 128, no mask, causal
// or not, dropout or not, any L and S (tails masked). It writes the same output and log-sum-exp as the
// scalar kernel (kernels/cuda/attention.cu), so either backward (attention_tc_backward.cu or the
// scalar one) reads them.
//
// Work split: a block of 4 warps takes 64 query rows of one batch entry, each warp 16 of them (one
// A-tile row of Q, kept in registers for the whole pass). Key tiles of 64 rows (32 at head dim 128)
// stream through shared memory, kStages buffers of them: tile t + 1 is copied (cp.async) while the
// warps compute on tile t. For each, every warp computes its scores S = Q K^T as accumulator
// tiles (16 x 64, or 16 x 32 at head dim 128), updates the running row maximum and sum (online
// softmax, in base 2), rescales its output accumulators, and adds P V with P re-read from the score
// tiles as A operands (a_from_c), never leaving registers. A lane holds rows `group` and `group + 8`
// of its warp's 16; a row's maximum and sum are reduced across the 4 lanes of the group with two
// shuffles. The online softmax and the output's end are functions of their own (online_softmax,
// write_forward), which the forward on Hopper's wgmma (attention_wgmma_forward.cuh) shares.
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
#include <string>

#include "kernels/attention.h"
#include "kernels/cuda/attention_tc.cuh"
#if defined(__CUDACC__)
#include "kernels/cuda/common.cuh"
#endif

namespace kiln::attention_tc {

// The forward's shared memory: the block's query rows, and kStages key tiles each of K and V.
template <typename T, int D> struct ForwardSmem {
  static constexpr int kTileElems = kStreamTileFor<D> * kLdFor<D>;
  T* q;
  T* k;
  T* v;
  KILN_HD explicit ForwardSmem(tile::SmemCarver& c)
      : q(c.take<T>(kBlockRows * kLdFor<D>)), k(c.take<T>(kStages * kTileElems)), v(c.take<T>(kStages * kTileElems)) {}
};

// A lane's two query rows of its warp's 16 (row_lo = the block's first row + 16 warp + group, row_hi
// = row_lo + 8) and their online-softmax state: the running maximum (base 2) and sum. row_hi is kept,
// not derived where it is used: derived, the mma.sync forward held 16 registers more at head dim 64.
struct RowState {
  int64_t row_lo, row_hi;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  __device__ __forceinline__ explicit RowState(int64_t block_row0)
      : row_lo(block_row0 + static_cast<int64_t>(threadIdx.x) / tile::kWarp * tile::kM + tile::lane_id() / 4),
        row_hi(row_lo + 8) {}
};

// The factor each of a lane's two rows rescales its output accumulators by after a key tile.
struct Rescale {
  float alpha[2];
};

// acc *= the factor of its row.
template <int OUT> __device__ __forceinline__ void rescale(tile::CTile (&acc)[OUT], const Rescale& r) {
#pragma unroll
  for (int t = 0; t < OUT; ++t) {
#pragma unroll
    for (int e = 0; e < tile::kCElems; ++e) acc[t].r[e] *= r.alpha[e / 2];
  }
}

// One key tile of the online softmax, for the warp's 16 query rows: s holds the scores Q K^T of keys
// j0 .. j0 + 8 N as N accumulator tiles and becomes the probabilities that P V takes (after dropout);
// the rows' state moves on, and the returned factors rescale the output accumulators to the new
// maximum (online_softmax applies them at once; the wgmma forward once its previous P V has landed).
// Shared by the forward kernels on mma.sync (below) and on wgmma (attention_wgmma_forward.cuh), whose
// accumulator tiles sit alike.
template <bool kDropout, int N>
__device__ __forceinline__ Rescale softmax_tile(tile::CTile (&s)[N], RowState& rows, const TcParams& p,
                                                const PhiloxState& st, int64_t b, int64_t j0) {
  using namespace tile;
  const int lane = lane_id();
  // Scale to base 2 and mask: keys past S, and with causal keys after the query.
  float tile_max[2] = {-INFINITY, -INFINITY};
  const int seen[2] = {keys_seen(p, rows.row_lo, j0, N * kN), keys_seen(p, rows.row_hi, j0, N * kN)};
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < kCElems; ++e) {
      const float x = n * kN + c_coord(lane, e).col < seen[e / 2] ? s[n].r[e] * p.scale_log2 : -INFINITY;
      s[n].r[e] = x;
      tile_max[e / 2] = fmaxf(tile_max[e / 2], x);
    }
  }
  Rescale r;
  float m_use[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
    const float m_new = fmaxf(rows.m_run[h], tile_max[h]);
    // While nothing is visible the row's state stays (m -inf, l 0): exp2 of -inf - -inf is NaN.
    m_use[h] = m_new == -INFINITY ? 0.f : m_new;
    r.alpha[h] = exp2f(rows.m_run[h] - m_use[h]);
    rows.m_run[h] = m_new;
  }
  // The row sums take the probabilities before dropout; P V takes them after (as the scalar kernel).
  float row_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < kCElems; ++e) {
      const float pe = exp2f(s[n].r[e] - m_use[e / 2]);  // 0 for masked scores
      row_sum[e / 2] += pe;
      if constexpr (kDropout) {
        const int64_t j = j0 + n * kN + c_coord(lane, e).col;
        s[n].r[e] = pe * keep_factor(p, st, b, e < 2 ? rows.row_lo : rows.row_hi, j);
      } else {
        s[n].r[e] = pe;
      }
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    rows.l_run[h] = rows.l_run[h] * r.alpha[h] + row_sum[h];
  }
  return r;
}

// softmax_tile, and the output accumulators rescaled at once.
template <bool kDropout, int N, int OUT>
__device__ __forceinline__ void online_softmax(tile::CTile (&s)[N], tile::CTile (&acc)[OUT], RowState& rows,
                                               const TcParams& p, const PhiloxState& st, int64_t b, int64_t j0) {
  rescale(acc, softmax_tile<kDropout>(s, rows, p, st, b, j0));
}

// The forward's end for the lane's row h (0: row_lo, 1: row_hi): from one lane of each group of four,
// the row's log-sum-exp in natural log; and the factor its output takes, 1 / l. A row with no visible
// key gets zeros and -inf, as from the scalar kernel. A row of NaN scores keeps m at -inf too (the
// max skips NaN), but its sum is NaN, which it takes to its output and log-sum-exp as the CPU does.
__device__ __forceinline__ float finish_row(float* lse, const TcParams& p, int64_t b, const RowState& rows, int h) {
  const int64_t i = h == 0 ? rows.row_lo : rows.row_hi;
  const bool none = rows.m_run[h] == -INFINITY && rows.l_run[h] == 0.f;
  if (i < p.L && tile::lane_id() % 4 == 0) {
    lse[b * p.L + i] = none ? -INFINITY : (rows.m_run[h] + log2f(rows.l_run[h])) / kLog2e;
  }
  return none ? 0.f : 1.f / rows.l_run[h];
}

// Batch entry b's output. Its offset is found at the end, not with q's, k's and v's at the kernel's
// start: held through the key loop it costs registers (the mma.sync kernel on sm_90 at head dim 64
// with dropout: spills). Offsets kept in shared memory instead, as the backward kernels keep theirs,
// spill at head dim 64 without dropout.
template <typename T> __device__ __forceinline__ T* output_of(T* out, const TcParams& p, int64_t b) {
  return out + attention_batch_offset(p.layout, p.layout.o, b);
}

// The forward's end: out = acc / l for the lane's two rows, straight from the accumulators, and the
// log-sum-exp (finish_row).
template <typename T, int OUT>
__device__ __forceinline__ void write_forward(T* out, float* lse, const TcParams& p, int64_t b, const RowState& rows,
                                              const tile::CTile (&acc)[OUT]) {
  using namespace tile;
  const int lane = lane_id();
  T* const out_b = output_of(out, p, b);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t i = h == 0 ? rows.row_lo : rows.row_hi;
    const float inv = finish_row(lse, p, b, rows, h);
    if (i >= p.L) continue;
    T* o = out_b + i * p.o_rs;
#pragma unroll
    for (int t = 0; t < OUT; ++t) {
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        o[t * kN + c_coord(lane, e).col] = static_cast<T>(acc[t].r[e] * inv);
      }
    }
  }
}

template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kBlockThreads)
    attention_forward_tc_kernel(T* out, float* lse, const T* q, const T* k, const T* v,
                                const __grid_constant__ TcParams p) {
  using namespace tile;
  constexpr int kKeyTile = kStreamTileFor<D>;
  constexpr int kScoreTiles = kKeyTile / kN;
  constexpr int kDTiles = D / kK;    // A tiles of Q along E (k steps of the score product)
  constexpr int kOutTiles = D / kN;  // accumulator tiles along Ev
  SmemCarver carve(dynamic_smem());
  using Smem = ForwardSmem<T, D>;
  const Smem smem(carve);

  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const BlockWork work = block_work(p, true);
  if (work.b >= p.batch) return;  // past the batch in the grid's last section (tc_grid)
  const int64_t b = work.b;
  const int64_t i0 = work.block * kBlockRows;
  const AttentionOffsets offs = attention_offsets(p.layout, b);
  const PhiloxState st = kDropout ? philox_resolve(p.philox) : PhiloxState{};

  // Key tile t's K and V into their buffers; zero rows past the last tile (stream_tiles says why).
  const int64_t j_end = block_key_end(p, i0);
  const int64_t tiles = tile_count(0, j_end, kKeyTile);
  const auto fetch = [&](int t) {
    const int64_t j0 = static_cast<int64_t>(t) * kKeyTile;
    const int rows = t < tiles ? kKeyTile : 0;
    stage<T, D>(stage_buffer(smem.k, Smem::kTileElems, t), k + offs.k, p.k_rs, j0, p.S, rows, p.wide);
    stage<T, D>(stage_buffer(smem.v, Smem::kTileElems, t), v + offs.v, p.v_rs, j0, p.S, rows, p.wide);
  };
  stage<T, D>(smem.q, q + offs.q, p.q_rs, i0, p.L, kBlockRows, p.wide);  // lands with tile 0
  commit_copies();

  ATile<T> qa[kDTiles];  // the warp's Q rows, loaded once tile 0 is in
  CTile acc[kOutTiles];
#pragma unroll
  for (int t = 0; t < kOutTiles; ++t) fill(acc[t], 0.f);
  RowState state(i0);

  stream_tiles(tiles, fetch, [] {}, [&](int t) {
    if (t == 0) {
#pragma unroll
      for (int d = 0; d < kDTiles; ++d) load_a(qa[d], smem.q + warp * kM * kLdFor<D> + d * kK, kLdFor<D>);
    }
    const T* k_s = stage_buffer(smem.k, Smem::kTileElems, t);
    const T* v_s = stage_buffer(smem.v, Smem::kTileElems, t);
    CTile s[kScoreTiles];
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
      fill(s[n], 0.f);
#pragma unroll
      for (int d = 0; d < kDTiles; ++d) {
        BTile<T> kb;
        load_b_transposed(kb, k_s + n * kN * kLdFor<D> + d * kK, kLdFor<D>);
        mma(s[n], qa[d], kb);
      }
    }
    online_softmax<kDropout>(s, acc, state, p, st, b, static_cast<int64_t>(t) * kKeyTile);
    // acc += P V, 16 keys at a time: two score tiles side by side are one A operand.
    add_product<T, D>(acc, s, v_s);
  });

  write_forward(out, lse, p, b, state, acc);
}

#if defined(__CUDACC__)
// Launches a forward kernel over blocks of query rows and the batch entries, with the dynamic shared
// memory its Smem<T, D> carves. KernelFor::get<T, D, kDropout>() names the kernel for the element
// type, the head dim and dropout (a template flag: the kernels without it hold none of its code or
// registers); KernelFor::threads<D>() and rows<D>() are a block's threads and query rows. The mma.sync
// forward (attention_tc.cu) and the one on wgmma (attention_wgmma.cu) launch alike; `extra` are
// arguments a kernel takes after the parameters (the wgmma forward's tensor maps).
template <template <typename, int> class Smem, typename KernelFor, typename... Extra>
void launch_forward(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a,
                    const KernelContext& ctx, const Extra&... extra) {
  const TcParams p = make_tc_params(a, q, k, v);
  const cudaStream_t s = cuda_detail::raw_stream(ctx.stream);
  const char* op = "scaled_dot_product_attention";
  dispatch(a.dtype, a.E, [&]<typename T, int D>() {
    const auto go = [&]<bool kDropout>() {
      const auto kernel = KernelFor::template get<T, D, kDropout>();
      const size_t bytes = smem_bytes<Smem<T, D>>();
      cuda_detail::allow_dynamic_smem(kernel, bytes, op, "head dim " + std::to_string(D));
      const TcGrid g = tc_grid(p, p.L, KernelFor::template rows<D>());
      const dim3 grid(g.x, g.y, g.z);
      kernel<<<grid, KernelFor::template threads<D>(), bytes, s>>>(static_cast<T*>(out), static_cast<float*>(lse),
                                                static_cast<const T*>(q), static_cast<const T*>(k),
                                                static_cast<const T*>(v), p, extra...);
      cuda_detail::check_launch(op);
    };
    if (p.dropout) go.template operator()<true>();
    else go.template operator()<false>();
  });
}
#endif

}  // namespace kiln::attention_tc
