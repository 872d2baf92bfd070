// CUDA twins of kernels/cpu/norm.cpp: softmax, layer norm and batch norm, forward and backward.
// A row along the last dim gets a warp (a block when longer than 1024); rows along an inner dim get
// a thread each, so neighbouring threads read neighbouring addresses. Sums across rows (layer norm's
// dweight/dbias, batch norm's per-channel statistics) write fixed per-chunk partials to the caller's
// workspace and a second kernel merges them in chunk order: no float atomics, the same bits every run.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/norm.h"

namespace kiln {
namespace {

using cuda_detail::from_f32;
using cuda_detail::load_as;
using cuda_detail::raw_stream;
using cuda_detail::store_as;
using cuda_detail::to_f32;
using cuda_detail::warp_allreduce_max;
using cuda_detail::warp_allreduce_sum;

constexpr int kWarpRowMax = 1024;      // rows up to this long get one warp, longer ones a block
constexpr int kWarpRowThreads = 256;   // 8 warp-rows per block
constexpr int kBlockRowThreads = 512;  // one long row per block
constexpr int64_t kMaxGrid = int64_t{1} << 20;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
unsigned grid_of(int64_t blocks) { return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxGrid)); }

// --- rows shared by a warp or a block --------------------------------------------------------------

// The threads that share a row: a warp, or (kBlockRow) the whole block. Rows are visited in a
// grid-stride loop that is uniform over the group, so block reductions may synchronize inside it.
template <bool kBlockRow> struct RowGroup {
  static __device__ __forceinline__ int rank() { return kBlockRow ? static_cast<int>(threadIdx.x) : (threadIdx.x & 31); }
  static __device__ __forceinline__ int size() { return kBlockRow ? static_cast<int>(blockDim.x) : 32; }
  static __device__ __forceinline__ int64_t first() {
    return kBlockRow ? static_cast<int64_t>(blockIdx.x)
                     : static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  }
  static __device__ __forceinline__ int64_t step() {
    return kBlockRow ? static_cast<int64_t>(gridDim.x) : static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  }
};

// Sum / max over the row's threads, received by all of them. Across warps every thread adds the
// per-warp results in warp order, so all threads (and all runs) get the same bits.
template <bool kBlockRow> __device__ __forceinline__ float row_sum(float v) {
  v = warp_allreduce_sum(v);
  if constexpr (kBlockRow) {
    __shared__ float part[32];
    __syncthreads();  // the previous reduction's readers are done with `part`
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) v += part[w];
  }
  return v;
}

template <bool kBlockRow> __device__ __forceinline__ float row_max(float v) {
  v = warp_allreduce_max(v);
  if constexpr (kBlockRow) {
    __shared__ float part[32];
    __syncthreads();
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) v = fmaxf(v, part[w]);
  }
  return v;
}

// How rows of length n are spread: warp rows (8 per block) or block rows.
struct RowLaunch {
  bool block_row;
  unsigned grid;
  int threads;
};
RowLaunch row_launch(int64_t rows, int64_t n) {
  if (n <= kWarpRowMax) return {false, grid_of(ceil_div(rows, kWarpRowThreads / 32)), kWarpRowThreads};
  return {true, grid_of(rows), kBlockRowThreads};
}

__device__ __forceinline__ float param_or(const void* p, DType t, int64_t i, float fallback) {
  return p ? load_as<float>(p, t, i) : fallback;
}

// --- softmax -----------------------------------------------------------------------------------

