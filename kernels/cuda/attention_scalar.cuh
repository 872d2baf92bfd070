// The CUDA twin's scaled dot-product attention kernels (the twin of kernels/cpu/attention.cpp), in float on
// CUDA cores (float16/bfloat16 at head dims 64 and 128 can go to tensor cores instead, forward and
// backward: kernels/cuda/attention_tc_forward.cuh and attention_tc_backward.cuh, off by default until checked
// on a GPU). A block holds 8 rows of one batch entry, a warp per row, and stages the other side 32
// rows at a time in shared memory, transposed with a padded stride so that lane t reads row t
// without bank conflicts: one key (or query) per lane for scores, one output column per
// lane for the weighted sums. The forward keeps an online softmax; the backward recomputes
// probabilities from the saved log-sum-exp, dq per query row and dk/dv per key row, each a sum in
// a fixed order (no atomics). All three kernels compute a score with the same instruction sequence.
//
// In a header so that the CPU tests compile the kernels too, on the emulator of kernels/simt/simt.h
// (tests/kernels/test_attention_simt.cpp); attention.cu launches them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cuda/device_math.cuh"

namespace kiln::attention_scalar {

using cuda_detail::dynamic_smem;
using cuda_detail::from_f32;
using cuda_detail::load_as;
using cuda_detail::min_i64;
using cuda_detail::to_f32;
using cuda_detail::warp_allreduce_max;
using cuda_detail::warp_allreduce_sum;

constexpr int kRows = 8;          // rows (warps) per block
constexpr int kThreads = kRows * 32;
constexpr int kTile = 32;         // staged rows of the other side: one per lane
constexpr int kPad = kTile + 1;   // transposed tiles: element (row t, column e) at [e * kPad + t]
constexpr int64_t kMaxGrid = int64_t{1} << 20;  // blocks: a grid-stride loop takes the rest

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int round4(int64_t v) { return static_cast<int>((v + 3) / 4 * 4); }

// AttentionArgs for the device: by value, no host pointers.
struct Params {
  int64_t batch, L, S, E, Ev;
  int E4, Ev4;  // E and Ev rounded up to a multiple of 4: staged rows are zero-padded to float4s
  int64_t q_rs, k_rs, v_rs;
  int64_t o_rs, dq_rs, dk_rs, dv_rs;  // out and dout, dq, dk, dv
  const void* mask;
  DType mask_dtype;
  int64_t mask_rs, mask_cs;
  bool causal;
  float scale;
  bool dropout;
  double dropout_p;
  float keep_scale;  // 1 / (1 - p)
  PhiloxState philox;
  AttentionBatch layout;
};

// Thread 0 computes batch entry b's offsets into shared memory; the caller synchronizes.
__device__ inline void batch_offsets(const Params& p, int64_t b, AttentionOffsets* out) {
  *out = attention_offsets(p.layout, b);
}

// Dot product of a staged row (float4-aligned, zero-padded to n4) with row `lane` of a transposed
// tile. Every kernel forms scores through this, in this order of e.
__device__ __forceinline__ float dot_row_tile(const float* row, const float* tile, int n4, int lane) {
  float d = 0.f;
  for (int e = 0; e < n4; e += 4) {
    const float4 r = *reinterpret_cast<const float4*>(row + e);
    d = fmaf(r.x, tile[(e + 0) * kPad + lane], d);
    d = fmaf(r.y, tile[(e + 1) * kPad + lane], d);
    d = fmaf(r.z, tile[(e + 2) * kPad + lane], d);
    d = fmaf(r.w, tile[(e + 3) * kPad + lane], d);
  }
  return d;
}

// The score of (i, j) from its dot product: scaled, then masked as on the CPU; -inf when hidden.
// Explicit roundings keep nvcc from fusing the scale and the mask into one FMA differently in
// different kernels.
__device__ __forceinline__ float masked_score(const Params& p, int64_t mask_base, int64_t i, int64_t j, float dot) {
  if (p.causal && j > i) return -INFINITY;
  float s = __fmul_rn(dot, p.scale);
  if (p.mask) {
    const int64_t mo = mask_base + i * p.mask_rs + j * p.mask_cs;
    if (p.mask_dtype == DType::Bool) {
      if (static_cast<const uint8_t*>(p.mask)[mo] == 0) return -INFINITY;
    } else {
      s = __fadd_rn(s, load_as<float>(p.mask, p.mask_dtype, mo));
    }
  }
  return s;
}

// Dropout's factor for (b, i, j): 1 without dropout, else 1 / (1 - p) or 0 (attention_keep).
__device__ __forceinline__ float keep_factor(const Params& p, int64_t b, int64_t i, int64_t j) {
  if (!p.dropout) return 1.f;
  const uint64_t idx = static_cast<uint64_t>((b * p.L + i) * p.S + j);
  // The seed and offset are resolved here rather than once per kernel: they are two cached loads,
  // and a captured graph's values are only known when the kernel runs.
  return attention_keep(philox_resolve(p.philox), idx, p.dropout_p) ? p.keep_scale : 0.f;
}

// Stages `n` elements of a row (row-contiguous in global memory) as floats, zero-padded to n4.
template <typename S>
__device__ __forceinline__ void stage_row(float* dst, const S* src, int64_t n, int n4, bool valid, int lane) {
  for (int e = lane; e < n4; e += 32) dst[e] = (valid && e < n) ? to_f32(src[e]) : 0.f;
}

// Stages rows r0 .. r0 + 31 (of `count`) of a row-strided operand transposed: tile[e * kPad + t].
template <typename S>
__device__ __forceinline__ void stage_tile_t(float* tile, const S* base, int64_t row_stride, int64_t r0,
                                             int64_t count, int64_t n, int n4) {
  const int total = kTile * n4;
  for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
    const int t = idx / n4, e = idx - t * n4;
    const int64_t r = r0 + t;
    tile[e * kPad + t] = (r < count && e < n) ? to_f32(base[r * row_stride + e]) : 0.f;
  }
}

