// Tensor metadata, shape helpers and grad mode. Ops (views included) live in core/ops.
#include "core/tensor.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "core/autograd.h"
#include "kernels/error.h"

namespace kiln {

TensorImpl::TensorImpl() : version(std::make_shared<std::atomic<uint64_t>>(0)) {}
TensorImpl::~TensorImpl() = default;

AutogradMeta& TensorImpl::autograd_meta() {
  if (!autograd) autograd = std::make_unique<AutogradMeta>();
  return *autograd;
}

void Tensor::check_defined(const char* what) const {
  if (!impl_) throw Error(std::string(what) + ": called on an undefined tensor");
}

DType Tensor::dtype() const {
  check_defined("dtype");
  return impl_->dtype;
}
Device Tensor::device() const {
  check_defined("device");
  return impl_->storage->device();
}
const Shape& Tensor::sizes() const {
  check_defined("sizes");
  return impl_->sizes;
}
const Shape& Tensor::strides() const {
  check_defined("strides");
  return impl_->strides;
}
int64_t Tensor::size(int64_t d) const {
  check_defined("size");
  return impl_->sizes[static_cast<size_t>(wrap_dim(d, dim(), "size"))];
}
int64_t Tensor::stride(int64_t d) const {
  check_defined("stride");
  return impl_->strides[static_cast<size_t>(wrap_dim(d, dim(), "stride"))];
}
int64_t Tensor::numel() const {
  check_defined("numel");
  return shape_numel(impl_->sizes);
}
int64_t Tensor::storage_offset() const {
  check_defined("storage_offset");
  return impl_->offset;
}
bool Tensor::is_view() const {
  check_defined("is_view");
  return impl_->is_view;
}
uint64_t Tensor::version() const {
  check_defined("version");
  return impl_->version->load();
}
void Tensor::bump_version() const {
  check_defined("bump_version");
  impl_->version->fetch_add(1);
}
const std::shared_ptr<Storage>& Tensor::storage() const {
  check_defined("storage");
  return impl_->storage;
}

void* Tensor::data_ptr() const {
  check_defined("data_ptr");
  auto* base = static_cast<char*>(impl_->storage->data());
  if (!base) return nullptr;
  return base + impl_->offset * static_cast<int64_t>(kiln::element_size(impl_->dtype));
}

template <typename T> T* Tensor::data_ptr() const {
  check_defined("data_ptr");
  if (dtype_of<T>() != dtype()) {
    throw DTypeError(std::string("data_ptr: tensor is ") + dtype_name(dtype()) + ", asked for " +
                     dtype_name(dtype_of<T>()));
  }
  return static_cast<T*>(data_ptr());
}
template float* Tensor::data_ptr<float>() const;
template double* Tensor::data_ptr<double>() const;
template Half* Tensor::data_ptr<Half>() const;
template BFloat16* Tensor::data_ptr<BFloat16>() const;
template int32_t* Tensor::data_ptr<int32_t>() const;
template int64_t* Tensor::data_ptr<int64_t>() const;
template uint8_t* Tensor::data_ptr<uint8_t>() const;
template bool* Tensor::data_ptr<bool>() const;

bool Tensor::is_contiguous(MemoryFormat format) const {
  check_defined("is_contiguous");
  const Shape& sz = sizes();
  const Shape& st = strides();
  if (format == MemoryFormat::ChannelsLast) {
    if (sz.size() != 4) return false;
    // order of increasing stride: C, W, H, N
    const int order[4] = {1, 3, 2, 0};
    int64_t expected = 1;
    for (int d : order) {
      if (sz[static_cast<size_t>(d)] != 1 && st[static_cast<size_t>(d)] != expected) return false;
      expected *= sz[static_cast<size_t>(d)];
    }
    return true;
  }
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (sz[static_cast<size_t>(d)] != 1 && st[static_cast<size_t>(d)] != expected) return false;
    expected *= sz[static_cast<size_t>(d)];
  }
  return true;
}

bool Tensor::is_non_overlapping_and_dense() const {
  check_defined("is_non_overlapping_and_dense");
  return non_overlapping_and_dense(sizes(), strides());
}

bool same_layout(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) != 1 && a.stride(d) != b.stride(d)) return false;
  }
  return true;
}

bool non_overlapping_and_dense(const Shape& sz, const Shape& st) {
  std::vector<size_t> order;
  for (size_t d = 0; d < sz.size(); ++d)
    if (sz[d] != 1) order.push_back(d);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return st[a] < st[b]; });
  int64_t expected = 1;
  for (size_t d : order) {
    if (st[d] != expected) return false;
    expected *= sz[d];
  }
  return true;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  if (ndim == 0) {
    throw IndexError(std::string(op) + ": dimension " + std::to_string(dim) +
                     " is out of range for a 0-d tensor (it has no dimensions)");
  }
  if (dim < -ndim || dim >= ndim) {
    throw IndexError(std::string(op) + ": dimension " + std::to_string(dim) + " is out of range for a " +
                     std::to_string(ndim) + "-d tensor (expected in [" + std::to_string(-ndim) + ", " +
                     std::to_string(ndim - 1) + "])");
  }
  return dim < 0 ? dim + ndim : dim;
}

