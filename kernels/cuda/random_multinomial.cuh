// multinomial's CUDA kernels and their launches (the twin of multinomial_cpu), run by
// kernels/cuda/random_multinomial.cu. A prep kernel checks each row's weights like the CPU and, with
// replacement, writes cumulative sums that a draw kernel searches; without replacement, each
// category's exponential race time is a key and the shared row selection (sort.cuh) keeps the
// num_samples smallest. Internal to that file and its test (each includer gets its own copy, as with
// sort.cuh).
//
// Host-compilable: multinomial_launches makes its launches through a launcher (StreamLaunch on a
// GPU), and the CPU tests run it on the emulator of CUDA's threads
// (tests/kernels/test_multinomial_simt.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/sort.cuh"
#include "kernels/index.h"
#include "kernels/random.h"
#include "kernels/strided.h"

namespace kiln {
namespace {

constexpr int kPrepThreads = 256;
constexpr int kPrepItems = 4;  // consecutive weights per thread in a prefix-sum tile

struct RowInfo {
  double total;          // the last cumulative sum (with replacement)
  int64_t last_nonzero;  // where a draw lands when u * total rounds up to total
  int32_t status;        // 0, or a MultinomialRowError
  int32_t pad;
};

struct MultinomialSource {
  const void* probs;
  DType dtype;
  int64_t row_stride, col_stride, n, row0;
  PhiloxState philox;
  const RowInfo* info;
  __device__ bool valid(int64_t row) const { return info[row].status == 0; }
  // The CPU's race: category j finishes at E_j / p_j with E_j = -log1p(-u) from Philox element
  // (row * n + j); zero weights never finish (the largest key; enough others exist in a valid row).
  __device__ uint64_t key(int64_t row, int64_t j) const {
    const int64_t r = row0 + row;
    const double p = load_as<double>(probs, dtype, r * row_stride + j * col_stride);
    if (!(p > 0)) return kMaxKey;
    const uint64_t e = static_cast<uint64_t>(r * n + j);
    const PhiloxState ph = philox_resolve(philox);  // a captured graph's base, read at run time
    const Philox4 blk = philox_block(ph.seed, ph.offset, e >> 1);
    const double u = philox_uniform_double(blk.v[(e & 1) * 2], blk.v[(e & 1) * 2 + 1]);
    return order_key(-::log1p(-u) / p);
  }
};

struct MultinomialSink {
  int64_t* out;
  int64_t num_samples, row0;
  __device__ void write(int64_t row, int64_t s, uint32_t j) const { out[(row0 + row) * num_samples + s] = j; }
};


// ---- multinomial ----

// One block per row: validates the weights like the CPU (first bad weight, zero sum, overflowing
// sum, too few non-zero weights) and, with replacement, writes the row's cumulative sums. Each
// thread adds kPrepItems consecutive weights, a block scan adds the threads in a fixed order, and a
// running max then makes the sums non-decreasing and flat across zero weights (a zero weight counts
// as -inf before the max), so rounding can never let a draw land on a zero-weight category.
__global__ void __launch_bounds__(kPrepThreads)
    multinomial_prep_kernel(const void* probs, DType dtype, int64_t row_stride, int64_t col_stride, int64_t row0,
                            int64_t rows, int64_t n, int64_t num_samples, bool replacement, double* cum,
                            RowInfo* info, DeviceErrorRecord* err) {
  KILN_SHARED(double, dbuf, [32]);
  KILN_SHARED(long long, lbuf, [32]);
  const int tid = threadIdx.x;
  const double neg_inf = -__longlong_as_double(0x7ff0000000000000LL);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t r = row0 + row;
    double carry = 0, carry_max = neg_inf;  // the same in every thread: built from block totals
    long long bad = n, nonzero = 0, last_nonzero = -1;
    for (int64_t base = 0; base < n; base += static_cast<int64_t>(kPrepThreads) * kPrepItems) {
      const int64_t j0 = base + static_cast<int64_t>(tid) * kPrepItems;
      double c[kPrepItems];
      bool positive[kPrepItems];
      double local = 0;
      for (int q = 0; q < kPrepItems; ++q) {
        const int64_t j = j0 + q;
        double p = 0;
        if (j < n) {
          p = load_as<double>(probs, dtype, r * row_stride + j * col_stride);
          if ((::isnan(p) || ::isinf(p) || p < 0) && bad == n) bad = j;  // a thread sees its j in order
          if (p > 0) {
            ++nonzero;
            last_nonzero = j;
          }
        }
        local += p;
        c[q] = local;
        positive[q] = p > 0;
      }
      double tile_sum;
      const double start = carry + block_exclusive_scan(local, SumOp<double>{}, 0.0, dbuf, tile_sum);
      double local_max = neg_inf;
      for (int q = 0; q < kPrepItems; ++q) {
        c[q] = positive[q] ? start + c[q] : neg_inf;
        local_max = c[q] > local_max ? c[q] : local_max;
      }
      double tile_max;
      const double before = block_exclusive_scan(local_max, MaxOp<double>{}, neg_inf, dbuf, tile_max);
      if (replacement) {
        double m = before > carry_max ? before : carry_max;
        for (int q = 0; q < kPrepItems; ++q) {
          m = c[q] > m ? c[q] : m;
          if (j0 + q < n) cum[row * n + j0 + q] = m;
        }
      }
      carry += tile_sum;
      carry_max = tile_max > carry_max ? tile_max : carry_max;
    }
    long long first_bad, count, last;
    block_inclusive_scan(bad, MinOp<long long>{}, static_cast<long long>(n), lbuf, first_bad);
    block_inclusive_scan(nonzero, SumOp<long long>{}, 0LL, lbuf, count);
    block_inclusive_scan(last_nonzero, MaxOp<long long>{}, -1LL, lbuf, last);
    if (tid == 0) {
      MultinomialRowError e{};
      if (first_bad < n) {
        const double p = load_as<double>(probs, dtype, r * row_stride + first_bad * col_stride);
        e = ::isnan(p) || ::isinf(p) ? MultinomialRowError::InvalidWeight : MultinomialRowError::NegativeWeight;
      } else if (count == 0) {
        e = MultinomialRowError::ZeroSum;
      } else if (::isinf(carry) || (replacement && ::isinf(carry_max))) {
        e = MultinomialRowError::InfiniteSum;
      } else if (!replacement && count < num_samples) {
        e = MultinomialRowError::TooFewNonZero;
      }
      info[row] = RowInfo{carry_max, last, static_cast<int32_t>(e), 0};
      if (e != MultinomialRowError{}) {
        cuda_detail::record_device_error(err, IndexCheckOp::Multinomial, r, static_cast<int64_t>(e));
      }
    }
  }
}

// With replacement: sample (r, s) uses Philox element r * num_samples + s and takes the first
// category whose cumulative sum exceeds u * total, as the CPU's upper_bound.
__global__ void multinomial_draw_kernel(int64_t* out, const double* cum, const RowInfo* info, int64_t row0,
                                        int64_t rows, int64_t n, int64_t num_samples, PhiloxState philox) {
  philox = philox_resolve(philox);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < rows * num_samples; q += step) {
    const int64_t row = q / num_samples, s = q % num_samples, r = row0 + row;
    const RowInfo ri = info[row];
    int64_t j = 0;
    if (ri.status == 0) {
      const uint64_t e = static_cast<uint64_t>(r * num_samples + s);
      const Philox4 blk = philox_block(philox.seed, philox.offset, e >> 1);
      const double u = philox_uniform_double(blk.v[(e & 1) * 2], blk.v[(e & 1) * 2 + 1]);
      const double target = u * ri.total;
      const double* w = cum + row * n;
      int64_t lo = 0, hi = n;
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (w[mid] > target) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      j = lo < n ? lo : ri.last_nonzero;  // u * total rounded up to total
    }
    out[r * num_samples + s] = j;
  }
}

