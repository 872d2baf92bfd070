// The flash-attention forward on Hopper's warpgroup mma (wgmma, sm_90a, through
// kernels/cuda/wgmma.cuh), for the shapes of the mma.sync forward (attention_tc_forward.cuh):
// float16 or bfloat16, head dims 64 or 128, no mask, causal or not, dropout or not, any L and S. It
// writes the same output and log-sum-exp, so either backward reads them.
//
// Work split: a block takes 128 query rows and streams the key tiles they see. It is warp-
// specialized, as FlashAttention-3 is: two consumer warpgroups (threads 0 .. 255) each compute 64 of
// the rows, each warp 16 of them, and a producer warpgroup (threads 256 .. 383) only loads tiles. The
// two sides never meet at __syncthreads: they hand each other buffers through shared-memory barriers
// (kernels/cuda/pipeline.cuh), so a consumer warpgroup goes on as soon as its next tile is in, whatever
// the other one does, and the producer runs ahead as far as the buffers allow. The producer gives back
// most of its registers (setmaxnreg) for the consumers to take.
// What changes from mma.sync is where the operands live and how big one instruction is:
// - The block's Q rows and each key tile of K and V are staged in shared memory in a layout wgmma
//   reads (kernels/wgmma_layout.h): with the 128-byte swizzle, as FlashAttention-3's are, or by pieces
//   (the template parameter kOrder, AttentionArgs::wgmma_swizzle). The instruction reads them there
//   through descriptors: nothing is loaded into registers lane by lane, as mma.sync's B tiles are.
// - S = Q K^T for a tile of 64 keys is D / 16 instructions of 64 x 64 x 16 for the whole warpgroup
//   (mma.sync: 8 D / 16 per warp); both operands K-major from shared memory.
// - P V is 4 instructions of 64 x D x 16, P from registers (the score accumulators re-read as A
//   tiles, a_from_c, as before) and V from shared memory, MN-major (the transpose flag).
// The online softmax between the two products is the mma.sync forward's own (softmax_tile, rescale):
// a warp's accumulator tiles sit where mma.sync's do. The output goes out through shared memory
// (WgmmaForwardConsumer::write_out), or where it cannot as from mma.sync (write_forward).
//
// The instruction is asynchronous (wgmma.cuh says how a kernel waits for it). The kernel uses that as
// FlashAttention-3 does within a warpgroup: tile t's S = Q K^T and tile t - 1's P V are issued
// together, and tile t's softmax runs while P V is still in flight. Between the two consumer
// warpgroups it overlaps as FlashAttention-3 does too (ping-pong, WgmmaForwardHandoff): they take
// turns issuing their products, so one's products run while the other computes its softmax. And as
// in FlashAttention-3 the producer loads with tensor copies (TMA, kernels/cuda/tma.cuh): one thread
// issues a tile's copies, which complete on the consumers' barrier (produce_forward_tiles_tma), rows
// of 128 bytes that the copy engine swizzles as it writes them. Where the operands do not allow it,
// its 128 threads copy with cp.async (produce_forward_tiles) into the same layout.
//
// attention_forward_wgmma_sync_kernel, at the end, is the same forward without the producer: the
// consumers load the tiles themselves (stream_tiles), for measuring what warp specialization is worth.
//
// Selected by AttentionArgs::wgmma (cuda::math_switches().attention_wgmma, with the tensor-core
// switch) on a device of compute capability 9.0, in builds for sm_90 (attention_wgmma.cu, compiled
// for sm_90a alone). The CPU tests run it on the emulator (tests/kernels/test_attention_tc_simt.cpp).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention_tc_forward.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/pipeline.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace kiln::attention_tc {

static_assert(kBlockThreads == wgmma::kThreads && kBlockRows == wgmma::kM, "a warpgroup takes 64 rows");

// Keys per shared tile: 64 at both head dims (scores 32 floats per lane; the output 32 or 64).
inline constexpr int kWgmmaKeyTile = 64;

// Consumer warpgroups per forward block, each with 64 query rows of its own: they share each key
// tile, so two halve the traffic of K and V per query (FlashAttention-3's blocks of 128 query rows).
// One producer warpgroup more loads the tiles.
inline constexpr int kWgmmaForwardGroups = 2;
inline constexpr int kWgmmaConsumerThreads = kWgmmaForwardGroups * wgmma::kThreads;
template <int D> inline constexpr int kWgmmaForwardThreads = kWgmmaConsumerThreads + wgmma::kThreads;
template <int D> inline constexpr int kWgmmaForwardRows = kWgmmaForwardGroups * wgmma::kM;

// The registers each side keeps (setmaxnreg, multiples of 8): the 384 threads of a block start with
// 168 each, the most that lets one block on an SM (65536 / 384, rounded down to 8); the producer gives
// back all but 40, and the consumers take them, 232 each (128 * 40 + 256 * 232 = 384 * 168).
inline constexpr int kWgmmaBlockRegisters = 65536 / (kWgmmaConsumerThreads + wgmma::kThreads) / 8 * 8;
inline constexpr int kWgmmaProducerRegisters = 40, kWgmmaConsumerRegisters = 232;
static_assert(wgmma::kThreads * kWgmmaProducerRegisters + kWgmmaConsumerThreads * kWgmmaConsumerRegisters <=
                  (kWgmmaConsumerThreads + wgmma::kThreads) * kWgmmaBlockRegisters,
              "the consumers take no more registers than the producer gives back");

