// Copies and conversions between dtypes and devices. Tensor's own methods (to, copy_, pin_memory,
// item, to_vector) are defined with these in core/ops/copy.cpp.
#pragma once

#include "core/tensor.h"

namespace kiln {

// Differentiable dtype conversion (the backward casts the gradient back); a cast to an integer
// dtype ends the graph, as in PyTorch.
Tensor to_dtype(const Tensor& x, DType dtype);

// An uninitialized contiguous CPU tensor in page-locked memory from the pinned caching allocator
// (cuda::pinned_allocator), for asynchronous host-to-device copies; a DeviceError without CUDA.
Tensor empty_pinned(const Shape& shape, DType dtype);
// The same with `strides`, which must lay `shape` out densely (a permutation of a contiguous
// layout, such as channels-last's); a ShapeError otherwise.
Tensor empty_pinned(const Shape& shape, const Shape& strides, DType dtype);

}  // namespace kiln
