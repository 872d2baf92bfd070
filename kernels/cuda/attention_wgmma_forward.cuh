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
// functions (online_softmax, write_forward): a warp's accumulator tiles sit where mma.sync's do.
//
// The instruction is asynchronous; the kernel issues each product as one group and waits for it
// before touching its accumulators (wgmma.cuh says how). Not yet done: overlapping the next tile's
// loads and products with the softmax (FlashAttention-3's pipelining, with TMA loads and warp
// specialization), and swizzled layouts. This first version has the same structure as the mma.sync
// kernel, so that the two can be compared on one GPU run.
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

// The shared memory: the block's query rows and one key tile each of K and V, all staged [rows, D]
// (wgmma::stage_offset), each 128-byte aligned (a core matrix). A warpgroup's 64 rows of Q are
// rows 64 g .. 64 g + 63 of the staged tile, 64 D elements after the previous warpgroup's.
template <typename T, int D> struct WgmmaForwardSmem {
  T* q;
  T* k;
  T* v;
  KILN_HD explicit WgmmaForwardSmem(tile::SmemCarver& c)
      : q(c.take<T>(kWgmmaForwardRows<D> * D, wgmma::kCoreBytes)),
        k(c.take<T>(kWgmmaKeyTile * D, wgmma::kCoreBytes)),
        v(c.take<T>(kWgmmaKeyTile * D, wgmma::kCoreBytes)) {}
};

// 16 bytes, for one store of a core matrix's row.
struct alignas(16) Words4 {
  uint32_t w[4];
};

// Copies rows [r0, r0 + rows) of a row-strided [count, D] operand into a staged [rows, D] tile, zeros
// past `count`. Each thread moves 16 bytes of one row (read as four 32-bit words: the operands are
// only known to be 4-byte aligned). Consecutive threads take consecutive rows of one core matrix, so
// 8 of them store its 128 contiguous bytes: no bank conflicts.
template <typename T, int D>
__device__ __forceinline__ void stage_cores(T* tile, const T* base, int64_t row_stride, int64_t r0, int64_t count,
                                            int rows) {
  constexpr int kPieces = D / wgmma::kCore;  // 16-byte pieces of a row
  for (int idx = threadIdx.x; idx < rows * kPieces; idx += blockDim.x) {
    const int r_in = idx % wgmma::kCore, rest = idx / wgmma::kCore;
    const int piece = rest % kPieces, r = rest / kPieces * wgmma::kCore + r_in;
    const int64_t row = r0 + r;
    Words4 x{};
    if (row < count) {
      const T* src = base + row * row_stride + piece * wgmma::kCore;
#pragma unroll
      for (int w = 0; w < 4; ++w) x.w[w] = tile::load_pair(src + 2 * w);
    }
    *reinterpret_cast<Words4*>(tile + wgmma::stage_offset(r, piece * wgmma::kCore, D)) = x;
  }
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
  const WgmmaForwardSmem<T, D> smem(carve);

  const int64_t b = blockIdx.y;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int group = kWgmmaForwardGroups<D> == 1 ? 0 : static_cast<int>(threadIdx.x) / wgmma::kThreads;
  const int64_t group_row0 = i0 + group * wgmma::kM;  // this warpgroup's first query row
  const AttentionOffsets offs = attention_offsets(p.layout, b);
  const PhiloxState st = kDropout ? philox_resolve(p.philox) : PhiloxState{};

  // Q's rows along M and K's along N, both with the head dim along K; V's rows (keys) along K and
  // the head dim along N.
  const uint64_t q_desc = wgmma::rows_by_k(wgmma::smem_address(smem.q + group * wgmma::kM * D), D);
  const uint64_t k_desc = wgmma::rows_by_k(wgmma::smem_address(smem.k), D);
  const uint64_t v_desc = wgmma::rows_by_n(wgmma::smem_address(smem.v), D);
  stage_cores<T, D>(smem.q, q + offs.q, p.q_rs, i0, p.L, kRows);

  CTile acc[kOutTiles];
#pragma unroll
  for (int t = 0; t < kOutTiles; ++t) fill(acc[t], 0.f);
  RowState rows(i0);  // thread t's rows: 16 per warp, the block's warps in order

  // The block streams the key tiles its last row sees; a warpgroup skips those past its own last
  // row (with causal), though it still stages them with the others.
  const int64_t j_end = block_key_end(p, i0, kRows);
  const int64_t group_j_end = block_key_end(p, group_row0, wgmma::kM);
  for (int64_t j0 = 0; j0 < j_end; j0 += kWgmmaKeyTile) {
    __syncthreads();  // every warp has waited for its products that read the previous tile
    stage_cores<T, D>(smem.k, k + offs.k, p.k_rs, j0, p.S, kWgmmaKeyTile);
    stage_cores<T, D>(smem.v, v + offs.v, p.v_rs, j0, p.S, kWgmmaKeyTile);
    wgmma::fence_async_smem();  // the stores (and Q's, before the first tile) before the tensor cores read
    __syncthreads();
    if (j0 >= group_j_end) continue;  // the same for the whole warpgroup

    // S = Q K^T: D / 16 steps along the head dim, the first overwriting s.
    CTile s[kScoreTiles];
    wgmma::fence();
#pragma unroll
    for (int d = 0; d < D / wgmma::kK; ++d) {
      const uint32_t step = static_cast<uint32_t>(d) * wgmma::k_step_bytes();
      wgmma::mma_ss<T, kWgmmaKeyTile>(s, wgmma::advance(q_desc, step), wgmma::advance(k_desc, step), d > 0);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::settle(s);

    online_softmax<kDropout>(s, acc, rows, p, st, b, j0);

    // acc += P V, 16 keys at a time: two score tiles side by side are one A operand. All of P is
    // converted first: the instructions read their A registers until the wait, so none may be reused
    // for the next one's.
    ATile<T> pa[kScoreTiles / 2];
#pragma unroll
    for (int kk = 0; kk < kScoreTiles / 2; ++kk) a_from_c(pa[kk], s[2 * kk], s[2 * kk + 1]);
    wgmma::fence();  // the rescaled accumulators and P written before the products read them
#pragma unroll
    for (int kk = 0; kk < kScoreTiles / 2; ++kk) {
      const uint32_t step = static_cast<uint32_t>(kk) * wgmma::row_step_bytes(D);
      wgmma::mma_rs<T, D, true>(acc, pa[kk], wgmma::advance(v_desc, step), true);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::settle(acc);
  }

  write_forward(out, lse, p, b, rows, acc);
}

}  // namespace kiln::attention_tc
