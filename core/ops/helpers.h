// Internal helpers of core/ops: building kernel arguments from tensors, collapsing dimensions,
// layout of outputs, and the checks every op makes. Not part of the public API.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/elementwise.h"
#include "kernels/strided.h"

namespace kiln::ops {

// A kernel argument for `t` as it is (its own sizes and strides).
StridedArg make_arg(const Tensor& t);
// A kernel argument for `t` broadcast to `shape` (stride 0 on broadcast dims).
StridedArg make_arg(const Tensor& t, const Shape& shape);
// An elementwise operand: a tensor broadcast to `shape`.
Operand make_operand(const Tensor& t, const Shape& shape);
Operand scalar_operand(const Scalar& s);

// Collapses the dims of args that share a shape (elementwise over the same index space): drops
// size-1 dims, optionally orders dims by the first arg's strides (so a channels-last or transposed
// layout becomes a unit-stride loop), and merges dims that are contiguous in every arg.
// Only for ops whose result does not depend on the logical order of elements.
void collapse_dims(std::vector<StridedArg*> args, bool allow_reorder = true);

// Strides for a new tensor of `shape` laid out like `like` (when it is dense and the same
// shape), else contiguous. Elementwise outputs keep their input's layout this way.
Shape strides_like(const Shape& shape, const Tensor& like);

// Checks: all defined tensors on one device (DeviceError naming op and devices); returns it.
Device common_device(const char* op, const std::vector<const Tensor*>& tensors);
void check_defined(const char* op, const Tensor& t, const char* what);
void check_floating(const char* op, const Tensor& t, const char* what);
// Errors an op that has no CUDA kernel yet raises for CUDA tensors.
[[noreturn]] void no_cuda_kernel(const char* op);
// Whether an op's result dtype may be written into a tensor of dtype `to` (in-place ops).
bool can_cast(DType from, DType to);

std::string dtype_str(DType t);

}  // namespace kiln::ops

namespace kiln::ops {
// dst[...] = src broadcast to dst's shape, cast to dst's dtype. No autograd, no checks of aliasing.
void copy_raw(const Tensor& dst, const Tensor& src);
// A new tensor sharing x's storage and version counter with other sizes, strides and offset.
Tensor make_view(const Tensor& x, Shape sizes, Shape strides, int64_t offset);
// Element offsets (from x.data_ptr()) of each entry of a broadcast batch shape, in row-major
// order. x's first `x_batch_dims` dims are its batch dims, right-aligned against `batch`; size-1
// dims repeat. Batched kernels (matmul, attention) take these instead of copying broadcasts.
std::vector<int64_t> batch_offsets(const Tensor& x, int64_t x_batch_dims, const Shape& batch);
// A fused backward kernel op(grad, saved) in grad's dtype (see BinaryOp's backward helpers).
Tensor backward_kernel(const Tensor& grad, const Tensor& saved, BinaryOp op, double alpha = 0, double beta = 0);
}  // namespace kiln::ops