// inner == 1: each row is contiguous.
template <typename S, bool kBlockRow>
__global__ void softmax_forward_rows_kernel(S* out, const S* in, int64_t rows, int64_t n, bool log) {
  using G = RowGroup<kBlockRow>;
  for (int64_t r = G::first(); r < rows; r += G::step()) {
    const S* x = in + r * n;
    S* y = out + r * n;
    if constexpr (!kBlockRow) {
      // A warp row (n <= kWarpRowMax) lives in registers: one read of the input instead of three,
      // with all of a lane's loads in flight at once. Each lane visits the same j = lane + 32k in
      // the same order as the loops below, so the results are the same bits.
      constexpr int kPer = kWarpRowMax / 32;
      const int lane = G::rank();
      float v[kPer];
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int64_t j = lane + 32 * k;
        v[k] = j < n ? to_f32(x[j]) : -INFINITY;
      }
      float mx = -INFINITY;
#pragma unroll
      for (int k = 0; k < kPer; ++k) mx = fmaxf(mx, v[k]);
      mx = row_max<false>(mx);
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        if (lane + 32 * k < n) {
          const float e = expf(v[k] - mx);
          sum += e;
          if (!log) v[k] = e;
        }
      }
      sum = row_sum<false>(sum);
      const float lsum = log ? logf(sum) : 0.f, inv = 1.f / sum;
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int64_t j = lane + 32 * k;
        if (j < n) y[j] = from_f32<S>(log ? (v[k] - mx) - lsum : v[k] * inv);
      }
      continue;
    }
    // Subtracting the row max keeps exp in range for logits of any magnitude.
    float mx = -INFINITY;
    for (int64_t j = G::rank(); j < n; j += G::size()) mx = fmaxf(mx, to_f32(x[j]));
    mx = row_max<kBlockRow>(mx);
    float sum = 0.f;
    for (int64_t j = G::rank(); j < n; j += G::size()) sum += expf(to_f32(x[j]) - mx);
    sum = row_sum<kBlockRow>(sum);
    if (log) {
      // (x - max) - log(sum), as the CPU: x - (max + log(sum)) would round log(sum) to the
      // spacing of floats near a large max.
      const float lsum = logf(sum);
      for (int64_t j = G::rank(); j < n; j += G::size()) y[j] = from_f32<S>((to_f32(x[j]) - mx) - lsum);
    } else {
      const float inv = 1.f / sum;
      for (int64_t j = G::rank(); j < n; j += G::size()) y[j] = from_f32<S>(expf(to_f32(x[j]) - mx) * inv);
    }
  }
}

// inner > 1: one thread per (outer, inner) row walks it along stride `inner`; neighbouring threads
// take neighbouring inner positions, so each step of the walk is a coalesced access.
template <typename S>
__global__ void softmax_forward_cols_kernel(S* out, const S* in, int64_t outer, int64_t n, int64_t inner, bool log) {
  const int64_t rows = outer * inner;
  for (int64_t r = cuda_detail::global_thread(); r < rows; r += cuda_detail::grid_threads()) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) mx = fmaxf(mx, to_f32(in[base + j * inner]));
    float sum = 0.f;
    for (int64_t j = 0; j < n; ++j) sum += expf(to_f32(in[base + j * inner]) - mx);
    if (log) {
      const float lsum = logf(sum);
      for (int64_t j = 0; j < n; ++j) {
        out[base + j * inner] = from_f32<S>((to_f32(in[base + j * inner]) - mx) - lsum);
      }
    } else {
      const float inv = 1.f / sum;
      for (int64_t j = 0; j < n; ++j) out[base + j * inner] = from_f32<S>(expf(to_f32(in[base + j * inner]) - mx) * inv);
    }
  }
}

// softmax: dx = y * (dy - sum(dy * y)); log_softmax: dx = dy - exp(y) * sum(dy).
template <typename S, bool kBlockRow>
__global__ void softmax_backward_rows_kernel(S* dinp, const S* dout, const S* out, int64_t rows, int64_t n, bool log) {
  using G = RowGroup<kBlockRow>;
  for (int64_t r = G::first(); r < rows; r += G::step()) {
    const S* dy = dout + r * n;
    const S* y = out + r * n;
    S* dx = dinp + r * n;
    float s = 0.f;
    for (int64_t j = G::rank(); j < n; j += G::size()) s += log ? to_f32(dy[j]) : to_f32(dy[j]) * to_f32(y[j]);
    s = row_sum<kBlockRow>(s);
    for (int64_t j = G::rank(); j < n; j += G::size()) {
      const float g = to_f32(dy[j]), yv = to_f32(y[j]);
      dx[j] = from_f32<S>(log ? g - expf(yv) * s : yv * (g - s));
    }
  }
}