// --- forward -------------------------------------------------------------------------------------

// Shared memory (floats): q rows [kRows][E4] | K tile^T [E4][kPad] | V tile [kTile][Ev] |
// dropped probabilities [kRows][kTile] | output accumulators [kRows][Ev].
inline size_t forward_smem(const Params& p) {
  return sizeof(float) * static_cast<size_t>(kRows * p.E4 + p.E4 * kPad + kTile * p.Ev + kRows * kTile + kRows * p.Ev);
}

template <typename S>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(S* out, float* lse, const S* q, const S* k, const S* v,
                             const __grid_constant__ Params p) {
  float* smem = reinterpret_cast<float*>(dynamic_smem());
  float* q_s = smem;
  float* k_t = q_s + kRows * p.E4;
  float* v_s = k_t + p.E4 * kPad;
  float* p_s = v_s + kTile * p.Ev;
  float* acc_s = p_s + kRows * kTile;
  KILN_SHARED(AttentionOffsets, offs);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row_blocks = ceil_div(p.L, kRows);
  for (int64_t blk = blockIdx.x; blk < p.batch * row_blocks; blk += gridDim.x) {
    const int64_t b = blk / row_blocks, i0 = (blk % row_blocks) * kRows;
    const int64_t i = i0 + warp;
    const bool active = i < p.L;
    __syncthreads();  // the previous block-row is done with shared memory
    if (threadIdx.x == 0) batch_offsets(p, b, &offs);
    __syncthreads();
    float* q_row = q_s + warp * p.E4;
    float* acc = acc_s + warp * p.Ev;
    float* pw = p_s + warp * kTile;
    stage_row(q_row, q + offs.q + i * p.q_rs, p.E, p.E4, active, lane);
    for (int e = lane; e < p.Ev; e += 32) acc[e] = 0.f;
    float m_run = -INFINITY, l_run = 0.f;
    const int64_t i_last = min_i64(p.L - 1, i0 + kRows - 1);
    const int64_t j_end = p.causal ? min_i64(p.S, i_last + 1) : p.S;
    for (int64_t j0 = 0; j0 < j_end; j0 += kTile) {
      __syncthreads();  // every warp is done with the previous tile
      stage_tile_t(k_t, k + offs.k, p.k_rs, j0, p.S, p.E, p.E4);
      for (int idx = threadIdx.x; idx < kTile * p.Ev; idx += blockDim.x) {
        const int t = idx / static_cast<int>(p.Ev);
        const int64_t j = j0 + t;
        v_s[idx] = j < p.S ? to_f32(v[offs.v + j * p.v_rs + (idx - t * p.Ev)]) : 0.f;
      }
      __syncthreads();
      if (!active) continue;
      const int64_t j = j0 + lane;
      float sc = -INFINITY;
      if (j < p.S) sc = masked_score(p, offs.mask, i, j, dot_row_tile(q_row, k_t, p.E4, lane));
      const float tile_max = warp_allreduce_max(sc);
      // Nothing visible in this tile: the state is unchanged. The max skips NaN, so a tile whose
      // visible scores are all NaN is told apart, and takes its NaN through the sums as the CPU does.
      if (tile_max == -INFINITY && warp_allreduce_max(::isnan(sc) ? 1.f : 0.f) == 0.f) continue;
      const float m_new = fmaxf(m_run, tile_max);
      const float alpha = expf(m_run - m_new);  // 0 while m_run is -inf (the sums are still 0)
      const float pj = expf(sc - m_new);
      l_run = l_run * alpha + warp_allreduce_sum(pj);
      pw[lane] = pj == 0.f ? 0.f : pj * keep_factor(p, b, i, j);
      m_run = m_new;
      __syncwarp();
      for (int e = lane; e < p.Ev; e += 32) {
        float a = acc[e] * alpha;
        for (int t = 0; t < kTile; ++t) {
          const float w = pw[t];
          if (w != 0.f) a = fmaf(w, v_s[t * p.Ev + e], a);  // as the CPU, a zero weight adds nothing
        }
        acc[e] = a;
      }
      __syncwarp();
    }
    if (!active) continue;
    const int64_t row = b * p.L + i;
    S* o_row = out + offs.o + i * p.o_rs;
    if (m_run == -INFINITY && l_run == 0.f) {  // no visible key: zero output, lse = -inf (NaN scores: NaN)
      for (int e = lane; e < p.Ev; e += 32) o_row[e] = from_f32<S>(0.f);
      if (lane == 0) lse[row] = -INFINITY;
    } else {
      for (int e = lane; e < p.Ev; e += 32) o_row[e] = from_f32<S>(acc[e] / l_run);
      if (lane == 0) lse[row] = m_run + logf(l_run);
    }
  }
}

