// What the tensor-core attention kernels share (kernels/cuda/attention_tc_forward.cuh, the forward,
// and attention_tc_backward.cuh): the launch parameters, the block shape, the staging of row tiles
// into shared memory, the visibility and dropout rules, the tile products, the shared-memory count
// and, for the .cu files that launch them, the dispatch over element type and head dim.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/tile.cuh"

namespace kiln::attention_tc {

// A block is 4 warps; each warp owns 16 rows (one A-tile row) of the block's 64: query rows in the
// forward and the dq kernel, key rows in the dk/dv kernel.
inline constexpr int kWarps = 4;
inline constexpr int kBlockRows = kWarps * tile::kM;
inline constexpr int kBlockThreads = kWarps * tile::kWarp;
// Blocks along a grid's x to cover `rows` rows (queries, or keys in the dk/dv kernel).
// (Or of `per_block` rows each, for kernels whose blocks take more.)
inline unsigned row_blocks(int64_t rows, int64_t per_block = kBlockRows) {
  return static_cast<unsigned>((rows + per_block - 1) / per_block);
}
// Rows of the streamed operand per shared-memory tile: 64, or 32 at head dim 128, whose
// accumulators leave no registers for 64 columns of scores.
template <int D> inline constexpr int kStreamTileFor = D == 128 ? 32 : 64;
inline constexpr int kPadElems = 8;  // shared rows padded by 16 bytes: fewer bank conflicts
inline constexpr float kLog2e = 1.4426950408889634f;

struct TcParams {
  int64_t batch, L, S, q_rs, k_rs, v_rs;
  int64_t o_rs, dq_rs, dk_rs, dv_rs;  // out and dout, dq, dk, dv
  AttentionBatch layout;
  float scale;       // the softmax scale, for the gradients
  float scale_log2;  // scale * log2(e): scores in base 2
  bool causal;
  // Dropout on the probabilities (attention_keep's rule, as the CPU and the scalar kernel draw it).
  bool dropout;
  double dropout_p;
  float keep_scale;  // 1 / (1 - p)
  PhiloxState philox;
  // Whether q, k, v (and dout, for the backward) are copied to shared memory in 16-byte pieces
  // (tile::wide_rows for all of them), or else in 4-byte ones.
  bool wide;
  // The warp-specialized wgmma forward's consumer warpgroups take turns (AttentionArgs::wgmma_pingpong).
  bool pingpong;
  // With causal, blocks go longest first (block_work; AttentionArgs::longest_first), in sections of
  // `section` batch entries (AttentionArgs::order_section, here 1 .. batch).
  bool longest_first;
  unsigned section;
};

// A grid's extent in y (and z): the longest-first order puts the blocks of rows there (tc_grid), so
// it is taken only where they fit (any sequence up to 4M rows), and the blocks go in order past that.
inline constexpr int64_t kMaxGridY = 65535;

// The entries per section of the longest-first order (block_work) for AttentionArgs::order_section:
// the batch cut into as few sections as that allows, as even as they can be, so that the last one
// leaves as few blocks of the grid idle as it can (0 or more than the batch: one section).
inline unsigned order_section_for(const AttentionArgs& a) {
  const int64_t want = a.order_section > 0 && a.order_section < a.batch ? a.order_section : a.batch;
  if (want <= 0) return 1;
  const int64_t sections = (a.batch + want - 1) / want;
  return static_cast<unsigned>((a.batch + sections - 1) / sections);
}

// The kernels' parameters for the operands at q, k, v and (the backward's) dout.
inline TcParams make_tc_params(const AttentionArgs& a, const void* q, const void* k, const void* v,
                               const void* dout = nullptr) {
  const bool dropout = a.dropout_p > 0.0;
  const AttentionBatch& l = a.layout;
  const bool wide = tile::wide_rows(q, l.q, l.ndim, a.q_row_stride) &&
                    tile::wide_rows(k, l.k, l.ndim, a.k_row_stride) &&
                    tile::wide_rows(v, l.v, l.ndim, a.v_row_stride) &&
                    (dout == nullptr || tile::wide_rows(dout, l.o, l.ndim, a.o_row_stride));
  return TcParams{a.batch, a.L, a.S, a.q_row_stride, a.k_row_stride, a.v_row_stride, a.o_row_stride,
                  a.dq_row_stride, a.dk_row_stride, a.dv_row_stride, a.layout,
                  static_cast<float>(a.scale), static_cast<float>(a.scale) * kLog2e, a.causal, dropout, a.dropout_p,
                  dropout ? static_cast<float>(1.0 / (1.0 - a.dropout_p)) : 1.f, a.philox, wide, a.wgmma_pingpong,
                  a.longest_first && row_blocks(a.L > a.S ? a.L : a.S, 64) <= kMaxGridY, order_section_for(a)};
}

// Shared buffers per streamed tile (key tiles in the forward and the dq kernels, query tiles in the
// dk/dv kernels): with two, the block copies tile t + 1 (cp.async, kernels/cuda/async_copy.cuh) while
// it computes on tile t; with one, the copies and the products take turns, as before the kernels had
// a pipeline. A build may set KILN_ATTENTION_STAGES to 1 to measure what the overlap is worth.
#if defined(KILN_ATTENTION_STAGES)
inline constexpr int kStages = KILN_ATTENTION_STAGES;
#else
inline constexpr int kStages = 2;
#endif
static_assert(kStages >= 1 && kStages <= 4, "one to four shared buffers per streamed tile");

// The buffer of streamed tile t, of `elems` elements each, from `first` on, of kBuffers.
template <int kBuffers = kStages, typename T> __device__ __forceinline__ T* stage_buffer(T* first, int elems, int t) {
  return first + static_cast<int>(static_cast<unsigned>(t) % kBuffers) * elems;
}

// The pipeline over a block's streamed tiles, the loop of the tensor-core attention kernels but the
// wgmma forward (which is warp-specialized, attention_wgmma_forward.cuh):
//
//   pass u:  fetch(u): start the copies of tile u into its buffer (none past the last tile), commit
//            from pass kStages - 1 on, for tile t = u - (kStages - 1):
//              wait until kStages - 1 groups are pending (tile t's are in), landed(), barrier
//              compute(t) on tile t's buffers
//              barrier: no warp reads them any more, a later pass may refill them
//
// so tile t + kStages - 1 loads while the warps compute on tile t. Past the last tile a pass commits an
// empty group, which keeps the count the wait expects. The kernel commits its own rows' copies (Q,
// or K and V) before; they land with tile 0's. `landed` runs between the wait and the barrier: the
// wgmma kernels' proxy fence. A fetch copies nothing past the last tile by copying zero rows, not
// by branching around the copies, and the copies are written once, here: a kernel that also fetched
// in a prologue held every copy's address in registers through the loop (the mma.sync dk/dv kernel
// at head dim 64: 175 registers became 255 with spills, ptxas -v for sm_90).
template <typename Fetch, typename Landed, typename Compute>
__device__ __forceinline__ void stream_tiles(int64_t tiles, Fetch&& fetch, Landed&& landed, Compute&& compute) {
  constexpr int kAhead = kStages - 1;
#pragma unroll 1
  for (int u = 0;; ++u) {
    fetch(u);
    tile::commit_copies();
    if (u < kAhead) continue;
    const int t = u - kAhead;
    if (t >= tiles) break;
    tile::wait_copies<kAhead>();
    landed();
    __syncthreads();  // every thread's copies of tile t (and, first, of the block's own rows) are in
    compute(t);
    __syncthreads();  // every warp is done with tile t's buffers
  }
  tile::wait_copies<0>();  // none in flight at the exit (a block with no tile still has its own rows')
}

// Tiles of `per_tile` rows covering rows [begin, end); none when end <= begin.
__device__ __forceinline__ int64_t tile_count(int64_t begin, int64_t end, int per_tile) {
  return end > begin ? (end - begin + per_tile - 1) / per_tile : 0;
}

// Dropout's factor for score (b, i, j): 1 without dropout, else 1 / (1 - p) or 0. `st` is p.philox
// resolved once per thread (a captured graph's seed and offset are read when the kernel runs).
__device__ __forceinline__ float keep_factor(const TcParams& p, const PhiloxState& st, int64_t b, int64_t i,
                                             int64_t j) {
  if (!p.dropout) return 1.f;
  const uint64_t idx = static_cast<uint64_t>((b * p.L + i) * p.S + j);
  return attention_keep(st, idx, p.dropout_p) ? p.keep_scale : 0.f;
}

// Shared row length of a [rows, D] tile.
template <int D> inline constexpr int kLdFor = D + kPadElems;

// Starts copying rows [r0, r0 + rows) of a row-strided [count, D] operand into a [rows, D + pad]
// shared tile (zeros past `count`); the caller commits and waits (async_copy.cuh). Consecutive
// threads take consecutive 16-byte pieces of a row: a row's reads are contiguous.
template <typename T, int D>
__device__ __forceinline__ void stage(T* tile, const T* base, int64_t row_stride, int64_t r0, int64_t count, int rows,
                                      bool wide) {
  constexpr int kPieces = D / tile::kPieceElems;
  const auto place = [](int idx) {
    const int r = idx / kPieces, col = idx % kPieces * tile::kPieceElems;
    return tile::Piece{r, col, r * kLdFor<D> + col};
  };
  tile::copy_rows_async<D>(tile, place, base, row_stride, r0, count, rows, wide);
}

// Whether query i sees key j: both exist, and with causal the key is not after the query.
__device__ __forceinline__ bool visible(const TcParams& p, int64_t i, int64_t j) {
  return i < p.L && j < p.S && (!p.causal || j <= i);
}

// visible() for query row i across the n keys of a tile from j0 on, as a count: the row sees the tile's
// first keys_seen() keys (those before S and, with causal, up to i; none past L). Found once per row
// and tile, it leaves each score one 32-bit compare instead of visible()'s 64-bit ones, which cost
// more instructions than the score's exponential. The forward's softmax, on its critical path, uses
// it; the backward keeps visible(): there the bounds, held through the loop, cost registers.
__device__ __forceinline__ int keys_seen(const TcParams& p, int64_t i, int64_t j0, int n) {
  const int64_t end = i >= p.L ? 0 : p.causal ? cuda_detail::min_i64(p.S, i + 1) : p.S;
  return static_cast<int>(end - j0 < 0 ? 0 : end - j0 > n ? n : end - j0);
}

// The grid of a kernel over `rows` rows (queries, or keys in the dk/dv kernels) in blocks of
// `per_block`, and each block's work (block_work): its batch entry and its block of rows, the index
// that times the rows per block gives the first row.
//
// With causal the blocks' work differs: a block of query rows (the forwards and the dq kernels) sees
// more keys the later its rows, a block of keys (the dk/dv kernels) is seen by more queries the earlier
// its keys. The GPU starts blocks in the order of blockIdx.x, then .y, then .z, and so that the longest
// start first and the shortest fill the grid's tail (instead of long ones starting last while the rest
// of the GPU runs out of work), the grid is laid out longest first: `latest_first` for blocks of
// queries (from the last), not for blocks of keys (from the first). Across batch entries too, but in
// sections of p.section entries: all of a section's longest blocks, then its next longest, and so on,
// then the next section's, so that the blocks running at once share the K and V of a few entries in
// the L2 (AttentionArgs::order_section; 1 is each entry's blocks together). So blockIdx.x is the entry
// within its section, .y the rank (0: the longest), .z the section; a block past the batch (the last
// section may be short) has nothing to do. The mapping is a multiply-add of the block's indices, as
// cheap to recompute as blockIdx itself: kept in registers through the kernel instead, a computed
// entry and row cost the mma.sync kernels at head dim 64 up to 81 registers and spills (ptxas,
// bench/records/kernel_resources_*).
// Without causal, or with TcParams::longest_first false (the A/B), blockIdx.x is the block and
// blockIdx.y the entry.
struct TcGrid {
  unsigned x, y, z;
};
inline TcGrid tc_grid(const TcParams& p, int64_t rows, int64_t per_block) {
  const unsigned blocks = row_blocks(rows, per_block);
  if (!(p.causal && p.longest_first)) return {blocks, static_cast<unsigned>(p.batch), 1};
  return {p.section, blocks, static_cast<unsigned>((p.batch + p.section - 1) / p.section)};
}
struct BlockWork {
  int64_t b, block;
};
__device__ __forceinline__ BlockWork block_work(const TcParams& p, bool latest_first) {
  if (!(p.causal && p.longest_first)) return {static_cast<int64_t>(blockIdx.y), static_cast<int64_t>(blockIdx.x)};
  const unsigned rank = blockIdx.y;
  return {static_cast<int64_t>(blockIdx.z) * gridDim.x + blockIdx.x,
          static_cast<int64_t>(latest_first ? gridDim.y - 1 - rank : rank)};
}

// The keys that `rows` query rows from i0 on see: all S, or with causal those up to the last row (the
// forward and the dq kernels, for their blocks or for a warpgroup's rows).
__device__ __forceinline__ int64_t block_key_end(const TcParams& p, int64_t i0, int64_t rows = kBlockRows) {
  const int64_t block_last = cuda_detail::min_i64(p.L - 1, i0 + rows - 1);
  return p.causal ? cuda_detail::min_i64(p.S, block_last + 1) : p.S;
}

// s = A B^T and t = A2 B2^T, each [16, 8 N]: A and A2 are a warp's 16 rows (at a, a2), B and B2 have
// 8 N rows (at b, b2), all D wide, row-major in shared memory with leading dimension kLdFor<D>. The
// backward's two score products: S and dP (Q K^T, dO V^T), or their transposes (K Q^T, V dO^T). The
// head-dim loop is not unrolled: unrolled, it holds every step's operands at once and spills.
template <typename T, int D, int N>
__device__ __forceinline__ void score_pair(tile::CTile (&s)[N], const T* a, const T* b, tile::CTile (&t)[N],
                                           const T* a2, const T* b2) {
  using namespace tile;
  constexpr int kLd = kLdFor<D>;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    fill(s[n], 0.f);
    fill(t[n], 0.f);
  }
#pragma unroll 1
  for (int d = 0; d < D / kK; ++d) {
    ATile<T> x, x2;
    load_a(x, a + d * kK, kLd);
    load_a(x2, a2 + d * kK, kLd);
#pragma unroll
    for (int n = 0; n < N; ++n) {
      BTile<T> y, y2;
      load_b_transposed(y, b + n * kN * kLd + d * kK, kLd);
      mma(s[n], x, y);
      load_b_transposed(y2, b2 + n * kN * kLd + d * kK, kLd);
      mma(t[n], x2, y2);
    }
  }
}