// Buffers of K: kStages, but at least two (the producer fills one while the consumers read the other;
// KILN_ATTENTION_STAGES=1 is for the kernels of stream_tiles). Of V: one more, for the key tile whose
// P V is issued with the next tile's scores (see the kernel).
inline constexpr int kWgmmaKBuffers = kStages < 2 ? 2 : kStages;
inline constexpr int kWgmmaVBuffers = kWgmmaKBuffers + 1;

// The shared memory: the block's query rows, kWgmmaKBuffers key tiles of K and kWgmmaVBuffers of V,
// all staged in kOrder (q_staging(), tile_staging(), kernels/wgmma_layout.h): swizzled, the layout
// the producer's tensor copies write with the 128-byte swizzle, each tile on 1024 bytes; or by pieces,
// the layout they write without it, each tile on 128 (a core matrix, and what a tensor copy asks). And
// the barriers of the warp-specialized kernel's pipeline (pipeline.cuh), per buffer of K and of V:
// `k_full` (the tile's K is in, and with tile 0 the block's Q rows), `v_full` (its V is in), and
// `k_empty`, `v_empty` (the consumers are done with it). K and V have barriers of their own, as in
// FlashAttention-3, because the consumers need them at different times: tile t's K for its scores,
// its V for its P V, which is issued with the next tile's scores.
// A warpgroup's 64 rows of Q are rows 64 g .. 64 g + 63 of the staged tile, which its descriptor
// starts at (q_staging().position(64 g, 0)) and reads with the tile's distances.
template <typename T, int D, wgmma::Order kOrder> struct WgmmaForwardSmem {
  static_assert(kOrder != wgmma::Order::kRowGroups, "the forward stages as its tensor copies write");
  static constexpr int kTileElems = kWgmmaKeyTile * D;
  static constexpr uintptr_t kAlign = kOrder == wgmma::Order::kSwizzled ? 1024 : wgmma::kCoreBytes;
  static_assert(kTileElems * sizeof(T) % kAlign == 0, "every buffer of a tile as aligned as the first");
  // (Functions, not constants: device code cannot take a static member object's address.)
  KILN_HD static constexpr wgmma::Staging q_staging() { return wgmma::Staging{kWgmmaForwardRows<D>, D, kOrder}; }
  KILN_HD static constexpr wgmma::Staging tile_staging() { return wgmma::Staging{kWgmmaKeyTile, D, kOrder}; }
  T* q;
  T* k;
  T* v;
  uint64_t* k_full;
  uint64_t* v_full;
  uint64_t* k_empty;
  uint64_t* v_empty;
  KILN_HD explicit WgmmaForwardSmem(tile::SmemCarver& c)
      : q(c.take<T>(kWgmmaForwardRows<D> * D, kAlign)),
        k(c.take<T>(kWgmmaKBuffers * kTileElems, kAlign)),
        v(c.take<T>(kWgmmaVBuffers * kTileElems, kAlign)),
        k_full(c.take<uint64_t>(kWgmmaKBuffers, sizeof(uint64_t))),
        v_full(c.take<uint64_t>(kWgmmaVBuffers, sizeof(uint64_t))),
        k_empty(c.take<uint64_t>(kWgmmaKBuffers, sizeof(uint64_t))),
        v_empty(c.take<uint64_t>(kWgmmaVBuffers, sizeof(uint64_t))) {}
};

// Starts copying rows [r0, r0 + rows) of a row-strided [count, D] operand into a staged [rows, D] tile
// (zeros past `count`) in kOrder: by row groups (the backward's tiles), or as the forward's tensor
// copies write, by pieces or swizzled (kernels/wgmma_layout.h). One 16-byte piece per thread and pass,
// by `threads` threads of which this is the `thread`-th (by default the block's); the caller commits
// and waits (async_copy.cuh). Consecutive threads take consecutive pieces in memory (Staging::
// piece_row, piece_col): contiguous bytes, or swizzled, the 8 chunks of a row of 128 bytes, which
// the swizzle spreads over all bank groups; either way a warp stores without bank conflicts.
template <typename T, int D, wgmma::Order kOrder = wgmma::Order::kRowGroups>
__device__ __forceinline__ void stage_cores(T* tile, const T* base, int64_t row_stride, int64_t r0, int64_t count,
                                            int rows, bool wide, int thread = static_cast<int>(threadIdx.x),
                                            int threads = static_cast<int>(blockDim.x)) {
  static_assert(wgmma::kCore == tile::kPieceElems, "a core matrix's row is one 16-byte piece");
  const wgmma::Staging staged{rows, D, kOrder};
  const auto place = [staged](int idx) {
    const auto r = static_cast<int>(staged.piece_row(idx)), col = static_cast<int>(staged.piece_col(idx));
    return tile::Piece{r, col, static_cast<int>(staged.offset(r, col))};
  };
  tile::copy_rows_async<D>(tile, place, base, row_stride, r0, count, rows, wide, thread, threads);
}

// The descriptor `first` (of a kBuffers-buffer operand's first buffer) moved to streamed tile t's
// buffer, `elems` elements of T each.
template <typename T, int kBuffers = kStages>
__device__ __forceinline__ uint64_t stage_descriptor(uint64_t first, int elems, int t) {
  return wgmma::advance(first, static_cast<uint32_t>(t) % kBuffers * static_cast<uint32_t>(elems * sizeof(T)));
}