// --- backward: dq (and D = dO . O) per query row ------------------------------------------------------

// Shared memory (floats): q rows [kRows][E4] | dO rows [kRows][Ev4] | K tile^T [E4][kPad] |
// V tile^T [Ev4][kPad] | dS [kRows][kTile] | dq accumulators [kRows][E].
inline size_t backward_q_smem(const Params& p) {
  return sizeof(float) * static_cast<size_t>(kRows * p.E4 + kRows * p.Ev4 + p.E4 * kPad + p.Ev4 * kPad +
                                             kRows * kTile + kRows * p.E);
}

template <typename S>
__global__ void __launch_bounds__(kThreads)
    attention_backward_q_kernel(S* dq, float* d_rows, const S* dout, const S* out, const float* lse, const S* q,
                                const S* k, const S* v, const __grid_constant__ Params p) {
  float* smem = reinterpret_cast<float*>(dynamic_smem());
  float* q_s = smem;
  float* do_s = q_s + kRows * p.E4;
  float* k_t = do_s + kRows * p.Ev4;
  float* v_t = k_t + p.E4 * kPad;
  float* ds_s = v_t + p.Ev4 * kPad;
  float* acc_s = ds_s + kRows * kTile;
  KILN_SHARED(AttentionOffsets, offs);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row_blocks = ceil_div(p.L, kRows);
  for (int64_t blk = blockIdx.x; blk < p.batch * row_blocks; blk += gridDim.x) {
    const int64_t b = blk / row_blocks, i0 = (blk % row_blocks) * kRows;
    const int64_t i = i0 + warp;
    const bool active = i < p.L;
    const int64_t row = b * p.L + i;
    __syncthreads();
    if (threadIdx.x == 0) batch_offsets(p, b, &offs);
    __syncthreads();
    float* q_row = q_s + warp * p.E4;
    float* do_row = do_s + warp * p.Ev4;
    float* acc = acc_s + warp * p.E;
    float* dsw = ds_s + warp * kTile;
    stage_row(q_row, q + offs.q + i * p.q_rs, p.E, p.E4, active, lane);
    const int64_t o_off = offs.o + i * p.o_rs;  // row i of out and dout
    stage_row(do_row, dout + o_off, p.Ev, p.Ev4, active, lane);
    for (int e = lane; e < p.E; e += 32) acc[e] = 0.f;
    // D = dO . O, the row's sum of P * dP, reused by the dk/dv kernel through d_rows.
    float d = 0.f;
    if (active) {
      for (int e = lane; e < p.Ev; e += 32) d += to_f32(dout[o_off + e]) * to_f32(out[o_off + e]);
    }
    d = warp_allreduce_sum(d);
    if (active && lane == 0) d_rows[row] = d;
    const float l = active ? lse[row] : -INFINITY;
    const int64_t i_last = min_i64(p.L - 1, i0 + kRows - 1);
    const int64_t j_end = p.causal ? min_i64(p.S, i_last + 1) : p.S;
    for (int64_t j0 = 0; j0 < j_end; j0 += kTile) {
      __syncthreads();
      stage_tile_t(k_t, k + offs.k, p.k_rs, j0, p.S, p.E, p.E4);
      stage_tile_t(v_t, v + offs.v, p.v_rs, j0, p.S, p.Ev, p.Ev4);
      __syncthreads();
      if (!active || l == -INFINITY) continue;  // no visible key: every P is 0, and so is dq
      const int64_t j = j0 + lane;
      float ds = 0.f;
      if (j < p.S) {
        const float sc = masked_score(p, offs.mask, i, j, dot_row_tile(q_row, k_t, p.E4, lane));
        const float pij = sc == -INFINITY ? 0.f : expf(sc - l);
        const float dp = dot_row_tile(do_row, v_t, p.Ev4, lane);  // dO_i . V_j
        ds = pij * (dp * keep_factor(p, b, i, j) - d);
      }
      dsw[lane] = ds;
      __syncwarp();
      for (int e = lane; e < p.E; e += 32) {
        float a = acc[e];
        for (int t = 0; t < kTile; ++t) a = fmaf(dsw[t], k_t[e * kPad + t], a);
        acc[e] = a;
      }
      __syncwarp();
    }
    if (!active) continue;
    S* dq_row = dq + offs.dq + i * p.dq_rs;
    for (int e = lane; e < p.E; e += 32) dq_row[e] = from_f32<S>(acc[e] * p.scale);
  }
}

