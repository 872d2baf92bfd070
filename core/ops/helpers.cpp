// Kernel-argument building and shared checks for core/ops.
#include "core/ops/helpers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/layout_stats.h"
#include "kernels/error.h"
#include "kernels/factory.h"

namespace kiln::ops {

StridedArg make_arg(const char* op, const Tensor& t) {
  StridedArg a;
  if (t.dim() > kMaxDims) {
    throw ShapeError(std::string(op) + ": kiln supports at most " + std::to_string(kMaxDims) +
                     " dimensions in a kernel, got " + std::to_string(t.dim()) + " (shape " + shape_str(t.sizes()) +
                     ")");
  }
  a.data = t.data_ptr();
  a.dtype = t.dtype();
  a.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < a.ndim; ++d) {
    a.sizes[d] = t.sizes()[static_cast<size_t>(d)];
    a.strides[d] = t.strides()[static_cast<size_t>(d)];
  }
  return a;
}

StridedArg make_arg(const char* op, const Tensor& t, const Shape& shape) {
  if (static_cast<int64_t>(shape.size()) > kMaxDims) {
    throw ShapeError(std::string(op) + ": kiln supports at most " + std::to_string(kMaxDims) +
                     " dimensions in a kernel, got shape " + shape_str(shape));
  }
  StridedArg a;
  a.data = t.data_ptr();
  a.dtype = t.dtype();
  a.ndim = static_cast<int>(shape.size());
  const int64_t lead = static_cast<int64_t>(shape.size()) - t.dim();
  for (int d = 0; d < a.ndim; ++d) {
    a.sizes[d] = shape[static_cast<size_t>(d)];
    int64_t td = d - lead;
    if (td < 0 || t.sizes()[static_cast<size_t>(td)] == 1) {
      a.strides[d] = 0;
    } else {
      a.strides[d] = t.strides()[static_cast<size_t>(td)];
    }
  }
  return a;
}

Operand make_operand(const char* op, const Tensor& t, const Shape& shape) {
  Operand o;
  o.arg = make_arg(op, t, shape);
  return o;
}

Operand scalar_operand(const Scalar& s) {
  Operand o;
  o.is_scalar = true;
  o.scalar = s.to_double();
  o.int_scalar = s.to_int();
  return o;
}

Operand scalar_operand(const Scalar& s, DType common) {
  Operand o = scalar_operand(s);
  // What a fill of `common` rounds from (a wide integer's float32 value already rounded); the cast
  // below is then the fill's one rounding.
  const double v = fill_compute_value(common, o.scalar, o.int_scalar);
  switch (common) {
    case DType::Float32: o.scalar = static_cast<float>(v); break;
    case DType::Float16: o.scalar = static_cast<float>(Half(static_cast<float>(v))); break;
    case DType::BFloat16: o.scalar = static_cast<float>(BFloat16(static_cast<float>(v))); break;
    default: break;
  }
  return o;
}

namespace {

// Dense strides for `shape` with its dims nested in `order` (a permutation, outermost dim first).
Shape dense_strides_nested(const Shape& shape, const std::vector<size_t>& order) {
  Shape permuted(order.size());
  for (size_t i = 0; i < order.size(); ++i) permuted[i] = shape[order[i]];
  const Shape dense = contiguous_strides(permuted);
  Shape strides(order.size());
  for (size_t i = 0; i < order.size(); ++i) strides[order[i]] = dense[i];
  return strides;
}

}  // namespace

Shape strides_like(const Shape& shape, const Tensor& like) {
  if (!like.defined() || like.sizes() != shape || like.is_contiguous()) return contiguous_strides(shape);
  if (like.is_non_overlapping_and_dense()) return like.strides();
  // Order the dims innermost first, starting from the contiguous order and moving a dim inward past
  // each neighbour with a larger stride (or an equal stride and a larger size). A zero stride has no
  // order: a broadcast dim stops the move, so it keeps its contiguous place.
  const size_t n = shape.size();
  std::vector<size_t> inner_first(n);
  for (size_t i = 0; i < n; ++i) inner_first[i] = n - 1 - i;
  auto goes_inside = [&](size_t d, size_t e) {  // dim d belongs inside dim e
    const int64_t sd = like.strides()[d], se = like.strides()[e];
    if (sd == 0 || se == 0) return false;
    return sd < se || (sd == se && shape[d] < shape[e]);
  };
  for (size_t i = 1; i < n; ++i) {
    for (size_t j = i; j > 0 && goes_inside(inner_first[j], inner_first[j - 1]); --j) {
      std::swap(inner_first[j], inner_first[j - 1]);
    }
  }
  return dense_strides_nested(shape, std::vector<size_t>(inner_first.rbegin(), inner_first.rend()));
}

