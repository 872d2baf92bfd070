// The CUDA twins of kernels/cpu/softmax.cpp: the launches of the kernels in kernels/cuda/softmax.cuh.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/softmax.cuh"
#include "kernels/softmax.h"

namespace kiln {
namespace {

using cuda_detail::raw_stream;
using namespace softmax_cuda;

}  // namespace

void softmax_forward_cuda(void* out, const void* in, DType dtype, int64_t outer, int64_t n, int64_t inner, bool log,
                          const KernelContext& ctx) {
  const char* op = log ? "log_softmax" : "softmax";
  if (outer * n * inner == 0) return;
  const cudaStream_t s = raw_stream(ctx.stream);
  KILN_CUDA_FLOAT_SWITCH(dtype, op, {
    S* o = static_cast<S*>(out);
    const S* x = static_cast<const S*>(in);
    if (inner == 1) {
      const RowLaunch rl = row_launch(outer, n);
      if (rl.block_row) {
        softmax_forward_rows_kernel<S, true><<<rl.grid, rl.threads, 0, s>>>(o, x, outer, n, log);
      } else {
        softmax_forward_rows_kernel<S, false><<<rl.grid, rl.threads, 0, s>>>(o, x, outer, n, log);
      }
    } else {
      softmax_forward_cols_kernel<S><<<cuda_detail::grid_for(outer * inner), cuda_detail::kThreads, 0, s>>>(
          o, x, outer, n, inner, log);
    }
  });
  cuda_detail::check_launch(op);
}

void softmax_backward_cuda(void* dinp, const void* dout, const void* out, DType dtype, int64_t outer, int64_t n,
                           int64_t inner, bool log, const KernelContext& ctx) {
  const char* op = log ? "log_softmax backward" : "softmax backward";
  if (outer * n * inner == 0) return;
  const cudaStream_t s = raw_stream(ctx.stream);
  KILN_CUDA_FLOAT_SWITCH(dtype, op, {
    S* dx = static_cast<S*>(dinp);
    const S* dy = static_cast<const S*>(dout);
    const S* y = static_cast<const S*>(out);
    if (inner == 1) {
      const RowLaunch rl = row_launch(outer, n);
      if (rl.block_row) {
        softmax_backward_rows_kernel<S, true><<<rl.grid, rl.threads, 0, s>>>(dx, dy, y, outer, n, log);
      } else {
        softmax_backward_rows_kernel<S, false><<<rl.grid, rl.threads, 0, s>>>(dx, dy, y, outer, n, log);
      }
    } else {
      softmax_backward_cols_kernel<S><<<cuda_detail::grid_for(outer * inner), cuda_detail::kThreads, 0, s>>>(
          dx, dy, y, outer, n, inner, log);
    }
  });
  cuda_detail::check_launch(op);
}

}  // namespace kiln