template <typename S>
__global__ void softmax_backward_cols_kernel(S* dinp, const S* dout, const S* out, int64_t outer, int64_t n,
                                             int64_t inner, bool log) {
  const int64_t rows = outer * inner;
  for (int64_t r = cuda_detail::global_thread(); r < rows; r += cuda_detail::grid_threads()) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    float s = 0.f;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      s += log ? to_f32(dout[k]) : to_f32(dout[k]) * to_f32(out[k]);
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      const float g = to_f32(dout[k]), yv = to_f32(out[k]);
      dinp[k] = from_f32<S>(log ? g - expf(yv) * s : yv * (g - s));
    }
  }
}

// --- layer norm --------------------------------------------------------------------------------

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

// Pass 2: each column adds its chunk partials in chunk order.
__global__ void layer_norm_param_finish_kernel(void* dweight, void* dbias, DType pdt, const float* part_w,
                                               const float* part_b, int64_t chunks, int64_t n) {
  for (int64_t j = cuda_detail::global_thread(); j < n; j += cuda_detail::grid_threads()) {
    float aw = 0.f, ab = 0.f;
    for (int64_t c = 0; c < chunks; ++c) {
      aw += part_w[c * n + j];
      ab += part_b[c * n + j];
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

// --- batch norm --------------------------------------------------------------------------------

// Per-channel reductions over (n, s) run as a grid of (channel groups, chunks of the reduced index
// k = n * S + s). When channels are the fastest-moving dim (channels-last, [N, C]), a block holds
// 32 channels x 8 k-lanes so a warp reads 32 neighbouring channels; otherwise a block holds one
// channel x 256 k-lanes reading along s. Each thread walks its k's in order, the block merges its
// lanes in a fixed tree, and the finish kernel merges the chunks in chunk order.
constexpr int64_t kBnTargetBlocks = 1024;  // a constant, not the SM count: the plan must not vary by GPU
constexpr int64_t kBnMinPerThread = 16;
constexpr int64_t kBnMaxChunkLen = int64_t{1} << 22;  // keeps per-chunk float counts exact

struct BnPlan {
  int bx, by;  // channels x k-lanes per block (bx * by = 256)
  int64_t c_groups, chunks, chunk_len, count;
};

BnPlan bn_plan(const ChannelLayout& l) {
  BnPlan p{};
  p.count = l.n * l.s;
  const int64_t k_stride = l.s > 1 ? l.stride_s : l.stride_n;
  const bool c_fast = l.c > 1 && l.stride_c < k_stride;
  p.bx = c_fast ? 32 : 1;
  p.by = c_fast ? 8 : 256;
  p.c_groups = ceil_div(l.c, p.bx);
  const int64_t by_fill = ceil_div(kBnTargetBlocks, std::max<int64_t>(p.c_groups, 1));
  const int64_t by_work = std::max<int64_t>(1, p.count / (p.by * kBnMinPerThread));
  p.chunks = std::max<int64_t>({1, std::min(by_fill, by_work), ceil_div(p.count, kBnMaxChunkLen)});
  p.chunk_len = std::max<int64_t>(1, ceil_div(p.count, p.chunks));
  p.chunks = std::max<int64_t>(1, ceil_div(p.count, p.chunk_len));
  return p;
}

void check_bn_grid(const BnPlan& p) {
  if (p.chunks > 65535 || p.c_groups > INT32_MAX) {
    throw Error("batch_norm: input too large for the CUDA kernel (" + std::to_string(p.count) +
                " values per channel in " + std::to_string(p.chunks) + " chunks)");
  }
}

// Position (n, s) of reduced index k, stepped by a fixed stride without a division per step.
struct KWalk {
  int64_t n, s, dn, ds, S;
  __device__ KWalk(int64_t k, int64_t step, int64_t S_) : n(k / S_), s(k % S_), dn(step / S_), ds(step % S_), S(S_) {}
  __device__ __forceinline__ void advance() {
    n += dn;
    s += ds;
    if (s >= S) {
      s -= S;
      ++n;
    }
  }
};

struct Welford {
  float n, mean, m2;
};
// Chan et al.'s merge of two (count, mean, M2) summaries.
__device__ __forceinline__ Welford welford_merge(const Welford& a, const Welford& b) {
  const float n = a.n + b.n;
  if (n == 0.f) return a;
  const float d = b.mean - a.mean, fb = b.n / n;
  return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * a.n * fb};
}

template <typename S>
__global__ void bn_stats_partial_kernel(Welford* part, const S* x, ChannelLayout l, int64_t count, int64_t chunk_len) {
  __shared__ Welford sh[256];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t k0 = chunk * chunk_len, k1 = min(count, k0 + chunk_len);
  Welford acc{0.f, 0.f, 0.f};
  if (c < l.c && k0 + threadIdx.y < k1) {
    const S* xc = x + c * l.stride_c;
    KWalk w(k0 + threadIdx.y, blockDim.y, l.s);
    for (int64_t k = k0 + threadIdx.y; k < k1; k += blockDim.y, w.advance()) {
      const float v = to_f32(xc[w.n * l.stride_n + w.s * l.stride_s]);
      acc.n += 1.f;
      const float d = v - acc.mean;
      acc.mean += d / acc.n;
      acc.m2 += d * (v - acc.mean);
    }
  }
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  sh[tid] = acc;
  __syncthreads();
  for (int half = blockDim.y >> 1; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.y) < half) sh[tid] = welford_merge(sh[tid], sh[tid + half * blockDim.x]);
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < l.c) part[chunk * l.c + c] = sh[threadIdx.x];
}

