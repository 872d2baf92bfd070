// embedding: rows of a weight table picked by integer indices; embedding_bag: bags of them summed,
// averaged or maxed.
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

// How embedding_bag combines each bag's rows.
enum class BagMode : uint8_t { Sum, Mean, Max };

// torch.nn.functional.embedding_bag: the rows of bags of indices combined, without forming the
// [bags, length, dim] tensor of picked rows for sum and mean. indices [B, L] make B bags of L
// (offsets undefined); 1-d indices with 1-d offsets make bag b of indices[offsets[b]:offsets[b+1]]
// (the last to the end, or to offsets' last entry with include_last_offset). per_sample_weights
// (Sum only; indices' shape, weight's dtype) scale each row. Positions holding padding_idx are left
// out (of the count too); an empty bag gives zeros. Max takes the elementwise maximum, its gradient
// split among tied rows. Returns [B, dim] in weight's dtype (sums of float16 and bfloat16
// accumulated in float32). The offsets are read on the host (a synchronization when they are a CUDA
// tensor); they start at 0 and never decrease.
Tensor embedding_bag(const Tensor& weight, const Tensor& indices, const Tensor& offsets = Tensor(),
                     BagMode mode = BagMode::Mean, const Tensor& per_sample_weights = Tensor(),
                     bool include_last_offset = false, std::optional<int64_t> padding_idx = std::nullopt);

// padding_idx as the row it names, in [0, num_embeddings): a negative one counts from the end. One
// out of [-num_embeddings, num_embeddings) is an IndexError naming op and `table` (the weight's
// shape or the layer's sizes). embedding() and nn::Embedding both check through this.
int64_t normalize_padding_idx(const char* op, int64_t padding_idx, int64_t num_embeddings, const std::string& table);

}  // namespace kiln
