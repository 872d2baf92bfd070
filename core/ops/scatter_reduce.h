// scatter_reduce and index_reduce: elements written to the same position are combined by a sum,
// product, mean, maximum or minimum (torch.Tensor.scatter_reduce and index_reduce). Composed of
// existing ops, no kernels of their own: sum and mean of scatter_add; prod, amax and amin of a
// sort of the writes by their target and a segmented scan over the sorted order (log2(n) steps of
// elementwise ops), so the result is exact and independent of the order of the writes.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace kiln {

// How scatter_reduce and index_reduce combine the values written to one position.
enum class ScatterReduce : uint8_t { Sum, Prod, Mean, Amax, Amin };
// "sum", "prod", "mean", "amax" or "amin" (PyTorch's reduce argument); another name is a
// kiln::Error naming op and the name.
ScatterReduce scatter_reduce_mode(const char* op, const std::string& name);
const char* scatter_reduce_name(ScatterReduce reduce);

// A copy of x where every position that index names along dim (dims as scatter_add's: for dim 0,
// position [index[i][j]][j] takes src[i][j]) holds the reduction of the src values written there,
// and of x's own value with include_self. Positions nothing is written to keep x's value. Mean
// divides by the number of values reduced (floor division for integer dtypes, as PyTorch); Amax
// and Amin propagate NaN. Gradients (x and src): Sum and Mean as the linear maps they are; Prod the
// product of the other values reduced at the position (exact with zeros among them); Amax and Amin
// split evenly among the values equal to the result that took part (with include_self false, x's
// value does not count even where it equals the result: PyTorch's backward counts it and loses
// part of the gradient). Bool tensors are a DTypeError.
Tensor scatter_reduce(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, ScatterReduce reduce,
                      bool include_self = true);

// scatter_reduce of whole slices: slice i of source along dim is reduced into slice index[i] of
// x (index 0-d or 1-d, source x's shape with index.numel() along dim), as index_add is to
// scatter_add. torch.Tensor.index_reduce, which takes prod, mean, amax and amin; Sum is index_add.
Tensor index_reduce(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, ScatterReduce reduce,
                    bool include_self = true);

}  // namespace kiln
