// embedding: rows of a weight table picked by integer indices.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

// Rows of weight [num_embeddings, dim] picked by integer indices of any shape.
Tensor embedding(const Tensor& weight, const Tensor& indices);

}  // namespace kiln
