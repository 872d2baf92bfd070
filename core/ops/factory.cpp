// Tensor factories: allocation, fills (new tensors and fill_/zero_), ranges and copies from host
// memory. Random factories live in core/ops/random.cpp.
#include "core/ops/factory.h"

#include <cmath>
#include <cstring>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"
#include "kernels/factory.h"

namespace kiln {
namespace {

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

void fill_tensor(const char* op, const Tensor& t, double value) {
  if (t.numel() == 0) return;
  StridedArg a = ops::make_arg(t);
  ops::collapse_dims({&a});
  ops::launch(op, t.device(), kernels::fill, a, value);
}

// out[i] = start + i * step on out's device.
void arange_on_device(const char* op, const Tensor& t, double start, double step) {
  ops::launch(op, t.device(), kernels::arange, ops::make_arg(t), start, step);
}

}  // namespace

Tensor empty(const Shape& shape, TensorOptions options, MemoryFormat format) {
  ops::check_shape("empty", shape);
  Shape strides = format == MemoryFormat::ChannelsLast ? channels_last_strides(shape) : contiguous_strides(shape);
  return empty_strided(shape, strides, options);
}

Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions options) {
  ops::check_shape("empty_strided", shape);
  if (shape.size() != strides.size()) {
    throw ShapeError("empty_strided: shape " + shape_str(shape) + " and strides " + shape_str(strides) +
                     " differ in length");
  }
  int64_t extent = 0;  // one past the furthest element
  bool any_zero = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) any_zero = true;
    extent += (shape[i] - 1) * strides[i];
  }
  size_t nbytes = any_zero ? 0 : static_cast<size_t>(extent + 1) * element_size(options.dtype);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(nbytes, options.device);
  impl->dtype = options.dtype;
  impl->sizes = shape;
  impl->strides = strides;
  return finish(Tensor(std::move(impl)), options);
}

Tensor empty_like(const Tensor& t, MemoryFormat format) { return empty_like(t, t.dtype(), format); }

Tensor empty_like(const Tensor& t, DType dtype, MemoryFormat format) {
  TensorOptions o(dtype, t.device());
  if (format == MemoryFormat::Preserve) return empty_strided(t.sizes(), ops::strides_like(t.sizes(), t), o);
  return empty(t.sizes(), o, format);
}

Tensor full(const Shape& shape, const Scalar& value, TensorOptions options) {
  ops::check_shape("full", shape);
  Tensor t = empty(shape, options.with_requires_grad(false));
  fill_tensor("full", t, value.to_double());
  return finish(t, options);
}
Tensor zeros(const Shape& shape, TensorOptions options) { return full(shape, 0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1, options); }
Tensor zeros_like(const Tensor& t) { return full_like(t, 0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1); }
Tensor full_like(const Tensor& t, const Scalar& value) {
  Tensor r = empty_like(t);
  fill_tensor("full_like", r, value.to_double());
  return r;
}

Tensor scalar_tensor(const Scalar& value, TensorOptions options) { return full({}, value, options); }
Tensor scalar_tensor(const Scalar& value) { return full({}, value, TensorOptions(value.default_dtype())); }

Tensor arange(const Scalar& end) { return arange(0, end, 1); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step) {
  bool all_int = !start.is_floating() && !end.is_floating() && !step.is_floating();
  return arange(start, end, step, TensorOptions(all_int ? DType::Int64 : kDefaultFloat));
}

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions options) {
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  if (st == 0 || !std::isfinite(s) || !std::isfinite(e) || !std::isfinite(st)) {
    throw Error("arange: start, end and step must be finite and step non-zero, got start=" + start.str() +
                " end=" + end.str() + " step=" + step.str());
  }
  if ((st > 0 && e < s) || (st < 0 && e > s)) {
    throw Error("arange: step " + step.str() + " points away from end (start=" + start.str() + ", end=" +
                end.str() + ")");
  }
  int64_t n = static_cast<int64_t>(std::ceil((e - s) / st));
  Tensor t = empty({n}, options.with_requires_grad(false));
  if (n > 0) arange_on_device("arange", t, s, st);
  return finish(t, options);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  if (steps < 0) throw Error("linspace: steps must be non-negative, got " + std::to_string(steps));
  Tensor t = empty({steps}, options.with_requires_grad(false));
  if (steps > 0) {
    double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
    arange_on_device("linspace", t, start, step);
    // The last point exactly `end`, as PyTorch gives.
    if (steps > 1) fill_tensor("linspace", t.narrow(0, steps - 1, 1), end);
  }
  return finish(t, options);
}

Tensor from_blob(const void* data, const Shape& shape, DType dtype, TensorOptions options) {
  ops::check_shape("from_blob", shape);
  Tensor host = empty(shape, TensorOptions(dtype));
  size_t nbytes = static_cast<size_t>(host.numel()) * element_size(dtype);
  if (nbytes > 0) {
    if (!data) throw Error("from_blob: null data pointer for shape " + shape_str(shape));
    std::memcpy(host.data_ptr(), data, nbytes);
  }
  Tensor t = host;
  if (options.dtype != dtype) t = t.to(options.dtype);
  if (options.device != Device::cpu()) t = t.to(options.device);
  return finish(t, options);
}

Tensor detail::tensor_from_host(const void* data, size_t count, DType dtype, const Shape& shape,
                                const std::optional<TensorOptions>& options) {
  Shape s = shape.empty() && count != 1 ? Shape{static_cast<int64_t>(count)} : shape;
  if (shape_numel(s) != static_cast<int64_t>(count)) {
    throw ShapeError("tensor: " + std::to_string(count) + " values do not fill shape " + shape_str(s));
  }
  return from_blob(data, s, dtype, options.value_or(TensorOptions(dtype)));
}

// --- fills in place ------------------------------------------------------------------------------

Tensor& Tensor::fill_(const Scalar& value) {
  ops::check_inplace("fill_", *this, {});
  if (value.is_floating() && !is_floating(dtype())) {
    throw DTypeError("fill_: cannot fill a " + std::string(dtype_name(dtype())) + " tensor with float value " +
                     value.str());
  }
  fill_tensor("fill_", *this, value.to_double());
  bump_version();
  ops::record_overwrite("fill_", *this);
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0); }

}  // namespace kiln
