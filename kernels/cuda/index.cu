// CUDA index_select, gather and scatter_add: the launches of kernels/cuda/index.cuh's kernels, one
// thread per output element (scatter_add: per line along `dim`).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/index.cuh"
#include "kernels/index.h"

namespace kiln {

using namespace index_device;
using cuda_detail::grid_for;
using cuda_detail::kThreads;
using cuda_detail::raw_stream;

void index_select_cuda(const StridedArg& out_arg, const StridedArg& in_arg, int dim, const StridedArg& index_arg,
                       const KernelContext& ctx) {
  const StridedArg out = at_least_1d(out_arg), in = at_least_1d(in_arg), index = at_least_1d(index_arg);
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceErrorRecord* err = ctx.error_record();
  index_select_kernel<<<grid_for(n), kThreads, 0, raw_stream(ctx.stream)>>>(out, in, dim, index, n, err);
  cuda_detail::check_launch("index_select");
}

void gather_cuda(const StridedArg& out_arg, const StridedArg& in_arg, int dim, const StridedArg& index_arg,
                 const KernelContext& ctx) {
  const StridedArg out = at_least_1d(out_arg), in = at_least_1d(in_arg), index = at_least_1d(index_arg);
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceErrorRecord* err = ctx.error_record();
  gather_kernel<<<grid_for(n), kThreads, 0, raw_stream(ctx.stream)>>>(out, in, dim, index, n, err);
  cuda_detail::check_launch("gather");
}

void scatter_add_cuda(const StridedArg& out_arg, int dim, const StridedArg& index_arg, const StridedArg& src_arg,
                      const KernelContext& ctx) {
  const StridedArg out = at_least_1d(out_arg), index = at_least_1d(index_arg), src = at_least_1d(src_arg);
  const int64_t outer = scatter_outer(index, dim);
  if (outer == 0 || index.sizes[dim] == 0) return;
  const unsigned blocks = grid_for(outer);
  const cudaStream_t s = raw_stream(ctx.stream);
  DeviceErrorRecord* err = ctx.error_record();
  if (is_floating(out.dtype)) {
    scatter_add_kernel<double><<<blocks, kThreads, 0, s>>>(out, dim, index, src, outer, err);
  } else {
    scatter_add_kernel<int64_t><<<blocks, kThreads, 0, s>>>(out, dim, index, src, outer, err);
  }
  cuda_detail::check_launch("scatter_add");
}

}  // namespace kiln
