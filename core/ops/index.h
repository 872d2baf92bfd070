// Indexing ops: pick slices or elements by integer indices, and their adjoint, scatter_add.
#pragma once

#include "core/tensor.h"

namespace kiln {

// Slices of x along dim at the (0-d or 1-d) int64/int32 index. A 0-d x takes an index of exactly
// one value and gives a 0-d result, as PyTorch's.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[..., i, ...] = x[..., index[..., i, ...], ...] along dim; out has index's shape. x and
// index have as many dims, where a 0-d tensor counts as a 1-d one of one element (PyTorch's rule).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// A copy of x with src added at index along dim; dims as gather's (0-d counts as 1-d).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// int64 one-hot rows of integer class indices: out[..., c] = (index[...] == c), shape
// index.shape + [num_classes]. num_classes -1 takes the largest index + 1 (a host read of index);
// an index outside [0, num_classes) is an IndexError.
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);

}  // namespace kiln
