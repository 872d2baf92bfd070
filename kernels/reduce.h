// One generic reduction for sum, mean, max/min (with indices), argmax/argmin and var, over any set
// of dims; plus topk and multinomial, which reduce rows in their own way. The CPU reference
// accumulates in double (int64 for integer sums) and splits long reductions into fixed-size
// chunks merged in order, so results never depend on thread count or timing.
#pragma once

#include <cstdint>

#include <cstddef>

#include "kernels/index.h"
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

#if defined(KILN_WITH_CUDA)
// The CUDA reduction: the same ops and empty-reduction results as reduce_cpu, accumulating in float
// for float32/float16/bfloat16 (double for float64, int64 for integer sums and products). The launch
// plan depends only on sizes and strides, never on the device or timing, so results are
// reproducible run to run. Long reductions with few outputs take two passes through `workspace`;
// reduce_cuda_workspace_bytes says how much (0 for one pass), and core allocates it on the stream.
size_t reduce_cuda_workspace_bytes(ReduceOp op, const ReduceArgs& args);
void reduce_cuda(ReduceOp op, const ReduceArgs& args, void* workspace, size_t workspace_bytes, Stream stream);

// topk_cpu's contract on the GPU. Rows longer than 2048 with k > 2048 are sorted in `workspace`
// (topk_cuda_workspace_bytes; 0 otherwise), a batch of rows at a time when it is smaller than all.
// Rows of 2^32 - 1 elements or more are a kiln::Error.
size_t topk_cuda_workspace_bytes(int64_t rows, int64_t n, int64_t k);
void topk_cuda(void* values, DType values_dtype, int64_t* indices, const void* in, DType in_dtype, int64_t rows,
               int64_t n, int64_t k, bool largest, void* workspace, size_t workspace_bytes, Stream stream);

// multinomial_cpu's draws on the GPU: the same Philox element indices and words, so the same
// categories except where u * total lands within rounding of a cumulative-sum boundary (the CUDA
// prefix sum adds in another order) or two exponential keys are within an ulp (CUDA's log1p).
// An invalid row cannot throw from the device: its outputs are set to 0 and the first one found is
// recorded in `err` as {op = IndexCheckOp::Multinomial, index = row, size = MultinomialRowError}, which
// the host raises at its next synchronizing call (cuda::raise_device_errors).
enum class MultinomialRowError : int64_t { InvalidWeight = 1, NegativeWeight, ZeroSum, InfiniteSum, TooFewNonZero };
size_t multinomial_cuda_workspace_bytes(int64_t rows, int64_t n, int64_t num_samples, bool replacement);
void multinomial_cuda(int64_t* out, const StridedArg& probs, int64_t num_samples, bool replacement, PhiloxState philox,
                      void* workspace, size_t workspace_bytes, DeviceErrorRecord* err, Stream stream);
#endif

}  // namespace kiln
