// cross_entropy's CUDA kernels (the CUDA twins of kernels/cpu/cross_entropy.cpp), launched by
// kernels/cuda/cross_entropy.cu. The forward reads each logit once: every thread keeps an online
// log-sum-exp (running max, sum of exp(x - max), sum of x - max, rescaled when the max grows) and
// the row's threads (a warp, or a block for long rows: rows.cuh) merge theirs in a fixed tree;
// targets are checked on the device, and the row losses are added in a fixed order by a second,
// one-block kernel, so sum and mean are bit-identical run to run.
//
// Host-compilable: the CPU tests run these kernels on the emulator of CUDA's threads
// (tests/kernels/test_cross_entropy_simt.cpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/rows.cuh"
#include "kernels/index.h"

namespace kiln::cross_entropy_cuda {

constexpr int kFinishThreads = 1024;  // the one block that adds the row losses

// An online log-sum-exp over some of a row's logits: m = their max, s = sum exp(x - m),
// z = sum (x - m), n = how many. Edge cases follow the CPU's two-pass formulas: a -inf logit adds 0
// to s and -inf to z; +inf or NaN logits make s NaN. Plain data (no member initializers), so it
// can live in shared memory; start from empty_lse().
struct OnlineLse {
  float m, s, z;
  int n;

  __device__ __forceinline__ void add(float v) {
    if (v > m) {
      if (n > 0) {
        s *= expf(m - v);
        z += static_cast<float>(n) * (m - v);
      }
      // exp(v - v) is 1, except for v = +inf, where the CPU's exp(inf - inf) is NaN.
      s += std::isinf(v) ? NAN : 1.f;
      m = v;
    } else if (v == -INFINITY) {
      z += v;
    } else {
      s += expf(v - m);
      z += v - m;
    }
    ++n;
  }
};

__device__ __forceinline__ OnlineLse empty_lse() { return OnlineLse{-INFINITY, 0.f, 0.f, 0}; }

__device__ __forceinline__ OnlineLse lse_merge(const OnlineLse& a, const OnlineLse& b) {
  if (a.n == 0) return b;
  if (b.n == 0) return a;
  OnlineLse r = empty_lse();
  r.n = a.n + b.n;
  r.m = fmaxf(a.m, b.m);
  if (r.m == -INFINITY) {  // every logit so far is -inf
    r.s = a.s + b.s;
    r.z = a.z + b.z;
    return r;
  }
  r.s = a.s * expf(a.m - r.m) + b.s * expf(b.m - r.m);
  r.z = (a.z + static_cast<float>(a.n) * (a.m - r.m)) + (b.z + static_cast<float>(b.n) * (b.m - r.m));
  return r;
}

// Lane 0 receives the merge of the warp's states (a fixed tree of down-shuffles).
__device__ __forceinline__ OnlineLse warp_merge_to_lane0(OnlineLse v) {
  for (int o = 16; o > 0; o >>= 1) {
    OnlineLse other = empty_lse();
    other.m = __shfl_down_sync(0xffffffffu, v.m, o);
    other.s = __shfl_down_sync(0xffffffffu, v.s, o);
    other.z = __shfl_down_sync(0xffffffffu, v.z, o);
    other.n = __shfl_down_sync(0xffffffffu, v.n, o);
    v = lse_merge(v, other);
  }
  return v;
}

// What the row's final thread needs besides the merged state.
struct CeArgs {
  void* out;
  DType out_dtype;
  float* stats;  // per row: max, log(sum of exp(x - max))
  float* row_loss;  // Sum/Mean: per-row losses for the ordered finish; None: unused
  const int64_t* target;
  int64_t c, inner, ignore_index;
  float keep_target, smooth;  // 1 - label_smoothing, label_smoothing
  LossReduce reduce;
  DeviceErrorRecord* err;
};

// The loss of row r from its merged state: (1 - eps) * (lse - x_t) + eps * mean_c (lse - x_c),
// with lse - x = log(s) - (x - m). x points at the row's first logit.
template <typename S>
__device__ __forceinline__ void finish_row(const CeArgs& a, int64_t r, const S* x, const OnlineLse& st) {
  const float lsum = logf(st.s);
  a.stats[2 * r] = st.m;
  a.stats[2 * r + 1] = lsum;
  const int64_t t = a.target[r];
  float loss = 0.f;
  if (t != a.ignore_index) {
    if (t < 0 || t >= a.c) {
      cuda_detail::record_device_error(a.err, IndexCheckOp::CrossEntropy, t, a.c);
    } else {
      // Without smoothing the mean term is left out (a -inf logit makes it +inf: 0 * inf is NaN).
      const float nll = lsum - (to_f32(x[t * a.inner]) - st.m);
      loss = a.keep_target * nll;
      if (a.smooth != 0.f) loss += a.smooth * (lsum - st.z / static_cast<float>(a.c));
    }
  }
  if (a.reduce == LossReduce::None) {
    store_as<float>(a.out, a.out_dtype, r, loss);
  } else {
    a.row_loss[r] = loss;
  }
}

// S == 1: row r is contiguous; a warp (or, for long rows, the block) reads it once.
template <typename S, bool kBlockRow>
__global__ void ce_forward_rows_kernel(const S* logits, int64_t rows, CeArgs a) {
  using G = RowGroup<kBlockRow>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t r = G::first(); r < rows; r += G::step()) {
    const S* x = logits + r * a.c;
    OnlineLse st = empty_lse();
    for (int64_t j = G::rank(); j < a.c; j += G::size()) st.add(to_f32(x[j]));
    st = warp_merge_to_lane0(st);
    if constexpr (kBlockRow) {
      KILN_SHARED(OnlineLse, part, [32]);
      __syncthreads();  // the previous row's thread 0 is done reading `part`
      if (lane == 0) part[warp] = st;
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) st = lse_merge(st, part[w]);
        finish_row(a, r, x, st);
      }
    } else {
      if (lane == 0) finish_row(a, r, x, st);
    }
  }
}