// The producer warpgroup: key tile by key tile K and V, each into the buffer its consumers have
// released, and with tile 0 the block's Q rows. Each operand's copies are one group (Q's with tile 0's
// K). The producer lets a group land (every thread waits for its own, then the proxy fence, as
// wgmma.cuh's protocol asks of plain writes before the tensor cores read them) and arrives on its
// `k_full` or `v_full` barrier only after starting the next tile's group of the same operand, so that
// a tile's copies fly while the last one's land. A barrier completes when all 128 producer threads
// have arrived.
template <typename T, int D, wgmma::Order kOrder>
__device__ __forceinline__ void produce_forward_tiles(const WgmmaForwardSmem<T, D, kOrder>& smem, const T* q,
                                                      const T* k, const T* v, const TcParams& p,
                                                      const AttentionOffsets& offs, int64_t i0, int64_t tiles) {
  using Smem = WgmmaForwardSmem<T, D, kOrder>;
  using pipeline::pipeline_parity;
  const int thread = static_cast<int>(threadIdx.x) - kWgmmaConsumerThreads;
  constexpr int kThreads = wgmma::kThreads;
  stage_cores<T, D, kOrder>(smem.q, q + offs.q, p.q_rs, i0, p.L, kWgmmaForwardRows<D>, p.wide, thread, kThreads);
  // Group 2 u is tile u's K, 2 u + 1 its V; past the last tile, empty groups keep the count. One
  // operand's part of tile u: wait until the consumers released tile u - kBuffers from its buffer (at
  // once the first time round), start its copies, commit them, and let the same operand's group of
  // tile u - 1 land: once a group is committed, all but the newest two have landed after
  // wait_copies<2>.
  const auto operand = [&]<int kBuffers>(int u, T* buffers, uint64_t* empty, uint64_t* full, const T* base,
                                         int64_t row_stride) {
    if (u < tiles) {
      pipeline::mbarrier_wait(stage_buffer<kBuffers>(empty, 1, u), 1 - pipeline_parity<kBuffers>(u));
      stage_cores<T, D, kOrder>(stage_buffer<kBuffers>(buffers, Smem::kTileElems, u), base, row_stride,
                                static_cast<int64_t>(u) * kWgmmaKeyTile, p.S, kWgmmaKeyTile, p.wide, thread, kThreads);
    }
    tile::commit_copies();
    if (u > 0) {
      tile::wait_copies<2>();
      wgmma::fence_async_smem();
      pipeline::mbarrier_arrive(stage_buffer<kBuffers>(full, 1, u - 1));
    }
  };
#pragma unroll 1
  for (int u = 0;; ++u) {
    operand.template operator()<kWgmmaKBuffers>(u, smem.k, smem.k_empty, smem.k_full, k + offs.k, p.k_rs);
    operand.template operator()<kWgmmaVBuffers>(u, smem.v, smem.v_empty, smem.v_full, v + offs.v, p.v_rs);
    if (u == tiles) break;
  }
  tile::wait_copies<0>();  // the last, empty groups (with no tile, the block's Q rows)
}

// The tensor maps of the producer's tensor copies (TMA, kernels/cuda/tma.cuh), or `on` false where it
// copies with cp.async (AttentionArgs::wgmma_tma off, rows not 16-byte aligned, more than two batch
// dims, a driver without TMA). Their boxes land the tiles as the forward stages them
// (kernels/tma_box.h):
// - swizzled, each operand viewed as it is, [D, rows, batch dims], and a tile taking D / 64 boxes of
//   [64, rows] (128-byte rows, the swizzle's), one per block of 64 columns;
// - by pieces, each viewed as [8 elements, rows, D / 8 pieces, batch dims] (strides: the element, the
//   row, 16 bytes, the batch strides), and a tile taking one box of [8, rows, D / 8].
// The rows are the block's 128 for Q, a key tile's 64 for K and V. Rows past L or S are zeros, as the
// tensor copy writes them. A batch dim along which the operand broadcasts (stride 0) is left at size 1
// and coordinate 0.
// And, with `store`, the output's map for the consumers' tensor stores (WgmmaForwardConsumer::
// write_out): swizzled tiles only, viewed as Q is, a warpgroup's box [64, 64 rows] per block of 64
// columns; rows past L are left out.
struct WgmmaForwardMaps {
  tma::Map q, k, v, o;
  bool on, store;
};
// The first of the maps' batch dims.
KILN_HD constexpr int forward_batch_dim(wgmma::Order order) { return order == wgmma::Order::kSwizzled ? 2 : 3; }

// Coordinates of batch entry b along the maps' two batch dims, for an operand with `strides`.
KILN_HD void batch_coordinates(const AttentionBatch& layout, const int64_t* strides, int64_t b, int32_t& c0,
                               int32_t& c1) {
  c0 = c1 = 0;  // (two variables, not an array indexed by d, which would live in local memory)
  for (int d = layout.ndim - 1; d >= 0; --d) {
    const auto idx = static_cast<int32_t>(b % layout.sizes[d]);
    b /= layout.sizes[d];
    if (strides[d] == 0) continue;
    if (d == 0) c0 = idx;
    else if (d == 1) c1 = idx;
  }
}

