// The flash-attention forward on Hopper's warpgroup mma (wgmma, sm_90a, through
// kernels/cuda/wgmma.cuh), for the shapes of the mma.sync forward (attention_tc_forward.cuh):
// float16 or bfloat16, head dims 64 or 128, no mask, causal or not, dropout or not, any L and S. It
// writes the same output and log-sum-exp, so either backward reads them.
//
// Work split, as in the mma.sync forward: a warpgroup (4 warps) takes 64 query rows, each warp 16 of
// them; a block is one or two warpgroups (kWgmmaForwardGroups), which share each key tile. What
// changes is where the operands live and how big one instruction is:
// - The block's Q rows and each key tile of K and V are staged in shared memory in wgmma's core-matrix
//   layout (kernels/wgmma_layout.h). The instruction reads them there through descriptors: nothing is
//   loaded into registers lane by lane, as mma.sync's B tiles are.
// - S = Q K^T for a tile of 64 keys is D / 16 instructions of 64 x 64 x 16 for the whole warpgroup
//   (mma.sync: 8 D / 16 per warp); both operands K-major from shared memory.
// - P V is 4 instructions of 64 x D x 16, P from registers (the score accumulators re-read as A
//   tiles, a_from_c, as before) and V from shared memory, MN-major (the transpose flag).
// The online softmax between the two products and the output's end are the mma.sync forward's own
// functions (softmax_tile, rescale, write_forward): a warp's accumulator tiles sit where mma.sync's do.
//
// The instruction is asynchronous (wgmma.cuh says how a kernel waits for it). The kernel uses that as
// FlashAttention-3 does within a warpgroup: tile t's S = Q K^T and tile t - 1's P V are issued
// together, and tile t's softmax runs while P V is still in flight. The tiles load as in the mma.sync
// kernel: the next key tile's copies (cp.async) fly while the warpgroups compute on this one, and V
// keeps one buffer more, for tile t - 1. Not yet done: TMA loads from a producer warp (warp
// specialization), ping-pong between warpgroups, and swizzled layouts.
//
// Selected by AttentionArgs::wgmma (cuda::math_switches().attention_wgmma, with the tensor-core
// switch) on a device of compute capability 9.0, in builds for sm_90 (attention_wgmma.cu, compiled
// for sm_90a alone). The CPU tests run it on the emulator (tests/kernels/test_attention_tc_simt.cpp).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention_tc_forward.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace kiln::attention_tc {

static_assert(kBlockThreads == wgmma::kThreads && kBlockRows == wgmma::kM, "a warpgroup takes 64 rows");

// Keys per shared tile: 64 at both head dims (scores 32 floats per lane; the output 32 or 64).
inline constexpr int kWgmmaKeyTile = 64;

// Warpgroups per forward block, each with 64 query rows of its own: they share each key tile, so two
// halve the traffic of K and V per query. Two at head dim 64; one at head dim 128, where a
// warpgroup's registers (the output alone is 64 floats a lane) would leave room for one block of
// two per SM. A first choice, for a GPU run to confirm.
template <int D> inline constexpr int kWgmmaForwardGroups = D == 64 ? 2 : 1;
template <int D> inline constexpr int kWgmmaForwardThreads = kWgmmaForwardGroups<D> * wgmma::kThreads;
template <int D> inline constexpr int kWgmmaForwardRows = kWgmmaForwardGroups<D> * wgmma::kM;

// Buffers of V: one more than of K, for the key tile whose P V is issued with the next tile's scores
// (see the kernel).
inline constexpr int kWgmmaVBuffers = kStages + 1;

// The shared memory: the block's query rows, kStages key tiles of K and kWgmmaVBuffers of V, all
// staged [rows, D] (wgmma::stage_offset), each 128-byte aligned (a core matrix). A warpgroup's 64 rows
// of Q are rows 64 g .. 64 g + 63 of the staged tile, 64 D elements after the previous warpgroup's.
template <typename T, int D> struct WgmmaForwardSmem {
  static constexpr int kTileElems = kWgmmaKeyTile * D;
  T* q;
  T* k;
  T* v;
  KILN_HD explicit WgmmaForwardSmem(tile::SmemCarver& c)
      : q(c.take<T>(kWgmmaForwardRows<D> * D, wgmma::kCoreBytes)),
        k(c.take<T>(kStages * kTileElems, wgmma::kCoreBytes)),
        v(c.take<T>(kWgmmaVBuffers * kTileElems, wgmma::kCoreBytes)) {}
};

