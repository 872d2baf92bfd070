// Layer norm over the trailing n values of each row, forward and backward. Activations are read in
// their own dtype and cast on load; statistics (mean, rstd) are norm_stat_dtype, so a float16 or
// bfloat16 activation never needs a cast copy. The weight and bias gradients sum over all rows in
// fixed chunks merged in order, so they are bit-identical for any thread count and every run.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel.h"

namespace kiln {

// x: contiguous [rows, n] of x_dtype; weight/bias: [n] of param_dtype, each may be null; mean and
// rstd: [rows] of norm_stat_dtype(x_dtype). out has x's dtype. The CUDA twin takes
// float32/float16/bfloat16 activations (float64 is CPU-only) and parameters of any float dtype.
void layer_norm_forward_cpu(void* out, void* mean, void* rstd, const void* x, DType x_dtype, const void* weight,
                            const void* bias, DType param_dtype, int64_t rows, int64_t n, double eps,
                            const KernelContext& ctx);
void layer_norm_forward_cuda(void* out, void* mean, void* rstd, const void* x, DType x_dtype, const void* weight,
                             const void* bias, DType param_dtype, int64_t rows, int64_t n, double eps,
                             const KernelContext& ctx);
// Any of dx ([rows, n], x_dtype), dweight, dbias ([n], param_dtype) may be null (not wanted).
// dout is contiguous [rows, n] of x_dtype. The CUDA twin sums the parameter gradients through
// scratch memory from the context.
void layer_norm_backward_cpu(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                             const void* mean, const void* rstd, const void* weight, DType param_dtype, int64_t rows,
                             int64_t n, const KernelContext& ctx);
void layer_norm_backward_cuda(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                              const void* mean, const void* rstd, const void* weight, DType param_dtype, int64_t rows,
                              int64_t n, const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(layer_norm_forward);
KILN_KERNEL(layer_norm_backward);
}  // namespace kernels

}  // namespace kiln
