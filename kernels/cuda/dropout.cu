// CUDA twin of kernels/cpu/dropout.cpp: the launches of kernels/cuda/dropout.cuh's kernels, typed
// loads for dense operands of one float dtype, offsets through the merged shape otherwise.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dropout.cuh"
#include "kernels/dropout.h"

namespace kiln {

using namespace dropout_device;
using cuda_detail::raw_stream;

void dropout_cuda(const StridedArg& out, const StridedArg& in, double p, PhiloxState philox,
                  const KernelContext& ctx) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const uint32_t threshold = dropout_threshold(p);
  const cudaStream_t s = raw_stream(ctx.stream);
  const Merged m = merge_dims(out, in);
  const int64_t pairs = (n + 1) / 2;
  if (takes_dense_path(m, out.dtype, in.dtype)) {
    KILN_CUDA_FLOAT_SWITCH(out.dtype, "dropout", {
      dropout_dense_kernel<S><<<cuda_detail::grid_for(pairs), cuda_detail::kThreads, 0, s>>>(
          static_cast<S*>(out.data), static_cast<const S*>(in.data), n, threshold, keep_scale<float>(p), philox);
    });
  } else {
    const int64_t* strides[2] = {m.out_strides, m.in_strides};
    const cuda_detail::OffsetCalc<2> calc = cuda_detail::make_offset_calc<2>(m.shape, strides);
    if (out.dtype == DType::Float64) {
      dropout_strided_kernel<double><<<cuda_detail::grid_for(pairs), cuda_detail::kThreads, 0, s>>>(
          calc, out.data, out.dtype, in.data, in.dtype, n, threshold, keep_scale<double>(p), philox);
    } else {
      dropout_strided_kernel<float><<<cuda_detail::grid_for(pairs), cuda_detail::kThreads, 0, s>>>(
          calc, out.data, out.dtype, in.data, in.dtype, n, threshold, keep_scale<float>(p), philox);
    }
  }
  cuda_detail::check_launch("dropout");
}

}  // namespace kiln
