// Views: free-function forms of the Tensor methods (view, reshape, permute, ...), defined with them
// in core/ops/view.cpp. A view shares its input's storage and version counter.
#pragma once

#include <optional>

#include "core/tensor.h"

namespace kiln {

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
// Whether x.view(shape) would succeed (the sizes match and x's strides allow a view).
bool can_view(const Tensor& x, const Shape& shape);
// x with dims `source` moved to positions `destination`, the others keeping their order (a
// permute).
Tensor movedim(const Tensor& x, const Shape& source, const Shape& destination);
Tensor movedim(const Tensor& x, int64_t source, int64_t destination);
// dim split into `sizes` (one of them may be -1, inferred): the inverse of flatten (a reshape).
Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes);
// The slices of x along dim, each without that dim (views).
TensorList unbind(const Tensor& x, int64_t dim = 0);
// Coordinate grids of 0-d or 1-d tensors: result i holds tensor i's values along dim i of the
// shape [n0, n1, ...] (Ij), or with the first two dims swapped (Xy: x along columns, as
// numpy's default); expanded views.
enum class MeshIndexing : uint8_t { Ij, Xy };
TensorList meshgrid(const TensorList& tensors, MeshIndexing indexing = MeshIndexing::Ij);

}  // namespace kiln
