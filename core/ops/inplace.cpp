// In-place ops and conversions. Every in-place op checks that the result dtype casts to self's
// and that the other operand broadcasts to self's shape, bumps the version counter, and rewrites
// self's history so backward sees the op. In-place on a leaf that requires grad, or on a view
// that takes part in autograd, is refused (kiln does not rebase view histories). Moves between
// devices copy the bytes of a contiguous source on the CUDA side's current stream.
#include <cstring>
#include <limits>

#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/random.h"
#include "kernels/error.h"

namespace kiln {
namespace {

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
    throw AutogradError(std::string(op) + ": in-place on a view that takes part in autograd is not supported (shape " +
                        shape_str(self.sizes()) + "); use the out-of-place op");
  }
}

void check_broadcast_to_self(const char* op, const Tensor& self, const Tensor& other) {
  ops::common_device(op, {&self, &other});
  if (broadcast_shapes(self.sizes(), other.sizes(), op) != self.sizes()) {
    throw ShapeError(std::string(op) + ": operand of shape " + shape_str(other.sizes()) +
                     " does not broadcast to the in-place target's shape " + shape_str(self.sizes()));
  }
}

void check_cast(const char* op, DType result, const Tensor& self) {
  if (!ops::can_cast(result, self.dtype())) {
    throw DTypeError(std::string(op) + ": result dtype " + dtype_name(result) + " cannot be stored in place into a " +
                     dtype_name(self.dtype()) + " tensor");
  }
}

// self = op(self, other) elementwise, computed in rt's compute type.
void apply_binary_inplace(const char* op, const Tensor& self, const Operand& other, bool other_is_tensor, BinaryOp bop,
                          DType rt, double alpha) {
  if (self.numel() == 0) return;
  StridedArg o = ops::make_arg(self);
  Operand x = ops::make_operand(self, self.sizes());
  Operand y = other;
  std::vector<StridedArg*> args{&o, &x.arg};
  if (other_is_tensor) args.push_back(&y.arg);
  ops::collapse_dims(args);
  if (self.is_cpu()) {
    binary_cpu(o, x, y, bop, compute_dtype_for(rt), alpha, 0);
    return;
  }
#if defined(KILN_WITH_CUDA)
  const int dev = self.device().index;
  cuda::DeviceGuard guard(dev);
  binary_cuda(o, x, y, bop, compute_dtype_for(rt), alpha, 0, cuda::current_stream(dev));
#else
  ops::no_cuda_kernel(op);
#endif
}

// A random fill of `self` in its logical order (no collapsing: element i uses draw i).
void random_inplace(const char* op, const Tensor& self, RandomDist dist, double a, double b) {
  PhiloxState st = default_generator(self.device()).next();
  if (self.is_cpu()) {
    random_cpu(ops::make_arg(self), dist, a, b, st);
    return;
  }
#if defined(KILN_WITH_CUDA)
  const int dev = self.device().index;
  cuda::DeviceGuard guard(dev);
  random_cuda(ops::make_arg(self), dist, a, b, st, cuda::current_stream(dev));
#else
  ops::no_cuda_kernel(op);
#endif
}

// Marks self as produced by a node that passes no gradient to self's old value.
void record_overwrite(const char* op, const Tensor& self) {
  if (!grad_enabled() || !self.requires_grad()) return;
  record_function(op, {self}, {self}, {}, [](const FunctionNode::Context&) { return TensorList{Tensor()}; });
}

// self += alpha * other; `op` names add_ or sub_ in errors and in the graph.
void add_inplace(const char* op, Tensor& self, const Tensor& other, const Scalar& alpha) {
  check_inplace(op, self, {&other});
  ops::check_defined(op, other, "operand");
  check_broadcast_to_self(op, self, other);
  DType rt = promote_types(self.dtype(), other.dtype());
  if (alpha.is_floating() && !is_floating(rt)) {
    throw DTypeError(std::string(op) + ": a float alpha (" + alpha.str() + ") needs floating operands, got " +
                     dtype_name(rt));
  }
  check_cast(op, rt, self);
  bool record = needs_grad({&self, &other});
  apply_binary_inplace(op, self, ops::make_operand(other, self.sizes()), true, BinaryOp::Add, rt, alpha.to_double());
  self.bump_version();
  if (record) {
    Shape os = other.sizes();
    double al = alpha.to_double();
    record_function(op, {self, other}, {self}, {}, [os, al](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      TensorList r(2);
      if (ctx.needs_input_grad[0]) r[0] = g;
      if (ctx.needs_input_grad[1]) r[1] = sum_to(al == 1.0 ? g : g * al, os);
      return r;
    });
  }
}

}  // namespace

