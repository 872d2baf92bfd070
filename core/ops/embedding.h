// embedding: rows of a weight table picked by integer indices.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace kiln {

// Rows of weight [num_embeddings, dim] picked by integer indices of any shape. With padding_idx
// (negative counts from the end, as PyTorch's), that row takes no gradient: positions holding it
// read the row as any other, and the weight's gradient keeps zeros there, so a padding row stays
// as it was made (Embedding zeroes it) through training.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace kiln
