// Small exact tensors for hand tests of ops that move values (the join and scatter_into families):
// 0, 1, 2, ... in a shape, values read back as integers, and a tensor made a leaf that requires
// grad.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kiln.h"

namespace kiln::test {

// 0, 1, 2, ... in float32, row-major in `shape`.
inline Tensor iota(const Shape& shape) { return arange(0, shape_numel(shape)).to(DType::Float32).reshape(shape); }

inline std::vector<int64_t> ints(const Tensor& t) { return t.to(DType::Int64).contiguous().to_vector<int64_t>(); }

inline Tensor leaf(Tensor t) {
  t.set_requires_grad(true);
  return t;
}

}  // namespace kiln::test
