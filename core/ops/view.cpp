// View ops: new sizes/strides/offset over the same storage, each with its backward node.
// as_strided is the one view without a gradient (it can alias elements arbitrarily).
#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln {
namespace {

Shape infer_shape(const char* op, const Shape& shape, int64_t numel, const Shape& from) {
  Shape out = shape;
  Shape given = shape;  // the sizes other than the inferred one
  int infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) throw ShapeError(std::string(op) + ": only one dimension can be -1, got " + shape_str(shape));
      infer = static_cast<int>(i);
      given[i] = 1;
    } else if (out[i] < 0) {
      throw ShapeError(std::string(op) + ": invalid size " + std::to_string(out[i]) + " in shape " + shape_str(shape));
    }
  }
  // Checked: a product that wrapped around could match numel and make a view of a huge shape.
  const int64_t known = checked_numel(given, op);
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) {
      throw ShapeError(std::string(op) + ": shape " + shape_str(shape) + " is invalid for input of shape " +
                       shape_str(from) + " (" + std::to_string(numel) + " elements)");
    }
    out[static_cast<size_t>(infer)] = numel / known;
  } else if (known != numel) {
    throw ShapeError(std::string(op) + ": shape " + shape_str(shape) + " is invalid for input of shape " +
                     shape_str(from) + " (" + std::to_string(numel) + " elements)");
  }
  return out;
}

// Strides that let `new_sizes` view memory laid out as (sizes, strides), if any. Old dims are
// grouped into runs that are contiguous with each other; each run must be exactly covered by a run
// of new dims, which then get strides inside it.
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes) {
  Shape out(new_sizes.size(), 1);
  if (shape_numel(sizes) == 0) return contiguous_strides(new_sizes);
  if (sizes.empty()) return out;
  int64_t nd = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t base = strides.back();
  int64_t old_count = 1, new_count = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    old_count *= sizes[static_cast<size_t>(d)];
    bool run_ends = d == 0 || (sizes[static_cast<size_t>(d - 1)] != 1 &&
                               strides[static_cast<size_t>(d - 1)] != old_count * base);
    if (!run_ends) continue;
    while (nd >= 0 && (new_count < old_count || new_sizes[static_cast<size_t>(nd)] == 1)) {
      out[static_cast<size_t>(nd)] = new_count * base;
      new_count *= new_sizes[static_cast<size_t>(nd)];
      --nd;
    }
    if (new_count != old_count) return std::nullopt;
    if (d > 0) {
      base = strides[static_cast<size_t>(d - 1)];
      old_count = 1;
      new_count = 1;
    }
  }
  if (nd != -1) return std::nullopt;
  return out;
}

// Records a view whose backward reshapes the gradient back to the input's shape.
void record_reshape_like(const char* name, const Tensor& x, const Tensor& out) {
  if (!needs_grad({&x})) return;
  Shape xs = x.sizes();
  record_function(name, {x}, {out}, {}, [xs](const FunctionNode::Context& ctx) {
    return TensorList{ctx.grads[0].reshape(xs)};
  });
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  check_defined("view");
  Shape ns = infer_shape("view", shape, numel(), sizes());
  auto st = view_strides(sizes(), strides(), ns);
  if (!st) {
    throw ShapeError("view: shape " + shape_str(shape) + " is not compatible with the input's size " +
                     shape_str(sizes()) + " and strides " + shape_str(strides()) + "; use reshape");
  }
  Tensor out = ops::make_view("view", *this, ns, *st, storage_offset());
  record_reshape_like("view", *this, out);
  return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
  check_defined("reshape");
  Shape ns = infer_shape("reshape", shape, numel(), sizes());
  if (view_strides(sizes(), strides(), ns)) return view(ns);
  return contiguous().view(ns);
}

