// The "other operations" of core/ops/other.h, composed of existing ops; checks first, naming the
// op and the offending shapes, dtypes or values.
#include "core/ops/other.h"

#include <algorithm>
#include <optional>
#include <string>

#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/math.h"
#include "core/ops/matmul.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "core/ops/triangle.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln {
namespace {

// The positions (i, j) of a [row, col] matrix where keep(j - i) holds, as a [2, count] int64
// tensor.
template <typename Keep>
Tensor triangle_indices(const char* op, int64_t row, int64_t col, int64_t offset, Device device, Keep keep) {
  if (row < 0 || col < 0) {
    throw Error(std::string(op) + ": row and col must be non-negative, got " + std::to_string(row) + " and " +
                std::to_string(col) + " (offset " + std::to_string(offset) + ")");
  }
  std::vector<int64_t> rows, cols;
  for (int64_t i = 0; i < row; ++i) {
    for (int64_t j = 0; j < col; ++j) {
      if (!keep(j - i)) continue;
      rows.push_back(i);
      cols.push_back(j);
    }
  }
  const int64_t count = static_cast<int64_t>(rows.size());
  rows.insert(rows.end(), cols.begin(), cols.end());
  return tensor(rows, {2, count}, TensorOptions(DType::Int64, Device::cpu())).to(device);
}

int64_t wrap(const char* op, int64_t dim, int64_t rank, const std::string& what) {
  if (dim < -rank || dim >= rank) {
    throw IndexError(std::string(op) + ": dim " + std::to_string(dim) + " is out of range for " + what);
  }
  return dim < 0 ? dim + rank : dim;
}

}  // namespace

Tensor tril_indices(int64_t row, int64_t col, int64_t offset, Device device) {
  return triangle_indices("tril_indices", row, col, offset, device, [offset](int64_t d) { return d <= offset; });
}

Tensor triu_indices(int64_t row, int64_t col, int64_t offset, Device device) {
  return triangle_indices("triu_indices", row, col, offset, device, [offset](int64_t d) { return d >= offset; });
}

Tensor cross(const Tensor& a, const Tensor& b, int64_t dim) {
  const char* op = "cross";
  ops::check_defined(op, a, "a");
  ops::check_defined(op, b, "b");
  ops::common_device(op, {&a, &b});
  const std::string shapes = "a " + shape_str(a.sizes()) + ", b " + shape_str(b.sizes());
  if (a.dim() != b.dim()) {
    throw ShapeError(std::string(op) + ": a and b must have as many dims, got " + shapes);
  }
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), op);
  const int64_t d = wrap(op, dim, static_cast<int64_t>(shape.size()), shapes);
  if (a.size(d) != 3 || b.size(d) != 3) {
    throw ShapeError(std::string(op) + ": dim " + std::to_string(dim) + " must have 3 elements in a and b, got " +
                     shapes);
  }
  const Tensor x = a.expand(shape), y = b.expand(shape);
  auto at = [d](const Tensor& t, int64_t i) { return t.narrow(d, i, 1); };
  return cat({at(x, 1) * at(y, 2) - at(x, 2) * at(y, 1), at(x, 2) * at(y, 0) - at(x, 0) * at(y, 2),
              at(x, 0) * at(y, 1) - at(x, 1) * at(y, 0)},
             d);
}

Tensor kron(const Tensor& a, const Tensor& b) {
  const char* op = "kron";
  ops::check_defined(op, a, "a");
  ops::check_defined(op, b, "b");
  ops::common_device(op, {&a, &b});
  const int64_t rank = std::max(a.dim(), b.dim());
  // a's dims at the even places of a [a0, 1, a1, 1, ...] view, b's at the odd of [1, b0, 1, b1,
  // ...]: their product holds a[i] b[j] at (i0, j0, i1, j1, ...), which merges pairwise into the
  // result.
  Shape as, bs, out;
  for (int64_t k = 0; k < rank; ++k) {
    const int64_t ak = k < rank - a.dim() ? 1 : a.size(k - (rank - a.dim()));
    const int64_t bk = k < rank - b.dim() ? 1 : b.size(k - (rank - b.dim()));
    as.insert(as.end(), {ak, 1});
    bs.insert(bs.end(), {1, bk});
    out.push_back(ak * bk);
  }
  return mul(a.reshape(as), b.reshape(bs)).reshape(out);
}

Tensor rot90(const Tensor& x, int64_t k, const std::vector<int64_t>& dims) {
  const char* op = "rot90";
  ops::check_defined(op, x, "input");
  const std::string what = "input " + shape_str(x.sizes()) + " (dims " + shape_str(dims) + ")";
  if (dims.size() != 2) throw Error(std::string(op) + ": dims must name 2 dims, got " + what);
  if (x.dim() < 2) throw ShapeError(std::string(op) + ": the input must have 2 dims at least, got " + what);
  const int64_t d0 = wrap(op, dims[0], x.dim(), what), d1 = wrap(op, dims[1], x.dim(), what);
  if (d0 == d1) throw Error(std::string(op) + ": dims must be two different dims, got " + what);
  switch (((k % 4) + 4) % 4) {
    case 1: return flip(x, {d1}).transpose(d0, d1);
    case 2: return flip(x, {d0, d1});
    case 3: return flip(x, {d0}).transpose(d0, d1);
    default: return x.clone();
  }
}

