// Tensor metadata, shape helpers and grad mode. Ops (views included) live in core/ops.
#include "core/tensor.h"

#include <algorithm>
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
int64_t Tensor::size(int64_t d) const { return sizes()[static_cast<size_t>(wrap_dim(d, dim(), "size"))]; }
int64_t Tensor::stride(int64_t d) const { return strides()[static_cast<size_t>(wrap_dim(d, dim(), "stride"))]; }
int64_t Tensor::numel() const { return shape_numel(sizes()); }
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
  const Shape& sz = sizes();
  const Shape& st = strides();
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
  int64_t n = ndim == 0 ? 1 : ndim;  // a 0-d tensor accepts dims 0 and -1, like PyTorch
  if (dim < -n || dim >= n) {
    throw IndexError(std::string(op) + ": dimension " + std::to_string(dim) + " is out of range for a " +
                     std::to_string(ndim) + "-d tensor (expected in [" + std::to_string(-n) + ", " +
                     std::to_string(n - 1) + "])");
  }
  return dim < 0 ? dim + n : dim;
}

int64_t wrap_insert_dim(int64_t dim, int64_t ndim, const char* op) {
  if (dim < -(ndim + 1) || dim > ndim) {
    throw IndexError(std::string(op) + ": dimension " + std::to_string(dim) + " is out of range for inserting into a " +
                     std::to_string(ndim) + "-d tensor (expected in [" + std::to_string(-(ndim + 1)) + ", " +
                     std::to_string(ndim) + "])");
  }
  return dim < 0 ? dim + ndim + 1 : dim;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = s;
    s *= sizes[i] > 1 ? sizes[i] : 1;
  }
  return st;
}

Shape channels_last_strides(const Shape& sizes) {
  if (sizes.size() != 4) throw ShapeError("channels_last: needs a 4-d shape, got " + shape_str(sizes));
  auto m = [](int64_t v) { return v > 1 ? v : int64_t{1}; };
  Shape st(4);
  st[1] = 1;
  st[3] = m(sizes[1]);
  st[2] = st[3] * m(sizes[3]);
  st[0] = st[2] * m(sizes[2]);
  return st;
}

int64_t shape_numel(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

namespace {
thread_local bool t_grad_enabled = true;
}
bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

}  // namespace kiln