Tensor Tensor::permute(const Shape& dims) const {
  check_defined("permute");
  const int64_t n = dim();
  if (static_cast<int64_t>(dims.size()) != n) {
    throw ShapeError("permute: " + std::to_string(dims.size()) + " dims given for a " + std::to_string(n) +
                     "-d tensor (shape " + shape_str(sizes()) + ")");
  }
  Shape ns(dims.size()), nst(dims.size()), inverse(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], n, "permute");
    if (seen[static_cast<size_t>(d)]) throw ShapeError("permute: dim " + std::to_string(d) + " repeats in " + shape_str(dims));
    seen[static_cast<size_t>(d)] = true;
    ns[i] = sizes()[static_cast<size_t>(d)];
    nst[i] = strides()[static_cast<size_t>(d)];
    inverse[static_cast<size_t>(d)] = static_cast<int64_t>(i);
  }
  Tensor out = ops::make_view("permute", *this, ns, nst, storage_offset());
  if (needs_grad({this})) {
    record_function("permute", {*this}, {out}, {}, [inverse](const FunctionNode::Context& ctx) {
      return TensorList{ctx.grads[0].permute(inverse)};
    });
  }
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  check_defined("transpose");
  int64_t n = dim();
  if (n == 0) {  // dims 0 and -1 name the 0-d tensor itself, as in PyTorch
    ops::checked_dim("transpose", *this, d0);
    ops::checked_dim("transpose", *this, d1);
    return *this;
  }
  d0 = wrap_dim(d0, n, "transpose");
  d1 = wrap_dim(d1, n, "transpose");
  Shape p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[static_cast<size_t>(d0)], p[static_cast<size_t>(d1)]);
  return permute(p);
}

Tensor Tensor::t() const {
  check_defined("t");
  if (dim() > 2) throw ShapeError("t: expects a tensor with at most 2 dims, got shape " + shape_str(sizes()));
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  check_defined("slice");
  d = wrap_dim(d, dim(), "slice");
  if (step <= 0) throw Error("slice: step must be positive, got " + std::to_string(step));
  const int64_t size = sizes()[static_cast<size_t>(d)];
  // Negative bounds count from the end; the adds cannot overflow (the operands differ in sign).
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  Shape ns = sizes(), nst = strides();
  // ceil((end - start) / step) without end - start + step - 1, which overflows for a huge step.
  const int64_t n = end > start ? (end - start - 1) / step + 1 : 0;
  ns[static_cast<size_t>(d)] = n;
  // With one element or none the stride is never used, and stride * step may not fit.
  if (n > 1) nst[static_cast<size_t>(d)] *= step;
  // An empty result's offset is never used (and an empty tensor's strides may be huge).
  const int64_t offset = numel() == 0 || n == 0 ? storage_offset() : storage_offset() + start * stride(d);
  Tensor out = ops::make_view("slice", *this, ns, nst, offset);
  if (needs_grad({this})) {
    Shape xs = sizes();
    record_function("slice", {*this}, {out}, {}, [xs, d, start, end, step](const FunctionNode::Context& ctx) {
      Tensor g = zeros(xs, TensorOptions(ctx.grads[0].dtype(), ctx.grads[0].device()));
      ops::copy_raw(g.slice(d, start, end, step), ctx.grads[0]);
      return TensorList{g};
    });
  }
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  check_defined("narrow");
  d = wrap_dim(d, dim(), "narrow");
  const int64_t size = sizes()[static_cast<size_t>(d)];
  const int64_t given_start = start;
  if (start < 0) start += size;
  // length > size - start, not start + length > size: the sum overflows for a huge length.
  if (start < 0 || length < 0 || start > size || length > size - start) {
    int64_t end = 0;
    const std::string last = __builtin_add_overflow(start, length, &end)
                                 ? std::to_string(start) + " + " + std::to_string(length)
                                 : std::to_string(end);
    const std::string range = std::to_string(start) + ", " + last;
    throw IndexError("narrow: range [" + range + ") is out of bounds for dimension " + std::to_string(d) + " of size " +
                     std::to_string(size) + " (shape " + shape_str(sizes()) + "; start " + std::to_string(given_start) +
                     ", length " + std::to_string(length) + ")");
  }
  return slice(d, start, start + length, 1);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  check_defined("select");
  if (dim() == 0) throw IndexError("select: cannot index a 0-d tensor");
  d = wrap_dim(d, dim(), "select");
  const int64_t size = sizes()[static_cast<size_t>(d)];
  if (index < -size || index >= size) {
    throw IndexError("select: index " + std::to_string(index) + " is out of range for dimension " + std::to_string(d) +
                     " of size " + std::to_string(size) + " (shape " + shape_str(sizes()) + ")");
  }
  if (index < 0) index += size;
  Shape ns = sizes(), nst = strides();
  ns.erase(ns.begin() + d);
  nst.erase(nst.begin() + d);
  // An empty tensor's offset is never used (and its strides may be huge).
  const int64_t offset = numel() == 0 ? storage_offset() : storage_offset() + index * stride(d);
  Tensor out = ops::make_view("select", *this, ns, nst, offset);
  if (needs_grad({this})) {
    Shape xs = sizes();
    record_function("select", {*this}, {out}, {}, [xs, d, index](const FunctionNode::Context& ctx) {
      Tensor g = zeros(xs, TensorOptions(ctx.grads[0].dtype(), ctx.grads[0].device()));
      ops::copy_raw(g.select(d, index), ctx.grads[0]);
      return TensorList{g};
    });
  }
  return out;
}

