// embedding: rows of a weight table picked by integer indices.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"

namespace kiln {

// Rows of weight [num_embeddings, dim] picked by integer indices of any shape. With padding_idx
// (negative counts from the end, as PyTorch's), that row takes no gradient: positions holding it
// read the row as any other, and the weight's gradient keeps zeros there, so a padding row stays
// as it was made (Embedding zeroes it) through training.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = std::nullopt);

// padding_idx as the row it names, in [0, num_embeddings): a negative one counts from the end. One
// out of [-num_embeddings, num_embeddings) is an IndexError naming op and `table` (the weight's
// shape or the layer's sizes). embedding() and nn::Embedding both check through this.
int64_t normalize_padding_idx(const char* op, int64_t padding_idx, int64_t num_embeddings, const std::string& table);

}  // namespace kiln