// Starts copying rows [r0, r0 + rows) of a row-strided [count, D] operand into a staged [rows, D] tile
// (zeros past `count`), one 16-byte piece (a core matrix's row) per thread and pass; the caller
// commits and waits (async_copy.cuh). Consecutive threads take consecutive rows of one core matrix,
// so 8 of them fill its 128 contiguous bytes.
template <typename T, int D>
__device__ __forceinline__ void stage_cores(T* tile, const T* base, int64_t row_stride, int64_t r0, int64_t count,
                                            int rows, bool wide) {
  static_assert(wgmma::kCore == tile::kPieceElems, "a core matrix's row is one 16-byte piece");
  constexpr int kPieces = D / wgmma::kCore;  // 16-byte pieces of a row
  const auto place = [](int idx) {
    const int r_in = idx % wgmma::kCore, rest = idx / wgmma::kCore;
    const int col = rest % kPieces * wgmma::kCore, r = rest / kPieces * wgmma::kCore + r_in;
    return tile::Piece{r, col, static_cast<int>(wgmma::stage_offset(r, col, D))};
  };
  tile::copy_rows_async<D>(tile, place, base, row_stride, r0, count, rows, wide);
}

// The descriptor `first` (of a kStages-buffer operand's first buffer) moved to streamed tile t's
// buffer, `elems` elements of T each.
template <typename T, int kBuffers = kStages>
__device__ __forceinline__ uint64_t stage_descriptor(uint64_t first, int elems, int t) {
  return wgmma::advance(first, static_cast<uint32_t>(t) % kBuffers * static_cast<uint32_t>(elems * sizeof(T)));
}