// Training: merge the chunks (in double, in chunk order), save mean and rstd, update running stats
// as the CPU: (1 - momentum) * running + momentum * stat, with the unbiased variance.
__global__ void bn_stats_finish_kernel(float* save_mean, float* save_rstd, const Welford* part, int64_t chunks,
                                       int64_t C, int64_t count, BatchNormParams p, double momentum, double eps) {
  for (int64_t c = cuda_detail::global_thread(); c < C; c += cuda_detail::grid_threads()) {
    double n = 0, mean = 0, m2 = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      const Welford w = part[k * C + c];
      const double nb = w.n, nt = n + nb;
      if (nt == 0) continue;
      const double d = static_cast<double>(w.mean) - mean, fb = nb / nt;
      mean += d * fb;
      m2 += static_cast<double>(w.m2) + d * d * n * fb;
      n = nt;
    }
    const double var = m2 / static_cast<double>(count);
    save_mean[c] = static_cast<float>(mean);
    save_rstd[c] = static_cast<float>(1.0 / sqrt(var + eps));
    if (p.running_mean) {
      const double rm = load_as<double>(p.running_mean, p.running_dtype, c);
      store_as<double>(p.running_mean, p.running_dtype, c, (1.0 - momentum) * rm + momentum * mean);
    }
    if (p.running_var) {
      const double unbiased = m2 / static_cast<double>(count - 1);
      const double rv = load_as<double>(p.running_var, p.running_dtype, c);
      store_as<double>(p.running_var, p.running_dtype, c, (1.0 - momentum) * rv + momentum * unbiased);
    }
  }
}

// Eval: the running stats normalize; save_mean/save_rstd receive them.
__global__ void bn_eval_stats_kernel(float* save_mean, float* save_rstd, BatchNormParams p, int64_t C, double eps) {
  for (int64_t c = cuda_detail::global_thread(); c < C; c += cuda_detail::grid_threads()) {
    save_mean[c] = load_as<float>(p.running_mean, p.running_dtype, c);
    save_rstd[c] = static_cast<float>(1.0 / sqrt(load_as<double>(p.running_var, p.running_dtype, c) + eps));
  }
}

