// Softmax, layer norm and batch norm kernels, forward and backward. Activations are read in their
// own dtype and cast on load; statistics (mean, rstd) are float, or double for float64 inputs, so a
// float16/bfloat16 activation never needs a cast copy. Parameter-gradient reductions over rows
// use fixed chunks merged in chunk order, so they are bit-identical for any thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace kiln {

// The dtype of saved statistics (mean, rstd) for an activation dtype: float64 stays float64,
// everything else is float32.
constexpr DType norm_stat_dtype(DType activation) {
  return activation == DType::Float64 ? DType::Float64 : DType::Float32;
}

// --- softmax ---------------------------------------------------------------------------------
// A contiguous tensor seen as [outer, n, inner]: softmax runs along the middle dim (stride
// `inner`), so any dim is handled without moving it last. out/in/grads share one dtype.
void softmax_forward_cpu(void* out, const void* in, DType dtype, int64_t outer, int64_t n, int64_t inner, bool log);
// dinp from dout and the forward output `out` (softmax: out * (dout - sum(dout * out));
// log_softmax: dout - exp(out) * sum(dout)).
void softmax_backward_cpu(void* dinp, const void* dout, const void* out, DType dtype, int64_t outer, int64_t n,
                          int64_t inner, bool log);

// --- layer norm ------------------------------------------------------------------------------
// x: contiguous [rows, n] of x_dtype; weight/bias: [n] of param_dtype, each may be null; mean and
// rstd: [rows] of norm_stat_dtype(x_dtype). out has x's dtype.
void layer_norm_forward_cpu(void* out, void* mean, void* rstd, const void* x, DType x_dtype, const void* weight,
                            const void* bias, DType param_dtype, int64_t rows, int64_t n, double eps);
// Any of dx ([rows, n], x_dtype), dweight, dbias ([n], param_dtype) may be null (not wanted).
// dout is contiguous [rows, n] of x_dtype.
void layer_norm_backward_cpu(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                             const void* mean, const void* rstd, const void* weight, DType param_dtype, int64_t rows,
                             int64_t n);

// --- batch norm ------------------------------------------------------------------------------
// An [N, C, ...] activation seen as [N, C, S] through strides (spatial dims merged), which covers
// NCHW and channels-last alike.
struct ChannelLayout {
  int64_t n = 0, c = 0, s = 1;
  int64_t stride_n = 0, stride_c = 0, stride_s = 0;
};

// Per-channel [C] vectors: weight, bias (param_dtype), running stats (running_dtype); null = absent.
struct BatchNormParams {
  const void* weight = nullptr;
  const void* bias = nullptr;
  DType param_dtype = DType::Float32;
  void* running_mean = nullptr;
  void* running_var = nullptr;
  DType running_dtype = DType::Float32;
};

// out and x share `layout` (out is allocated with x's strides). Training: mean and biased variance
// over N and S normalize x, save_mean/save_rstd receive them, and the running stats (when given)
// become (1 - momentum) * running + momentum * stat with the unbiased variance. Eval: the running
// stats normalize x and save_mean/save_rstd receive running_mean and 1/sqrt(running_var + eps).
// save_mean/save_rstd: [C] of norm_stat_dtype(x_dtype).
void batch_norm_forward_cpu(void* out, void* save_mean, void* save_rstd, const void* x, DType x_dtype,
                            const ChannelLayout& layout, const BatchNormParams& params, bool training, double momentum,
                            double eps);
// dx (x's layout and dtype), dweight, dbias ([C], param_dtype); any may be null. dout has x's
// layout and dtype. Training differentiates through the batch statistics; eval treats them as
// constants.
void batch_norm_backward_cpu(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                             const ChannelLayout& layout, const void* save_mean, const void* save_rstd,
                             const void* weight, DType param_dtype, bool training);

#if defined(KILN_WITH_CUDA)
// The CUDA twins: same arguments and results (pointers on the device), float32/float16/bfloat16
// activations (float64 is CPU-only: a DTypeError), parameters and running stats of any float dtype.
// Cross-row sums go through a caller-provided workspace of the size the *_workspace_bytes function
// gives (0: none needed; pointer may then be null) as fixed chunks merged in order, so results are
// bit-identical run to run. Statistics are float32.
void softmax_forward_cuda(void* out, const void* in, DType dtype, int64_t outer, int64_t n, int64_t inner, bool log,
                          Stream stream);
void softmax_backward_cuda(void* dinp, const void* dout, const void* out, DType dtype, int64_t outer, int64_t n,
                           int64_t inner, bool log, Stream stream);

void layer_norm_forward_cuda(void* out, void* mean, void* rstd, const void* x, DType x_dtype, const void* weight,
                             const void* bias, DType param_dtype, int64_t rows, int64_t n, double eps, Stream stream);
size_t layer_norm_backward_cuda_workspace_bytes(int64_t rows, int64_t n, bool want_param_grads);
void layer_norm_backward_cuda(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                              const void* mean, const void* rstd, const void* weight, DType param_dtype, int64_t rows,
                              int64_t n, void* workspace, size_t workspace_bytes, Stream stream);

// The CUDA batch norm reads x, out, dout and dx through `layout`; all four share it (as on the CPU).
size_t batch_norm_forward_cuda_workspace_bytes(const ChannelLayout& layout, bool training);
void batch_norm_forward_cuda(void* out, void* save_mean, void* save_rstd, const void* x, DType x_dtype,
                             const ChannelLayout& layout, const BatchNormParams& params, bool training,
                             double momentum, double eps, void* workspace, size_t workspace_bytes, Stream stream);
size_t batch_norm_backward_cuda_workspace_bytes(const ChannelLayout& layout);
void batch_norm_backward_cuda(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                              const ChannelLayout& layout, const void* save_mean, const void* save_rstd,
                              const void* weight, DType param_dtype, bool training, void* workspace,
                              size_t workspace_bytes, Stream stream);
#endif

}  // namespace kiln