// The maps for operands q, k, v and the output of the forward with head dim D, its tiles staged in
// `order` (host code).
inline WgmmaForwardMaps make_forward_maps(const TcParams& p, int D, const void* q, const void* k, const void* v,
                                          const void* out, wgmma::Order order, bool want) {
  WgmmaForwardMaps maps{};
  const AttentionBatch& l = p.layout;
  if (!want || l.ndim > 2 || p.L < 1 || p.S < 1) return maps;
  const int first = forward_batch_dim(order);
  const auto view = [&](const void* base, int64_t rows, int64_t row_stride, const int64_t* strides, int box_rows) {
    const auto n = static_cast<uint64_t>(rows), row_bytes = static_cast<uint64_t>(row_stride) * 2;
    tma::Box b = order == wgmma::Order::kSwizzled
                     ? tma::swizzled_view(base, n, row_bytes, static_cast<uint32_t>(D), static_cast<uint32_t>(box_rows))
                     : tma::pieces_view(base, n, row_bytes, static_cast<uint32_t>(D), static_cast<uint32_t>(box_rows));
    // The batch dims stay at size 1 where unused or broadcast (stride 0), never stepped along.
    for (int d = 0; d < l.ndim; ++d) {
      if (strides[d] == 0) continue;
      b.dims[first + d] = static_cast<uint64_t>(l.sizes[d]);
      b.strides[first + d] = static_cast<uint64_t>(strides[d]) * 2;
    }
    return b;
  };
  maps.on = p.wide && tma::encode(view(q, p.L, p.q_rs, l.q, kWgmmaForwardGroups * wgmma::kM), &maps.q) &&
            tma::encode(view(k, p.S, p.k_rs, l.k, kWgmmaKeyTile), &maps.k) &&
            tma::encode(view(v, p.S, p.v_rs, l.v, kWgmmaKeyTile), &maps.v);
  maps.store = order == wgmma::Order::kSwizzled && tma::encode(view(out, p.L, p.o_rs, l.o, wgmma::kM), &maps.o);
  return maps;
}

// The producer with tensor copies: one thread of the producer warpgroup issues them all (the others
// have nothing to do and exit). Per key tile it waits for K's buffer, tells its `k_full` barrier how
// many bytes to wait for (K's, and with tile 0 the block's Q rows) with its one arrival, starts K's
// copies, and does the same for V. The copies complete the barrier's phase as they land: no thread
// waits for them, and no proxy fence is needed (the copy engine and wgmma both work in the async
// proxy). A tile is kBoxes copies, one per block of 64 columns where swizzled.
template <typename T, int D, wgmma::Order kOrder>
__device__ __forceinline__ void produce_forward_tiles_tma(const WgmmaForwardSmem<T, D, kOrder>& smem,
                                                          const WgmmaForwardMaps& maps, const TcParams& p, int64_t b,
                                                          int64_t i0, int64_t tiles) {
  using Smem = WgmmaForwardSmem<T, D, kOrder>;
  using pipeline::pipeline_parity;
  if (static_cast<int>(threadIdx.x) != kWgmmaConsumerThreads) return;
  constexpr bool kSwizzled = kOrder == wgmma::Order::kSwizzled;
  constexpr int kBoxes = kSwizzled ? D / 64 : 1, kBatch = forward_batch_dim(kOrder);
  constexpr uint32_t kTileBytes = Smem::kTileElems * sizeof(T);
  constexpr uint32_t kQBytes = kWgmmaForwardRows<D> * D * sizeof(T);
  int32_t q_at[tma::kRank] = {0, static_cast<int32_t>(i0), 0, 0, 0};
  int32_t k_at[tma::kRank] = {}, v_at[tma::kRank] = {};
  batch_coordinates(p.layout, p.layout.q, b, q_at[kBatch], q_at[kBatch + 1]);
  batch_coordinates(p.layout, p.layout.k, b, k_at[kBatch], k_at[kBatch + 1]);
  batch_coordinates(p.layout, p.layout.v, b, v_at[kBatch], v_at[kBatch + 1]);
  // A tile staged as `s`, its box at `at` (the column left at 0 after).
  const auto copy = [](T* dst, wgmma::Staging s, const tma::Map& map, int32_t(&at)[tma::kRank], uint64_t* full) {
#pragma unroll
    for (int c = 0; c < kBoxes; ++c) {
      at[0] = kSwizzled ? 64 * c : 0;
      tma::copy_box(dst + s.position(0, 64 * c) / sizeof(T), map, at, full);
    }
    at[0] = 0;
  };
#pragma unroll 1
  for (int u = 0; u < tiles; ++u) {
    k_at[1] = v_at[1] = u * kWgmmaKeyTile;
    uint64_t* k_full = stage_buffer<kWgmmaKBuffers>(smem.k_full, 1, u);
    pipeline::mbarrier_wait(stage_buffer<kWgmmaKBuffers>(smem.k_empty, 1, u), 1 - pipeline_parity<kWgmmaKBuffers>(u));
    pipeline::mbarrier_arrive_expect_tx(k_full, kTileBytes + (u == 0 ? kQBytes : 0));
    if (u == 0) copy(smem.q, Smem::q_staging(), maps.q, q_at, k_full);
    copy(stage_buffer<kWgmmaKBuffers>(smem.k, Smem::kTileElems, u), Smem::tile_staging(), maps.k, k_at, k_full);
    uint64_t* v_full = stage_buffer<kWgmmaVBuffers>(smem.v_full, 1, u);
    pipeline::mbarrier_wait(stage_buffer<kWgmmaVBuffers>(smem.v_empty, 1, u), 1 - pipeline_parity<kWgmmaVBuffers>(u));
    pipeline::mbarrier_arrive_expect_tx(v_full, kTileBytes);
    copy(stage_buffer<kWgmmaVBuffers>(smem.v, Smem::kTileElems, u), Smem::tile_staging(), maps.v, v_at, v_full);
  }
}

// The consumer warpgroups' epilogue barriers (WgmmaForwardConsumer::write_out): warpgroup g's is
// kWgmmaEpilogueBarrier + g, counting its 128 threads, after the turns' (kWgmmaTurnBarrier below).
inline constexpr int kWgmmaEpilogueBarrier = 1 + kWgmmaForwardGroups;
static_assert(kWgmmaEpilogueBarrier + kWgmmaForwardGroups <= 16, "a block has 16 named barriers");

