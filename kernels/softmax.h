// softmax and log_softmax along any dim, forward and backward. Inputs are read in their own dtype
// and accumulated in float (double for float64); the backward needs only the forward's output.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel.h"

namespace kiln {

// A contiguous tensor seen as [outer, n, inner]: softmax runs along the middle dim (stride
// `inner`), so any dim is handled without moving it last. out/in/grads share one dtype; the CUDA
// twin takes float32/float16/bfloat16 (float64 is CPU-only: a DTypeError).
void softmax_forward_cpu(void* out, const void* in, DType dtype, int64_t outer, int64_t n, int64_t inner, bool log,
                         const KernelContext& ctx);
void softmax_forward_cuda(void* out, const void* in, DType dtype, int64_t outer, int64_t n, int64_t inner, bool log,
                          const KernelContext& ctx);
// dinp from dout and the forward output `out` (softmax: out * (dout - sum(dout * out));
// log_softmax: dout - exp(out) * sum(dout)).
void softmax_backward_cpu(void* dinp, const void* dout, const void* out, DType dtype, int64_t outer, int64_t n,
                          int64_t inner, bool log, const KernelContext& ctx);
void softmax_backward_cuda(void* dinp, const void* dout, const void* out, DType dtype, int64_t outer, int64_t n,
                           int64_t inner, bool log, const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(softmax_forward);
KILN_KERNEL(softmax_backward);
}  // namespace kernels

}  // namespace kiln