Tensor& Tensor::add_(const Tensor& other, const Scalar& alpha) {
  add_inplace("add_", *this, other, alpha);
  return *this;
}

Tensor& Tensor::sub_(const Tensor& other, const Scalar& alpha) {
  if ((defined() && dtype() == DType::Bool) || (other.defined() && other.dtype() == DType::Bool)) {
    throw DTypeError("sub_: bool tensors cannot be subtracted; use ne");
  }
  add_inplace("sub_", *this, other, alpha.is_floating() ? Scalar(-alpha.to_double()) : Scalar(-alpha.to_int()));
  return *this;
}

Tensor& Tensor::add_(const Scalar& other) {
  check_inplace("add_", *this, {});
  DType rt = promote_with_scalar(dtype(), other);
  check_cast("add_", rt, *this);
  apply_binary_inplace("add_", *this, ops::scalar_operand(other), false, BinaryOp::Add, rt, 1.0);
  bump_version();
  if (needs_grad({this})) {
    record_function("add_", {*this}, {*this}, {}, [](const FunctionNode::Context& ctx) { return TensorList{ctx.grads[0]}; });
  }
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  check_inplace("mul_", *this, {&other});
  ops::check_defined("mul_", other, "operand");
  check_broadcast_to_self("mul_", *this, other);
  DType rt = promote_types(dtype(), other.dtype());
  check_cast("mul_", rt, *this);
  bool record = needs_grad({this, &other});
  Tensor old = record && other.requires_grad() ? clone() : Tensor();
  if (old.defined()) old = old.detach();
  apply_binary_inplace("mul_", *this, ops::make_operand(other, sizes()), true, BinaryOp::Mul, rt, 1.0);
  bump_version();
  if (record) {
    Shape os = other.sizes();
    record_function("mul_", {*this, other}, {*this}, {other, old}, [os](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      TensorList r(2);
      if (ctx.needs_input_grad[0]) r[0] = mul(g, ctx.saved_at(0));
      if (ctx.needs_input_grad[1]) r[1] = sum_to(mul(g, ctx.saved_at(1)), os);
      return r;
    });
  }
  return *this;
}

Tensor& Tensor::mul_(const Scalar& other) {
  check_inplace("mul_", *this, {});
  DType rt = promote_with_scalar(dtype(), other);
  check_cast("mul_", rt, *this);
  apply_binary_inplace("mul_", *this, ops::scalar_operand(other), false, BinaryOp::Mul, rt, 1.0);
  bump_version();
  if (needs_grad({this})) {
    Scalar s = other;
    record_function("mul_", {*this}, {*this}, {}, [s](const FunctionNode::Context& ctx) {
      return TensorList{mul(ctx.grads[0], s)};
    });
  }
  return *this;
}

Tensor& Tensor::div_(const Tensor& other) {
  check_inplace("div_", *this, {&other});
  ops::check_defined("div_", other, "operand");
  check_broadcast_to_self("div_", *this, other);
  DType rt = promote_types(dtype(), other.dtype());
  if (!is_floating(rt)) rt = kDefaultFloat;
  check_cast("div_", rt, *this);
  bool record = needs_grad({this, &other});
  apply_binary_inplace("div_", *this, ops::make_operand(other, sizes()), true, BinaryOp::Div, rt, 1.0);
  bump_version();
  if (record) {
    Shape os = other.sizes();
    record_function("div_", {*this, other}, {*this}, {other, *this}, [os](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      Tensor q = div(g, ctx.saved_at(0));
      TensorList r(2);
      if (ctx.needs_input_grad[0]) r[0] = q;
      if (ctx.needs_input_grad[1]) r[1] = sum_to(neg(mul(q, ctx.saved_at(1))), os);
      return r;
    });
  }
  return *this;
}