// Elementwise passes walk x's memory order: the three dims sorted by stride (fastest last), with a
// second "operand" whose only non-zero stride is 1 on the channel dim, so its offset is the channel.
cuda_detail::OffsetCalc<2> channel_offset_calc(const ChannelLayout& l) {
  struct Dim {
    int64_t size, stride, is_c;
  };
  Dim d[3] = {{l.n, l.stride_n, 0}, {l.c, l.stride_c, 1}, {l.s, l.stride_s, 0}};
  // Slowest first; a size-1 dim's stride is meaningless, so it counts as the slowest.
  auto key = [](const Dim& v) { return v.size == 1 ? INT64_MAX : v.stride; };
  std::stable_sort(std::begin(d), std::end(d), [&](const Dim& a, const Dim& b) { return key(a) > key(b); });
  StridedArg shape;
  shape.ndim = 3;
  int64_t xs[3], cs[3];
  for (int i = 0; i < 3; ++i) {
    shape.sizes[i] = d[i].size;
    xs[i] = d[i].stride;
    cs[i] = d[i].is_c;
  }
  const int64_t* const strides[2] = {xs, cs};
  return cuda_detail::make_offset_calc<2>(shape, strides);
}

template <typename S>
__global__ void bn_normalize_kernel(const __grid_constant__ cuda_detail::OffsetCalc<2> calc, S* out, const S* x,
                                    const float* mean, const float* rstd, const void* weight, const void* bias,
                                    DType pdt, int64_t numel) {
  for (int64_t e = cuda_detail::global_thread(); e < numel; e += cuda_detail::grid_threads()) {
    int64_t off[2];
    calc.offsets(e, off);
    const int64_t c = off[1];
    const float w = param_or(weight, pdt, c, 1.f), b = param_or(bias, pdt, c, 0.f);
    out[off[0]] = from_f32<S>((to_f32(x[off[0]]) - mean[c]) * rstd[c] * w + b);
  }
}

// Backward pass 1: per-chunk sums of dy and dy * xhat per channel.
template <typename S>
__global__ void bn_grad_partial_kernel(float2* part, const S* dout, const S* x, const float* mean, const float* rstd,
                                       ChannelLayout l, int64_t count, int64_t chunk_len) {
  __shared__ float2 sh[256];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t k0 = chunk * chunk_len, k1 = min(count, k0 + chunk_len);
  float sdy = 0.f, sdyx = 0.f;
  if (c < l.c && k0 + threadIdx.y < k1) {
    const float m = mean[c], rs = rstd[c];
    const int64_t base = c * l.stride_c;
    KWalk w(k0 + threadIdx.y, blockDim.y, l.s);
    for (int64_t k = k0 + threadIdx.y; k < k1; k += blockDim.y, w.advance()) {
      const int64_t o = base + w.n * l.stride_n + w.s * l.stride_s;
      const float g = to_f32(dout[o]);
      sdy += g;
      sdyx += g * (to_f32(x[o]) - m) * rs;
    }
  }
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  sh[tid] = make_float2(sdy, sdyx);
  __syncthreads();
  for (int half = blockDim.y >> 1; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.y) < half) {
      const float2 a = sh[tid], b = sh[tid + half * blockDim.x];
      sh[tid] = make_float2(a.x + b.x, a.y + b.y);
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < l.c) part[chunk * l.c + c] = sh[threadIdx.x];
}

// Backward pass 2: per channel, the chunk sums in chunk order (double, as the CPU), written as
// dweight/dbias and as the two means the dx pass needs.
__global__ void bn_grad_finish_kernel(float2* coef, void* dweight, void* dbias, DType pdt, const float2* part,
                                      int64_t chunks, int64_t C, int64_t count) {
  for (int64_t c = cuda_detail::global_thread(); c < C; c += cuda_detail::grid_threads()) {
    double sdy = 0, sdyx = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      const float2 v = part[k * C + c];
      sdy += v.x;
      sdyx += v.y;
    }
    if (dweight) store_as<double>(dweight, pdt, c, sdyx);
    if (dbias) store_as<double>(dbias, pdt, c, sdy);
    coef[c] = make_float2(static_cast<float>(sdy / static_cast<double>(count)),
                          static_cast<float>(sdyx / static_cast<double>(count)));
  }
}

