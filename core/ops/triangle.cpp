// tril and triu: one kernel that zeroes the other triangle; the gradient keeps the same triangle.
// diagonal is a view (its stride the sum of the two dims'); diag_embed writes into that view of a
// zero tensor, and each is the other's backward.
#include "core/ops/triangle.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "kernels/error.h"
#include "kernels/triangle.h"

namespace kiln {

namespace {
Tensor triangle(const char* name, const Tensor& x, int64_t k, bool upper) {
  ops::check_defined(name, x, "input");
  if (x.dim() < 2) throw ShapeError(std::string(name) + ": expects at least 2 dims, got shape " + shape_str(x.sizes()));
  Tensor out = ops::empty_for(name, x.sizes(), TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0)
    ops::launch(name, x.device(), kernels::triangle, ops::make_arg(name, out), ops::make_arg(name, x), k, upper);
  if (needs_grad({&x})) {
    record_function(name, {x}, {out}, {}, [k, upper](const FunctionNode::Context& ctx) {
      return TensorList{upper ? triu(ctx.grads[0], k) : tril(ctx.grads[0], k)};
    });
  }
  return out;
}
}  // namespace

Tensor tril(const Tensor& x, int64_t k) { return triangle("tril", x, k, false); }
Tensor triu(const Tensor& x, int64_t k) { return triangle("triu", x, k, true); }

namespace {

// The two matrix dims of x, wrapped and distinct.
std::pair<int64_t, int64_t> matrix_dims(const char* op, const Tensor& x, int64_t dim1, int64_t dim2) {
  if (x.dim() < 2) throw ShapeError(std::string(op) + ": expects at least 2 dims, got shape " + shape_str(x.sizes()));
  const int64_t d1 = wrap_dim(dim1, x.dim(), op), d2 = wrap_dim(dim2, x.dim(), op);
  if (d1 == d2) {
    throw ShapeError(std::string(op) + ": dim1 and dim2 name the same dimension " + std::to_string(d1) + " of shape " +
                     shape_str(x.sizes()));
  }
  return {d1, d2};
}

// The view of x's offset diagonal over d1 and d2 (wrapped and distinct), without autograd.
Tensor diagonal_view(const char* op, const Tensor& x, int64_t offset, int64_t d1, int64_t d2) {
  const int64_t rows = x.size(d1), cols = x.size(d2);
  // Elements (i, i + offset) for offset >= 0, (i - offset, i) below; none when the offset passes
  // the matrix.
  const int64_t length =
      std::max<int64_t>(0, offset >= 0 ? std::min(rows, cols - std::min(offset, cols)) : std::min(rows + offset, cols));
  Shape sizes, strides;
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (k == d1 || k == d2) continue;
    sizes.push_back(x.size(k));
    strides.push_back(x.stride(k));
  }
  sizes.push_back(length);
  strides.push_back(x.stride(d1) + x.stride(d2));
  int64_t start = x.storage_offset();
  if (length > 0 && x.numel() > 0) start += offset >= 0 ? offset * x.stride(d2) : -offset * x.stride(d1);
  return ops::make_view(op, x, sizes, strides, start);
}

}  // namespace

Tensor diagonal(const Tensor& x, int64_t offset, int64_t dim1, int64_t dim2) {
  ops::check_defined("diagonal", x, "input");
  const std::pair<int64_t, int64_t> dims = matrix_dims("diagonal", x, dim1, dim2);
  const int64_t d1 = dims.first, d2 = dims.second;  // plain names: a lambda captures them
  Tensor out = diagonal_view("diagonal", x, offset, d1, d2);
  if (needs_grad({&x})) {
    const Shape xs = x.sizes();
    record_function("diagonal", {x}, {out}, {}, [xs, offset, d1, d2](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      Tensor full = zeros(xs, TensorOptions(g.dtype(), g.device()));
      ops::copy_raw(diagonal_view("diagonal", full, offset, d1, d2), g);
      return TensorList{full};
    });
  }
  return out;
}

Tensor diag_embed(const Tensor& x, int64_t offset, int64_t dim1, int64_t dim2) {
  const char* op = "diag_embed";
  ops::check_defined(op, x, "input");
  if (x.dim() == 0) throw ShapeError(std::string(op) + ": expects at least 1 dim, got a 0-d tensor");
  const int64_t out_dims = x.dim() + 1;
  const int64_t d1 = wrap_dim(dim1, out_dims, op), d2 = wrap_dim(dim2, out_dims, op);
  if (d1 == d2) {
    throw ShapeError(std::string(op) + ": dim1 and dim2 name the same dimension " + std::to_string(d1) + " of the " +
                     std::to_string(out_dims) + "-d result");
  }
  int64_t n = 0;
  if (offset == INT64_MIN || __builtin_add_overflow(x.size(-1), offset < 0 ? -offset : offset, &n)) {
    throw Error(std::string(op) + ": offset " + std::to_string(offset) + " is too large");
  }
  Shape shape = x.sizes();
  shape.pop_back();
  for (int64_t d : {std::min(d1, d2), std::max(d1, d2)}) shape.insert(shape.begin() + d, n);
  Tensor out = zeros(shape, TensorOptions(x.dtype(), x.device()));
  ops::copy_raw(diagonal_view(op, out, offset, d1, d2), x.detach());
  if (needs_grad({&x})) {
    record_function(op, {x}, {out}, {}, [offset, d1, d2](const FunctionNode::Context& ctx) {
      return TensorList{diagonal_view("diag_embed", ctx.grads[0], offset, d1, d2).contiguous()};
    });
  }
  return out;
}

Tensor diag(const Tensor& x, int64_t offset) {
  ops::check_defined("diag", x, "input");
  if (x.dim() == 1) return diag_embed(x, offset, 0, 1);
  if (x.dim() == 2) return diagonal(x, offset).clone(MemoryFormat::Contiguous);
  throw ShapeError("diag: expects a 1-d or 2-d tensor, got shape " + shape_str(x.sizes()));
}

Tensor trace(const Tensor& x) {
  ops::check_defined("trace", x, "input");
  if (x.dim() != 2) throw ShapeError("trace: expects a 2-d tensor, got shape " + shape_str(x.sizes()));
  return sum(diagonal(x));
}

}  // namespace kiln