Shape dense_strides_in_order_of(const Shape& shape, const Tensor& ref) {
  const size_t n = shape.size();
  if (!ref.defined() || ref.dim() != static_cast<int64_t>(n) || n == 0) return contiguous_strides(shape);
  for (size_t d = 0; d < n; ++d) {
    const int64_t size = ref.size(static_cast<int64_t>(d));
    if ((d + 1 < n && size != shape[d]) || (size > 1 && ref.stride(static_cast<int64_t>(d)) == 0)) {
      return contiguous_strides(shape);
    }
  }
  // The last dim stays innermost whatever ref's stride there (a size-1 last dim may carry any).
  std::vector<size_t> order(n);  // outermost first
  for (size_t d = 0; d < n; ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end() - 1, [&](size_t a, size_t b) {
    return ref.stride(static_cast<int64_t>(a)) > ref.stride(static_cast<int64_t>(b));
  });
  return dense_strides_nested(shape, order);
}

Device common_device(const char* op, const std::vector<const Tensor*>& tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    if (!first) {
      first = t;
    } else if (t->device() != first->device()) {
      // PyTorch takes a 0-d CPU tensor beside a CUDA one as a number; kiln asks for the number.
      const bool cpu_0d = (first->dim() == 0 && first->is_cpu()) || (t->dim() == 0 && t->is_cpu());
      throw DeviceError(std::string(op) + ": expected all tensors on one device, got " + first->device().str() +
                        " (shape " + shape_str(first->sizes()) + ") and " + t->device().str() + " (shape " +
                        shape_str(t->sizes()) + ")" +
                        (cpu_0d ? "; a 0-d CPU tensor is not taken as a number on another device: pass its item() "
                                  "as a Scalar, or move it there with to()"
                                : ""));
    }
  }
  return first ? first->device() : Device::cpu();
}

void check_defined(const char* op, const Tensor& t, const char* what) {
  if (!t.defined()) throw Error(std::string(op) + ": " + what + " is an undefined tensor");
}

void check_shape(const char* op, const Shape& shape) {
  for (int64_t s : shape) {
    if (s < 0) throw ShapeError(std::string(op) + ": negative size in shape " + shape_str(shape));
  }
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  if (!t.is_floating_point()) {
    throw DTypeError(std::string(op) + ": " + what + " must be a floating point tensor, got " + dtype_name(t.dtype()) +
                     " (shape " + shape_str(t.sizes()) + ")");
  }
}

bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

double largest_finite(DType dtype) {
  switch (dtype) {
    case DType::Float16: return 65504.0;
    case DType::BFloat16: return std::ldexp(255.0, 120);  // 0x7f7f: (2 - 2^-7) * 2^127
    case DType::Float64: return std::numeric_limits<double>::max();
    default: return std::numeric_limits<float>::max();
  }
}

void check_fill_value(const char* op, const Scalar& value, DType dtype) {
  if (dtype == DType::Bool || value.kind() == Scalar::Kind::Bool) return;
  bool fits = true;
  if (is_floating(dtype)) {
    const double v = value.to_double();
    fits = !std::isfinite(v) || std::fabs(v) <= largest_finite(dtype);
  } else {
    const double lo = dtype == DType::Int32 ? -0x1p31 : dtype == DType::Int64 ? -0x1p63 : 0.0;
    const double hi = dtype == DType::Int32 ? 0x1p31 - 1 : dtype == DType::Int64 ? 0x1p63 : 255.0;
    if (value.is_floating()) {
      const double v = value.to_double();  // NaN fails both comparisons
      fits = v >= lo && (dtype == DType::Int64 ? v < hi : v <= hi);
    } else {
      const int64_t v = value.to_int();
      fits = dtype == DType::Int64 || (dtype == DType::UInt8 ? v >= -255 && v <= 255 : v >= lo && v <= hi);
    }
  }
  if (!fits) {
    const std::string shown = value.is_floating() ? num_str(value.to_double()) : value.str();
    throw Error(std::string(op) + ": value " + shown + " cannot be converted to " + dtype_name(dtype) +
                " without overflow");
  }
}

