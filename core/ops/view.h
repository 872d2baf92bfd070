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


}  // namespace kiln