Tensor Tensor::expand(const Shape& shape) const {
  check_defined("expand");
  const int64_t n = static_cast<int64_t>(shape.size());
  if (n < dim()) {
    throw ShapeError("expand: target shape " + shape_str(shape) + " has fewer dims than the input " + shape_str(sizes()));
  }
  Shape ns(shape.size()), nst(shape.size());
  const int64_t lead = n - dim();
  for (int64_t i = 0; i < n; ++i) {
    int64_t target = shape[static_cast<size_t>(i)];
    if (target < -1) {
      throw ShapeError("expand: invalid size " + std::to_string(target) + " in target shape " + shape_str(shape) +
                       " (input " + shape_str(sizes()) + ")");
    }
    if (i < lead) {
      if (target < 0) throw ShapeError("expand: -1 is not allowed in a new leading dim, shape " + shape_str(shape));
      ns[static_cast<size_t>(i)] = target;
      nst[static_cast<size_t>(i)] = 0;
      continue;
    }
    int64_t cur = sizes()[static_cast<size_t>(i - lead)];
    if (target == -1) target = cur;
    if (cur == target) {
      ns[static_cast<size_t>(i)] = cur;
      nst[static_cast<size_t>(i)] = strides()[static_cast<size_t>(i - lead)];
    } else if (cur == 1) {
      ns[static_cast<size_t>(i)] = target;
      nst[static_cast<size_t>(i)] = 0;
    } else {
      throw ShapeError("expand: cannot expand shape " + shape_str(sizes()) + " to " + shape_str(shape) +
                       " (dimension " + std::to_string(i) + ": " + std::to_string(cur) + " to " +
                       std::to_string(target) + ")");
    }
  }
  Tensor out = ops::make_view("expand", *this, ns, nst, storage_offset());
  if (needs_grad({this})) {
    Shape xs = sizes();
    record_function("expand", {*this}, {out}, {}, [xs](const FunctionNode::Context& ctx) {
      return TensorList{sum_to(ctx.grads[0], xs)};
    });
  }
  return out;
}

Tensor Tensor::squeeze() const {
  check_defined("squeeze");
  Shape ns, nst;
  for (int64_t d = 0; d < dim(); ++d) {
    if (sizes()[static_cast<size_t>(d)] != 1) {
      ns.push_back(sizes()[static_cast<size_t>(d)]);
      nst.push_back(strides()[static_cast<size_t>(d)]);
    }
  }
  if (ns.size() == sizes().size()) return *this;
  Tensor out = ops::make_view("squeeze", *this, ns, nst, storage_offset());
  record_reshape_like("squeeze", *this, out);
  return out;
}

