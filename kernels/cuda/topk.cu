// CUDA topk: kernels/cuda/topk.cuh's launches on the context's stream, with a workspace for as many
// rows as fit under sort.cuh's cap.
#include "kernels/cuda/topk.cuh"
#include "kernels/topk.h"

namespace kiln {

void topk_cuda(void* values, DType values_dtype, int64_t* indices, const void* in, DType in_dtype, int64_t rows,
               int64_t n, int64_t k, bool largest, const KernelContext& ctx) {
  topk_launches(values, values_dtype, indices, in, in_dtype, rows, n, k, largest,
                [&](size_t bytes) { return ctx.workspace(bytes); }, StreamLaunch{raw_stream(ctx.stream), "topk"});
}

}  // namespace kiln
