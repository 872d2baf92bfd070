// Ops that join and split tensors along a dim.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace kiln {

Tensor cat(const TensorList& tensors, int64_t dim = 0);
Tensor stack(const TensorList& tensors, int64_t dim = 0);
// Pieces of `split_size` along dim (the last may be shorter); views of x. An empty dim splits into
// one empty piece, whatever split_size (0 included, as PyTorch's).
TensorList split(const Tensor& x, int64_t split_size, int64_t dim = 0);
TensorList split_with_sizes(const Tensor& x, const Shape& sizes, int64_t dim = 0);
// `chunks` pieces as equal as possible (PyTorch's rule: ceil(size / chunks) each).
TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

}  // namespace kiln
