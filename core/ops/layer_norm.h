// Layer norm over the trailing dims. Activations may be float16/bfloat16 and are read directly;
// statistics accumulate in float; parameters keep their own dtype.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

// Normalizes over the trailing dims `normalized_shape`; weight and bias (optional) have that shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace kiln
