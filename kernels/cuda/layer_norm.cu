// CUDA twins of kernels/cpu/layer_norm.cpp. Rows are normalized by a warp or a block (rows.cuh); the
// weight and bias gradients, sums over all rows, write per-chunk partials to scratch memory and a
// second kernel adds them in a fixed order (32 lanes of strided chunks, then the lanes in order):
// no float atomics, the same bits every run.
//
// The forward and the input gradient pass over a row two or three times. Rows that fit in the
// registers of their threads (RowCache: a multiple of 16 bytes, up to 16384 values, 16-byte
// aligned) are read from memory once, in 16-byte vectors, and written once;
// the others run the plain kernels, which read the row again on each pass (from L1/L2 when short).
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>

#include "kernels/cuda/rows.cuh"
#include "kernels/layer_norm.h"

namespace kiln {
namespace {

template <typename S, bool kBlockRow>
__global__ void layer_norm_forward_kernel(S* out, float* mean, float* rstd, const S* x, const void* weight,
                                          const void* bias, DType pdt, int64_t rows, int64_t n, float eps) {
  using G = RowGroup<kBlockRow>;
  for (int64_t r = G::first(); r < rows; r += G::step()) {
    const S* xr = x + r * n;
    // Two passes (mean, then squared deviations) as the CPU: no cancellation.
    float s = 0.f;
    for (int64_t j = G::rank(); j < n; j += G::size()) s += to_f32(xr[j]);
    const float m = row_sum<kBlockRow>(s) / static_cast<float>(n);
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
    const float m = row_sum<kBlockRow>(s) / static_cast<float>(n);
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

// How a cached kernel is launched for rows of n, or fits == false when the rows do not fit (or the
// parameters are in a dtype the cached kernels do not read) and the plain kernels run.
struct CachedLaunch {
  bool fits = false, block_row = false, params_f32 = false;
  unsigned grid = 1;
  int threads = 0;
};

template <typename S>
CachedLaunch cached_launch(int64_t rows, int64_t n, DType x_dtype, DType param_dtype, bool has_params,
                           std::initializer_list<const void*> rows_at) {
  using C = RowCache<S>;
  CachedLaunch c;
  c.params_f32 = param_dtype == DType::Float32;
  if (has_params && !c.params_f32 && param_dtype != x_dtype) return c;
  for (const void* p : rows_at) {
    if (!C::fits(p, n, C::kMaxBlock)) return c;
  }
  c.fits = true;
  if (n <= kWarpRowMax) {  // a warp's 32 lanes hold 1024 values
    const RowLaunch rl = row_launch(rows, n);
    c.grid = rl.grid;
    c.threads = rl.threads;
  } else {
    c.block_row = true;
    c.grid = grid_of(rows);
    c.threads = C::block_threads(n);
  }
  return c;
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
  __shared__ float sw[kLnLanes][kLnCols + 1], sb[kLnLanes][kLnCols + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kLnCols + tx;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_rows, r1 = min(rows, r0 + chunk_rows);
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
  __shared__ float sw[kLnFinishLanes][kLnCols + 1], sb[kLnFinishLanes][kLnCols + 1];
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
LnPlan ln_plan(int64_t rows) {
  const int64_t chunk_rows = std::max(kLnMinChunkRows, ceil_div(rows, kLnMaxChunks));
  return {chunk_rows, std::max<int64_t>(1, ceil_div(rows, chunk_rows))};
}

size_t layer_norm_backward_workspace_bytes(int64_t rows, int64_t n, bool want_param_grads) {
  if (!want_param_grads || rows == 0 || n == 0) return 0;
  const LnPlan p = ln_plan(rows);
  return 2 * align_up(static_cast<size_t>(p.chunks * n) * sizeof(float));
}

}  // namespace

void layer_norm_forward_cuda(void* out, void* mean, void* rstd, const void* x, DType x_dtype, const void* weight,
                             const void* bias, DType param_dtype, int64_t rows, int64_t n, double eps,
                             const KernelContext& ctx) {
  if (rows == 0 || n == 0) return;
  const cudaStream_t s = raw_stream(ctx.stream);
  const RowLaunch rl = row_launch(rows, n);
  float* m = static_cast<float*>(mean);
  float* r = static_cast<float*>(rstd);
  KILN_CUDA_FLOAT_SWITCH(x_dtype, "layer_norm", {
    S* o = static_cast<S*>(out);
    const S* xp = static_cast<const S*>(x);
    const CachedLaunch c =
        cached_launch<S>(rows, n, x_dtype, param_dtype, weight != nullptr || bias != nullptr, {out, x});
    const float e = static_cast<float>(eps);
    if (c.fits && c.block_row) {
      layer_norm_forward_cached_kernel<S, true><<<c.grid, c.threads, 0, s>>>(o, m, r, xp, weight, bias, c.params_f32,
                                                                             rows, n, e);
    } else if (c.fits) {
      layer_norm_forward_cached_kernel<S, false><<<c.grid, c.threads, 0, s>>>(o, m, r, xp, weight, bias,
                                                                              c.params_f32, rows, n, e);
    } else if (rl.block_row) {
      layer_norm_forward_kernel<S, true><<<rl.grid, rl.threads, 0, s>>>(o, m, r, xp, weight, bias, param_dtype, rows,
                                                                        n, e);
    } else {
      layer_norm_forward_kernel<S, false><<<rl.grid, rl.threads, 0, s>>>(o, m, r, xp, weight, bias, param_dtype,
                                                                         rows, n, e);
    }
  });
  cuda_detail::check_launch("layer_norm");
}

void layer_norm_backward_cuda(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                              const void* mean, const void* rstd, const void* weight, DType param_dtype, int64_t rows,
                              int64_t n, const KernelContext& ctx) {
  const char* op = "layer_norm backward";
  if (rows == 0 || n == 0) return;
  const cudaStream_t s = raw_stream(ctx.stream);
  const float* m = static_cast<const float*>(mean);
  const float* r = static_cast<const float*>(rstd);
  const bool want_params = dweight != nullptr || dbias != nullptr;
  const LnPlan plan = ln_plan(rows);
  void* workspace = ctx.workspace(layer_norm_backward_workspace_bytes(rows, n, want_params));
  KILN_CUDA_FLOAT_SWITCH(x_dtype, op, {
    const S* dy = static_cast<const S*>(dout);
    const S* xp = static_cast<const S*>(x);
    if (dx) {
      const RowLaunch rl = row_launch(rows, n);
      const CachedLaunch c = cached_launch<S>(rows, n, x_dtype, param_dtype, weight != nullptr, {dx, dout, x});
      S* d = static_cast<S*>(dx);
      if (c.fits && c.block_row) {
        layer_norm_backward_dx_cached_kernel<S, true><<<c.grid, c.threads, 0, s>>>(d, dy, xp, m, r, weight,
                                                                                   c.params_f32, rows, n);
      } else if (c.fits) {
        layer_norm_backward_dx_cached_kernel<S, false><<<c.grid, c.threads, 0, s>>>(d, dy, xp, m, r, weight,
                                                                                    c.params_f32, rows, n);
      } else if (rl.block_row) {
        layer_norm_backward_dx_kernel<S, true><<<rl.grid, rl.threads, 0, s>>>(d, dy, xp, m, r, weight, param_dtype,
                                                                              rows, n);
      } else {
        layer_norm_backward_dx_kernel<S, false><<<rl.grid, rl.threads, 0, s>>>(d, dy, xp, m, r, weight, param_dtype,
                                                                               rows, n);
      }
      cuda_detail::check_launch(op);
    }
    if (want_params) {
      float* part_w = static_cast<float*>(workspace);
      float* part_b = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                               align_up(static_cast<size_t>(plan.chunks * n) * sizeof(float)));
      const dim3 grid(static_cast<unsigned>(ceil_div(n, kLnCols)), static_cast<unsigned>(plan.chunks));
      layer_norm_param_partials_kernel<S><<<grid, dim3(kLnCols, kLnLanes), 0, s>>>(part_w, part_b, dy, xp, m, r, rows,
                                                                                  n, plan.chunk_rows);
      cuda_detail::check_launch(op);
      layer_norm_param_finish_kernel<<<static_cast<unsigned>(ceil_div(n, kLnCols)), dim3(kLnCols, kLnFinishLanes), 0,
                                       s>>>(dweight, dbias, param_dtype, part_w, part_b, plan.chunks, n);
      cuda_detail::check_launch(op);
    }
  });
}

}  // namespace kiln