Tensor Tensor::squeeze(int64_t d) const {
  check_defined("squeeze");
  if (dim() == 0) {  // dims 0 and -1 name the 0-d tensor itself
    ops::checked_dim("squeeze", *this, d);
    return *this;
  }
  d = wrap_dim(d, dim(), "squeeze");
  if (sizes()[static_cast<size_t>(d)] != 1) return *this;  // as PyTorch: not an error
  Shape ns = sizes(), nst = strides();
  ns.erase(ns.begin() + d);
  nst.erase(nst.begin() + d);
  Tensor out = ops::make_view("squeeze", *this, ns, nst, storage_offset());
  record_reshape_like("squeeze", *this, out);
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  check_defined("unsqueeze");
  d = wrap_insert_dim(d, dim(), "unsqueeze");
  Shape ns = sizes(), nst = strides();
  // The stride of a size-1 dim is never used: one that would overflow becomes 1.
  int64_t st = 1;
  if (d < dim() && __builtin_mul_overflow(strides()[static_cast<size_t>(d)], sizes()[static_cast<size_t>(d)], &st)) {
    st = 1;
  }
  ns.insert(ns.begin() + d, 1);
  nst.insert(nst.begin() + d, st);
  Tensor out = ops::make_view("unsqueeze", *this, ns, nst, storage_offset());
  record_reshape_like("unsqueeze", *this, out);
  return out;
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  check_defined("flatten");
  if (dim() == 0) {  // dims 0 and -1 name the 0-d tensor itself
    ops::checked_dim("flatten", *this, start_dim);
    ops::checked_dim("flatten", *this, end_dim);
    return reshape({1});
  }
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  if (start_dim > end_dim) {
    throw ShapeError("flatten: start_dim " + std::to_string(start_dim) + " is after end_dim " + std::to_string(end_dim));
  }
  if (start_dim == end_dim) return *this;
  Shape ns;
  for (int64_t d = 0; d < start_dim; ++d) ns.push_back(size(d));
  int64_t m = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) m = checked_mul(m, size(d), "flatten", "the flattened size");
  ns.push_back(m);
  for (int64_t d = end_dim + 1; d < dim(); ++d) ns.push_back(size(d));
  return reshape(ns);
}

Tensor Tensor::unfold(int64_t d, int64_t size, int64_t step) const {
  check_defined("unfold");
  if (dim() == 0) throw ShapeError("unfold: cannot unfold a 0-d tensor");
  d = wrap_dim(d, dim(), "unfold");
  const int64_t length = sizes()[static_cast<size_t>(d)];
  if (step <= 0) throw Error("unfold: step must be positive, got " + std::to_string(step));
  if (size < 0 || size > length) {
    throw Error("unfold: size " + std::to_string(size) + " does not fit dimension " + std::to_string(d) + " of size " +
                std::to_string(length) + " (shape " + shape_str(sizes()) + ")");
  }
  const int64_t windows = (length - size) / step + 1;
  Shape ns = sizes(), nst = strides();
  ns[static_cast<size_t>(d)] = windows;
  ns.push_back(size);
  const int64_t st = stride(d);
  nst[static_cast<size_t>(d)] = windows > 1 ? st * step : st;  // one window: the stride is never used
  nst.push_back(st);
  Tensor out = ops::make_view("unfold", *this, ns, nst, storage_offset());
  if (needs_grad({this})) {
    const Shape xs = sizes();
    record_function("unfold", {*this}, {out}, {}, [xs, d, size, step, windows](const FunctionNode::Context& ctx) {
      // Element k of every window adds into the positions k, k + step, ...: one strided slice each.
      const Tensor& g = ctx.grads[0];
      Tensor full = zeros(xs, TensorOptions(g.dtype(), g.device()));
      for (int64_t k = 0; k < size; ++k) {
        Tensor target = full.slice(d, k, k + (windows - 1) * step + 1, step);
        ops::copy_raw(target, add(target, g.select(-1, k)));
      }
      return TensorList{full};
    });
  }
  return out;
}