// acc += C B: C is a [16, 8 N] product held as N accumulator tiles (probabilities, dS), re-read as
// A tiles two at a time (a_from_c, rounded to T); B is [8 N, 8 OUT], row-major at b with leading
// dimension kLdFor<D>. Attention's P V, dS K, P^T dO and dS^T Q.
template <typename T, int D, int N, int OUT>
__device__ __forceinline__ void add_product(tile::CTile (&acc)[OUT], const tile::CTile (&c)[N], const T* b) {
  using namespace tile;
  constexpr int kLd = kLdFor<D>;
#pragma unroll
  for (int kk = 0; kk < N / 2; ++kk) {
    ATile<T> x;
    a_from_c(x, c[2 * kk], c[2 * kk + 1]);
#pragma unroll
    for (int o = 0; o < OUT; ++o) {
      BTile<T> y;
      load_b(y, b + kk * kK * kLd + o * kN, kLd);
      mma(acc[o], x, y);
    }
  }
}

// The bytes of dynamic shared memory a kernel carves with `Smem` (a struct whose constructor takes
// its pieces from a SmemCarver): the same calls on a null base, so the launch and the kernel agree.
template <typename Smem> size_t smem_bytes() {
  tile::SmemCarver sizes;
  const Smem pieces(sizes);
  (void)pieces;
  return sizes.bytes();
}

#if defined(__CUDACC__)
// Calls f.template operator()<T, D>() for the element type (float16 or bfloat16) and head dim (64
// or 128) that attention_tc_fits accepted.
template <typename F> void dispatch(DType dtype, int64_t head_dim, F&& f) {
  const bool bf16 = dtype == DType::BFloat16;
  if (head_dim == 64) {
    if (bf16) f.template operator()<__nv_bfloat16, 64>();
    else f.template operator()<__half, 64>();
  } else {
    if (bf16) f.template operator()<__nv_bfloat16, 128>();
    else f.template operator()<__half, 128>();
  }
}

#endif

}  // namespace kiln::attention_tc
