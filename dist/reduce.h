// The elementwise reductions the collectives apply to raw buffers: acc = acc op in, typed by dtype,
// float16 and bfloat16 computed in float32 and rounded once per call. Shared by kiln's ring and by
// the MPI backend's user-defined ops for the 16-bit floats MPI has no type for. Internal to dist/.
#pragma once

#include <cstdint>

#include "dist/process_group.h"
#include "core/tensor.h"
#include "kernels/dtype.h"

namespace kiln::dist::detail {

// acc[i] = acc[i] op in[i] for i < n. Avg reduces as Sum (the caller divides once at the end); bool
// takes Max and Min (effective_op).
void reduce_into(void* acc, const void* in, int64_t n, DType dtype, ReduceOp op);
// t[i] /= divisor for a float dtype (Avg's last step).
void divide(void* t, int64_t n, DType dtype, double divisor);
// The same two on contiguous tensors of one dtype and numel: on the CPU through the functions above;
// on a CUDA device through kiln's ops on the current stream (add_ computes float16 and bfloat16 in
// float32 and rounds once, as reduce_into does).
void reduce_tensor(Tensor& acc, const Tensor& in, ReduceOp op);
void divide_tensor(Tensor& t, double divisor);
// Whether `op` applies to `dtype` (Avg needs a float dtype); check_supported throws the DTypeError
// naming `collective`, the op and the dtype where it does not.
bool supports(DType dtype, ReduceOp op);
void check_supported(const char* collective, DType dtype, ReduceOp op);
// The op a backend applies: bool's Sum is Max (any true) and its Product Min (all true), on bytes
// that hold 0 or 1; every other pair as it is.
ReduceOp effective_op(DType dtype, ReduceOp op);

}  // namespace kiln::dist::detail