// --- backward: dk and dv per key row ---------------------------------------------------------------

// Shared memory (floats): k rows [kRows][E4] | v rows [kRows][Ev4] | Q tile^T [E4][kPad] |
// dO tile^T [Ev4][kPad] | lse, D of the tile's queries [2][kTile] | dS, dropped P [2][kRows][kTile] |
// dk accumulators [kRows][E] | dv accumulators [kRows][Ev].
inline size_t backward_kv_smem(const Params& p) {
  return sizeof(float) * static_cast<size_t>(kRows * p.E4 + kRows * p.Ev4 + p.E4 * kPad + p.Ev4 * kPad + 2 * kTile +
                                             2 * kRows * kTile + kRows * p.E + kRows * p.Ev);
}

template <typename S>
__global__ void __launch_bounds__(kThreads)
    attention_backward_kv_kernel(S* dk, S* dv, const S* dout, const float* lse, const float* d_rows, const S* q,
                                 const S* k, const S* v, const __grid_constant__ Params p) {
  float* smem = reinterpret_cast<float*>(dynamic_smem());
  float* k_s = smem;
  float* v_s = k_s + kRows * p.E4;
  float* q_t = v_s + kRows * p.Ev4;
  float* do_t = q_t + p.E4 * kPad;
  float* lse_s = do_t + p.Ev4 * kPad;
  float* d_s = lse_s + kTile;
  float* ds_s = d_s + kTile;
  float* pd_s = ds_s + kRows * kTile;
  float* acc_k_s = pd_s + kRows * kTile;
  float* acc_v_s = acc_k_s + kRows * p.E;
  KILN_SHARED(AttentionOffsets, offs);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row_blocks = ceil_div(p.S, kRows);
  for (int64_t blk = blockIdx.x; blk < p.batch * row_blocks; blk += gridDim.x) {
    const int64_t b = blk / row_blocks, j_first = (blk % row_blocks) * kRows;
    const int64_t j = j_first + warp;
    const bool active = j < p.S;
    __syncthreads();
    if (threadIdx.x == 0) batch_offsets(p, b, &offs);
    __syncthreads();
    float* k_row = k_s + warp * p.E4;
    float* v_row = v_s + warp * p.Ev4;
    float* acc_k = acc_k_s + warp * p.E;
    float* acc_v = acc_v_s + warp * p.Ev;
    float* dsw = ds_s + warp * kTile;
    float* pdw = pd_s + warp * kTile;
    stage_row(k_row, k + offs.k + j * p.k_rs, p.E, p.E4, active, lane);
    stage_row(v_row, v + offs.v + j * p.v_rs, p.Ev, p.Ev4, active, lane);
    for (int e = lane; e < p.E; e += 32) acc_k[e] = 0.f;
    for (int e = lane; e < p.Ev; e += 32) acc_v[e] = 0.f;
    // Causal: queries before the block's first key see none of its keys.
    const int64_t i_begin = p.causal ? j_first / kTile * kTile : 0;
    for (int64_t i0 = i_begin; i0 < p.L; i0 += kTile) {
      __syncthreads();
      stage_tile_t(q_t, q + offs.q, p.q_rs, i0, p.L, p.E, p.E4);
      stage_tile_t(do_t, dout + offs.o, p.o_rs, i0, p.L, p.Ev, p.Ev4);
      if (threadIdx.x < kTile) {
        const int64_t i = i0 + threadIdx.x;
        lse_s[threadIdx.x] = i < p.L ? lse[b * p.L + i] : -INFINITY;
        d_s[threadIdx.x] = i < p.L ? d_rows[b * p.L + i] : 0.f;
      }
      __syncthreads();
      if (!active) continue;
      const int64_t i = i0 + lane;
      float ds = 0.f, pd = 0.f;
      const float l = lse_s[lane];
      // Keys past a causal query's reach take no share of its terms, not even 0 * a NaN row's D (as
      // the CPU, which stops at the visible end).
      if (i < p.L && l != -INFINITY && !(p.causal && j > i)) {
        const float sc = masked_score(p, offs.mask, i, j, dot_row_tile(k_row, q_t, p.E4, lane));
        const float pij = sc == -INFINITY ? 0.f : expf(sc - l);
        const float dp = dot_row_tile(v_row, do_t, p.Ev4, lane);  // dO_i . V_j
        const float keep = keep_factor(p, b, i, j);
        ds = pij * (dp * keep - d_s[lane]);
        pd = pij * keep;
      }
      dsw[lane] = ds;
      pdw[lane] = pd;
      __syncwarp();
      for (int e = lane; e < p.E; e += 32) {
        float a = acc_k[e];
        for (int t = 0; t < kTile; ++t) a = fmaf(dsw[t], q_t[e * kPad + t], a);
        acc_k[e] = a;
      }
      for (int e = lane; e < p.Ev; e += 32) {
        float a = acc_v[e];
        for (int t = 0; t < kTile; ++t) a = fmaf(pdw[t], do_t[e * kPad + t], a);
        acc_v[e] = a;
      }
      __syncwarp();
    }
    if (!active) continue;
    S* dk_row = dk + offs.dk + j * p.dk_rs;
    S* dv_row = dv + offs.dv + j * p.dv_rs;
    for (int e = lane; e < p.E; e += 32) dk_row[e] = from_f32<S>(acc_k[e] * p.scale);
    for (int e = lane; e < p.Ev; e += 32) dv_row[e] = from_f32<S>(acc_v[e]);
  }
}

