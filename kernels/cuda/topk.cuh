// topk's CUDA launches (the twin of topk_cpu), run by kernels/cuda/topk.cu: values become
// order-preserving integer keys (complemented for the largest), the shared row selection of
// sort.cuh keeps the k smallest, and the values are copied from the input afterwards (int64
// exactly). Internal to topk.cu and its test (each includer gets its own copy, as with sort.cuh).
//
// Host-compilable: topk_launches makes its launches through a launcher (StreamLaunch on a GPU), and
// the CPU tests run it on the emulator of CUDA's threads (tests/kernels/test_sort_simt.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/sort.cuh"
#include "kernels/dtype.h"
#include "kernels/error.h"

namespace kiln {
namespace {

// Rows are numbered within the batch; the source and the sink add the batch's first row.
struct TopkSource {
  const void* in;
  DType dtype;
  int64_t n;
  int64_t row0;
  bool largest;
  bool integral;  // keys from the int64 value (exact past 2^53), else from the double
  __device__ bool valid(int64_t) const { return true; }
  // largest: complemented, so that the ascending sort puts NaN first and ties still by index.
  __device__ uint64_t key(int64_t row, int64_t j) const {
    const int64_t at = (row0 + row) * n + j;
    const uint64_t k = integral ? order_key(load_as<int64_t>(in, dtype, at))  //
                                : order_key(load_as<double>(in, dtype, at));
    return largest ? ~k : k;
  }
};

struct TopkSink {
  void* values;
  DType values_dtype;
  int64_t* indices;
  const void* in;
  DType in_dtype;
  int64_t n, k, row0;
  bool integral;  // values copy through int64 so that large int64 values stay exact
  __device__ void write(int64_t row, int64_t s, uint32_t j) const {
    const int64_t dst = (row0 + row) * k + s;
    if (indices) indices[dst] = j;
    if (!values) return;
    const int64_t src = (row0 + row) * n + j;
    if (integral) {
      store_as<int64_t>(values, values_dtype, dst, load_as<int64_t>(in, in_dtype, src));
    } else {
      store_as<double>(values, values_dtype, dst, load_as<double>(in, in_dtype, src));
    }
  }
};

// topk of `rows` contiguous rows of n, through `launch`: checks k and n, asks workspace(bytes) for
// scratch (the context's on a GPU; up to workspace_cap bytes, at least a row's worth when the rows
// need any), and runs one selection per batch of rows that the workspace holds.
template <class Workspace, class Launch>
void topk_launches(void* values, DType values_dtype, int64_t* indices, const void* in, DType in_dtype, int64_t rows,
                   int64_t n, int64_t k, bool largest, const Workspace& workspace, const Launch& launch,
                   size_t workspace_cap = kWorkspaceCap) {
  if (k > n) {
    throw Error("topk: k = " + std::to_string(k) + " is larger than the row size " + std::to_string(n));
  }
  if (k <= 0 || rows <= 0) return;
  check_row_length("topk", n);
  const size_t per_row = sort_workspace_per_row(n, k);
  const size_t bytes = capped(rows, per_row, workspace_cap);
  void* scratch = workspace(bytes);
  const int64_t batch = batch_rows("topk", rows, per_row, scratch, bytes);
  const bool integral = is_integral(in_dtype, true);
  for (int64_t row0 = 0; row0 < rows; row0 += batch) {
    const int64_t b = std::min(batch, rows - row0);
    const TopkSource src{in, in_dtype, n, row0, largest, integral};
    const TopkSink sink{values, values_dtype, indices, in, in_dtype, n, k, row0, integral};
    smallest_k(src, sink, b, n, k, scratch, launch);
  }
}

}  // namespace
}  // namespace kiln