Tensor Tensor::as_strided(const Shape& sizes_, const Shape& strides_, int64_t offset) const {
  check_defined("as_strided");
  if (needs_grad({this})) {
    throw AutogradError("as_strided: not differentiable in kiln; call it on a detached tensor or under NoGradGuard");
  }
  if (sizes_.size() != strides_.size()) {
    throw ShapeError("as_strided: sizes " + shape_str(sizes_) + " and strides " + shape_str(strides_) + " differ in length");
  }
  for (size_t i = 0; i < sizes_.size(); ++i) {
    if (sizes_[i] < 0 || strides_[i] < 0) {
      throw ShapeError("as_strided: negative size or stride in sizes " + shape_str(sizes_) + ", strides " +
                       shape_str(strides_));
    }
  }
  const int64_t numel = checked_numel(sizes_, "as_strided");
  const int64_t capacity = static_cast<int64_t>(storage()->nbytes() / element_size());
  // The furthest element, offset + sum((size - 1) * stride), checked: a sum that wrapped around
  // would pass the bound and reach far outside the storage.
  bool inside = offset >= 0;
  int64_t last = offset;
  for (size_t i = 0; inside && numel > 0 && i < sizes_.size(); ++i) {
    int64_t span = 0;
    inside = !__builtin_mul_overflow(sizes_[i] - 1, strides_[i], &span) && !__builtin_add_overflow(last, span, &last);
  }
  if (!inside || (numel > 0 && last >= capacity)) {
    throw IndexError("as_strided: sizes " + shape_str(sizes_) + ", strides " + shape_str(strides_) + " and offset " +
                     std::to_string(offset) + " reach past the storage of " + std::to_string(capacity) + " elements");
  }
  return ops::make_view("as_strided", *this, sizes_, strides_, offset);
}

Tensor Tensor::clone(MemoryFormat format) const {
  check_defined("clone");
  Tensor out;
  if (format == MemoryFormat::Preserve) {
    out = ops::empty_for("clone", sizes(), ops::strides_like(sizes(), *this), TensorOptions(dtype(), device()));
  } else {
    out = ops::empty_for("clone", sizes(), TensorOptions(dtype(), device()), format);
  }
  ops::copy_raw(out, *this, "clone");
  if (needs_grad({this})) {
    record_function("clone", {*this}, {out}, {}, [](const FunctionNode::Context& ctx) { return TensorList{ctx.grads[0]}; });
  }
  return out;
}

Tensor Tensor::contiguous(MemoryFormat format) const {
  check_defined("contiguous");
  if (format == MemoryFormat::Preserve) format = MemoryFormat::Contiguous;
  if (is_contiguous(format)) return *this;
  return clone(format);
}

Tensor Tensor::expand_as(const Tensor& other) const {
  ops::check_defined("expand_as", other, "the tensor to expand as");
  return expand(other.sizes());
}

// Free-function forms.
Tensor view(const Tensor& x, const Shape& shape) { return x.view(shape); }
Tensor reshape(const Tensor& x, const Shape& shape) { return x.reshape(shape); }

bool can_view(const Tensor& x, const Shape& shape) {
  if (!x.defined() || shape_numel(shape) != x.numel()) return false;
  return view_strides(x.sizes(), x.strides(), shape).has_value();
}
Tensor permute(const Tensor& x, const Shape& dims) { return x.permute(dims); }
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) { return x.transpose(d0, d1); }
Tensor narrow(const Tensor& x, int64_t d, int64_t start, int64_t length) { return x.narrow(d, start, length); }
Tensor select(const Tensor& x, int64_t d, int64_t index) { return x.select(d, index); }
Tensor expand(const Tensor& x, const Shape& shape) { return x.expand(shape); }
Tensor squeeze(const Tensor& x, std::optional<int64_t> d) { return d ? x.squeeze(*d) : x.squeeze(); }
Tensor unsqueeze(const Tensor& x, int64_t d) { return x.unsqueeze(d); }
Tensor flatten(const Tensor& x, int64_t s, int64_t e) { return x.flatten(s, e); }
Tensor contiguous(const Tensor& x, MemoryFormat format) { return x.contiguous(format); }