template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kWgmmaForwardThreads<D>)
    attention_forward_wgmma_kernel(T* out, float* lse, const T* q, const T* k, const T* v,
                                   const __grid_constant__ TcParams p) {
  using namespace tile;
  constexpr int kRows = kWgmmaForwardRows<D>;
  constexpr int kScoreTiles = kWgmmaKeyTile / kN;  // 8
  constexpr int kOutTiles = D / kN;
  SmemCarver carve(dynamic_smem());
  using Smem = WgmmaForwardSmem<T, D>;
  const Smem smem(carve);

  const int64_t b = blockIdx.y;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int group = kWgmmaForwardGroups<D> == 1 ? 0 : static_cast<int>(threadIdx.x) / wgmma::kThreads;
  const int64_t group_row0 = i0 + group * wgmma::kM;  // this warpgroup's first query row
  const AttentionOffsets offs = attention_offsets(p.layout, b);
  const PhiloxState st = kDropout ? philox_resolve(p.philox) : PhiloxState{};

  // Q's rows along M and K's along N, both with the head dim along K; V's rows (keys) along K and
  // the head dim along N. K's and V's for the first buffer (stage_descriptor moves them).
  const uint64_t q_desc = wgmma::rows_by_k(wgmma::smem_address(smem.q + group * wgmma::kM * D), D);
  const uint64_t k_desc = wgmma::rows_by_k(wgmma::smem_address(smem.k), D);
  const uint64_t v_desc = wgmma::rows_by_n(wgmma::smem_address(smem.v), D);

  // The pipeline of the mma.sync kernels (stream_tiles): key tile t's K and V into their buffers,
  // the block's Q landing with tile 0. The block streams the key tiles its last row sees; a warpgroup
  // skips those past its own last row (with causal), though it still copies them with the others.
  const int64_t tiles = tile_count(0, block_key_end(p, i0, kRows), kWgmmaKeyTile);
  const int64_t group_j_end = block_key_end(p, group_row0, wgmma::kM);
  const auto fetch = [&](int t) {
    const int64_t j0 = static_cast<int64_t>(t) * kWgmmaKeyTile;
    const int n = t < tiles ? kWgmmaKeyTile : 0;
    stage_cores<T, D>(stage_buffer(smem.k, Smem::kTileElems, t), k + offs.k, p.k_rs, j0, p.S, n, p.wide);
    stage_cores<T, D>(stage_buffer<kWgmmaVBuffers>(smem.v, Smem::kTileElems, t), v + offs.v, p.v_rs, j0, p.S, n,
                      p.wide);
  };
  stage_cores<T, D>(smem.q, q + offs.q, p.q_rs, i0, p.L, kRows, p.wide);
  commit_copies();

  CTile acc[kOutTiles];
#pragma unroll
  for (int t = 0; t < kOutTiles; ++t) fill(acc[t], 0.f);
  RowState rows(i0);  // thread t's rows: 16 per warp, the block's warps in order

  // P of the last tile this warpgroup computed, as A tiles, and whether its P V is still to be issued.
  ATile<T> pa[kScoreTiles / 2];
  bool pending = false;
  int last = 0;
  // acc += P V for tile t's V: 16 keys an instruction, P from registers, V MN-major. With a fence of
  // its own: the compiler may have moved P's and the accumulators' registers since the pass's first.
  // (ptxas -v still reports an arrive it adds where the pass's two paths meet, C7519, which is
  // information: it reports no serialization.)
  const auto issue_pv = [&](int t) {
    const uint64_t v_t = stage_descriptor<T, kWgmmaVBuffers>(v_desc, Smem::kTileElems, t);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kScoreTiles / 2; ++kk) {
      const uint32_t step = static_cast<uint32_t>(kk) * wgmma::row_step_bytes(D);
      wgmma::mma_rs<T, D, true>(acc, pa[kk], wgmma::advance(v_t, step), true);
    }
    wgmma::commit();
  };
  // The last P V, where no next tile's scores come to overlap it.
  const auto finish_pv = [&] {
    issue_pv(last);
    wgmma::wait<0>();
    wgmma::settle(acc);
    pending = false;
  };

  // Per key tile, FlashAttention-3's overlap within a warpgroup: the scores S = Q K^T of tile t and
  // P V of tile t - 1 are issued together, and the softmax of tile t runs while P V is in flight. The
  // output accumulators are rescaled once P V has landed (P V adds at the old maximum, and the factor
  // takes the sum to the new one), and P of tile t waits in registers for the next tile. V's extra
  // buffer keeps tile t - 1's V while tile t + kStages - 1 loads. cp.async writes as plain stores do:
  // ordered before the tensor cores' reads by the proxy fence.
  stream_tiles(tiles, fetch, [] { wgmma::fence_async_smem(); }, [&](int t) {
    const int64_t j0 = static_cast<int64_t>(t) * kWgmmaKeyTile;
    if (j0 >= group_j_end) return;  // the same for the whole warpgroup, and for every later tile
    const uint64_t k_t = stage_descriptor<T>(k_desc, Smem::kTileElems, t);
    CTile s[kScoreTiles];
    wgmma::fence();  // P and the rescaled accumulators written before the products read them
#pragma unroll
    for (int d = 0; d < D / wgmma::kK; ++d) {  // D / 16 steps along the head dim, the first overwriting s
      const uint32_t step = static_cast<uint32_t>(d) * wgmma::k_step_bytes();
      wgmma::mma_ss<T, kWgmmaKeyTile>(s, wgmma::advance(q_desc, step), wgmma::advance(k_t, step), d > 0);
    }
    wgmma::commit();
    if (pending) issue_pv(last);
    else wgmma::commit();  // an empty group: the same wait either way
    wgmma::wait<1>();      // the scores' group: P V may still run
    wgmma::settle(s);
    const Rescale r = softmax_tile<kDropout>(s, rows, p, st, b, j0);
    wgmma::wait<0>();
    wgmma::settle(acc);
    rescale(acc, r);
    // P as A tiles, two score tiles side by side each; the registers are free again once the last
    // P V has landed.
#pragma unroll
    for (int kk = 0; kk < kScoreTiles / 2; ++kk) a_from_c(pa[kk], s[2 * kk], s[2 * kk + 1]);
    pending = true;
    last = t;
  });
  // A warpgroup that skipped the block's last tiles (causal) has its P V to do too, and its V is still
  // in its buffer: the warpgroups' rows are a key tile apart, so a warpgroup's last tile is at most
  // kWgmmaForwardGroups - 1 tiles before the block's, and V's buffers hold the last kWgmmaVBuffers.
  // (Done in the skipping pass instead, it is code on a path ptxas takes for divergent, and it
  // serializes every wgmma of the kernel: C7520.)
  static_assert(kWgmmaForwardGroups<D> <= kWgmmaVBuffers, "the last tiles' V stay in their buffers");
  if (pending) finish_pv();

  write_forward(out, lse, p, b, rows, acc);
}

}  // namespace kiln::attention_tc