Tensor& Tensor::div_(const Scalar& other) {
  check_inplace("div_", *this, {});
  DType rt = promote_with_scalar(dtype(), other);
  if (!is_floating(rt)) rt = kDefaultFloat;
  check_cast("div_", rt, *this);
  apply_binary_inplace("div_", *this, ops::scalar_operand(other), false, BinaryOp::Div, rt, 1.0);
  bump_version();
  if (needs_grad({this})) {
    Scalar s = other;
    record_function("div_", {*this}, {*this}, {}, [s](const FunctionNode::Context& ctx) {
      return TensorList{div(ctx.grads[0], s)};
    });
  }
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace("copy_", *this, {&src});
  ops::check_defined("copy_", src, "source");
  if (broadcast_shapes(sizes(), src.sizes(), "copy_") != sizes()) {
    throw ShapeError("copy_: source of shape " + shape_str(src.sizes()) + " does not broadcast to destination shape " +
                     shape_str(sizes()));
  }
  bool record = needs_grad({this, &src});
  Tensor source = src;
  if (device() != src.device()) {
#if defined(KILN_WITH_CUDA)
    // Across devices: move the source over first (its own history is not needed: the node below
    // sends the gradient back to src's device), then the same-device copy casts and broadcasts.
    NoGradGuard no_grad;
    source = src.to(device());
#else
    throw DeviceError("copy_: copies between " + src.device().str() + " and " + device().str() +
                      " need the CUDA runtime, which this build of kiln does not have");
#endif
  }
  ops::copy_raw(*this, source);
  bump_version();
  if (record) {
    Shape ss = src.sizes();
    Device sd = src.device();
    record_function("copy_", {*this, src}, {*this}, {}, [ss, sd](const FunctionNode::Context& ctx) {
      TensorList r(2);
      if (ctx.needs_input_grad[1]) r[1] = sum_to(ctx.grads[0], ss).to(sd);
      return r;
    });
  }
  return *this;
}

Tensor& Tensor::fill_(const Scalar& value) {
  check_inplace("fill_", *this, {});
  if (value.is_floating() && !is_floating(dtype())) {
    throw DTypeError("fill_: cannot fill a " + std::string(dtype_name(dtype())) + " tensor with float value " + value.str());
  }
  if (numel() > 0) {
    StridedArg a = ops::make_arg(*this);
    ops::collapse_dims({&a});
    if (is_cpu()) {
      fill_cpu(a, value.to_double());
    } else {
#if defined(KILN_WITH_CUDA)
      const int dev = device().index;
      cuda::DeviceGuard guard(dev);
      fill_cuda(a, value.to_double(), cuda::current_stream(dev));
#else
      ops::no_cuda_kernel("fill_");
#endif
    }
  }
  bump_version();
  record_overwrite("fill_", *this);
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0); }

Tensor& Tensor::uniform_(double low, double high) {
  check_inplace("uniform_", *this, {});
  if (!is_floating_point()) throw DTypeError(std::string("uniform_: needs a floating tensor, got ") + dtype_name(dtype()));
  if (!(low <= high)) {
    throw Error("uniform_: low must not exceed high, got low=" + std::to_string(low) + " high=" + std::to_string(high));
  }
  if (numel() > 0) random_inplace("uniform_", *this, RandomDist::Uniform, low, high);
  bump_version();
  record_overwrite("uniform_", *this);
  return *this;
}

