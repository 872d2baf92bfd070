// Batch norm over [N, C, ...] activations, forward (training and eval) and backward. Per-channel
// sums run in fixed chunks merged in order (the CPU sums a whole channel on one thread, in double),
// so results are bit-identical run to run; the CUDA twin takes float32/float16/bfloat16 activations
// (float64 is CPU-only), with its cross-chunk partials in scratch memory from the context.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel.h"

namespace kiln {

// An [N, C, ...] activation seen as [N, C, S] through strides (spatial dims merged), which covers
// NCHW and channels-last alike.
struct ChannelLayout {
  int64_t n = 0, c = 0, s = 1;
  int64_t stride_n = 0, stride_c = 0, stride_s = 0;
};

// What the forward reads besides x: per-channel [C] vectors, weight, bias (param_dtype) and the
// running stats (running_dtype), null when absent; and its epilogue, applied in the pass that
// normalizes: the normalized value rounded to x's dtype, plus `residual` (x's layout and dtype; null:
// none) rounded again, then ReLU when `relu` is set. Each step rounds as the op it replaces
// (batch_norm, add, relu) would, so the result has their bits.
struct BatchNormParams {
  const void* weight = nullptr;
  const void* bias = nullptr;
  DType param_dtype = DType::Float32;
  void* running_mean = nullptr;
  void* running_var = nullptr;
  DType running_dtype = DType::Float32;
  const void* residual = nullptr;
  bool relu = false;
};

// out and x share `layout` (out is allocated with x's strides). Training: mean and biased variance
// over N and S normalize x, save_mean/save_rstd receive them, and the running stats (when given)
// become (1 - momentum) * running + momentum * stat with the unbiased variance. Eval: the running
// stats normalize x and save_mean/save_rstd receive running_mean and 1/sqrt(running_var + eps).
// save_mean/save_rstd: [C] of norm_stat_dtype(x_dtype).
void batch_norm_forward_cpu(void* out, void* save_mean, void* save_rstd, const void* x, DType x_dtype,
                            const ChannelLayout& layout, const BatchNormParams& params, bool training, double momentum,
                            double eps, const KernelContext& ctx);
void batch_norm_forward_cuda(void* out, void* save_mean, void* save_rstd, const void* x, DType x_dtype,
                             const ChannelLayout& layout, const BatchNormParams& params, bool training,
                             double momentum, double eps, const KernelContext& ctx);
// dx (x's layout and dtype), dweight, dbias ([C], param_dtype); any may be null. dout has x's
// layout and dtype. relu_out, when not null, is the output of a forward whose epilogue was a ReLU
// (and no residual), in x's layout: dout counts only where relu_out > 0, which is ReLU's backward
// in the same passes (the same bits as relu's backward kernel, then this one). Training
// differentiates through the batch statistics; eval treats them as constants.
void batch_norm_backward_cpu(void* dx, void* dweight, void* dbias, const void* dout, const void* relu_out,
                             const void* x, DType x_dtype, const ChannelLayout& layout, const void* save_mean,
                             const void* save_rstd, const void* weight, DType param_dtype, bool training,
                             const KernelContext& ctx);
void batch_norm_backward_cuda(void* dx, void* dweight, void* dbias, const void* dout, const void* relu_out,
                              const void* x, DType x_dtype, const ChannelLayout& layout, const void* save_mean,
                              const void* save_rstd, const void* weight, DType param_dtype, bool training,
                              const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(batch_norm_forward);
KILN_KERNEL(batch_norm_backward);
}  // namespace kernels

}  // namespace kiln