// S > 1: one thread per (n, s) row walks its C logits at stride S; neighbouring threads take
// neighbouring s, so every step is coalesced.
template <typename S> __global__ void ce_forward_cols_kernel(const S* logits, int64_t rows, CeArgs a) {
  for (int64_t r = cuda_detail::global_thread(); r < rows; r += cuda_detail::grid_threads()) {
    const S* x = logits + (r / a.inner) * a.c * a.inner + r % a.inner;
    OnlineLse st = empty_lse();
    for (int64_t j = 0; j < a.c; ++j) st.add(to_f32(x[j * a.inner]));
    finish_row(a, r, x, st);
  }
}

// One block: valid_count, and for sum/mean the row losses added in double in a fixed order (each
// thread a fixed stride of rows, then a fixed tree).
__global__ void ce_finish_kernel(void* out, DType out_dtype, int64_t* valid_count, const float* row_loss,
                                 const int64_t* target, int64_t rows, int64_t c, int64_t ignore_index,
                                 LossReduce reduce) {
  KILN_SHARED(double, sum_sh, [kFinishThreads]);
  KILN_SHARED(long long, count_sh, [kFinishThreads]);
  double acc = 0;
  long long count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t t = target[r];
    count += (t != ignore_index && t >= 0 && t < c) ? 1 : 0;
    if (reduce != LossReduce::None) acc += static_cast<double>(row_loss[r]);
  }
  sum_sh[threadIdx.x] = acc;
  count_sh[threadIdx.x] = count;
  __syncthreads();
  for (int half = blockDim.x >> 1; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) {
      sum_sh[threadIdx.x] += sum_sh[threadIdx.x + half];
      count_sh[threadIdx.x] += count_sh[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *valid_count = count_sh[0];
    if (reduce == LossReduce::None) return;
    double total = sum_sh[0];
    // Mean over zero non-ignored rows is 0/0 = NaN, as in PyTorch.
    if (reduce == LossReduce::Mean) total /= static_cast<double>(count_sh[0]);
    store_as<double>(out, out_dtype, 0, total);
  }
}