Tensor& Tensor::normal_(double mean, double std) {
  check_inplace("normal_", *this, {});
  if (!is_floating_point()) throw DTypeError(std::string("normal_: needs a floating tensor, got ") + dtype_name(dtype()));
  if (!(std >= 0)) throw Error("normal_: std must be non-negative, got " + std::to_string(std));
  if (numel() > 0) random_inplace("normal_", *this, RandomDist::Normal, mean, std);
  bump_version();
  record_overwrite("normal_", *this);
  return *this;
}

Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) {
  check_inplace("clamp_", *this, {});
  Tensor r = [&] {
    NoGradGuard g;
    return clamp(*this, min, max);
  }();
  check_cast("clamp_", r.dtype(), *this);
  bool record = needs_grad({this});
  Tensor old = record ? detach().clone() : Tensor();
  ops::copy_raw(*this, r);
  bump_version();
  if (record) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    double lo = min ? min->to_double() : nan, hi = max ? max->to_double() : nan;
    record_function("clamp_", {*this}, {*this}, {old}, [lo, hi](const FunctionNode::Context& ctx) {
      return TensorList{ops::backward_kernel(ctx.grads[0], ctx.saved_at(0), BinaryOp::ClampBackward, lo, hi)};
    });
  }
  return *this;
}

Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& value) {
  check_inplace("masked_fill_", *this, {});
  Tensor r = [&] {
    NoGradGuard g;
    return masked_fill(*this, mask, value);
  }();
  bool record = needs_grad({this});
  ops::copy_raw(*this, r);
  bump_version();
  if (record) {
    record_function("masked_fill_", {*this}, {*this}, {mask}, [](const FunctionNode::Context& ctx) {
      return TensorList{where(ctx.saved_at(0), 0.0, ctx.grads[0])};
    });
  }
  return *this;
}

// --- conversions --------------------------------------------------------------------------------

Tensor Tensor::to(DType t) const { return to_dtype(*this, t); }

#if defined(KILN_WITH_CUDA)
namespace {

// An uninitialized contiguous CPU tensor in page-locked memory from the pinned caching allocator.
Tensor empty_pinned(const Shape& shape, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * element_size(dtype);
  impl->storage = std::make_shared<Storage>(cuda::pinned_allocator()->allocate(nbytes));
  impl->dtype = dtype;
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  return Tensor(std::move(impl));
}

// The bytes of x, made contiguous, in a new contiguous tensor on `d` (x is elsewhere). Copies run
// on the current stream of the CUDA side; they are asynchronous only where that is safe: a pinned
// host side and non_blocking, where record_stream keeps the pinned block from reuse until done.
Tensor move_to_device(const Tensor& x, Device d, bool non_blocking) {
  Tensor src;
  {
    NoGradGuard no_grad;  // the caller records one node for the whole move
    src = x.contiguous();
  }
  const size_t nbytes = static_cast<size_t>(src.numel()) * src.element_size();
  if (src.is_cpu()) {  // host to device
    Tensor out = empty(src.sizes(), TensorOptions(src.dtype(), d));
    cuda::DeviceGuard guard(d.index);
    const Stream stream = cuda::current_stream(d.index);
    const bool async = non_blocking && src.is_pinned();
    cuda::copy_bytes(out.data_ptr(), d, src.data_ptr(), src.device(), nbytes, stream, async);
    if (async) src.storage()->record_stream(stream);
    return out;
  }
  const int from = src.device().index;
  if (d.is_cpu()) {  // device to host: non_blocking lands in pinned memory, as PyTorch does
    cuda::DeviceGuard guard(from);
    const Stream stream = cuda::current_stream(from);
    Tensor out = non_blocking ? empty_pinned(src.sizes(), src.dtype()) : empty(src.sizes(), TensorOptions(src.dtype()));
    cuda::copy_bytes(out.data_ptr(), d, src.data_ptr(), src.device(), nbytes, stream, non_blocking);
    if (non_blocking) out.storage()->record_stream(stream);
    return out;
  }
  // device to device: the destination's stream first waits for the source's, then copies; the
  // copy is blocking so that src (and its stream-ordered block) may be released right after.
  Tensor out = empty(src.sizes(), TensorOptions(src.dtype(), d));
  const Stream to_stream = cuda::current_stream(d.index);
  {
    cuda::DeviceGuard guard(from);
    cuda::Event ready;
    ready.record(cuda::current_stream(from));
    ready.wait(to_stream);
  }
  cuda::DeviceGuard guard(d.index);
  cuda::copy_bytes(out.data_ptr(), d, src.data_ptr(), src.device(), nbytes, to_stream, false);
  return out;
}

}  // namespace
#endif

