// Ops whose result depends on the values (nonzero, masked_select, unique, bincount: their sizes)
// or that search sorted data (searchsorted, bucketize). Composed of kernels that already run on
// both devices (scatter_add, sort, cumsum, comparisons); a data-dependent size costs one read back
// from the device (a synchronization on the GPU), as in PyTorch. None is differentiable but
// masked_select (through the elements it picks).
#pragma once

#include "core/scalar.h"
#include "core/tensor.h"

namespace kiln {

// The indices of x's nonzero (true) elements in row-major order: int64 [count, x.dim()].
Tensor nonzero(const Tensor& x);
Tensor argwhere(const Tensor& x);  // the same
// x's elements where mask (bool, broadcast with x) is true, in row-major order: 1-d. The gradient
// goes back to the elements picked.
Tensor masked_select(const Tensor& x, const Tensor& mask);

// The number of times each value 0, 1, ... occurs in a 1-d tensor of non-negative integers (the
// weights' sum instead, with weights of x's length): length max(x) + 1, at least minlength. int64
// counts; with weights, float32 for float32 weights and float64 for any other dtype (PyTorch's
// rule).
Tensor bincount(const Tensor& x, const Tensor& weights = Tensor(), int64_t minlength = 0);

// For each value, the number of boundaries below it (right: at or below it), which for sorted
// boundaries is where it would be inserted to keep them sorted (a NaN value goes after every
// number). 1-d boundaries serve every value; N-d ones pair their last dim with the values' last
// dim, row by row (the leading dims equal). int64, or int32 with out_int32.
Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool right = false, bool out_int32 = false);
Tensor searchsorted(const Tensor& sorted_sequence, const Scalar& value, bool right = false, bool out_int32 = false);
// searchsorted(boundaries, input, right) for 1-d boundaries: the bucket of each element.
Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool right = false, bool out_int32 = false);

// x's distinct values (of x read as 1-d), ascending; inverse (x's shape, int64): the position in
// values of each element of x; counts (int64): how often each value occurs. NaNs stay distinct,
// each its own value at the end, as PyTorch's.
struct UniqueResult {
  Tensor values, inverse, counts;
};
UniqueResult unique(const Tensor& x);
// The same for runs of equal consecutive elements, in x's order: [1, 1, 2, 1] gives [1, 2, 1].
UniqueResult unique_consecutive(const Tensor& x);

}  // namespace kiln