// dlogits = g * (softmax - (1 - eps) * onehot - eps / C), zero on ignored (and invalid) rows. One
// thread per logit, in memory order.
template <typename S>
__global__ void ce_backward_kernel(S* dx, const void* dout, DType dout_dtype, const S* x, const float* stats,
                                   const int64_t* valid_count, const int64_t* target, int64_t n_rows_outer, int64_t c,
                                   int64_t inner, int64_t ignore_index, LossReduce reduce, float on_target,
                                   float off_target) {
  const int64_t numel = n_rows_outer * c * inner;
  double scale = 1.0;
  if (reduce != LossReduce::None) scale = load_as<double>(dout, dout_dtype, 0);
  if (reduce == LossReduce::Mean) scale /= static_cast<double>(*valid_count);
  const bool small = numel <= UINT32_MAX;
  for (int64_t e = cuda_detail::global_thread(); e < numel; e += cuda_detail::grid_threads()) {
    int64_t j, r;
    if (small) {
      const uint32_t ue = static_cast<uint32_t>(e), uc = static_cast<uint32_t>(c), ui = static_cast<uint32_t>(inner);
      const uint32_t n = ue / (uc * ui), rem = ue - n * uc * ui, jj = rem / ui;
      j = jj;
      r = static_cast<int64_t>(n) * inner + (rem - jj * ui);
    } else {
      const int64_t n = e / (c * inner), rem = e - n * c * inner;
      j = rem / inner;
      r = n * inner + (rem - j * inner);
    }
    const int64_t t = target[r];
    if (t == ignore_index || t < 0 || t >= c) {
      dx[e] = cuda_detail::from_f32<S>(0.f);
      continue;
    }
    const float g = static_cast<float>(reduce == LossReduce::None ? load_as<double>(dout, dout_dtype, r) : scale);
    const float p = expf((to_f32(x[e]) - stats[2 * r]) - stats[2 * r + 1]);
    dx[e] = cuda_detail::from_f32<S>(g * (p - (j == t ? on_target : off_target)));
  }
}

// The same gradient for S == 1 and long rows (a language model's vocabulary): one block per row,
// its threads walking the row's classes, so the row's target, statistics and dout are read once
// and no thread divides to find its row and class. The arithmetic per logit is the element
// kernel's, so both give the same bits.
template <typename S>
__global__ void ce_backward_rows_kernel(S* dx, const void* dout, DType dout_dtype, const S* x, const float* stats,
                                        const int64_t* valid_count, const int64_t* target, int64_t rows, int64_t c,
                                        int64_t ignore_index, LossReduce reduce, float on_target, float off_target) {
  double scale = 1.0;
  if (reduce != LossReduce::None) scale = load_as<double>(dout, dout_dtype, 0);
  if (reduce == LossReduce::Mean) scale /= static_cast<double>(*valid_count);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    S* drow = dx + r * c;
    const S* xrow = x + r * c;
    const int64_t t = target[r];
    if (t == ignore_index || t < 0 || t >= c) {
      for (int64_t j = threadIdx.x; j < c; j += blockDim.x) drow[j] = cuda_detail::from_f32<S>(0.f);
      continue;
    }
    const float g = static_cast<float>(reduce == LossReduce::None ? load_as<double>(dout, dout_dtype, r) : scale);
    const float m = stats[2 * r], lsum = stats[2 * r + 1];
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float p = expf((to_f32(xrow[j]) - m) - lsum);
      drow[j] = cuda_detail::from_f32<S>(g * (p - (j == t ? on_target : off_target)));
    }
  }
}

// Rows at least this long take the row kernel (a block of kRowBackwardThreads per row); shorter
// ones the element kernel, which keeps every thread busy whatever the row length.
constexpr int64_t kRowBackwardMinClasses = 1024;
constexpr int kRowBackwardThreads = 256;

}  // namespace kiln::cross_entropy_cuda
