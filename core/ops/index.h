// Indexing ops: pick slices or elements by integer indices, and their adjoint, scatter_add.
#pragma once

#include "core/tensor.h"

namespace kiln {

// Slices of x along dim at the (0-d or 1-d) int64/int32 index.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[..., i, ...] = x[..., index[..., i, ...], ...] along dim; out has index's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// A copy of x with src added at index along dim.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace kiln
