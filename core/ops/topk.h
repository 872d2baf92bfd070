// topk: the k largest (or smallest) values along a dim, with their indices.
#pragma once

#include <utility>

#include "core/tensor.h"

namespace kiln {

// k largest (or smallest) along dim, sorted; values and int64 indices (ties: lower index first).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);
// x sorted along dim, ascending (or descending), with the int64 indices that sort it: topk of the
// whole dim, so NaN sorts above every number (last ascending, first descending, as PyTorch) and
// equal values keep their order (torch.sort's stable=True).
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
// The indices of sort.
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);

}  // namespace kiln