// Syncs warpgroup g's threads on its epilogue barrier, the id an immediate (as turn_barrier's, below).
template <int G = 0> __device__ __forceinline__ void epilogue_barrier(int g) {
  if constexpr (G < kWgmmaForwardGroups) {
    if (g != G) epilogue_barrier<G + 1>(g);
    else pipeline::named_barrier_sync(kWgmmaEpilogueBarrier + G, wgmma::kThreads);
  }
}

// A consumer warpgroup's side of the forward, the same in both kernels below: its 64 query rows'
// output accumulators and softmax state, and P of the last key tile it computed, as A tiles, whose
// P V is still to be issued.
//
// Per key tile, FlashAttention-3's overlap within a warpgroup (step()): the scores S = Q K^T of tile
// t and P V of tile t - 1 are issued together, and the softmax of tile t runs while P V is in flight.
// The output accumulators are rescaled once P V has landed (P V adds at the old maximum, and the
// factor takes the sum to the new one), and P of tile t waits in registers for the next tile. The
// last P V comes after the last tile (finish()).
template <typename T, int D, bool kDropout, wgmma::Order kOrder> struct WgmmaForwardConsumer {
  static constexpr int kScoreTiles = kWgmmaKeyTile / tile::kN;  // 8
  static constexpr int kOutTiles = D / tile::kN;
  using Smem = WgmmaForwardSmem<T, D, kOrder>;

  const TcParams& p;
  const int64_t b;
  const int64_t j_end;  // the keys this warpgroup's rows see: it stops at the first tile past them
  const PhiloxState st;
  // Q's rows along M and K's along N, both with the head dim along K; V's rows (keys) along K and
  // the head dim along N. K's and V's for the first buffer (stage_descriptor moves them).
  const uint64_t q_desc, k_desc, v_desc;
  tile::CTile acc[kOutTiles];
  RowState rows;  // thread t's rows: 16 per warp, the consumers' warps in order
  tile::ATile<T> pa[kScoreTiles / 2];
  bool pending = false;
  int last = 0;

  __device__ __forceinline__ WgmmaForwardConsumer(const Smem& smem, int group, int64_t i0, const TcParams& params,
                                                  int64_t batch)
      : p(params),
        b(batch),
        j_end(block_key_end(params, i0 + group * wgmma::kM, wgmma::kM)),
        st(kDropout ? philox_resolve(params.philox) : PhiloxState{}),
        q_desc(wgmma::rows_by_k(wgmma::smem_address(smem.q) + Smem::q_staging().position(group * wgmma::kM, 0),
                                Smem::q_staging())),
        k_desc(wgmma::rows_by_k(wgmma::smem_address(smem.k), Smem::tile_staging())),
        v_desc(wgmma::rows_by_n(wgmma::smem_address(smem.v), Smem::tile_staging())),
        rows(i0) {
#pragma unroll
    for (int t = 0; t < kOutTiles; ++t) tile::fill(acc[t], 0.f);
  }

  // acc += P V for tile t's V, once it is in (v_ready(t)): 16 keys an instruction, P from registers,
  // V MN-major. With a fence of its own: the compiler may have moved P's and the accumulators'
  // registers since the pass's first. (ptxas -v still reports an arrive it adds where the pass's two
  // paths meet, C7519, which is information: it reports no serialization.)
  template <typename Handoff> __device__ __forceinline__ void issue_pv(int t, const Handoff& handoff) {
    const uint64_t v_t = stage_descriptor<T, kWgmmaVBuffers>(v_desc, Smem::kTileElems, t);
    handoff.v_ready(t);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kScoreTiles / 2; ++kk) {
      const uint32_t step = Smem::tile_staging().position(wgmma::kK * kk, 0);
      wgmma::mma_rs<T, D, true>(acc, pa[kk], wgmma::advance(v_t, step), true);
    }
    wgmma::commit();
  }

  // Key tile t, at keys j0 on. The kernel's `handoff` waits until the tile's K is in its buffer
  // (k_ready(t)) and the last tile's V (v_ready, in issue_pv), and is told when this warpgroup's turn
  // to issue products begins and ends (take_turn(t), pass_turn(t)), when S = Q K^T has landed
  // (scores_landed(t): K is read) and when the last tile's P V has (pv_landed(t - 1): its V is read).
  template <typename Handoff> __device__ __forceinline__ void step(int t, int64_t j0, const Handoff& handoff) {
    const uint64_t k_t = stage_descriptor<T, kWgmmaKBuffers>(k_desc, Smem::kTileElems, t);
    tile::CTile s[kScoreTiles];
    handoff.k_ready(t);
    handoff.take_turn(t);
    wgmma::fence();  // P and the rescaled accumulators written before the products read them
    // D / 16 steps along the head dim, the first overwriting s. (Swizzled, a step moves 32 bytes along
    // a block's rows and then to the next block: Staging::position says where each starts.)
#pragma unroll
    for (int d = 0; d < D / wgmma::kK; ++d) {
      const uint32_t q_step = Smem::q_staging().position(0, wgmma::kK * d);
      const uint32_t k_step = Smem::tile_staging().position(0, wgmma::kK * d);
      wgmma::mma_ss<T, kWgmmaKeyTile>(s, wgmma::advance(q_desc, q_step), wgmma::advance(k_t, k_step), d > 0);
    }
    wgmma::commit();
    if (pending) issue_pv(last, handoff);
    else wgmma::commit();  // an empty group: the same wait either way
    handoff.pass_turn(t);
    wgmma::wait<1>();  // the scores' group: P V may still run
    wgmma::settle(s);
    handoff.scores_landed(t);
    const Rescale r = softmax_tile<kDropout>(s, rows, p, st, b, j0);
    wgmma::wait<0>();
    wgmma::settle(acc);
    if (pending) handoff.pv_landed(last);
    rescale(acc, r);
    // P as A tiles, two score tiles side by side each; the registers are free again once the last
    // P V has landed.
#pragma unroll
    for (int kk = 0; kk < kScoreTiles / 2; ++kk) tile::a_from_c(pa[kk], s[2 * kk], s[2 * kk + 1]);
    pending = true;
    last = t;
  }

  // The last P V, with no next tile's scores to overlap (after a causal warpgroup's early stop too),
  // then the output and the log-sum-exp (write_out).
  template <typename Handoff>
  __device__ __forceinline__ void finish(const Smem& smem, int group, int64_t i0, T* out, float* lse,
                                         const Handoff& handoff, const tma::Map* out_map = nullptr) {
    if (pending) {
      issue_pv(last, handoff);
      wgmma::wait<0>();
      wgmma::settle(acc);
    }
    write_out(smem, group, i0, out, lse, out_map);
  }

  // out = acc / l for the warpgroup's 64 rows (from the block's first, i0), through shared memory, as
  // FlashAttention-3's epilogue goes: the rows go into the warpgroup's own rows of the staged Q tile,
  // which no one reads any more (only its products did, and all have landed), then leave by tensor
  // stores through `out_map` (WgmmaForwardMaps::store: one thread starts a box per 64 columns, and
  // waits for their reads before it exits), or else in 16-byte pieces, 8 threads to 128 contiguous
  // bytes of a row where the tile is swizzled (stored from the accumulators, a warp's store writes 16
  // bytes in each of 8 rows). Where the output's rows are not 16-byte aligned, write_forward stores
  // from the accumulators. The log-sum-exp is written from the registers (finish_row) either way.
  __device__ __forceinline__ void write_out(const Smem& smem, int group, int64_t i0, T* out, float* lse,
                                            const tma::Map* out_map) {
    T* const out_b = output_of(out, p, b);
    if (reinterpret_cast<uintptr_t>(out_b) % 16 != 0 || p.o_rs % tile::kPieceElems != 0) {  // the block's alike
      write_forward(out, lse, p, b, rows, acc);
      return;
    }
    const int lane = tile::lane_id();
    constexpr wgmma::Staging kQ = Smem::q_staging();
    const int row = static_cast<int>(threadIdx.x) / tile::kWarp * tile::kM + lane / 4;  // of the block's
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float inv = finish_row(lse, p, b, rows, h);
#pragma unroll
      for (int t = 0; t < kOutTiles; ++t) {
        T* at = smem.q + kQ.offset(row + 8 * h, t * tile::kN + tile::c_coord(lane, 2 * h).col);
        *reinterpret_cast<uint32_t*>(at) =
            tile::pack2(static_cast<T>(acc[t].r[2 * h] * inv), static_cast<T>(acc[t].r[2 * h + 1] * inv));
      }
    }
    if (out_map != nullptr) {
      wgmma::fence_async_smem();  // each thread's stores, for the copy engine
      epilogue_barrier(group);
      if (static_cast<int>(threadIdx.x) % wgmma::kThreads != 0) return;
      int32_t at[tma::kRank] = {0, static_cast<int32_t>(i0 + group * wgmma::kM), 0, 0, 0};
      batch_coordinates(p.layout, p.layout.o, b, at[2], at[3]);
#pragma unroll
      for (int c = 0; c < D / 64; ++c) {
        at[0] = 64 * c;
        tma::store_box(*out_map, at, smem.q + kQ.position(group * wgmma::kM, 64 * c) / sizeof(T));
      }
      tma::commit_bulk();
      tma::wait_bulk_read<0>();  // the block's shared memory goes when its threads exit
      return;
    }
    epilogue_barrier(group);
    // The warpgroup's rows, in memory order.
    constexpr wgmma::Staging kMine{wgmma::kM, D, kOrder};
    using Piece = cuda_detail::Vec16<T>;
    for (int idx = static_cast<int>(threadIdx.x) % wgmma::kThreads; idx < wgmma::kM * D / tile::kPieceElems;
         idx += wgmma::kThreads) {
      const int r = static_cast<int>(kMine.piece_row(idx)), c = static_cast<int>(kMine.piece_col(idx));
      const int64_t i = i0 + group * wgmma::kM + r;
      if (i >= p.L) continue;
      *reinterpret_cast<Piece*>(out_b + i * p.o_rs + c) =
          *reinterpret_cast<const Piece*>(smem.q + kQ.offset(group * wgmma::kM + r, c));
    }
  }
};