Tensor movedim(const Tensor& x, const Shape& source, const Shape& destination) {
  const char* op = "movedim";
  ops::check_defined(op, x, "input");
  if (source.size() != destination.size()) {
    throw ShapeError("movedim: source " + shape_str(source) + " and destination " + shape_str(destination) +
                     " name different numbers of dims");
  }
  const int64_t n = x.dim();
  Shape perm(static_cast<size_t>(n), -1);
  std::vector<bool> moved(static_cast<size_t>(n), false);
  for (size_t i = 0; i < source.size(); ++i) {
    const int64_t s = n == 0 ? ops::checked_dim(op, x, source[i]) : wrap_dim(source[i], n, op);
    const int64_t t = n == 0 ? ops::checked_dim(op, x, destination[i]) : wrap_dim(destination[i], n, op);
    if (n == 0) continue;
    if (moved[static_cast<size_t>(s)] || perm[static_cast<size_t>(t)] != -1) {
      throw ShapeError("movedim: a dim repeats in source " + shape_str(source) + " or destination " +
                       shape_str(destination));
    }
    moved[static_cast<size_t>(s)] = true;
    perm[static_cast<size_t>(t)] = s;
  }
  if (n == 0) return x.view({});
  // The dims not moved fill the free positions in their order.
  int64_t next = 0;
  for (int64_t& p : perm) {
    if (p != -1) continue;
    while (moved[static_cast<size_t>(next)]) ++next;
    p = next++;
  }
  return x.permute(perm);
}

Tensor movedim(const Tensor& x, int64_t source, int64_t destination) {
  return movedim(x, Shape{source}, Shape{destination});
}

Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes) {
  const char* op = "unflatten";
  ops::check_defined(op, x, "input");
  if (x.dim() == 0) throw ShapeError("unflatten: cannot unflatten a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), op);
  if (sizes.empty()) throw ShapeError("unflatten: sizes must name at least one size");
  const Shape inner = infer_shape(op, sizes, x.size(d), {x.size(d)});
  Shape shape = x.sizes();
  shape.erase(shape.begin() + d);
  shape.insert(shape.begin() + d, inner.begin(), inner.end());
  return x.reshape(shape);
}

TensorList unbind(const Tensor& x, int64_t dim) {
  ops::check_defined("unbind", x, "input");
  if (x.dim() == 0) throw ShapeError("unbind: cannot unbind a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "unbind");
  TensorList out;
  for (int64_t i = 0; i < x.size(d); ++i) out.push_back(x.select(d, i));
  return out;
}

TensorList meshgrid(const TensorList& tensors, MeshIndexing indexing) {
  const char* op = "meshgrid";
  if (tensors.empty()) throw Error("meshgrid: needs at least one tensor");
  Shape shape;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ops::check_defined(op, tensors[i], "input");
    if (tensors[i].dim() > 1) {
      throw ShapeError("meshgrid: input " + std::to_string(i) + " must be 0-d or 1-d, got shape " +
                       shape_str(tensors[i].sizes()));
    }
    if (tensors[i].dtype() != tensors[0].dtype() || !(tensors[i].device() == tensors[0].device())) {
      throw DTypeError("meshgrid: inputs must share a dtype and device; input 0 is " +
                       std::string(dtype_name(tensors[0].dtype())) + ", input " + std::to_string(i) + " " +
                       dtype_name(tensors[i].dtype()));
    }
    shape.push_back(tensors[i].numel());
  }
  // Xy swaps the first two dims: tensor 0 runs along dim 1 and tensor 1 along dim 0.
  const bool swap = indexing == MeshIndexing::Xy && tensors.size() >= 2;
  if (swap) std::swap(shape[0], shape[1]);
  TensorList out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    size_t at = i;
    if (swap && i < 2) at = 1 - i;
    Shape view(shape.size(), 1);
    view[at] = shape[at];
    out.push_back(tensors[i].reshape(view).expand(shape));
  }
  return out;
}

}  // namespace kiln
