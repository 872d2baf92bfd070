// CUDA twins of kernels/cpu/cross_entropy.cpp. The forward reads each logit once: every thread keeps
// an online log-sum-exp (running max, sum of exp(x - max), sum of x - max, rescaled when the max
// grows) and the row's threads merge theirs in a fixed tree; targets are checked on the device and
// the row losses are added in a fixed order by a second, one-block kernel, so sum and mean are
// bit-identical run to run.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cross_entropy.h"
#include "kernels/index.h"

namespace kiln {
namespace {

using cuda_detail::load_as;
using cuda_detail::raw_stream;
using cuda_detail::store_as;
using cuda_detail::to_f32;

constexpr int kWarpRowMax = 1024;      // rows of up to this many classes get a warp, longer ones a block
constexpr int kWarpRowThreads = 256;   // 8 warp-rows per block
constexpr int kBlockRowThreads = 512;
constexpr int kFinishThreads = 1024;   // the one block that adds the row losses
constexpr int64_t kMaxGrid = int64_t{1} << 20;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
unsigned grid_of(int64_t blocks) { return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxGrid)); }

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
      s += isinf(v) ? NAN : 1.f;
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
  float* lse;
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
  a.lse[r] = st.m + lsum;
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
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rank = kBlockRow ? static_cast<int>(threadIdx.x) : lane;
  const int group = kBlockRow ? static_cast<int>(blockDim.x) : 32;
  const int64_t first = kBlockRow ? blockIdx.x : static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + warp;
  const int64_t step = kBlockRow ? gridDim.x : static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t r = first; r < rows; r += step) {
    const S* x = logits + r * a.c;
    OnlineLse st = empty_lse();
    for (int64_t j = rank; j < a.c; j += group) st.add(to_f32(x[j]));
    st = warp_merge_to_lane0(st);
    if constexpr (kBlockRow) {
      __shared__ OnlineLse part[32];
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
  __shared__ double sum_sh[kFinishThreads];
  __shared__ long long count_sh[kFinishThreads];
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
__global__ void ce_backward_kernel(S* dx, const void* dout, DType dout_dtype, const S* x, const float* lse,
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
    const float p = expf(to_f32(x[e]) - lse[r]);
    dx[e] = cuda_detail::from_f32<S>(g * (p - (j == t ? on_target : off_target)));
  }
}

// The same gradient for S == 1 and long rows (a language model's vocabulary): one block per row,
// its threads walking the row's classes, so the row's target, log-sum-exp and dout are read once
// and no thread divides to find its row and class. The arithmetic per logit is the element
// kernel's, so both give the same bits.
template <typename S>
__global__ void ce_backward_rows_kernel(S* dx, const void* dout, DType dout_dtype, const S* x, const float* lse,
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
    const float l = lse[r];
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float p = expf(to_f32(xrow[j]) - l);
      drow[j] = cuda_detail::from_f32<S>(g * (p - (j == t ? on_target : off_target)));
    }
  }
}

// Rows at least this long take the row kernel (a block of kRowBackwardThreads per row); shorter
// ones the element kernel, which keeps every thread busy whatever the row length.
constexpr int64_t kRowBackwardMinClasses = 1024;
constexpr int kRowBackwardThreads = 256;

// Scratch for the row losses that sum and mean add in order.
size_t row_loss_bytes(const CrossEntropyShape& shape, LossReduce reduce) {
  if (reduce == LossReduce::None) return 0;
  return static_cast<size_t>(shape.n * shape.s) * sizeof(float);
}

}  // namespace

