// What core/ops/linalg.cpp and core/ops/spectral.cpp share: the scope of their raw computations and
// the checks of their matrix operands. Internal to those two files (not part of core/kiln.h).
#pragma once

#include <initializer_list>
#include <string>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/helpers.h"
#include "core/tensor.h"
#include "kernels/error.h"

namespace kiln::linalg_detail {

// The scope of a raw computation: no tape, and matmul kept in the operands' dtype.
struct RawScope {
  explicit RawScope(Device device) : autocast(device.type, false) {}
  NoGradGuard no_grad;
  AutocastGuard autocast;
};

inline Tensor mT(const Tensor& x) { return x.transpose(-2, -1); }

// x's sizes without its last `matrix_dims` dims.
inline Shape batch_of(const Tensor& x, int64_t matrix_dims) {
  Shape b = x.sizes();
  b.resize(b.size() - static_cast<size_t>(matrix_dims));
  return b;
}

inline Shape with(Shape batch, std::initializer_list<int64_t> tail) {
  batch.insert(batch.end(), tail.begin(), tail.end());
  return batch;
}

// Defined, at least 2-d, float32 or float64.
inline void check_matrix(const char* op, const Tensor& t, const char* what) {
  ops::check_defined(op, t, what);
  if (t.dim() < 2) {
    throw ShapeError(std::string(op) + ": " + what + " must be matrices [*, m, n], got " + shape_str(t.sizes()));
  }
  if (t.dtype() != DType::Float32 && t.dtype() != DType::Float64) {
    throw DTypeError(std::string(op) + ": " + what + " must be float32 or float64, got " + ops::dtype_str(t.dtype()));
  }
}

inline void check_square(const char* op, const Tensor& t, const char* what) {
  check_matrix(op, t, what);
  if (t.size(-1) != t.size(-2)) {
    throw ShapeError(std::string(op) + ": " + what + " must be square matrices [*, n, n], got " + shape_str(t.sizes()));
  }
}

}  // namespace kiln::linalg_detail
