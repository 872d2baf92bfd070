// Copies of an input with one of its views replaced: select_scatter, slice_scatter and
// diagonal_scatter (the out-of-place inverses of select, a strided slice and diagonal, which
// functional code and PyTorch's compilers use in place of writes into views), and masked_scatter
// (source's elements, in order, where a mask holds). Each is index_select of src into place and one
// where, so both devices run it, no position is written twice and the gradients are those ops':
// input's where it was kept, src's read back from where each element went.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace kiln {

// input with select(input, dim, index) replaced by src (input's shape without dim; index may be
// negative): torch.select_scatter.
Tensor select_scatter(const Tensor& input, const Tensor& src, int64_t dim, int64_t index);
// input with the slice start:end:step along dim replaced by src (input's shape with the slice's
// length along dim). start and end are read as a Python slice's (negative from the end, clamped;
// none: the whole dim); step >= 1: torch.slice_scatter.
Tensor slice_scatter(const Tensor& input, const Tensor& src, int64_t dim = 0,
                     std::optional<int64_t> start = std::nullopt, std::optional<int64_t> end = std::nullopt,
                     int64_t step = 1);
// input with diagonal(input, offset, dim1, dim2) replaced by src (that view's shape: the other
// dims, then the diagonal): torch.diagonal_scatter.
Tensor diagonal_scatter(const Tensor& input, const Tensor& src, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
// input with the positions where mask (bool, broadcast to input's shape) holds filled by source's
// elements in row-major order, the k-th true position taking source's k-th element:
// torch.masked_scatter. source needs as many elements as mask has true positions at least;
// checking that counts them on the host (a synchronization on the GPU). source has input's dtype.
Tensor masked_scatter(const Tensor& input, const Tensor& mask, const Tensor& source);

}  // namespace kiln
