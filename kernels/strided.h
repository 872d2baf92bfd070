// StridedArg: how a possibly broadcast or non-contiguous operand reaches a kernel.
// Plain data (pointer, dtype, sizes, strides in elements) so it can be passed by value to a CUDA
// kernel; core collapses dimensions before building one, so kMaxDims bounds the collapsed rank.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace kiln {

inline constexpr int kMaxDims = 12;

struct StridedArg {
  void* data = nullptr;
  DType dtype = DType::Float32;
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= sizes[i];
    return n;
  }
  bool is_contiguous() const {
    int64_t expected = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      if (sizes[i] != 1 && strides[i] != expected) return false;
      expected *= sizes[i];
    }
    return true;
  }
};

}  // namespace kiln