// dx: training differentiates through the batch statistics (coef = mean(dy), mean(dy * xhat));
// eval treats them as constants (coef unused).
template <typename S>
__global__ void bn_dx_kernel(const __grid_constant__ cuda_detail::OffsetCalc<2> calc, S* dx, const S* dout, const S* x,
                             const float* mean, const float* rstd, const float2* coef, const void* weight, DType pdt,
                             bool training, int64_t numel) {
  for (int64_t e = cuda_detail::global_thread(); e < numel; e += cuda_detail::grid_threads()) {
    int64_t off[2];
    calc.offsets(e, off);
    const int64_t c = off[1];
    const float w = param_or(weight, pdt, c, 1.f), rs = rstd[c], g = to_f32(dout[off[0]]);
    if (training) {
      const float xhat = (to_f32(x[off[0]]) - mean[c]) * rs;
      const float2 k = coef[c];
      dx[off[0]] = from_f32<S>(w * rs * (g - k.x - xhat * k.y));
    } else {
      dx[off[0]] = from_f32<S>(g * w * rs);
    }
  }
}

size_t align_up(size_t v) { return (v + 255) & ~size_t{255}; }

void check_workspace(const char* op, size_t have, size_t need) {
  if (have < need) {
    throw Error(std::string(op) + ": CUDA workspace of " + std::to_string(have) + " bytes is smaller than the " +
                std::to_string(need) + " bytes needed");
  }
}

}  // namespace

// --- entry points ------------------------------------------------------------------------------

void softmax_forward_cuda(void* out, const void* in, DType dtype, int64_t outer, int64_t n, int64_t inner, bool log,
                          Stream stream) {
  const char* op = log ? "log_softmax" : "softmax";
  if (outer * n * inner == 0) return;
  const cudaStream_t s = raw_stream(stream);
  KILN_CUDA_FLOAT_SWITCH(dtype, op, {
    S* o = static_cast<S*>(out);
    const S* x = static_cast<const S*>(in);
    if (inner == 1) {
      const RowLaunch rl = row_launch(outer, n);
      if (rl.block_row) {
        softmax_forward_rows_kernel<S, true><<<rl.grid, rl.threads, 0, s>>>(o, x, outer, n, log);
      } else {
        softmax_forward_rows_kernel<S, false><<<rl.grid, rl.threads, 0, s>>>(o, x, outer, n, log);
      }
    } else {
      softmax_forward_cols_kernel<S><<<cuda_detail::grid_for(outer * inner), cuda_detail::kThreads, 0, s>>>(
          o, x, outer, n, inner, log);
    }
  });
  cuda_detail::check_launch(op);
}

void softmax_backward_cuda(void* dinp, const void* dout, const void* out, DType dtype, int64_t outer, int64_t n,
                           int64_t inner, bool log, Stream stream) {
  const char* op = log ? "log_softmax backward" : "softmax backward";
  if (outer * n * inner == 0) return;
  const cudaStream_t s = raw_stream(stream);
  KILN_CUDA_FLOAT_SWITCH(dtype, op, {
    S* dx = static_cast<S*>(dinp);
    const S* dy = static_cast<const S*>(dout);
    const S* y = static_cast<const S*>(out);
    if (inner == 1) {
      const RowLaunch rl = row_launch(outer, n);
      if (rl.block_row) {
        softmax_backward_rows_kernel<S, true><<<rl.grid, rl.threads, 0, s>>>(dx, dy, y, outer, n, log);
      } else {
        softmax_backward_rows_kernel<S, false><<<rl.grid, rl.threads, 0, s>>>(dx, dy, y, outer, n, log);
      }
    } else {
      softmax_backward_cols_kernel<S><<<cuda_detail::grid_for(outer * inner), cuda_detail::kThreads, 0, s>>>(
          dx, dy, y, outer, n, inner, log);
    }
  });
  cuda_detail::check_launch(op);
}