std::string dtype_str(DType t) { return dtype_name(t); }

Tensor dense(const Tensor& t) {
  if (!t.defined()) return t;
  return to_layout(t, MemoryFormat::Contiguous, "dense");
}

Tensor dense_grad(const Tensor& g, DType dtype) {
  // The cast keeps g's layout; only the row-major copy after it is a layout conversion.
  if (!g.is_contiguous()) note_layout_copy("dense_grad");
  return g.detach().to(dtype).contiguous();
}

void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

int64_t checked_dim(const char* op, const Tensor& x, int64_t dim) {
  const int64_t n = x.dim() == 0 ? 1 : x.dim();
  if (dim < -n || dim >= n) {
    throw IndexError(std::string(op) + ": dim " + std::to_string(dim) + " is out of range for input of shape " +
                     shape_str(x.sizes()) + " (expected in [" + std::to_string(-n) + ", " + std::to_string(n - 1) +
                     "])");
  }
  return dim < 0 ? dim + n : dim;
}

void check_index_values(const char* op, const Tensor& index, int64_t size, const std::string& range) {
  const Tensor host = index.to(Device::cpu()).to(DType::Int64).contiguous();
  const int64_t* v = host.data_ptr<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (v[i] < 0 || v[i] >= size) {
      throw IndexError(std::string(op) + ": index " + std::to_string(v[i]) + " is out of range for " + range);
    }
  }
}

void check_param(const char* op, const Tensor& t, const char* what, const Shape& shape, const std::string& expected) {
  if (!t.defined()) return;
  check_floating(op, t, what);
  if (t.sizes() != shape) {
    throw ShapeError(std::string(op) + ": " + what + " of shape " + shape_str(t.sizes()) + " does not match " +
                     expected);
  }
}

void check_normalized_shape(const char* op, const Tensor& x, const Shape& normalized_shape) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  if (k == 0) {
    throw ShapeError(std::string(op) + ": normalized_shape must name at least one dim (input " + shape_str(x.sizes()) +
                     ")");
  }
  bool matches = x.dim() >= k;
  for (int64_t i = 0; matches && i < k; ++i) {
    matches = x.size(x.dim() - k + i) == normalized_shape[static_cast<size_t>(i)];
  }
  if (!matches) {
    throw ShapeError(std::string(op) + ": input of shape " + shape_str(x.sizes()) +
                     " does not end with normalized_shape " + shape_str(normalized_shape));
  }
}

void check_eps(const char* op, double eps) {
  if (!(eps >= 0.0) || !std::isfinite(eps)) {
    throw Error(std::string(op) + ": eps must be a finite number >= 0, got " + num_str(eps));
  }
}

void check_same_dtype(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  if (a.defined() && b.defined() && a.dtype() != b.dtype()) {
    throw DTypeError(std::string(op) + ": " + a_name + " is " + dtype_name(a.dtype()) + " but " + b_name + " is " +
                     dtype_name(b.dtype()));
  }
}

DType param_dtype_of(const Tensor& a, const Tensor& b, DType fallback) {
  return a.defined() ? a.dtype() : (b.defined() ? b.dtype() : fallback);
}


void check_inplace(const char* op, const Tensor& self, std::initializer_list<const Tensor*> others) {
  if (!self.defined()) throw Error(std::string(op) + ": called on an undefined tensor");
  if (!grad_enabled()) return;
  bool others_grad = false;
  for (const Tensor* t : others) others_grad = others_grad || (t && t->defined() && t->requires_grad());
  if (self.requires_grad() && self.is_leaf()) {
    throw AutogradError(std::string(op) + ": a leaf tensor that requires grad (shape " + shape_str(self.sizes()) +
                        ") cannot be modified in place; wrap the update in NoGradGuard or use detach()");
  }
  if (self.is_view() && (self.requires_grad() || others_grad)) {
    // A view taken with grad mode on changes its base's history with it (core/autograd.cpp,
    // ViewInPlaceBackward), unless that base is a leaf, whose values are its own to keep.
    const Tensor base(self.impl()->view_base);
    if (!base.defined() || base.storage() != self.storage()) {
      throw AutogradError(std::string(op) + ": the view (shape " + shape_str(self.sizes()) +
                          ") has no base whose history could take the change (a detach() alias, or a view of one); "
                          "use the out-of-place op");
    }
    if (base.requires_grad() && base.is_leaf()) {
      throw AutogradError(std::string(op) + ": the view (shape " + shape_str(self.sizes()) +
                          ") is of a leaf tensor that requires grad (shape " + shape_str(base.sizes()) +
                          "), which cannot be modified in place; wrap the update in NoGradGuard or use detach()");
    }
  }
  if (self.impl()->no_grad_view_of_grad) {
    throw AutogradError(std::string(op) + ": the view (shape " + shape_str(self.sizes()) +
                        ") was taken under NoGradGuard from a tensor that requires grad; changing it in place with "
                        "grad mode on would change that tensor behind its history. Change it under NoGradGuard, or "
                        "take the view with grad mode on");
  }
}