Tensor block_diag(const TensorList& tensors) {
  const char* op = "block_diag";
  if (tensors.empty()) return zeros({1, 0});  // PyTorch's result for no blocks
  std::vector<const Tensor*> all;
  DType dtype = tensors[0].defined() ? tensors[0].dtype() : DType::Float32;
  int64_t width = 0;
  TensorList blocks;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    ops::check_defined(op, t, "block");
    if (t.dim() > 2) {
      throw ShapeError(std::string(op) + ": block " + std::to_string(i) + " must have 2 dims at most, got " +
                       shape_str(t.sizes()));
    }
    all.push_back(&t);
    dtype = promote_types(dtype, t.dtype());
    blocks.push_back(t.dim() == 2 ? t : t.reshape({1, t.dim() == 1 ? t.size(0) : 1}));
    width += blocks.back().size(1);
  }
  ops::common_device(op, all);
  int64_t left = 0;
  for (Tensor& m : blocks) {
    const int64_t cols = m.size(1);
    m = pad(m.to(dtype), {left, width - left - cols});
    left += cols;
  }
  return cat(blocks, 0);
}

Tensor cartesian_prod(const TensorList& tensors) {
  const char* op = "cartesian_prod";
  if (tensors.empty()) throw Error(std::string(op) + ": no tensors given");
  for (size_t i = 0; i < tensors.size(); ++i) {
    ops::check_defined(op, tensors[i], "input");
    if (tensors[i].dim() != 1) {
      throw ShapeError(std::string(op) + ": tensor " + std::to_string(i) + " must be 1-d, got " +
                       shape_str(tensors[i].sizes()));
    }
  }
  if (tensors.size() == 1) return tensors[0];
  TensorList columns = meshgrid(tensors, MeshIndexing::Ij);
  for (Tensor& c : columns) c = c.reshape({-1});
  return stack(columns, 1);
}

Tensor cov(const Tensor& x, int64_t correction, const Tensor& fweights, const Tensor& aweights) {
  const char* op = "cov";
  ops::check_defined(op, x, "input");
  if (x.dim() > 2) {
    throw ShapeError(std::string(op) + ": input must have 2 dims at most (variables x observations), got " +
                     shape_str(x.sizes()));
  }
  const Tensor rows = (is_floating(x.dtype()) ? x : x.to(DType::Float32)).reshape({x.dim() < 2 ? 1 : x.size(0), -1});
  const int64_t observations = rows.size(1);
  auto check_weights = [&](const Tensor& w, const char* name, bool integral) {
    if (!w.defined()) return;
    ops::common_device(op, {&x, &w});
    if (w.dim() != 1 || w.size(0) != observations) {
      throw ShapeError(std::string(op) + ": " + name + " must be 1-d with one weight per observation (" +
                       std::to_string(observations) + "), got " + shape_str(w.sizes()));
    }
    if (integral == is_floating(w.dtype()) || w.dtype() == DType::Bool) {
      throw DTypeError(std::string(op) + ": " + name + " must be " + (integral ? "integers" : "floating") + ", got " +
                       dtype_name(w.dtype()));
    }
    // A host read, as PyTorch's check.
    if (observations > 0 && amin(w, {}).to(DType::Float64).item<double>() < 0.0) {
      throw Error(std::string(op) + ": " + name + " cannot be negative");
    }
  };
  check_weights(fweights, "fweights", true);
  check_weights(aweights, "aweights", false);
  Tensor w;
  if (fweights.defined()) w = fweights.to(rows.dtype());
  if (aweights.defined()) w = w.defined() ? w * aweights.to(rows.dtype()) : aweights.to(rows.dtype());
  Tensor average, divisor;
  if (!w.defined()) {
    average = mean(rows, {1}, true);
    divisor = scalar_tensor(static_cast<double>(observations - correction), TensorOptions(rows.dtype(), rows.device()));
  } else {
    const Tensor total = sum(w);
    average = sum(rows * w, {1}, true) / total;
    divisor = correction == 0 ? total
              : !aweights.defined()
                  ? total - static_cast<double>(correction)
                  : total - static_cast<double>(correction) * sum(w * aweights.to(rows.dtype())) / total;
  }
  divisor = clamp(divisor, 0.0, std::nullopt);
  const Tensor centred = rows - average;
  const Tensor c = matmul(w.defined() ? centred * w : centred, centred.t()) / divisor;
  return x.dim() < 2 ? c.squeeze() : c;
}

Tensor corrcoef(const Tensor& x) {
  const Tensor c = cov(x);
  if (c.dim() == 0) return c / c;  // one variable: 1 (NaN when it does not vary), as PyTorch's
  const Tensor sd = sqrt(diagonal(c));
  return clamp(c / sd.unsqueeze(1) / sd.unsqueeze(0), -1.0, 1.0);
}

}  // namespace kiln
