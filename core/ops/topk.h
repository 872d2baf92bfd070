// topk: the k largest (or smallest) values along a dim, with their indices.
#pragma once

#include <utility>

#include "core/tensor.h"

namespace kiln {

// k largest (or smallest) along dim, sorted; values and int64 indices (ties: lower index first).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

}  // namespace kiln