// The consumer warpgroups' turns (FlashAttention-3's ping-pong, TcParams::pingpong): named barrier
// kWgmmaTurnBarrier + g is warpgroup g's. Per key tile, warpgroup 0 issues its products, then 1, then
// 0 again for the next tile, so that one warpgroup's tensor-core work runs while the other computes its
// softmax, instead of both issuing at once and then both waiting on the exponentials. A turn syncs on
// its own barrier and ends by arriving on the next warpgroup's; the barrier counts the two warpgroups.
inline constexpr int kWgmmaTurnBarrier = 1;  // 0 is __syncthreads'
static_assert(kWgmmaTurnBarrier + kWgmmaForwardGroups == kWgmmaEpilogueBarrier, "the epilogue's barriers follow");
inline constexpr int kWgmmaTurnThreads = 2 * wgmma::kThreads;
static_assert(kWgmmaTurnBarrier + kWgmmaForwardGroups <= 16, "a block has 16 named barriers");

// Syncs on (kArrive false) or arrives on (true) warpgroup g's turn barrier, its id an immediate in the
// instruction: with an id in a register ptxas reserves all 16 of the block's barriers.
template <bool kArrive, int G = 0> __device__ __forceinline__ void turn_barrier(int g) {
  if constexpr (G < kWgmmaForwardGroups) {
    if (g != G) {
      turn_barrier<kArrive, G + 1>(g);
    } else if constexpr (kArrive) {
      pipeline::named_barrier_arrive(kWgmmaTurnBarrier + G, kWgmmaTurnThreads);
    } else {
      pipeline::named_barrier_sync(kWgmmaTurnBarrier + G, kWgmmaTurnThreads);
    }
  }
}

