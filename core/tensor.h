// Tensor: a cheap, shared handle to a TensorImpl (storage, dtype, shape, strides, offset, version
// counter, autograd metadata). Views share storage and the version counter with their base;
// channels-last is only a stride permutation. Ops live in core/ops and are also offered here as
// methods, PyTorch-style.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/random.h"
#include "core/scalar.h"
#include "core/storage.h"
#include "kernels/dtype.h"

namespace kiln {

using Shape = std::vector<int64_t>;
class Tensor;
using TensorList = std::vector<Tensor>;
class Node;
struct AutogradMeta;

enum class MemoryFormat : uint8_t { Contiguous, ChannelsLast, Preserve };

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  DType dtype = DType::Float32;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // in elements
  std::shared_ptr<std::atomic<uint64_t>> version;  // shared with views and detached aliases
  std::unique_ptr<AutogradMeta> autograd;          // null until autograd needs it
  bool is_view = false;
  // A view taken under NoGradGuard of a tensor that requires grad (or a view of such a view): it has
  // no history of its own, so an in-place change to it with grad mode on would change the tensor's
  // values behind its history (ops::check_inplace refuses it).
  bool no_grad_view_of_grad = false;
  // A view taken with grad mode on: the tensor whose memory it views (never a view itself: the
  // base of a view of a view is the first one's) and the history that base had when the view's own
  // was last made (held, so the node cannot be freed and its address reused). An in-place op that
  // gives the base a new history, on the base or through any of its views, leaves the view's
  // history pointing past that op; the view's next use (requires_grad, grad_fn, a recorded op,
  // backward) sees the base's history changed and takes a new one from it, as PyTorch does
  // (core/autograd.cpp, detail::refresh_view_history). `view_base_seen` is that node's address, for
  // a check without a lock.
  std::shared_ptr<TensorImpl> view_base;
  std::shared_ptr<Node> view_base_fn;
  std::atomic<const Node*> view_base_seen{nullptr};

  TensorImpl();
  ~TensorImpl();
  AutogradMeta& autograd_meta();  // creates it on first use
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- metadata ---------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  DType dtype() const;
  Device device() const;
  const Shape& sizes() const;
  const Shape& shape() const { return sizes(); }
  const Shape& strides() const;
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t dim() const {
    check_defined("dim");
    return static_cast<int64_t>(impl_->sizes.size());
  }
  int64_t numel() const;
  int64_t storage_offset() const;
  size_t element_size() const { return kiln::element_size(dtype()); }
  bool is_contiguous(MemoryFormat format = MemoryFormat::Contiguous) const;
  // Non-overlapping and dense: the elements fill a block of memory in some dimension order.
  bool is_non_overlapping_and_dense() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_view() const;
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  uint64_t version() const;
  void bump_version() const;
  const std::shared_ptr<Storage>& storage() const;
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // Pointer to the first element (storage data + offset). T must match the dtype.
  void* data_ptr() const;
  template <typename T> T* data_ptr() const;

