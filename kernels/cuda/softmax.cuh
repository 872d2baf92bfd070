// softmax's and log_softmax's CUDA kernels (the CUDA twins of kernels/cpu/softmax.cpp), launched
// by kernels/cuda/softmax.cu. Rows along the last dim are reduced by a warp or a block (rows.cuh),
// with a warp's row kept in registers; rows along an inner dim get a thread each, so neighbouring
// threads read neighbouring addresses.
//
// Host-compilable: the CPU tests run these kernels on the emulator of CUDA's threads
// (tests/kernels/test_softmax_simt.cpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/rows.cuh"

namespace kiln::softmax_cuda {

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
      for (int64_t j = 0; j < n; ++j)
        out[base + j * inner] = from_f32<S>(expf(to_f32(in[base + j * inner]) - mx) * inv);
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

}  // namespace kiln::softmax_cuda
