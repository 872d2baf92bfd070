// embedding's lookup: row indices[i] of a [num, dim] weight becomes row i of the output. The
// backward is a scatter_add of the output gradient into the weight's rows (kernels/index.h).
#pragma once

#include <cstdint>

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

namespace kernels {
KILN_KERNEL(embedding_forward);
}  // namespace kernels

}  // namespace kiln
