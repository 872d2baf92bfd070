// The triangles and diagonals of matrices: tril and triu over the last two dims; diagonal (a
// view), diag, diag_embed and trace.
#pragma once

#include "core/tensor.h"

namespace kiln {

// Lower / upper triangle of the last two dims; elements with j - i > k (tril) / < k (triu) are zero.
Tensor tril(const Tensor& x, int64_t k = 0);
Tensor triu(const Tensor& x, int64_t k = 0);

// The diagonal of the matrices spanned by dim1 and dim2, `offset` above the main one (below it
// when negative), as a view: those two dims removed and the diagonal appended as the last dim.
Tensor diagonal(const Tensor& x, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
// x's last dim placed on the offset diagonal of new zero matrices over dims dim1 and dim2 of the
// result (one dim more than x): the inverse of diagonal.
Tensor diag_embed(const Tensor& x, int64_t offset = 0, int64_t dim1 = -2, int64_t dim2 = -1);
// A 1-d x on the offset diagonal of a square zero matrix, or a 2-d x's offset diagonal (a copy).
Tensor diag(const Tensor& x, int64_t offset = 0);
// The sum of a matrix's main diagonal (integers sum to int64).
Tensor trace(const Tensor& x);

}  // namespace kiln