inline size_t multinomial_row_bytes(int64_t n, int64_t num_samples, bool replacement) {
  return sizeof(RowInfo) +
         (replacement ? static_cast<size_t>(n) * sizeof(double) : sort_workspace_per_row(n, num_samples));
}

// The rows of probs ([rows, n], or one row of n) and their strides.
struct MultinomialRows {
  int64_t rows, n, row_stride, col_stride;
};
inline MultinomialRows multinomial_rows(const StridedArg& probs) {
  const bool two_d = probs.ndim >= 2;
  return {two_d ? probs.sizes[0] : 1, two_d ? probs.sizes[1] : probs.sizes[0], two_d ? probs.strides[0] : 0,
          two_d ? probs.strides[1] : probs.strides[0]};
}

// The launches of one multinomial call, in batches of the rows whose RowInfo and cumulative sums
// (or sort) fit in `workspace_bytes`: for each batch the prep kernel, then the draws or the row
// selection. Each launch is a call launch(kernel, grid, block, arguments...) (StreamLaunch on a
// GPU). Invalid rows are recorded in err, their outputs 0.
template <class Launch>
inline void multinomial_launches(int64_t* out, const StridedArg& probs, int64_t num_samples, bool replacement,
                                 PhiloxState philox, void* workspace, size_t workspace_bytes, DeviceErrorRecord* err,
                                 const Launch& launch) {
  const MultinomialRows m = multinomial_rows(probs);
  if (m.rows <= 0 || num_samples <= 0) return;
  check_row_length("multinomial", m.n);
  const size_t per_row = multinomial_row_bytes(m.n, num_samples, replacement);
  const int64_t batch = batch_rows("multinomial", m.rows, per_row, workspace, workspace_bytes);
  // Layout: RowInfo[batch], then the cumulative sums or the sort (both 8-byte aligned).
  RowInfo* info = static_cast<RowInfo*>(workspace);
  void* rest = info + batch;
  for (int64_t row0 = 0; row0 < m.rows; row0 += batch) {
    const int64_t b = std::min(batch, m.rows - row0);
    launch(multinomial_prep_kernel, grid_of(b), unsigned{kPrepThreads}, probs.data, probs.dtype, m.row_stride,
           m.col_stride, row0, b, m.n, num_samples, replacement, static_cast<double*>(rest), info, err);
    if (replacement) {
      launch(multinomial_draw_kernel, grid_of(ceil_div(b * num_samples, 256)), 256u, out,
             static_cast<const double*>(rest), static_cast<const RowInfo*>(info), row0, b, m.n, num_samples, philox);
    } else {
      const MultinomialSource src{probs.data, probs.dtype, m.row_stride, m.col_stride, m.n, row0, philox, info};
      const MultinomialSink sink{out, num_samples, row0};
      smallest_k(src, sink, b, m.n, num_samples, rest, launch);
    }
  }
}

}  // namespace
}  // namespace kiln
