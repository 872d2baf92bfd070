// StridedArg: how a possibly broadcast or non-contiguous operand reaches a kernel.
// Plain data (pointer, dtype, sizes, strides in elements) so it can be passed by value to a CUDA
// kernel; core collapses dimensions before building one, so kMaxDims bounds the collapsed rank.
#pragma once

#include <cstdint>
#include <vector>

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

// Collapses the dims of args that share a shape (elementwise over the same index space): drops
// size-1 dims, optionally orders dims by the first arg's strides (so a channels-last or transposed
// layout becomes a unit-stride loop), and merges dims that are contiguous in every arg.
// Only for work whose result does not depend on the logical order of elements.
void collapse_dims(std::vector<StridedArg*> args, bool allow_reorder = true);

}  // namespace kiln
