// Views (free-function forms of the Tensor methods) and the ops that join and split.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace kiln {

Tensor cat(const TensorList& tensors, int64_t dim = 0);
Tensor stack(const TensorList& tensors, int64_t dim = 0);
// Pieces of `split_size` along dim (the last may be shorter); views of x.
TensorList split(const Tensor& x, int64_t split_size, int64_t dim = 0);
TensorList split_with_sizes(const Tensor& x, const Shape& sizes, int64_t dim = 0);
// `chunks` pieces as equal as possible (PyTorch's rule: ceil(size / chunks) each).
TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

Tensor view(const Tensor& x, const Shape& shape);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim = std::nullopt);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor contiguous(const Tensor& x, MemoryFormat format = MemoryFormat::Contiguous);

}  // namespace kiln
