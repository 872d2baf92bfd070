// One generic reduction for sum, mean, max/min (with indices), argmax/argmin and var, over any set
// of dims; plus topk and multinomial, which reduce rows in their own way. The CPU reference
// accumulates in double (int64 for integer sums) and splits long reductions into fixed-size
// chunks merged in order, so results never depend on thread count or timing.
#pragma once

#include <cstdint>

#include "kernels/philox.h"
#include "kernels/stream.h"
#include "kernels/strided.h"

namespace kiln {

enum class ReduceOp : uint8_t { Sum, Mean, Max, Min, ArgMax, ArgMin, Var, Prod, Any, All };

struct ReduceArgs {
  StridedArg out;      // the kept dims: out.sizes/ndim; null data when only indices are wanted
  StridedArg indices;  // int64 with out's sizes, or null data
  const void* in = nullptr;
  DType in_dtype = DType::Float32;
  int64_t in_kept_strides[kMaxDims] = {};  // input strides of the kept dims (sizes = out.sizes)
  int red_ndim = 0;
  int64_t red_sizes[kMaxDims] = {};
  int64_t red_strides[kMaxDims] = {};
  double correction = 1.0;  // var: divide by n - correction
};

void reduce_cpu(ReduceOp op, const ReduceArgs& args);

// Rows of a contiguous [rows, n] input; values/indices are contiguous [rows, k]. NaN counts as the
// largest value, ties keep the lower index first. Results are always sorted.
void topk_cpu(void* values, DType values_dtype, int64_t* indices, const void* in, DType in_dtype, int64_t rows,
              int64_t n, int64_t k, bool largest);

// out: contiguous int64 [rows, num_samples]; probs: [rows, n] non-negative weights (any strides).
// Element (r, s) of a draw with replacement uses Philox subsequence r * num_samples + s; without
// replacement, category (r, j) gets an exponential key from subsequence r * n + j and the
// num_samples smallest keys win (sequential sampling without replacement in distribution).
// Invalid rows (negative, inf or NaN weights, zero sum, too few non-zero weights) are an Error.
void multinomial_cpu(int64_t* out, const StridedArg& probs, int64_t num_samples, bool replacement,
                     PhiloxState philox);

}  // namespace kiln