int64_t wrap_insert_dim(int64_t dim, int64_t ndim, const char* op) {
  if (dim < -(ndim + 1) || dim > ndim) {
    throw IndexError(std::string(op) + ": dimension " + std::to_string(dim) + " is out of range for inserting into a " +
                     std::to_string(ndim) + "-d tensor (expected in [" + std::to_string(-(ndim + 1)) + ", " +
                     std::to_string(ndim) + "])");
  }
  return dim < 0 ? dim + ndim + 1 : dim;
}

namespace {

bool has_zero(const Shape& sizes) { return std::find(sizes.begin(), sizes.end(), int64_t{0}) != sizes.end(); }

[[noreturn]] void throw_too_many(const char* op, const Shape& sizes) {
  throw ShapeError(std::string(op) + ": shape " + shape_str(sizes) + " has more elements than int64 can count");
}

}  // namespace

Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  int64_t s = 1;
  bool saturated = false;  // past int64: only a shape without elements may get here
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = s;
    if (!saturated && __builtin_mul_overflow(s, std::max<int64_t>(sizes[i], 1), &s)) {
      if (!has_zero(sizes)) {
        throw ShapeError("contiguous_strides: the strides of shape " + shape_str(sizes) + " overflow int64");
      }
      saturated = true;
    }
    if (saturated) s = std::numeric_limits<int64_t>::max();
  }
  return st;
}

Shape channels_last_strides(const Shape& sizes) {
  if (sizes.size() != 4) throw ShapeError("channels_last: needs a 4-d shape, got " + shape_str(sizes));
  // Order of increasing stride: C, W, H, N; the same saturation rule as contiguous_strides.
  const size_t order[4] = {1, 3, 2, 0};
  Shape st(4);
  int64_t s = 1;
  bool saturated = false;
  for (size_t d : order) {
    st[d] = s;
    if (!saturated && __builtin_mul_overflow(s, std::max<int64_t>(sizes[d], 1), &s)) {
      if (!has_zero(sizes)) {
        throw ShapeError("channels_last: the strides of shape " + shape_str(sizes) + " overflow int64");
      }
      saturated = true;
    }
    if (saturated) s = std::numeric_limits<int64_t>::max();
  }
  return st;
}

int64_t shape_numel(const Shape& sizes) { return checked_numel(sizes, "numel"); }

int64_t checked_numel(const Shape& sizes, const char* op) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : sizes) {
    if (s < 0) throw ShapeError(std::string(op) + ": negative size in shape " + shape_str(sizes));
    overflow = overflow || __builtin_mul_overflow(n, s, &n);
  }
  // A zero anywhere makes the count 0 whatever the other sizes are.
  if (overflow) {
    if (has_zero(sizes)) return 0;
    throw_too_many(op, sizes);
  }
  return n;
}

int64_t checked_nbytes(const Shape& sizes, DType dtype, const char* op) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(checked_numel(sizes, op), static_cast<int64_t>(element_size(dtype)), &bytes)) {
    throw ShapeError(std::string(op) + ": shape " + shape_str(sizes) + " of " + dtype_name(dtype) +
                     " needs more bytes than int64 can count");
  }
  return bytes;
}

int64_t checked_extent(const Shape& sizes, const Shape& strides, const char* op) {
  if (sizes.size() != strides.size()) {
    throw ShapeError(std::string(op) + ": shape " + shape_str(sizes) + " and strides " + shape_str(strides) +
                     " differ in length");
  }
  for (int64_t st : strides) {
    if (st < 0) {
      throw ShapeError(std::string(op) + ": negative stride in strides " + shape_str(strides) + " (shape " +
                       shape_str(sizes) + "); kiln has no negative strides");
    }
  }
  if (checked_numel(sizes, op) == 0) return 0;
  int64_t extent = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    int64_t span = 0;
    if (sizes[i] > 1 &&
        (__builtin_mul_overflow(sizes[i] - 1, strides[i], &span) || __builtin_add_overflow(extent, span, &extent))) {
      throw ShapeError(std::string(op) + ": shape " + shape_str(sizes) + " with strides " + shape_str(strides) +
                       " spans more elements than int64 can count");
    }
  }
  return extent;
}

int64_t checked_add(int64_t a, int64_t b, const char* op, const char* what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    throw ShapeError(std::string(op) + ": " + what + " overflows int64 (" + std::to_string(a) + " + " +
                     std::to_string(b) + ")");
  }
  return r;
}

int64_t checked_mul(int64_t a, int64_t b, const char* op, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw ShapeError(std::string(op) + ": " + what + " overflows int64 (" + std::to_string(a) + " * " +
                     std::to_string(b) + ")");
  }
  return r;
}

namespace {
thread_local bool t_grad_enabled = true;
}
bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

}  // namespace kiln
