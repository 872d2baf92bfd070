// NumPy's joining, splitting and tiling helpers as PyTorch has them: tile (here tiled),
// repeat_interleave, the atleast_Nd views, hstack, vstack, dstack and column_stack, tensor_split
// and its h, v and d forms, and fliplr and flipud. Each is composed of views, cat, repeat, flip and
// index_select, so both devices run it and autograd comes with it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace kiln {

// x tiled reps[i] times along dim i: torch.tile, named tiled as kiln::tile is the namespace of the
// CUDA kernels' tile vocabulary. Unlike repeat, reps may name fewer dims than x has (the leading
// ones then repeat once); more add new leading dims. Each rep >= 0.
Tensor tiled(const Tensor& x, const Shape& reps);

// Each element of x (read as 1-d without a dim) or each slice along dim, repeated `repeats` times
// in place: torch.repeat_interleave. repeats >= 0.
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim = std::nullopt);
// The same with a count per element or slice: repeats is an integer tensor, 1-d with one count per
// element (or slice along dim), or of one element for all. Reading the counts is a host read (a
// synchronization on the GPU), as the output's size depends on them.
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim = std::nullopt);
// The positions 0, 1, ... repeated counts[i] times each (counts 1-d integer): the index the form
// above selects with, on counts' device.
Tensor repeat_interleave(const Tensor& counts);

// x itself when it has enough dims, else a view with dims of size 1 added: a 0-d x becomes [1]
// ([1, 1], [1, 1, 1]); atleast_2d makes a 1-d [n] a row [1, n]; atleast_3d makes [n] into
// [1, n, 1] and [m, n] into [m, n, 1] (NumPy's rule).
Tensor atleast_1d(const Tensor& x);
Tensor atleast_2d(const Tensor& x);
Tensor atleast_3d(const Tensor& x);

// Joins along the dim NumPy names for each: hstack along dim 1 (dim 0 when the first tensor is
// 1-d or 0-d), vstack (torch.row_stack) along dim 0 of the atleast_2d views, dstack along dim 2
// of the atleast_3d views. column_stack makes each 0-d or 1-d tensor a column [n, 1] and joins
// along dim 1. The tensors promote to one dtype, as cat's do.
Tensor hstack(const TensorList& tensors);
Tensor vstack(const TensorList& tensors);
Tensor dstack(const TensorList& tensors);
Tensor column_stack(const TensorList& tensors);

// x in `sections` pieces along dim, views: the first size % sections pieces one longer than the
// rest, so the sizes never differ by more than one and some may be empty (sections >= 1):
// torch.tensor_split with an int.
TensorList tensor_split(const Tensor& x, int64_t sections, int64_t dim = 0);
// x cut before each of `indices` along dim: pieces [0, i0), [i0, i1), ..., [ik, size), each read as
// a Python slice (a negative index counts from the end, one past the size clamps to it, and a
// piece whose end comes before its start is empty): torch.tensor_split with a list.
TensorList tensor_split_at(const Tensor& x, const std::vector<int64_t>& indices, int64_t dim = 0);
// tensor_split along dim 1 (dim 0 of a 1-d x), dim 0 (x at least 2-d) and dim 2 (at least 3-d);
// with a count, the dim must divide into `sections` equal pieces: torch.hsplit, vsplit, dsplit.
TensorList hsplit(const Tensor& x, int64_t sections);
TensorList vsplit(const Tensor& x, int64_t sections);
TensorList dsplit(const Tensor& x, int64_t sections);
TensorList hsplit_at(const Tensor& x, const std::vector<int64_t>& indices);
TensorList vsplit_at(const Tensor& x, const std::vector<int64_t>& indices);
TensorList dsplit_at(const Tensor& x, const std::vector<int64_t>& indices);

// x reversed left to right (dim 1; x at least 2-d) and upside down (dim 0; at least 1-d): copies.
Tensor fliplr(const Tensor& x);
Tensor flipud(const Tensor& x);

}  // namespace kiln