Tensor Tensor::to(Device d, bool non_blocking) const {
  check_defined("to");
  if (d == device()) return *this;
#if defined(KILN_WITH_CUDA)
  if (!cuda::is_available()) {
    throw DeviceError("to: moving a tensor from " + device().str() + " to " + d.str() + " needs a CUDA device (" +
                      cuda::unavailable_reason() + ")");
  }
  Tensor out = move_to_device(*this, d, non_blocking);
  if (needs_grad({this})) {
    Device src = device();
    record_function("to", {*this}, {out}, {}, [src](const FunctionNode::Context& ctx) {
      return TensorList{ctx.grads[0].to(src)};
    });
  }
  return out;
#else
  (void)non_blocking;
  throw DeviceError("to: moving a tensor from " + device().str() + " to " + d.str() +
                    " needs the CUDA runtime, which this build of kiln does not have");
#endif
}

Tensor Tensor::to(Device d, DType t) const { return to(t).to(d); }

Tensor Tensor::pin_memory() const {
  check_defined("pin_memory");
  if (!is_cpu()) throw DeviceError("pin_memory: only CPU tensors can be pinned, got one on " + device().str());
#if defined(KILN_WITH_CUDA)
  if (is_pinned()) return *this;
  Tensor out = empty_pinned(sizes(), dtype());
  ops::copy_raw(out, *this);
  if (needs_grad({this})) {
    record_function("pin_memory", {*this}, {out}, {}, [](const FunctionNode::Context& ctx) {
      return TensorList{ctx.grads[0]};
    });
  }
  return out;
#else
  throw DeviceError("pin_memory: needs the CUDA runtime");
#endif
}

bool Tensor::is_pinned() const {
  if (!defined() || !is_cpu() || !storage()->data()) return false;
#if defined(KILN_WITH_CUDA)
  return cuda::is_available() && storage()->allocator() == cuda::pinned_allocator();
#else
  return false;
#endif
}

std::vector<double> Tensor::to_vector_double() const {
  check_defined("to_vector_double");
  Tensor c = to(Device::cpu()).detach().to(DType::Float64).contiguous();
  std::vector<double> v(static_cast<size_t>(c.numel()));
  if (!v.empty()) std::memcpy(v.data(), c.data_ptr(), v.size() * sizeof(double));
  return v;
}

template <typename T> std::vector<T> Tensor::to_vector() const {
  check_defined("to_vector");
  Tensor c;
  {
    NoGradGuard g;
    c = to(Device::cpu()).to(dtype_of<T>()).contiguous();
  }
  std::vector<T> v(static_cast<size_t>(c.numel()));
  if (!v.empty()) std::memcpy(static_cast<void*>(v.data()), c.data_ptr(), v.size() * sizeof(T));
  return v;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;
template std::vector<Half> Tensor::to_vector<Half>() const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>() const;

Scalar Tensor::item() const {
  check_defined("item");
  if (numel() != 1) {
    throw ShapeError("item: only one-element tensors can be converted to a scalar, got shape " + shape_str(sizes()));
  }
  if (dtype() == DType::Bool) return Scalar(to_vector<uint8_t>()[0] != 0);
  if (!is_floating_point()) return Scalar(to_vector<int64_t>()[0]);
  return Scalar(to_vector<double>()[0]);
}

template <typename T> T Tensor::item() const {
  Scalar s = item();
  if constexpr (std::is_same_v<T, bool>) {
    return s.to_double() != 0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(s.to_int());
  } else {
    return static_cast<T>(s.to_double());
  }
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int32_t Tensor::item<int32_t>() const;
template int64_t Tensor::item<int64_t>() const;
template bool Tensor::item<bool>() const;

// Method forms of common ops.
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::pow(const Scalar& e) const { return kiln::pow(*this, e); }

}  // namespace kiln
