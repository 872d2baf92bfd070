// The CUDA twins of kernels/cpu/layer_norm.cpp: the launches of the kernels in
// kernels/cuda/layer_norm.cuh.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/layer_norm.cuh"
#include "kernels/layer_norm.h"

namespace kiln {
namespace {

using cuda_detail::raw_stream;
using namespace layer_norm_cuda;

size_t layer_norm_backward_workspace_bytes(int64_t rows, int64_t n, bool want_param_grads) {
  if (!want_param_grads || rows == 0 || n == 0) return 0;
  const LnPlan p = ln_plan(rows);
  return 2 * align_up(static_cast<size_t>(p.chunks * n) * sizeof(float));
}

}  // namespace

void layer_norm_forward_cuda(void* out, void* mean, void* rstd, const void* x, DType x_dtype, const void* weight,
                             const void* bias, DType param_dtype, int64_t rows, int64_t n, double eps,
                             const KernelContext& ctx) {
  if (rows == 0 || n == 0) return;
  const cudaStream_t s = raw_stream(ctx.stream);
  float* m = static_cast<float*>(mean);
  float* r = static_cast<float*>(rstd);
  KILN_CUDA_FLOAT_SWITCH(x_dtype, "layer_norm", {
    S* o = static_cast<S*>(out);
    const S* xp = static_cast<const S*>(x);
    const RowPlan p = row_plan<S>(rows, n, x_dtype, param_dtype, weight != nullptr || bias != nullptr, {out, x});
    const float e = static_cast<float>(eps);
    if (p.cached && p.block_row) {
      layer_norm_forward_cached_kernel<S, true><<<p.grid, p.threads, 0, s>>>(o, m, r, xp, weight, bias, p.params_f32,
                                                                             rows, n, e);
    } else if (p.cached) {
      layer_norm_forward_cached_kernel<S, false><<<p.grid, p.threads, 0, s>>>(o, m, r, xp, weight, bias,
                                                                              p.params_f32, rows, n, e);
    } else if (p.block_row) {
      layer_norm_forward_kernel<S, true><<<p.grid, p.threads, 0, s>>>(o, m, r, xp, weight, bias, param_dtype, rows, n,
                                                                      e);
    } else {
      layer_norm_forward_kernel<S, false><<<p.grid, p.threads, 0, s>>>(o, m, r, xp, weight, bias, param_dtype, rows,
                                                                       n, e);
    }
  });
  cuda_detail::check_launch("layer_norm");
}

void layer_norm_backward_cuda(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                              const void* mean, const void* rstd, const void* weight, DType param_dtype, int64_t rows,
                              int64_t n, const KernelContext& ctx) {
  const char* op = "layer_norm backward";
  if (rows == 0 || n == 0) return;
  const cudaStream_t s = raw_stream(ctx.stream);
  const float* m = static_cast<const float*>(mean);
  const float* r = static_cast<const float*>(rstd);
  const bool want_params = dweight != nullptr || dbias != nullptr;
  const LnPlan plan = ln_plan(rows);
  void* workspace = ctx.workspace(layer_norm_backward_workspace_bytes(rows, n, want_params));
  KILN_CUDA_FLOAT_SWITCH(x_dtype, op, {
    const S* dy = static_cast<const S*>(dout);
    const S* xp = static_cast<const S*>(x);
    if (dx) {
      const RowPlan p = row_plan<S>(rows, n, x_dtype, param_dtype, weight != nullptr, {dx, dout, x});
      S* d = static_cast<S*>(dx);
      if (p.cached && p.block_row) {
        layer_norm_backward_dx_cached_kernel<S, true><<<p.grid, p.threads, 0, s>>>(d, dy, xp, m, r, weight,
                                                                                   p.params_f32, rows, n);
      } else if (p.cached) {
        layer_norm_backward_dx_cached_kernel<S, false><<<p.grid, p.threads, 0, s>>>(d, dy, xp, m, r, weight,
                                                                                    p.params_f32, rows, n);
      } else if (p.block_row) {
        layer_norm_backward_dx_kernel<S, true><<<p.grid, p.threads, 0, s>>>(d, dy, xp, m, r, weight, param_dtype,
                                                                            rows, n);
      } else {
        layer_norm_backward_dx_kernel<S, false><<<p.grid, p.threads, 0, s>>>(d, dy, xp, m, r, weight, param_dtype,
                                                                             rows, n);
      }
      cuda_detail::check_launch(op);
    }
    if (want_params) {
      float* part_w = static_cast<float*>(workspace);
      float* part_b = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                               align_up(static_cast<size_t>(plan.chunks * n) * sizeof(float)));
      const dim3 grid(static_cast<unsigned>(ceil_div(n, kLnCols)), static_cast<unsigned>(plan.chunks));
      layer_norm_param_partials_kernel<S><<<grid, dim3(kLnCols, kLnLanes), 0, s>>>(part_w, part_b, dy, xp, m, r, rows,
                                                                                  n, plan.chunk_rows);
      cuda_detail::check_launch(op);
      layer_norm_param_finish_kernel<<<static_cast<unsigned>(ceil_div(n, kLnCols)), dim3(kLnCols, kLnFinishLanes), 0,
                                       s>>>(dweight, dbias, param_dtype, part_w, part_b, plan.chunks, n);
      cuda_detail::check_launch(op);
    }
  });
}

}  // namespace kiln
