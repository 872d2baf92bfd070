// What the tensor-core attention kernels share (kernels/cuda/attention_tc_forward.cuh, the forward,
// and attention_tc_backward.cuh): the launch parameters, the block shape, the staging of row tiles
// into shared memory, the visibility and dropout rules, the tile products, the shared-memory count
// and, for the .cu files that launch them, the dispatch over element type and head dim.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
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
};

inline TcParams make_tc_params(const AttentionArgs& a) {
  const bool dropout = a.dropout_p > 0.0;
  return TcParams{a.batch, a.L, a.S, a.q_row_stride, a.k_row_stride, a.v_row_stride, a.o_row_stride,
                  a.dq_row_stride, a.dk_row_stride, a.dv_row_stride, a.layout,
                  static_cast<float>(a.scale), static_cast<float>(a.scale) * kLog2e, a.causal, dropout, a.dropout_p,
                  dropout ? static_cast<float>(1.0 / (1.0 - a.dropout_p)) : 1.f, a.philox};
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

// Copies rows [r0, r0 + rows) of a row-strided [count, D] operand into a [rows, D + pad] shared
// tile, as 32-bit words (two elements), zeros past `count`.
template <typename T, int D>
__device__ __forceinline__ void stage(T* tile, const T* base, int64_t row_stride, int64_t r0, int64_t count, int rows) {
  constexpr int kWords = D / 2, kLd = kLdFor<D>;
  for (int idx = threadIdx.x; idx < rows * kWords; idx += blockDim.x) {
    const int r = idx / kWords, w = idx - r * kWords;
    const int64_t row = r0 + r;
    uint32_t word = 0;
    if (row < count) word = *reinterpret_cast<const uint32_t*>(base + row * row_stride + 2 * w);
    *reinterpret_cast<uint32_t*>(tile + r * kLd + 2 * w) = word;
  }
}

// Whether query i sees key j: both exist, and with causal the key is not after the query.
__device__ __forceinline__ bool visible(const TcParams& p, int64_t i, int64_t j) {
  return i < p.L && j < p.S && (!p.causal || j <= i);
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
