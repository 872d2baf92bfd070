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

}  // namespace kiln
