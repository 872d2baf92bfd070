// batch_norm's CUDA kernels (the CUDA twins of kernels/cpu/batch_norm.cpp), launched by
// kernels/cuda/batch_norm.cu, and the plan that sizes their grids. Per-channel statistics are
// reduced over (n, s) by a grid of channel groups x chunks whose partials a finish kernel merges
// in chunk order, so results are the same bits every run; elementwise passes walk x in memory
// order, NCHW or channels-last alike.
//
// Host-compilable: the CPU tests run these kernels on the emulator of CUDA's threads
// (tests/kernels/test_batch_norm_simt.cpp).
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

#include "kernels/batch_norm.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/cuda/rows.cuh"
#include "kernels/elementwise_math.h"
#include "kernels/error.h"

namespace kiln::batch_norm_cuda {

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

inline BnPlan bn_plan(const ChannelLayout& l) {
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

inline void check_bn_grid(const BnPlan& p) {
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
// Chan et al.'s merge of two (count, mean, M2) summaries. An empty side returns the other as it is:
// the general formula would multiply d * d (inf once |mean| passes about 1.8e19) by a zero count.
__device__ __forceinline__ Welford welford_merge(const Welford& a, const Welford& b) {
  if (b.n == 0.f) return a;
  if (a.n == 0.f) return b;
  const float n = a.n + b.n;
  const float d = b.mean - a.mean, fb = b.n / n;
  return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * a.n * fb};
}

template <typename S>
__global__ void bn_stats_partial_kernel(Welford* part, const S* x, ChannelLayout l, int64_t count, int64_t chunk_len) {
  KILN_SHARED(Welford, sh, [256]);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t k0 = chunk * chunk_len, k1 = k0 + chunk_len < count ? k0 + chunk_len : count;
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
    save_rstd[c] = static_cast<float>(1.0 / ::sqrt(var + eps));
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
    save_rstd[c] = static_cast<float>(1.0 / ::sqrt(load_as<double>(p.running_var, p.running_dtype, c) + eps));
  }
}

// Elementwise passes walk x's memory order: the three dims sorted by stride (fastest last), with a
// second "operand" whose only non-zero stride is 1 on the channel dim, so its offset is the channel.
inline cuda_detail::OffsetCalc<2> channel_offset_calc(const ChannelLayout& l) {
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

// out = epilogue(normalized x): plus the residual (null: none) after rounding to S, then ReLU when
// relu is set, rounding as batch_norm, add and relu do one after another (BatchNormParams).
template <typename S>
__global__ void bn_normalize_kernel(const __grid_constant__ cuda_detail::OffsetCalc<2> calc, S* out, const S* x,
                                    const float* mean, const float* rstd, const void* weight, const void* bias,
                                    DType pdt, const S* residual, bool relu, int64_t numel) {
  for (int64_t e = cuda_detail::global_thread(); e < numel; e += cuda_detail::grid_threads()) {
    int64_t off[2];
    calc.offsets(e, off);
    const int64_t c = off[1];
    const float w = param_or(weight, pdt, c, 1.f), b = param_or(bias, pdt, c, 0.f);
    float v = (to_f32(x[off[0]]) - mean[c]) * rstd[c] * w + b;
    if (residual) v = to_f32(from_f32<S>(v)) + to_f32(residual[off[0]]);
    if (relu) v = ew::unary_fn<UnaryOp::Relu, float>(v, 0.f, 0.f);
    out[off[0]] = from_f32<S>(v);
  }
}

// The gradient at offset o: dout[o], or relu's backward of it when relu_out (a fused ReLU's output)
// is given: dout[o] where relu_out[o] > 0, zero elsewhere.
template <typename S> __device__ __forceinline__ float grad_at(const S* dout, const S* relu_out, int64_t o) {
  if (relu_out && !(to_f32(relu_out[o]) > 0.f)) return 0.f;
  return to_f32(dout[o]);
}

// Backward pass 1: per-chunk sums of dy and dy * xhat per channel.
template <typename S>
__global__ void bn_grad_partial_kernel(float2* part, const S* dout, const S* relu_out, const S* x, const float* mean,
                                       const float* rstd, ChannelLayout l, int64_t count, int64_t chunk_len) {
  KILN_SHARED(float2, sh, [256]);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t k0 = chunk * chunk_len, k1 = k0 + chunk_len < count ? k0 + chunk_len : count;
  float sdy = 0.f, sdyx = 0.f;
  if (c < l.c && k0 + threadIdx.y < k1) {
    const float m = mean[c], rs = rstd[c];
    const int64_t base = c * l.stride_c;
    KWalk w(k0 + threadIdx.y, blockDim.y, l.s);
    for (int64_t k = k0 + threadIdx.y; k < k1; k += blockDim.y, w.advance()) {
      const int64_t o = base + w.n * l.stride_n + w.s * l.stride_s;
      const float g = grad_at(dout, relu_out, o);
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
__global__ void bn_dx_kernel(const __grid_constant__ cuda_detail::OffsetCalc<2> calc, S* dx, const S* dout,
                             const S* relu_out, const S* x, const float* mean, const float* rstd, const float2* coef,
                             const void* weight, DType pdt, bool training, int64_t numel) {
  for (int64_t e = cuda_detail::global_thread(); e < numel; e += cuda_detail::grid_threads()) {
    int64_t off[2];
    calc.offsets(e, off);
    const int64_t c = off[1];
    const float w = param_or(weight, pdt, c, 1.f), rs = rstd[c], g = grad_at(dout, relu_out, off[0]);
    if (training) {
      const float xhat = (to_f32(x[off[0]]) - mean[c]) * rs;
      const float2 k = coef[c];
      dx[off[0]] = from_f32<S>(w * rs * (g - k.x - xhat * k.y));
    } else {
      dx[off[0]] = from_f32<S>(g * w * rs);
    }
  }
}

inline size_t batch_norm_forward_workspace_bytes(const ChannelLayout& layout, bool training) {
  if (!training || layout.c == 0 || layout.n * layout.s == 0) return 0;
  const BnPlan p = bn_plan(layout);
  return static_cast<size_t>(p.chunks * layout.c) * sizeof(Welford);
}

inline size_t batch_norm_backward_workspace_bytes(const ChannelLayout& layout) {
  if (layout.c == 0 || layout.n * layout.s == 0) return 0;
  const BnPlan p = bn_plan(layout);
  return align_up(static_cast<size_t>(layout.c) * sizeof(float2)) +
         static_cast<size_t>(p.chunks * layout.c) * sizeof(float2);
}

}  // namespace kiln::batch_norm_cuda