void cross_entropy_forward_cuda(void* out, DType out_dtype, void* lse, int64_t* valid_count, const void* logits,
                                DType logits_dtype, const int64_t* target, const CrossEntropyShape& shape,
                                LossReduce reduce, const KernelContext& ctx) {
  const char* op = "cross_entropy";
  if (shape.c > INT32_MAX) throw Error("cross_entropy: more than 2^31 - 1 classes (" + std::to_string(shape.c) + ")");
  void* workspace = ctx.workspace(row_loss_bytes(shape, reduce));
  DeviceErrorRecord* err = ctx.error_record();
  const cudaStream_t s = raw_stream(ctx.stream);
  const int64_t rows = shape.n * shape.s;
  CeArgs a{};
  a.out = out;
  a.out_dtype = out_dtype;
  a.lse = static_cast<float*>(lse);
  a.row_loss = static_cast<float*>(workspace);
  a.target = target;
  a.c = shape.c;
  a.inner = shape.s;
  a.ignore_index = shape.ignore_index;
  a.keep_target = static_cast<float>(1.0 - shape.label_smoothing);
  a.smooth = static_cast<float>(shape.label_smoothing);
  a.reduce = reduce;
  a.err = err;
  if (rows > 0) {
    KILN_CUDA_FLOAT_SWITCH(logits_dtype, op, {
      const S* x = static_cast<const S*>(logits);
      if (shape.s == 1) {
        if (shape.c <= kWarpRowMax) {
          ce_forward_rows_kernel<S, false>
              <<<grid_of(ceil_div(rows, kWarpRowThreads / 32)), kWarpRowThreads, 0, s>>>(x, rows, a);
        } else {
          ce_forward_rows_kernel<S, true><<<grid_of(rows), kBlockRowThreads, 0, s>>>(x, rows, a);
        }
      } else {
        ce_forward_cols_kernel<S><<<cuda_detail::grid_for(rows), cuda_detail::kThreads, 0, s>>>(x, rows, a);
      }
    });
    cuda_detail::check_launch(op);
  } else if (logits_dtype != DType::Float32 && logits_dtype != DType::Float16 && logits_dtype != DType::BFloat16) {
    cuda_detail::throw_no_cuda_float_kernel(op, logits_dtype);
  }
  // Runs for zero rows too: valid_count = 0, and a mean of nothing is NaN.
  ce_finish_kernel<<<1, kFinishThreads, 0, s>>>(out, out_dtype, valid_count, a.row_loss, target, rows, shape.c,
                                                shape.ignore_index, reduce);
  cuda_detail::check_launch(op);
}

void cross_entropy_backward_cuda(void* dlogits, const void* dout, DType dout_dtype, const void* logits,
                                 DType logits_dtype, const void* lse, const int64_t* valid_count,
                                 const int64_t* target, const CrossEntropyShape& shape, LossReduce reduce,
                                 const KernelContext& ctx) {
  const char* op = "cross_entropy backward";
  const int64_t numel = shape.n * shape.c * shape.s;
  if (numel == 0) return;
  const double eps = shape.label_smoothing;
  const float off_target = static_cast<float>(eps / static_cast<double>(shape.c));
  const float on_target = static_cast<float>(1.0 - eps) + off_target;
  const cudaStream_t st = raw_stream(ctx.stream);
  const bool by_rows = shape.s == 1 && shape.c >= kRowBackwardMinClasses;
  KILN_CUDA_FLOAT_SWITCH(logits_dtype, op, {
    if (by_rows) {
      ce_backward_rows_kernel<S><<<grid_of(shape.n), kRowBackwardThreads, 0, st>>>(
          static_cast<S*>(dlogits), dout, dout_dtype, static_cast<const S*>(logits), static_cast<const float*>(lse),
          valid_count, target, shape.n, shape.c, shape.ignore_index, reduce, on_target, off_target);
    } else {
      ce_backward_kernel<S><<<cuda_detail::grid_for(numel), cuda_detail::kThreads, 0, st>>>(
          static_cast<S*>(dlogits), dout, dout_dtype, static_cast<const S*>(logits), static_cast<const float*>(lse),
          valid_count, target, shape.n, shape.c, shape.s, shape.ignore_index, reduce, on_target, off_target);
    }
  });
  cuda_detail::check_launch(op);
}

}  // namespace kiln