void layer_norm_forward_cuda(void* out, void* mean, void* rstd, const void* x, DType x_dtype, const void* weight,
                             const void* bias, DType param_dtype, int64_t rows, int64_t n, double eps, Stream stream) {
  if (rows == 0 || n == 0) return;
  const cudaStream_t s = raw_stream(stream);
  const RowLaunch rl = row_launch(rows, n);
  float* m = static_cast<float*>(mean);
  float* r = static_cast<float*>(rstd);
  KILN_CUDA_FLOAT_SWITCH(x_dtype, "layer_norm", {
    S* o = static_cast<S*>(out);
    const S* xp = static_cast<const S*>(x);
    if (rl.block_row) {
      layer_norm_forward_kernel<S, true><<<rl.grid, rl.threads, 0, s>>>(o, m, r, xp, weight, bias, param_dtype, rows,
                                                                        n, static_cast<float>(eps));
    } else {
      layer_norm_forward_kernel<S, false><<<rl.grid, rl.threads, 0, s>>>(o, m, r, xp, weight, bias, param_dtype,
                                                                         rows, n, static_cast<float>(eps));
    }
  });
  cuda_detail::check_launch("layer_norm");
}

size_t layer_norm_backward_cuda_workspace_bytes(int64_t rows, int64_t n, bool want_param_grads) {
  if (!want_param_grads || rows == 0 || n == 0) return 0;
  const LnPlan p = ln_plan(rows);
  return 2 * align_up(static_cast<size_t>(p.chunks * n) * sizeof(float));
}

