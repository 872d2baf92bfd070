// topk: the k largest (or smallest) values of each row, with their indices, sorted.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel.h"

namespace kiln {

// Rows of a contiguous [rows, n] input; values/indices are contiguous [rows, k]. NaN counts as the
// largest value, ties keep the lower index first. Results are always sorted. On CUDA, rows longer
// than 2048 with k > 2048 are sorted in scratch memory from the context, a batch of rows at a time
// when it cannot hold all; rows of 2^32 - 1 elements or more are a kiln::Error.
void topk_cpu(void* values, DType values_dtype, int64_t* indices, const void* in, DType in_dtype, int64_t rows,
              int64_t n, int64_t k, bool largest, const KernelContext& ctx);
void topk_cuda(void* values, DType values_dtype, int64_t* indices, const void* in, DType in_dtype, int64_t rows,
               int64_t n, int64_t k, bool largest, const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(topk);
}  // namespace kernels

}  // namespace kiln