bool shares_storage(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.storage() && a.storage() == b.storage();
}

Tensor index_on(const std::vector<int64_t>& values, Device device) {
  return tensor(values, {static_cast<int64_t>(values.size())}, TensorOptions(DType::Int64, Device::cpu())).to(device);
}

Scalar negated(const Scalar& s) {
  if (s.is_floating()) return Scalar(-s.to_double());
  return Scalar(static_cast<int64_t>(uint64_t{0} - static_cast<uint64_t>(s.to_int())));
}

bool exact_in_double(const Scalar& s) {
  if (s.is_floating()) return true;
  const int64_t v = s.to_int();
  return v >= -(int64_t{1} << 53) && v <= (int64_t{1} << 53);
}

namespace {

// The bytes [first, last) a view spans in its storage.
std::pair<int64_t, int64_t> byte_span(const Tensor& t, const char* op) {
  const auto esize = static_cast<int64_t>(t.element_size());
  const int64_t first = t.storage_offset() * esize;
  return {first, first + checked_extent(t.sizes(), t.strides(), op) * esize};
}

// Whether `input` meets the memory of `self`, which an in-place op writes: not at all (or input is
// self itself, each element read before it is written), or within the bytes self spans.
bool meets_written(const Tensor& self, const Tensor& input, const char* op) {
  if (!shares_storage(self, input) || input.numel() == 0 || self.numel() == 0) return false;
  if (input.storage_offset() == self.storage_offset() && input.sizes() == self.sizes() &&
      input.strides() == self.strides()) {
    return false;
  }
  const auto [a0, a1] = byte_span(self, op);
  const auto [b0, b1] = byte_span(input, op);
  return a0 < b1 && b0 < a1;
}

}  // namespace

void check_no_overlap(const char* op, const Tensor& self, std::initializer_list<const Tensor*> inputs) {
  if (self.numel() <= 1) return;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (self.size(d) > 1 && self.stride(d) == 0) {
      throw Error(std::string(op) + ": several elements of the written-to tensor (shape " + shape_str(self.sizes()) +
                  ", strides " + shape_str(self.strides()) + ") are one place in memory; clone() it first");
    }
  }
  for (const Tensor* t : inputs) {
    if (!t || !meets_written(self, *t, op)) continue;
    if (!self.is_non_overlapping_and_dense() || !t->is_non_overlapping_and_dense()) continue;  // readable_input
    throw Error(std::string(op) + ": an input (shape " + shape_str(t->sizes()) + ", strides " +
                shape_str(t->strides()) + ") shares part of the written-to tensor's memory (shape " +
                shape_str(self.sizes()) + ", strides " + shape_str(self.strides()) +
                "), so the result would depend on the order of the writes; clone() the input first");
  }
}

Tensor readable_input(const Tensor& self, const Tensor& input) {
  if (!meets_written(self, input, "readable_input")) return input;
  NoGradGuard no_grad;
  return input.detach().clone();
}

void check_inplace_cast(const char* op, DType result, const Tensor& self) {
  if (!can_cast(result, self.dtype())) {
    throw DTypeError(std::string(op) + ": result dtype " + dtype_name(result) + " cannot be stored in place into a " +
                     dtype_name(self.dtype()) + " tensor");
  }
}

void record_overwrite(const char* op, const Tensor& self) {
  if (!grad_enabled() || !self.requires_grad()) return;
  record_function(op, {self}, {self}, {}, [](const FunctionNode::Context&) { return TensorList{Tensor()}; });
}


}  // namespace kiln::ops