// What the warp-specialized kernel's consumer warpgroup waits for and tells the rest of the block as
// it steps (WgmmaForwardConsumer::step): it waits for a tile's K before its scores and for its V
// before its P V, releases K's buffer once the scores have landed and V's once its P V has (the
// mbarriers of WgmmaForwardSmem), and with ping-pong takes and passes its turns.
//
// The turns add up: every warpgroup takes one per key tile of the block, a warpgroup past its rows
// (causal) too, without products (skip()). Warpgroup 0's first turn is open from the start (begin()
// arrives on its barrier, and its sync then completes the phase); every other turn is opened by the
// one before it, and the block's last turn, the last warpgroup's on the last tile, opens none. So no
// barrier is left partly arrived when the block ends.
template <typename Smem> struct WgmmaForwardHandoff {
  const Smem& smem;
  const int group;
  const int64_t tiles;
  const bool pingpong;

  __device__ __forceinline__ void begin() const {
    if (pingpong && group == 0) turn_barrier<true>(0);
  }
  __device__ __forceinline__ void take_turn(int) const {
    if (pingpong) turn_barrier<false>(group);
  }
  __device__ __forceinline__ void pass_turn(int t) const {
    if (pingpong && (group < kWgmmaForwardGroups - 1 || t < tiles - 1)) {
      turn_barrier<true>((group + 1) % kWgmmaForwardGroups);
    }
  }
  __device__ __forceinline__ void skip(int t) const {
    take_turn(t);
    pass_turn(t);
  }
  __device__ __forceinline__ void k_ready(int t) const {
    using pipeline::pipeline_parity;
    pipeline::mbarrier_wait(stage_buffer<kWgmmaKBuffers>(smem.k_full, 1, t), pipeline_parity<kWgmmaKBuffers>(t));
  }
  __device__ __forceinline__ void v_ready(int t) const {
    using pipeline::pipeline_parity;
    pipeline::mbarrier_wait(stage_buffer<kWgmmaVBuffers>(smem.v_full, 1, t), pipeline_parity<kWgmmaVBuffers>(t));
  }
  __device__ __forceinline__ void scores_landed(int t) const {
    pipeline::mbarrier_arrive(stage_buffer<kWgmmaKBuffers>(smem.k_empty, 1, t));
  }
  __device__ __forceinline__ void pv_landed(int t) const {
    pipeline::mbarrier_arrive(stage_buffer<kWgmmaVBuffers>(smem.v_empty, 1, t));
  }
};

template <typename T, int D, bool kDropout, wgmma::Order kOrder>
__global__ void __launch_bounds__(kWgmmaForwardThreads<D>, 1)
    attention_forward_wgmma_kernel(T* out, float* lse, const T* q, const T* k, const T* v,
                                   const __grid_constant__ TcParams p, const __grid_constant__ WgmmaForwardMaps maps) {
  constexpr int kRows = kWgmmaForwardRows<D>;
  tile::SmemCarver carve(tile::dynamic_smem());
  const WgmmaForwardSmem<T, D, kOrder> smem(carve);

  const BlockWork work = block_work(p, true);
  if (work.b >= p.batch) return;  // past the batch in the grid's last section (tc_grid)
  const int64_t b = work.b;
  const int64_t i0 = work.block * kRows;
  const int group = static_cast<int>(threadIdx.x) / wgmma::kThreads;  // kWgmmaForwardGroups: the producer
  const AttentionOffsets offs = attention_offsets(p.layout, b);
  // The block streams the key tiles its last row sees; a consumer warpgroup stops at the first one
  // past its own last row (with causal).
  const int64_t tiles = tile_count(0, block_key_end(p, i0, kRows), kWgmmaKeyTile);

  // Thread 0 sets up the barriers: the two kinds of `full` expect the producer's 128 threads (with
  // tensor copies the one that issues them, and the bytes it names), of `empty` the consumers' 256.
  if (threadIdx.x == 0) {
    const uint32_t producers = maps.on ? 1 : wgmma::kThreads;
    for (int s = 0; s < kWgmmaKBuffers; ++s) {
      pipeline::mbarrier_init(smem.k_full + s, producers);
      pipeline::mbarrier_init(smem.k_empty + s, kWgmmaConsumerThreads);
    }
    for (int s = 0; s < kWgmmaVBuffers; ++s) {
      pipeline::mbarrier_init(smem.v_full + s, producers);
      pipeline::mbarrier_init(smem.v_empty + s, kWgmmaConsumerThreads);
    }
    pipeline::fence_barrier_init();  // the copy engine completes the `full` phases
  }
  __syncthreads();  // the only one: the barriers are ready before anyone uses them

  if (group == kWgmmaForwardGroups) {
    pipeline::shrink_registers<kWgmmaProducerRegisters>();
    if (maps.on) produce_forward_tiles_tma(smem, maps, p, b, i0, tiles);
    else produce_forward_tiles(smem, q, k, v, p, offs, i0, tiles);
    return;
  }
  pipeline::grow_registers<kWgmmaConsumerRegisters>();

  // K's buffer is released once the scores have landed, V's once its P V has, during the next tile:
  // V's buffers are held a tile longer than K's, so V has one buffer more, for the producer to run as
  // far ahead with both.
  //
  // A warpgroup whose rows all precede tile t (causal) computes nothing from there on. It neither
  // waits for the tile nor releases it: the warpgroups' rows are a key tile apart, so it skips the
  // block's last tile at most, whose buffers are never filled again. Nor does anyone release the last
  // tile's V after the last P V, for the same reason. With ping-pong it still takes the tile's turn.
  static_assert(kWgmmaForwardGroups - 1 <= kWgmmaKBuffers, "no buffer of a skipped tile is filled again");
  WgmmaForwardConsumer<T, D, kDropout, kOrder> c(smem, group, i0, p, b);
  const WgmmaForwardHandoff<WgmmaForwardSmem<T, D, kOrder>> handoff{smem, group, tiles, p.pingpong};
  handoff.begin();
#pragma unroll 1
  for (int t = 0; t < tiles; ++t) {
    const int64_t j0 = static_cast<int64_t>(t) * kWgmmaKeyTile;
    if (j0 >= c.j_end) {  // the same for the whole warpgroup, and for every later tile
      handoff.skip(t);
      continue;
    }
    c.step(t, j0, handoff);
  }
  c.finish(smem, group, i0, out, lse, handoff, maps.store ? &maps.o : nullptr);
}