// --- host side -----------------------------------------------------------------------------------

inline Params make_params(const AttentionArgs& a) {
  Params p{};
  p.batch = a.batch;
  p.L = a.L;
  p.S = a.S;
  p.E = a.E;
  p.Ev = a.Ev;
  p.E4 = round4(a.E);
  p.Ev4 = round4(a.Ev);
  p.q_rs = a.q_row_stride;
  p.k_rs = a.k_row_stride;
  p.v_rs = a.v_row_stride;
  p.o_rs = a.o_row_stride;
  p.dq_rs = a.dq_row_stride;
  p.dk_rs = a.dk_row_stride;
  p.dv_rs = a.dv_row_stride;
  p.mask = a.mask;
  p.mask_dtype = a.mask_dtype;
  p.mask_rs = a.mask_row_stride;
  p.mask_cs = a.mask_col_stride;
  p.causal = a.causal;
  p.scale = static_cast<float>(a.scale);
  p.dropout = a.dropout_p > 0;
  p.dropout_p = a.dropout_p;
  p.keep_scale = a.dropout_p > 0 ? static_cast<float>(1.0 / (1.0 - a.dropout_p)) : 1.f;
  p.philox = a.philox;
  p.layout = a.layout;
  return p;
}

// Blocks for `rows` rows of every batch entry, kRows a block, capped.
inline unsigned grid_for_rows(int64_t batch, int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(batch * ceil_div(rows, kRows), 1, kMaxGrid));
}

}  // namespace kiln::attention_scalar