namespace kiln::ops {

DType conversion_compute_dtype(DType in, DType out) {
  if (out == DType::Bool) return is_floating(in) ? compute_dtype_for(in) : DType::Int64;  // != 0 on the value
  if (!is_floating(out)) return DType::Int64;  // truncated to int64, then wrapped to the type: defined
  return in == DType::Float64 || out == DType::Float64 ? DType::Float64 : DType::Float32;
}

DType cast_compute_dtype(DType in, DType out) {
  const bool to_16bit = out == DType::Float16 || out == DType::BFloat16;
  if (to_16bit && (in == DType::Int32 || in == DType::Int64)) return DType::Int64;
  return conversion_compute_dtype(in, out);
}

void copy_raw(const Tensor& dst, const Tensor& src, const char* op) {
  if (dst.numel() == 0) return;
  common_device(op, {&dst, &src});
  StridedArg o = make_arg(op, dst);
  Operand i = make_operand(op, src, dst.sizes());
  collapse_dims({&o, &i.arg});
  launch("copy_", dst.device(), kernels::unary, o, i, UnaryOp::Copy, cast_compute_dtype(src.dtype(), dst.dtype()),
         0.0, 0.0);
}

std::vector<int64_t> batch_offsets(const Tensor& x, int64_t x_batch_dims, const Shape& batch) {
  const int64_t nb = shape_numel(batch);
  const int64_t lead = static_cast<int64_t>(batch.size()) - x_batch_dims;
  std::vector<int64_t> offs(static_cast<size_t>(nb));
  for (int64_t n = 0; n < nb; ++n) {
    int64_t rem = n, off = 0;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      int64_t idx = rem % batch[static_cast<size_t>(d)];
      rem /= batch[static_cast<size_t>(d)];
      int64_t xd = d - lead;
      if (xd >= 0 && x.size(xd) != 1) off += idx * x.stride(xd);
    }
    offs[static_cast<size_t>(n)] = off;
  }
  return offs;
}

Tensor make_view(const char* op, const Tensor& x, Shape sizes, Shape strides, int64_t offset) {
  const int64_t extent = checked_extent(sizes, strides, op);
  if (extent > 0) {
    const int64_t capacity = static_cast<int64_t>(x.storage()->nbytes() / x.element_size());
    int64_t end = 0;
    if (offset < 0 || __builtin_add_overflow(offset, extent, &end) || end > capacity) {
      throw IndexError(std::string(op) + ": a view of shape " + shape_str(sizes) + ", strides " + shape_str(strides) +
                       " and offset " + std::to_string(offset) + " reaches past the storage of " +
                       std::to_string(capacity) + " elements");
    }
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.storage();
  impl->dtype = x.dtype();
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->version = x.impl()->version;
  impl->is_view = true;
  Tensor view(std::move(impl));
  set_view_origin(view, x);
  return view;
}

void set_view_origin(const Tensor& view, const Tensor& x) {
  TensorImpl& impl = *view.impl();
  impl.no_grad_view_of_grad = x.impl()->no_grad_view_of_grad || (!grad_enabled() && x.requires_grad());
  if (grad_enabled()) detail::remember_view_base(impl, x);
}

}  // namespace kiln::ops

// --- hidden layout copies (core/ops/layout_stats.h) ------------------------------------------------

namespace kiln {
namespace {

// Per thread: ops run on their caller's thread (and backward on backward()'s), so a test counting
// around its own step sees neither another thread's copies nor a lock.
struct LayoutCopies {
  int64_t total = 0;
  std::map<std::string, int64_t> by_op;
};
thread_local LayoutCopies t_layout_copies;

}  // namespace

int64_t layout_copy_count() { return t_layout_copies.total; }
std::map<std::string, int64_t> layout_copy_counts() { return t_layout_copies.by_op; }
void reset_layout_copy_count() { t_layout_copies = LayoutCopies(); }

namespace ops {

void note_layout_copy(const char* what) {
  ++t_layout_copies.total;
  ++t_layout_copies.by_op[what];
}

Tensor to_layout(const Tensor& t, MemoryFormat format, const char* what) {
  if (format == MemoryFormat::Preserve) format = MemoryFormat::Contiguous;
  if (t.is_contiguous(format)) return t.detach();
  note_layout_copy(what);
  return t.detach().contiguous(format);
}

}  // namespace ops
}  // namespace kiln
