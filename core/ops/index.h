// Indexing ops: pick slices or elements by integer indices, and their adjoints (scatter_add and
// the writes composed of it). Indices are never wrapped: a negative one is an IndexError, except in
// advanced_index and index_put, which follow a subscript's rules.
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
// A copy of x with slice i of source along dim written to slice index[i] (index 0-d or 1-d,
// source x's shape with index.numel() along dim): torch.Tensor.index_copy. A slice named twice is
// an error, as for scatter (a host read of a count). Gradients: x's where it was kept, source's
// read from where each slice went.
Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
// NumPy's and PyTorch's advanced indexing, x[i0, i1, ...] with index tensors: indices[k] indexes
// dim k, an undefined tensor leaves that dim whole (a ':'), and dims past the list are whole. The
// defined indices (int64 or int32) broadcast together to one shape B; the result has B in place of
// the indexed dims when those are adjacent, else B first and the whole dims after (PyTorch's
// rule). A bool index selects where it is true over as many dims as it has (nonzero: a host read).
// Negative indices count from the end, as a subscript's do; outside [-size, size) is an IndexError.
// The gradient adds up where an element was picked more than once.
Tensor advanced_index(const Tensor& x, const TensorList& indices);
// A copy of x with values (broadcast to advanced_index(x, indices)'s shape) written at those
// positions: torch.index_put. With accumulate they are added, repeats adding up; without, a
// position named twice is an error, as for scatter. Gradients: x's where it was kept (everywhere
// with accumulate), values' read from where each went.
Tensor index_put(const Tensor& x, const TensorList& indices, const Tensor& values, bool accumulate = false);
// int64 one-hot rows of integer class indices: out[..., c] = (index[...] == c), shape
// index.shape + [num_classes]. num_classes -1 takes the largest index + 1 (a host read of index);
// an index outside [0, num_classes) is an IndexError.
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);

namespace ops {
// The pieces the ops composed of index ops share; their errors name `op`.
Tensor index_select_as(const char* op, const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add_as(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// scatter_add's checks of its arguments (defined, index dtype, devices, dims, sizes, src dtype);
// dim wrapped. Where scatter_add reads 0-d tensors as 1-d ones, pass them reshaped.
int64_t check_scatter_args(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// How many times a scatter along dim with index writes each position of x: int64, x's shape. A
// bad index is an IndexError naming op (on CUDA at the next synchronizing call).
Tensor scatter_counts(const char* op, const Tensor& x, int64_t dim, const Tensor& index);
// What a slice op (index_add, index_copy, index_reduce) scatters: x and source as at least 1-d, dim
// wrapped, and the 0-d or 1-d index expanded over source along dim. Checks the index (integer,
// 0-d or 1-d) and source's shape (x's with index.numel() along dim).
struct SliceScatter {
  Tensor x, source, index;
  int64_t dim;
};
SliceScatter slice_scatter_args(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                                const Tensor& source);
}  // namespace ops

}  // namespace kiln
