// CUDA twin of reduce_cpu: the launches of kernels/cuda/reduce.cuh's kernels, one pass or two.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/reduce.h"

namespace kiln {
namespace {

using namespace reduction_cuda;
using cuda_detail::raw_stream;

template <class Policy> void run(const ReduceParams& p, const KernelContext& ctx) {
  using Partial = typename Policy::Partial;
  const cudaStream_t s = raw_stream(ctx.stream);
  const dim3 grid(static_cast<unsigned>(std::min(p.groups, kMaxGridX)), static_cast<unsigned>(p.nchunks));
  if (p.nchunks <= 1) {
    reduce_kernel<Policy><<<grid, kBlock, 0, s>>>(p, nullptr);
    cuda_detail::check_launch("reduce");
    return;
  }
  Partial* partials = static_cast<Partial*>(ctx.workspace(partials_bytes<Policy>(p)));
  reduce_kernel<Policy><<<grid, kBlock, 0, s>>>(p, partials);
  cuda_detail::check_launch("reduce");
  const ReduceParams q = finish_params(p);
  reduce_finish_kernel<Policy><<<static_cast<unsigned>(std::min(q.groups, kMaxGridX)), kBlock, 0, s>>>(q, partials);
  cuda_detail::check_launch("reduce");
}

}  // namespace

void reduce_cuda(ReduceOp op, const ReduceArgs& args, const KernelContext& ctx) {
  const ReduceParams p = make_params(op, args);
  if (p.nout == 0) return;
  visit_policy(op, args.in_dtype, [&](auto tag) { run<typename decltype(tag)::type>(p, ctx); });
}

}  // namespace kiln