// The sync forward's consumers tell no one anything: stream_tiles's barriers order the block.
struct WgmmaNoHandoff {
  __device__ __forceinline__ void k_ready(int) const {}
  __device__ __forceinline__ void v_ready(int) const {}
  __device__ __forceinline__ void take_turn(int) const {}
  __device__ __forceinline__ void pass_turn(int) const {}
  __device__ __forceinline__ void scores_landed(int) const {}
  __device__ __forceinline__ void pv_landed(int) const {}
};

// The same forward without warp specialization, for measuring what it is worth
// (cuda::math_switches().attention_wgmma_producer = false, KILN_ATTENTION_WGMMA_PRODUCER=0): the two
// warpgroups of a block (256 threads, the same 128 query rows and the same consumer code) load the
// tiles themselves, with the pipeline of the other tensor-core kernels (stream_tiles: every thread
// copies, waits for its copies and meets the others at __syncthreads twice per tile). The barriers
// in the shared memory go unused, and the warpgroups take no turns (TcParams::pingpong is ignored).
template <int D> inline constexpr int kWgmmaSyncForwardThreads = kWgmmaConsumerThreads;

template <typename T, int D, bool kDropout, wgmma::Order kOrder>
__global__ void __launch_bounds__(kWgmmaSyncForwardThreads<D>)
    attention_forward_wgmma_sync_kernel(T* out, float* lse, const T* q, const T* k, const T* v,
                                        const __grid_constant__ TcParams p) {
  using Smem = WgmmaForwardSmem<T, D, kOrder>;
  constexpr int kRows = kWgmmaForwardRows<D>;
  tile::SmemCarver carve(tile::dynamic_smem());
  const Smem smem(carve);

  const BlockWork work = block_work(p, true);
  if (work.b >= p.batch) return;  // past the batch in the grid's last section (tc_grid)
  const int64_t b = work.b;
  const int64_t i0 = work.block * kRows;
  const int group = static_cast<int>(threadIdx.x) / wgmma::kThreads;
  const AttentionOffsets offs = attention_offsets(p.layout, b);
  const int64_t tiles = tile_count(0, block_key_end(p, i0, kRows), kWgmmaKeyTile);
  // Key tile t's K and V into their buffers (zero rows past the last tile), the block's Q rows landing
  // with tile 0. A warpgroup still copies the tiles it skips, with the others.
  const auto fetch = [&](int t) {
    const int64_t j0 = static_cast<int64_t>(t) * kWgmmaKeyTile;
    const int n = t < tiles ? kWgmmaKeyTile : 0;
    stage_cores<T, D, kOrder>(stage_buffer<kWgmmaKBuffers>(smem.k, Smem::kTileElems, t), k + offs.k, p.k_rs, j0,
                              p.S, n, p.wide);
    stage_cores<T, D, kOrder>(stage_buffer<kWgmmaVBuffers>(smem.v, Smem::kTileElems, t), v + offs.v, p.v_rs, j0,
                              p.S, n, p.wide);
  };
  stage_cores<T, D, kOrder>(smem.q, q + offs.q, p.q_rs, i0, p.L, kRows, p.wide);
  tile::commit_copies();

  // The buffers need no release: stream_tiles's barrier after each tile keeps them until every warp
  // is done, and V's extra buffer keeps tile t - 1's V for P V while tile t + kStages - 1 loads.
  // cp.async writes as plain stores do: ordered before the tensor cores' reads by the proxy fence.
  WgmmaForwardConsumer<T, D, kDropout, kOrder> c(smem, group, i0, p, b);
  stream_tiles(tiles, fetch, [] { wgmma::fence_async_smem(); }, [&](int t) {
    const int64_t j0 = static_cast<int64_t>(t) * kWgmmaKeyTile;
    if (j0 >= c.j_end) return;  // the same for the whole warpgroup, and for every later tile
    c.step(t, j0, WgmmaNoHandoff{});
  });
  c.finish(smem, group, i0, out, lse, WgmmaNoHandoff{});
}

}  // namespace kiln::attention_tc
