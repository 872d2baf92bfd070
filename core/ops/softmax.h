// softmax and log_softmax along one dim: one fused kernel each way, float accumulation for
// float16/bfloat16 inputs read directly.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace kiln
