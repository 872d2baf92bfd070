// One generic reduction for sum, mean, max/min (with indices), argmax/argmin, var, prod, any and all
// over any set of dims. The CPU reference accumulates in double (int64 for integer sums) and splits
// long reductions into fixed-size chunks merged in order, so results never depend on thread count
// or timing; the CUDA twin accumulates in float (double for float64) with a launch plan that
// depends only on sizes and strides, so its results are reproducible run to run.
#pragma once

#include <cstdint>

#include "kernels/kernel.h"
#include "kernels/strided.h"

namespace kiln {

enum class ReduceOp : uint8_t { Sum, Mean, Max, Min, ArgMax, ArgMin, Var, Prod, Any, All };

struct ReduceArgs {
  StridedArg out;      // the kept dims: out.sizes/ndim; null data when only indices are wanted
  StridedArg indices;  // int64 with out's sizes, or null data
  const void* in = nullptr;
  DType in_dtype = DType::Float32;
  int64_t in_kept_strides[kMaxDims] = {};  // input strides of the kept dims (sizes = out.sizes)
  int red_ndim = 0;
  int64_t red_sizes[kMaxDims] = {};
  int64_t red_strides[kMaxDims] = {};
  double correction = 1.0;  // var: divide by max(0, n - correction), as PyTorch
};

// Long CUDA reductions with few outputs take two passes through scratch memory from the context.
void reduce_cpu(ReduceOp op, const ReduceArgs& args, const KernelContext& ctx);
void reduce_cuda(ReduceOp op, const ReduceArgs& args, const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(reduce);
}  // namespace kernels

}  // namespace kiln