void layer_norm_backward_cuda(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                              const void* mean, const void* rstd, const void* weight, DType param_dtype, int64_t rows,
                              int64_t n, void* workspace, size_t workspace_bytes, Stream stream) {
  const char* op = "layer_norm backward";
  if (rows == 0 || n == 0) return;
  const cudaStream_t s = raw_stream(stream);
  const float* m = static_cast<const float*>(mean);
  const float* r = static_cast<const float*>(rstd);
  const bool want_params = dweight != nullptr || dbias != nullptr;
  const LnPlan plan = ln_plan(rows);
  if (want_params) check_workspace(op, workspace_bytes, layer_norm_backward_cuda_workspace_bytes(rows, n, true));
  KILN_CUDA_FLOAT_SWITCH(x_dtype, op, {
    const S* dy = static_cast<const S*>(dout);
    const S* xp = static_cast<const S*>(x);
    if (dx) {
      const RowLaunch rl = row_launch(rows, n);
      S* d = static_cast<S*>(dx);
      if (rl.block_row) {
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
      layer_norm_param_finish_kernel<<<cuda_detail::grid_for(n), cuda_detail::kThreads, 0, s>>>(
          dweight, dbias, param_dtype, part_w, part_b, plan.chunks, n);
      cuda_detail::check_launch(op);
    }
  });
}

size_t batch_norm_forward_cuda_workspace_bytes(const ChannelLayout& layout, bool training) {
  if (!training || layout.c == 0 || layout.n * layout.s == 0) return 0;
  const BnPlan p = bn_plan(layout);
  return static_cast<size_t>(p.chunks * layout.c) * sizeof(Welford);
}

void batch_norm_forward_cuda(void* out, void* save_mean, void* save_rstd, const void* x, DType x_dtype,
                             const ChannelLayout& layout, const BatchNormParams& params, bool training,
                             double momentum, double eps, void* workspace, size_t workspace_bytes, Stream stream) {
  const char* op = "batch_norm";
  const int64_t numel = layout.n * layout.c * layout.s;
  if (numel == 0) return;
  const cudaStream_t s = raw_stream(stream);
  float* m = static_cast<float*>(save_mean);
  float* r = static_cast<float*>(save_rstd);
  KILN_CUDA_FLOAT_SWITCH(x_dtype, op, {
    const S* xp = static_cast<const S*>(x);
    if (training) {
      const BnPlan plan = bn_plan(layout);
      check_bn_grid(plan);
      check_workspace(op, workspace_bytes, batch_norm_forward_cuda_workspace_bytes(layout, true));
      Welford* part = static_cast<Welford*>(workspace);
      const dim3 grid(static_cast<unsigned>(plan.c_groups), static_cast<unsigned>(plan.chunks));
      bn_stats_partial_kernel<S><<<grid, dim3(plan.bx, plan.by), 0, s>>>(part, xp, layout, plan.count,
                                                                          plan.chunk_len);
      cuda_detail::check_launch(op);
      bn_stats_finish_kernel<<<cuda_detail::grid_for(layout.c), cuda_detail::kThreads, 0, s>>>(
          m, r, part, plan.chunks, layout.c, plan.count, params, momentum, eps);
    } else {
      bn_eval_stats_kernel<<<cuda_detail::grid_for(layout.c), cuda_detail::kThreads, 0, s>>>(m, r, params, layout.c,
                                                                                             eps);
    }
    cuda_detail::check_launch(op);
    bn_normalize_kernel<S><<<cuda_detail::grid_for(numel), cuda_detail::kThreads, 0, s>>>(
        channel_offset_calc(layout), static_cast<S*>(out), xp, m, r, params.weight, params.bias, params.param_dtype,
        numel);
    cuda_detail::check_launch(op);
  });
}

size_t batch_norm_backward_cuda_workspace_bytes(const ChannelLayout& layout) {
  if (layout.c == 0 || layout.n * layout.s == 0) return 0;
  const BnPlan p = bn_plan(layout);
  return align_up(static_cast<size_t>(layout.c) * sizeof(float2)) +
         static_cast<size_t>(p.chunks * layout.c) * sizeof(float2);
}

void batch_norm_backward_cuda(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                              const ChannelLayout& layout, const void* save_mean, const void* save_rstd,
                              const void* weight, DType param_dtype, bool training, void* workspace,
                              size_t workspace_bytes, Stream stream) {
  const char* op = "batch_norm backward";
  const int64_t numel = layout.n * layout.c * layout.s;
  if (numel == 0) return;
  const cudaStream_t s = raw_stream(stream);
  const float* m = static_cast<const float*>(save_mean);
  const float* r = static_cast<const float*>(save_rstd);
  // The sums are needed for dweight/dbias, and for dx only in training.
  const bool want_sums = dweight != nullptr || dbias != nullptr || (dx != nullptr && training);
  const BnPlan plan = bn_plan(layout);
  float2* coef = static_cast<float2*>(workspace);
  if (want_sums) {
    check_bn_grid(plan);
    check_workspace(op, workspace_bytes, batch_norm_backward_cuda_workspace_bytes(layout));
  }
  KILN_CUDA_FLOAT_SWITCH(x_dtype, op, {
    const S* dy = static_cast<const S*>(dout);
    const S* xp = static_cast<const S*>(x);
    if (want_sums) {
      float2* part = reinterpret_cast<float2*>(static_cast<char*>(workspace) +
                                               align_up(static_cast<size_t>(layout.c) * sizeof(float2)));
      const dim3 grid(static_cast<unsigned>(plan.c_groups), static_cast<unsigned>(plan.chunks));
      bn_grad_partial_kernel<S><<<grid, dim3(plan.bx, plan.by), 0, s>>>(part, dy, xp, m, r, layout, plan.count,
                                                                         plan.chunk_len);
      cuda_detail::check_launch(op);
      bn_grad_finish_kernel<<<cuda_detail::grid_for(layout.c), cuda_detail::kThreads, 0, s>>>(
          coef, dweight, dbias, param_dtype, part, plan.chunks, layout.c, plan.count);
      cuda_detail::check_launch(op);
    }
    if (dx) {
      bn_dx_kernel<S><<<cuda_detail::grid_for(numel), cuda_detail::kThreads, 0, s>>>(
          channel_offset_calc(layout), static_cast<S*>(dx), dy, xp, m, r, coef, weight, param_dtype, training, numel);
      cuda_detail::check_launch(op);
    }
  });
}

}  // namespace kiln