  // --- autograd ---------------------------------------------------------------------------
  bool requires_grad() const;
  Tensor& set_requires_grad(bool requires_grad);  // leaves only
  const Tensor& grad() const;                     // undefined when no gradient
  Tensor& mutable_grad();
  void set_grad(const Tensor& grad);
  const std::shared_ptr<Node>& grad_fn() const;
  bool is_leaf() const;
  uint32_t output_nr() const;
  // Gradient of this tensor (default: ones for a one-element tensor) into the graph's leaves.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // Hook on the gradient flowing into this tensor; may return a replacement (or undefined: keep).
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // Leaves only: called after the gradient was accumulated into .grad.
  void register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) const;
  void retain_grad() const;  // keep .grad on a non-leaf
  Tensor detach() const;     // same storage and version counter, no history
  Tensor& detach_();
  // Leaves only: makes this tensor hold `data`'s storage, dtype, shape and strides (PyTorch's
  // `t.data = data`), keeping its identity and requires_grad; its gradient is dropped.
  void set_data(const Tensor& data);

  // --- conversions ------------------------------------------------------------------------
  Tensor to(DType dtype) const;  // differentiable; returns *this when already that dtype
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(Device device, DType dtype) const;
  // A copy in page-locked host memory (CPU tensors only), for asynchronous host-to-device copies.
  Tensor pin_memory() const;
  bool is_pinned() const;
  Tensor clone(MemoryFormat format = MemoryFormat::Preserve) const;
  Tensor contiguous(MemoryFormat format = MemoryFormat::Contiguous) const;
  Scalar item() const;  // one-element tensors only; syncs the device
  template <typename T> T item() const;
  std::vector<double> to_vector_double() const;  // host copy of the values, in logical order
  template <typename T> std::vector<T> to_vector() const;
  std::string str() const;  // PyTorch-like printing

  // --- views ------------------------------------------------------------------------------
  Tensor view(const Shape& shape) const;  // -1 infers one size; needs compatible strides
  Tensor reshape(const Shape& shape) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  // Sliding windows as a view: dim becomes the (size(dim) - size) / step + 1 window starts and a
  // new last dim of `size` holds each window (torch.Tensor.unfold; a 0-d tensor is refused);
  // windows overlap when step < size, and their gradients add.
  Tensor unfold(int64_t dim, int64_t size, int64_t step) const;
  Tensor as_strided(const Shape& sizes, const Shape& strides, int64_t storage_offset) const;

  // --- in-place (bump the version counter) -----------------------------------------------
  Tensor& add_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& add_(const Scalar& other);
  Tensor& sub_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(const Scalar& other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(const Scalar& other);
  Tensor& copy_(const Tensor& src);
  // Every element `value`, stored as full() stores it: an Error if it overflows the dtype (1e5 in
  // float16, 300 in uint8), a float into an integer tensor cut toward zero.
  Tensor& fill_(const Scalar& value);
  Tensor& zero_();
  // Random fills from `generator`, or the device's default generator (core/random.h). uniform_
  // stays in [low, high) in every floating dtype (a value that would round to high takes the largest
  // one below it), and with low == high fills low.
  Tensor& uniform_(double low = 0.0, double high = 1.0, const std::optional<Generator>& generator = std::nullopt);
  Tensor& normal_(double mean = 0.0, double std = 1.0, const std::optional<Generator>& generator = std::nullopt);
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max);
  Tensor& masked_fill_(const Tensor& mask, const Scalar& value);

  // --- common ops as methods (see core/ops) ------------------------------------------------
  Tensor sum(const Shape& dims = {}, bool keepdim = false) const;
  Tensor mean(const Shape& dims = {}, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor pow(const Scalar& exponent) const;

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string shape_str(const Shape& shape);

// Normalizes a possibly negative dim against `ndim`; an IndexError naming `op` when out of range.
// A 0-d tensor has no dims to index, so every dim is out of range for it (ops that treat a 0-d
// tensor as one element, as reductions and softmax do, accept 0 and -1 themselves).
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// The same for a dim at which a new dim is inserted (unsqueeze, stack): range [-(ndim+1), ndim].
int64_t wrap_insert_dim(int64_t dim, int64_t ndim, const char* op);
// Row-major contiguous strides of a shape, and the number of elements. A ShapeError when a stride
// or the count overflows int64 (strides of a shape with no elements saturate instead: they are
// never used) or, for shape_numel, when a size is negative.
Shape contiguous_strides(const Shape& sizes);
// Whether a layout's elements fill a block of memory in some dimension order, each once
// (Tensor::is_non_overlapping_and_dense for sizes and strides that need no tensor).
bool non_overlapping_and_dense(const Shape& sizes, const Shape& strides);
// Same sizes, and the same strides wherever a dim has more than one element (the stride of a
// size-1 dim addresses nothing, so it may differ).
bool same_layout(const Tensor& a, const Tensor& b);
Shape channels_last_strides(const Shape& sizes);  // 4-D only
int64_t shape_numel(const Shape& sizes);

// Overflow-checked size arithmetic. Shapes come from callers, and a count that wraps around sizes
// a buffer too small for the tensor (or passes a "same count" check) and is then read past its
// end, so every size computation that can overflow goes through these. Each throws a ShapeError
// naming `op` and the offending shape or values.
// The element count of `sizes` (negative sizes refused).
int64_t checked_numel(const Shape& sizes, const char* op);
// The bytes of a dense tensor of `sizes` and `dtype`.
int64_t checked_nbytes(const Shape& sizes, DType dtype, const char* op);
// The elements a strided layout spans from its first element: 1 + sum((size - 1) * stride) over
// dims of size > 1, 0 when it has no elements. Negative sizes or strides are refused.
int64_t checked_extent(const Shape& sizes, const Shape& strides, const char* op);
// a + b and a * b; `what` names the quantity in the message.
int64_t checked_add(int64_t a, int64_t b, const char* op, const char* what);
int64_t checked_mul(int64_t a, int64_t b, const char* op, const char* what);

// --- grad mode ----------------------------------------------------------------------------
bool grad_enabled();
void set_grad_enabled(bool enabled);
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln
