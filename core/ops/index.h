// Indexing ops: pick slices or elements by integer indices, and their adjoints (scatter_add and
// the writes composed of it). Indices are never wrapped: a negative one is an IndexError.
#pragma once

#include <optional>

#include "core/scalar.h"
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
// x's elements at `index` into x read as 1-d (row-major): out has index's shape.
Tensor take(const Tensor& x, const Tensor& index);
// gather with indices broadcast against x in every dim but dim (both with as many dims); without
// a dim, x and indices are read as 1-d (take's indices, a 1-d result).
Tensor take_along_dim(const Tensor& x, const Tensor& indices, std::optional<int64_t> dim = std::nullopt);
// A copy of x with alpha * src added to the slices at the 1-d (or 0-d) index along dim: src has
// x's shape but index.numel() along dim. An index repeated adds twice.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha = 1);
// A copy of x with the slices at the 1-d (or 0-d) index along dim set to value; the gradient
// passes where x was kept.
Tensor index_fill(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value);
// A copy of x with src written where index points along dim (dims as scatter_add's): for dim 0,
// out[index[i][j]][j] = src[i][j]. A position written twice is an error (PyTorch leaves which
// write wins undefined); finding one reads a count back (a synchronization on the GPU). Gradients:
// x's where it was kept, src's gathered from where each element went.
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// The same with one value everywhere index points (repeats allowed: they write the same value).
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value);
// int64 one-hot rows of integer class indices: out[..., c] = (index[...] == c), shape
// index.shape + [num_classes]. num_classes -1 takes the largest index + 1 (a host read of index);
// an index outside [0, num_classes) is an IndexError.
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);

}  // namespace kiln
