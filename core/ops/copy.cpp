// Copies and conversions: to(dtype) (differentiable), copy_ (broadcasting, casting, across devices),
// moves between the CPU and CUDA devices, pinned host memory, and reading values back to the host.
// A move copies the bytes of a dense source, in its own layout (channels-last stays channels-last),
// on the CUDA side's current stream; it is asynchronous only where that is safe (a pinned host side
// and non_blocking).
#include "core/ops/copy.h"

#include <cstring>

#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"

namespace kiln {

Tensor to_dtype(const Tensor& x, DType dtype) {
  ops::check_defined("to", x, "input");
  if (x.dtype() == dtype) return x;
  Tensor out = ops::unary_raw("to", x, UnaryOp::Copy, dtype);
  if (needs_grad({&x})) {
    if (!is_floating(dtype)) {
      // A cast to an integer type ends the graph, as in PyTorch.
      return out;
    }
    DType src = x.dtype();
    record_function("to", {x}, {out}, {}, [src](const FunctionNode::Context& ctx) {
      return TensorList{to_dtype(ctx.grads[0], src)};
    });
  }
  return out;
}


Tensor& Tensor::copy_(const Tensor& src) {
  ops::check_inplace("copy_", *this, {&src});
  ops::check_defined("copy_", src, "source");
  ops::check_no_overlap("copy_", *this, {&src});
  if (broadcast_shapes(sizes(), src.sizes(), "copy_") != sizes()) {
    throw ShapeError("copy_: source of shape " + shape_str(src.sizes()) + " does not broadcast to destination shape " +
                     shape_str(sizes()));
  }
  // An integer or bool destination ends the graph, as a cast to it does (to_dtype): it cannot
  // require grad, and a gradient cast to its dtype would be truncated.
  bool record = is_floating(dtype()) && needs_grad({this, &src});
  Tensor source = src;
  if (device() != src.device()) {
    // Across devices: move the source over first (its own history is not needed: the node below
    // sends the gradient back to src's device), then the same-device copy casts and broadcasts.
    NoGradGuard no_grad;
    source = src.to(device());
  }
  ops::copy_raw(*this, ops::readable_input(*this, source));
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

Tensor Tensor::to(DType t) const { return to_dtype(*this, t); }

namespace {

// An uninitialized dense CPU tensor (of `strides`, a dense layout of `shape`) in page-locked memory
// from the pinned caching allocator.
Tensor pinned_dense(const Shape& shape, const Shape& strides, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * element_size(dtype);
  impl->storage = std::make_shared<Storage>(cuda::pinned_allocator()->allocate(nbytes));
  impl->dtype = dtype;
  impl->sizes = shape;
  impl->strides = strides;
  return Tensor(std::move(impl));
}

}  // namespace

Tensor empty_pinned(const Shape& shape, DType dtype) {
  if (!cuda::is_available()) {
    throw DeviceError("empty_pinned: page-locked memory needs a CUDA device (" + cuda::unavailable_reason() + ")");
  }
  return pinned_dense(shape, contiguous_strides(shape), dtype);
}

Tensor empty_pinned(const Shape& shape, const Shape& strides, DType dtype) {
  if (!cuda::is_available()) {
    throw DeviceError("empty_pinned: page-locked memory needs a CUDA device (" + cuda::unavailable_reason() + ")");
  }
  if (strides.size() != shape.size() || !non_overlapping_and_dense(shape, strides)) {
    throw ShapeError("empty_pinned: strides " + shape_str(strides) + " do not lay shape " + shape_str(shape) +
                     " out densely");
  }
  return pinned_dense(shape, strides, dtype);
}

namespace {

// The bytes of x in a new tensor on `d` (x is elsewhere) with x's layout when x is dense, as
// PyTorch's to() preserves the memory format: a channels-last batch or model stays channels-last
// on the other device instead of arriving NCHW and being copied back by its first conv. A dense
// tensor's elements fill one block from its first element (kiln has no negative strides), so the
// block moves as it is; anything else is made contiguous first. Copies run on the current stream of
// the CUDA side; they are asynchronous only where that is safe: a pinned host side and
// non_blocking, where record_stream keeps the pinned block from reuse until done.
Tensor move_to_device(const Tensor& x, Device d, bool non_blocking) {
  Tensor src;
  {
    NoGradGuard no_grad;  // the caller records one node for the whole move
    src = x.is_non_overlapping_and_dense() ? x.detach() : x.contiguous();
  }
  const Shape& strides = src.strides();
  const size_t nbytes = static_cast<size_t>(src.numel()) * src.element_size();
  if (src.is_cpu()) {  // host to device
    Tensor out = empty_strided(src.sizes(), strides, TensorOptions(src.dtype(), d));
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
    Tensor out = non_blocking ? pinned_dense(src.sizes(), strides, src.dtype())
                              : empty_strided(src.sizes(), strides, TensorOptions(src.dtype()));
    cuda::copy_bytes(out.data_ptr(), d, src.data_ptr(), src.device(), nbytes, stream, non_blocking);
    if (non_blocking) out.storage()->record_stream(stream);
    return out;
  }
  // device to device: the destination's stream first waits for the source's, then copies; the
  // copy is blocking so that src (and its stream-ordered block) may be released right after.
  Tensor out = empty_strided(src.sizes(), strides, TensorOptions(src.dtype(), d));
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

Tensor Tensor::to(Device d, bool non_blocking) const {
  check_defined("to");
  if (d == device()) return *this;
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
}

Tensor Tensor::to(Device d, DType t) const { return to(t).to(d); }

Tensor Tensor::pin_memory() const {
  check_defined("pin_memory");
  if (!is_cpu()) throw DeviceError("pin_memory: only CPU tensors can be pinned, got one on " + device().str());
  if (!cuda::is_available()) {
    throw DeviceError("pin_memory: page-locked memory needs a CUDA device (" + cuda::unavailable_reason() + ")");
  }
  if (is_pinned()) return *this;
  Tensor out = pinned_dense(sizes(), contiguous_strides(sizes()), dtype());
  ops::copy_raw(out, *this, "pin_memory");
  if (needs_grad({this})) {
    record_function("pin_memory", {*this}, {out}, {}, [](const FunctionNode::Context& ctx) {
      return TensorList{ctx.grads[0]};
    });
  }
  return out;
}

bool Tensor::is_pinned() const {
  if (!defined() || !is_cpu() || !storage()->data()) return false;
  return cuda::is_available() && storage()->allocator() == cuda::pinned_allocator();
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

}  // namespace kiln
