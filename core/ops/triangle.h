// tril and triu over the last two dims.
#pragma once

#include "core/tensor.h"

namespace kiln {

// Lower / upper triangle of the last two dims; elements with j - i > k (tril) / < k (triu) are zero.
Tensor tril(const Tensor& x, int64_t k = 0);
Tensor triu(const Tensor& x, int64_t k = 0);

}  // namespace kiln
