// Bit-for-bit tensor equality for the tests: same dtype and shape, and the same bytes in logical
// row-major order (CPU tensors; views are made contiguous first). Empty tensors are equal without
// a compare: their data pointer is null, which memcmp must not be given.
#pragma once

#include <cstring>

#include "core/tensor.h"

namespace kiln::test {

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  const Tensor ca = a.detach().contiguous(), cb = b.detach().contiguous();
  const size_t bytes = static_cast<size_t>(ca.numel()) * ca.element_size();
  return bytes == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), bytes) == 0;
}

}  // namespace kiln::test
