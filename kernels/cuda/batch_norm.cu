// CUDA twins of kernels/cpu/batch_norm.cpp: the launches of the kernels in batch_norm.cuh (the
// per-channel sums in chunks merged in order, then the elementwise passes in x's memory order).
#include "kernels/batch_norm.h"
#include "kernels/cuda/batch_norm.cuh"
#include "kernels/cuda/common.cuh"

namespace kiln {
namespace {

using cuda_detail::raw_stream;
using namespace batch_norm_cuda;

}  // namespace

void batch_norm_forward_cuda(void* out, void* save_mean, void* save_rstd, const void* x, DType x_dtype,
                             const ChannelLayout& layout, const BatchNormParams& params, bool training,
                             double momentum, double eps, const KernelContext& ctx) {
  const char* op = "batch_norm";
  const int64_t numel = layout.n * layout.c * layout.s;
  if (numel == 0) return;
  const cudaStream_t s = raw_stream(ctx.stream);
  float* m = static_cast<float*>(save_mean);
  float* r = static_cast<float*>(save_rstd);
  KILN_CUDA_FLOAT_SWITCH(x_dtype, op, {
    const S* xp = static_cast<const S*>(x);
    if (training) {
      const BnPlan plan = bn_plan(layout);
      check_bn_grid(plan);
      Welford* part = static_cast<Welford*>(ctx.workspace(batch_norm_forward_workspace_bytes(layout, true)));
      const dim3 grid(static_cast<unsigned>(plan.c_groups), static_cast<unsigned>(plan.chunks));
      bn_stats_partial_kernel<S><<<grid, dim3(plan.bx, plan.by), 0, s>>>(part, xp, layout, plan.count,
                                                                          plan.chunk_len);
      cuda_detail::check_launch(op);
      bn_stats_finish_kernel<<<cuda_detail::grid_for(layout.c), cuda_detail::kThreads, 0, s>>>(
          m, r, part, plan.chunks, layout.c, plan.count, params, momentum, eps);
    } else {
      bn_eval_stats_kernel<<<cuda_detail::grid_for(layout.c), cuda_detail::kThreads, 0, s>>>(m, r, params, layout.c,
                                                                                             eps);
    }
    cuda_detail::check_launch(op);
    bn_normalize_kernel<S><<<cuda_detail::grid_for(numel), cuda_detail::kThreads, 0, s>>>(
        channel_offset_calc(layout), static_cast<S*>(out), xp, m, r, params.weight, params.bias, params.param_dtype,
        static_cast<const S*>(params.residual), params.relu, numel);
    cuda_detail::check_launch(op);
  });
}

void batch_norm_backward_cuda(void* dx, void* dweight, void* dbias, const void* dout, const void* relu_out,
                              const void* x, DType x_dtype, const ChannelLayout& layout, const void* save_mean,
                              const void* save_rstd, const void* weight, DType param_dtype, bool training,
                              const KernelContext& ctx) {
  const char* op = "batch_norm backward";
  const int64_t numel = layout.n * layout.c * layout.s;
  if (numel == 0) return;
  const cudaStream_t s = raw_stream(ctx.stream);
  const float* m = static_cast<const float*>(save_mean);
  const float* r = static_cast<const float*>(save_rstd);
  // The sums are needed for dweight/dbias, and for dx only in training.
  const bool want_sums = dweight != nullptr || dbias != nullptr || (dx != nullptr && training);
  const BnPlan plan = bn_plan(layout);
  if (want_sums) check_bn_grid(plan);
  void* workspace = ctx.workspace(batch_norm_backward_workspace_bytes(layout));
  float2* coef = static_cast<float2*>(workspace);
  KILN_CUDA_FLOAT_SWITCH(x_dtype, op, {
    const S* dy = static_cast<const S*>(dout);
    const S* y = static_cast<const S*>(relu_out);
    const S* xp = static_cast<const S*>(x);
    if (want_sums) {
      float2* part = reinterpret_cast<float2*>(static_cast<char*>(workspace) +
                                               align_up(static_cast<size_t>(layout.c) * sizeof(float2)));
      const dim3 grid(static_cast<unsigned>(plan.c_groups), static_cast<unsigned>(plan.chunks));
      bn_grad_partial_kernel<S><<<grid, dim3(plan.bx, plan.by), 0, s>>>(part, dy, y, xp, m, r, layout,
                                                                         plan.count, plan.chunk_len);
      cuda_detail::check_launch(op);
      bn_grad_finish_kernel<<<cuda_detail::grid_for(layout.c), cuda_detail::kThreads, 0, s>>>(
          coef, dweight, dbias, param_dtype, part, plan.chunks, layout.c, plan.count);
      cuda_detail::check_launch(op);
    }
    if (dx) {
      bn_dx_kernel<S><<<cuda_detail::grid_for(numel), cuda_detail::kThreads, 0, s>>>(
          channel_offset_calc(layout), static_cast<S*>(dx), dy, y, xp, m, r, coef, weight, param_dtype, training,
          numel);
      cuda_detail::check_launch(op);
    }
  });
}

}  // namespace kiln
