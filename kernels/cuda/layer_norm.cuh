// layer_norm's CUDA kernels (the CUDA twins of kernels/cpu/layer_norm.cpp), launched by
// kernels/cuda/layer_norm.cu, and the host functions that choose their launches. Rows are
// normalized by a warp or a block (rows.cuh); the weight and bias gradients, sums over all rows,
// write per-chunk partials to scratch memory and a second kernel adds them in a fixed order (32
// lanes of strided chunks, then the lanes in order): no float atomics, the same bits every run.
//
// The forward and the input gradient pass over a row two or three times. Rows that fit in the
// registers of their threads (RowCache: a multiple of 16 bytes, up to 16384 values, 16-byte
// aligned) are read from memory once, in 16-byte vectors, and written once; the others run the
// plain kernels, which read the row again on each pass (from L1/L2 when short).
//
// Host-compilable: the CPU tests run these kernels on the emulator of CUDA's threads
// (tests/kernels/test_layer_norm_simt.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/rows.cuh"
#include "kernels/dtype.h"

namespace kiln::layer_norm_cuda {

template <typename S, bool kBlockRow>
__global__ void layer_norm_forward_kernel(S* out, float* mean, float* rstd, const S* x, const void* weight,
                                          const void* bias, DType pdt, int64_t rows, int64_t n, float eps) {
  using G = RowGroup<kBlockRow>;
  for (int64_t r = G::first(); r < rows; r += G::step()) {
    const S* xr = x + r * n;
    // Two passes (mean, then squared deviations) as the CPU: no cancellation. A sum that overflows (a
    // row of values near float32's largest) is taken again over x / n, whose sum cannot, as the CPU.
    float s = 0.f;
    for (int64_t j = G::rank(); j < n; j += G::size()) s += to_f32(xr[j]);
    float m = row_sum<kBlockRow>(s) / static_cast<float>(n);
    if (!::isfinite(m)) {  // the same for the whole row group: row_sum gives every thread the sum
      s = 0.f;
      for (int64_t j = G::rank(); j < n; j += G::size()) s += to_f32(xr[j]) / static_cast<float>(n);
      m = row_sum<kBlockRow>(s);
    }
    float ss = 0.f;
    for (int64_t j = G::rank(); j < n; j += G::size()) {
      const float d = to_f32(xr[j]) - m;
      ss += d * d;
    }
    const float rs = 1.f / sqrtf(row_sum<kBlockRow>(ss) / static_cast<float>(n) + eps);
    if (G::rank() == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    for (int64_t j = G::rank(); j < n; j += G::size()) {
      const float w = param_or(weight, pdt, j, 1.f), b = param_or(bias, pdt, j, 0.f);
      out[r * n + j] = from_f32<S>((to_f32(xr[j]) - m) * rs * w + b);
    }
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight, per row.
template <typename S, bool kBlockRow>
__global__ void layer_norm_backward_dx_kernel(S* dx, const S* dout, const S* x, const float* mean, const float* rstd,
                                              const void* weight, DType pdt, int64_t rows, int64_t n) {
  using G = RowGroup<kBlockRow>;
  const float inv_n = 1.f / static_cast<float>(n);
  for (int64_t r = G::first(); r < rows; r += G::step()) {
    const S* xr = x + r * n;
    const S* dyr = dout + r * n;
    const float m = mean[r], rs = rstd[r];
    float sg = 0.f, sgx = 0.f;
    for (int64_t j = G::rank(); j < n; j += G::size()) {
      const float g = to_f32(dyr[j]) * param_or(weight, pdt, j, 1.f);
      sg += g;
      sgx += g * (to_f32(xr[j]) - m) * rs;
    }
    sg = row_sum<kBlockRow>(sg) * inv_n;
    sgx = row_sum<kBlockRow>(sgx) * inv_n;
    for (int64_t j = G::rank(); j < n; j += G::size()) {
      const float g = to_f32(dyr[j]) * param_or(weight, pdt, j, 1.f);
      const float xhat = (to_f32(xr[j]) - m) * rs;
      dx[r * n + j] = from_f32<S>(rs * (g - sg - xhat * sgx));
    }
  }
}

// A weight or bias element in the cached kernels: float32 or the input's dtype; `fallback` when absent.
template <typename S> __device__ __forceinline__ float ln_param(const void* p, bool f32, int64_t j, float fallback) {
  if (p == nullptr) return fallback;
  return f32 ? static_cast<const float*>(p)[j] : to_f32(static_cast<const S*>(p)[j]);
}

// The forward with the row in registers: the same two-pass statistics, one read of x, one write.
template <typename S, bool kBlockRow>
__global__ void __launch_bounds__(RowCache<S>::kMaxBlock)
    layer_norm_forward_cached_kernel(S* out, float* mean, float* rstd, const S* x, const void* weight,
                                     const void* bias, bool params_f32, int64_t rows, int64_t n, float eps) {
  using G = RowGroup<kBlockRow>;
  using C = RowCache<S>;
  const int64_t vectors = n / C::kVec;
  for (int64_t r = G::first(); r < rows; r += G::step()) {
    C c;
    c.template load<kBlockRow>(x + r * n, vectors);
    float s = 0.f;  // slots past the row's end hold zeros
#pragma unroll
    for (int k = 0; k < C::kSlots; ++k) {
#pragma unroll
      for (int e = 0; e < C::kVec; ++e) s += c.v[k][e];
    }
    float m = row_sum<kBlockRow>(s) / static_cast<float>(n);
    if (!::isfinite(m)) {  // an overflowing sum, again over x / n (as the plain kernel)
      s = 0.f;
#pragma unroll
      for (int k = 0; k < C::kSlots; ++k) {
#pragma unroll
        for (int e = 0; e < C::kVec; ++e) s += c.v[k][e] / static_cast<float>(n);
      }
      m = row_sum<kBlockRow>(s);
    }
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < C::kSlots; ++k) {
      if (C::template slot<kBlockRow>(k) >= vectors) continue;
#pragma unroll
      for (int e = 0; e < C::kVec; ++e) {
        const float d = c.v[k][e] - m;
        ss += d * d;
      }
    }
    const float rs = 1.f / sqrtf(row_sum<kBlockRow>(ss) / static_cast<float>(n) + eps);
    if (G::rank() == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    c.template store<kBlockRow>(out + r * n, vectors, [&](int k, int e, int64_t j) {
      return (c.v[k][e] - m) * rs * ln_param<S>(weight, params_f32, j, 1.f) + ln_param<S>(bias, params_f32, j, 0.f);
    });
  }
}

// The input gradient with x and dout in registers: each read once, dx written once.
template <typename S, bool kBlockRow>
__global__ void __launch_bounds__(RowCache<S>::kMaxBlock)
    layer_norm_backward_dx_cached_kernel(S* dx, const S* dout, const S* x, const float* mean, const float* rstd,
                                         const void* weight, bool params_f32, int64_t rows, int64_t n) {
  using G = RowGroup<kBlockRow>;
  using C = RowCache<S>;
  const int64_t vectors = n / C::kVec;
  const float inv_n = 1.f / static_cast<float>(n);
  for (int64_t r = G::first(); r < rows; r += G::step()) {
    C xs, gs;  // become xhat and g = dout * weight
    xs.template load<kBlockRow>(x + r * n, vectors);
    gs.template load<kBlockRow>(dout + r * n, vectors);
    const float m = mean[r], rs = rstd[r];
    float sg = 0.f, sgx = 0.f;
#pragma unroll
    for (int k = 0; k < C::kSlots; ++k) {
      const int64_t i = C::template slot<kBlockRow>(k);
      if (i >= vectors) continue;
#pragma unroll
      for (int e = 0; e < C::kVec; ++e) {
        const float g = gs.v[k][e] * ln_param<S>(weight, params_f32, i * C::kVec + e, 1.f);
        const float xhat = (xs.v[k][e] - m) * rs;
        gs.v[k][e] = g;
        xs.v[k][e] = xhat;
        sg += g;
        sgx += g * xhat;
      }
    }
    sg = row_sum<kBlockRow>(sg) * inv_n;
    sgx = row_sum<kBlockRow>(sgx) * inv_n;
    xs.template store<kBlockRow>(dx + r * n, vectors, [&](int k, int e, int64_t) {
      return rs * (gs.v[k][e] - sg - xs.v[k][e] * sgx);
    });
  }
}

// Which kernel normalizes rows of n, and how it is launched: a warp per row up to kWarpRowMax
// values, a block per row above (rows.cuh); the row kept in registers (the cached kernels) when
// every row pointer in `rows_at` fits RowCache and the parameters, if any, are float32 or the
// input's dtype; the plain kernels otherwise.
struct RowPlan {
  bool cached = false, block_row = false, params_f32 = false;
  unsigned grid = 1;
  int threads = 0;
};

template <typename S>
RowPlan row_plan(int64_t rows, int64_t n, DType x_dtype, DType param_dtype, bool has_params,
                 std::initializer_list<const void*> rows_at) {
  using C = RowCache<S>;
  const RowLaunch rl = row_launch(rows, n);
  RowPlan p;
  p.block_row = rl.block_row;
  p.grid = rl.grid;
  p.threads = rl.threads;
  p.params_f32 = param_dtype == DType::Float32;
  if (has_params && !p.params_f32 && param_dtype != x_dtype) return p;
  for (const void* row : rows_at) {
    if (!C::fits(row, n, C::kMaxBlock)) return p;
  }
  p.cached = true;
  if (p.block_row) p.threads = C::block_threads(n);  // a warp's 32 lanes hold up to 1024 values
  return p;
}

// dweight/dbias, pass 1: block (32 columns x 8 row lanes) sums rows [chunk * chunk_rows, ...) of 32
// columns; the 8 lanes are added in lane order into partials [chunk][n].
constexpr int kLnCols = 32, kLnLanes = 8;
constexpr int64_t kLnMaxChunks = 256;
constexpr int64_t kLnMinChunkRows = 64;

template <typename S>
__global__ void layer_norm_param_partials_kernel(float* part_w, float* part_b, const S* dout, const S* x,
                                                 const float* mean, const float* rstd, int64_t rows, int64_t n,
                                                 int64_t chunk_rows) {
  KILN_SHARED(float, sw, [kLnLanes][kLnCols + 1]);
  KILN_SHARED(float, sb, [kLnLanes][kLnCols + 1]);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kLnCols + tx;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_rows, r1 = cuda_detail::min_i64(rows, r0 + chunk_rows);
  float pw = 0.f, pb = 0.f;
  if (j < n) {
    for (int64_t r = r0 + ty; r < r1; r += kLnLanes) {
      const float g = to_f32(dout[r * n + j]);
      pw += g * (to_f32(x[r * n + j]) - mean[r]) * rstd[r];
      pb += g;
    }
  }
  sw[ty][tx] = pw;
  sb[ty][tx] = pb;
  __syncthreads();
  if (ty == 0 && j < n) {
    float aw = sw[0][tx], ab = sb[0][tx];
    for (int k = 1; k < kLnLanes; ++k) {
      aw += sw[k][tx];
      ab += sb[k][tx];
    }
    part_w[chunk * n + j] = aw;
    part_b[chunk * n + j] = ab;
  }
}

// Pass 2: block (32 columns x 32 chunk lanes); lane k adds chunks k, k + 32, ... in order, then
// lane 0 adds the 32 lane sums in lane order. A fixed order for given sizes, and 32 times fewer
// dependent steps per column than one thread walking every chunk (GPT-2's 768 columns were 3
// blocks, each thread adding 256 partials of each kind).
constexpr int kLnFinishLanes = 32;

__global__ void __launch_bounds__(kLnCols * kLnFinishLanes)
    layer_norm_param_finish_kernel(void* dweight, void* dbias, DType pdt, const float* part_w, const float* part_b,
                                   int64_t chunks, int64_t n) {
  KILN_SHARED(float, sw, [kLnFinishLanes][kLnCols + 1]);
  KILN_SHARED(float, sb, [kLnFinishLanes][kLnCols + 1]);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kLnCols + tx;
  float aw = 0.f, ab = 0.f;
  if (j < n) {
    for (int64_t c = ty; c < chunks; c += kLnFinishLanes) {
      aw += part_w[c * n + j];
      ab += part_b[c * n + j];
    }
  }
  sw[ty][tx] = aw;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && j < n) {
    for (int k = 1; k < kLnFinishLanes; ++k) {
      aw += sw[k][tx];
      ab += sb[k][tx];
    }
    if (dweight) store_as<float>(dweight, pdt, j, aw);
    if (dbias) store_as<float>(dbias, pdt, j, ab);
  }
}

// Rows per chunk: a function of the sizes only, so the order of additions never changes.
struct LnPlan {
  int64_t chunk_rows, chunks;
};
inline LnPlan ln_plan(int64_t rows) {
  const int64_t chunk_rows = std::max(kLnMinChunkRows, ceil_div(rows, kLnMaxChunks));
  return {chunk_rows, std::max<int64_t>(1, ceil_div(rows, chunk_rows))};
}

}  // namespace kiln::layer_norm_cuda
