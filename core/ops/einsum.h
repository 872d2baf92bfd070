// Einstein summation (torch.einsum): products of operands over labelled dims, summed over the
// labels the output leaves out, composed of views, sums and batched matmuls, so both devices run
// it, autocast sees its matmuls, and its gradient is those ops'.
#pragma once

#include <string>

#include "core/tensor.h"

namespace kiln {

// `equation` as PyTorch's: one comma-separated term per operand, each a letter (a-z, A-Z) per dim,
// and "..." for any number of leading, middle or trailing dims, which broadcast across operands
// as in elementwise ops (right-aligned, size 1 against any); "->" and the output's labels, or none,
// for the labels that occur once, in alphabetical order, after the ellipsis dims. A label repeated
// within an operand takes its diagonal; labels left out of the output are summed. Spaces are
// ignored. Operands share one floating dtype and a device. Two operands at a time, left to right:
// the labels both hold and nothing later needs become a matmul's inner dim, the rest its batch,
// rows and columns.
Tensor einsum(const std::string& equation, const TensorList& operands);

// The outer product of two 1-d tensors, [n] x [m] -> [n, m] (torch.outer): an elementwise product
// of the two as a column and a row, promoted as mul.
Tensor outer(const Tensor& a, const Tensor& b);

}  // namespace kiln
