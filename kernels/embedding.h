// embedding's lookup: row indices[i] of a [num, dim] weight becomes row i of the output, and its
// backward: the output gradient's rows summed into the weight gradient's rows by index value, in
// the sorted, chunked order of kernels/embedding_plan.h (deterministic; the twins agree bit for bit).
#pragma once

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/strided.h"

namespace kiln {

// out: contiguous [k, dim] of weight's dtype; weight: a 2-D [num, dim] StridedArg (any strides);
// indices: contiguous int64 [k]. An index outside [0, num) is an IndexError on the CPU; on CUDA it
// gives a zero row and is recorded in the context's error record as IndexCheckOp::Embedding.
void embedding_forward_cpu(void* out, const StridedArg& weight, const int64_t* indices, int64_t k,
                           const KernelContext& ctx);
void embedding_forward_cuda(void* out, const StridedArg& weight, const int64_t* indices, int64_t k,
                            const KernelContext& ctx);

// The backward's limit: k positions and num embeddings each below 2^31 (sorted as 32-bit keys and
// positions); the op falls back to scatter_add (kernels/index.h) beyond it.
inline constexpr int64_t kEmbeddingBackwardMaxRows = int64_t{1} << 31;

// grad_weight: contiguous [num, dim] of `dtype`, to which the gradient is added; grad: contiguous
// [k, dim] of `dtype`; indices: contiguous int64 [k]. dtype: a floating type (CUDA: float32, float16,
// bfloat16). Sums accumulate in float (double for float64) and are added to grad_weight once per
// element. An index outside [0, num) is an IndexError on the CPU before anything is written; on CUDA
// its row is skipped and it is recorded as IndexCheckOp::Embedding.
void embedding_backward_cpu(void* grad_weight, const void* grad, DType dtype, const int64_t* indices, int64_t k,
                            int64_t num, int64_t dim, const KernelContext& ctx);
void embedding_backward_cuda(void* grad_weight, const void* grad, DType dtype, const int64_t* indices, int64_t k,
                             int64_t num, int64_t dim, const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(embedding_forward);
KILN_KERNEL(embedding_backward);
}  // namespace kernels

}  // namespace kiln
