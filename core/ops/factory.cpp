// Tensor factories: allocation, fills (new tensors and fill_/zero_), ranges and copies from host
// memory. Random factories live in core/ops/random.cpp.
#include "core/ops/factory.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"
#include "kernels/factory.h"
#include "kernels/half.h"

namespace kiln {
namespace {

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

void fill_tensor(const char* op, const Tensor& t, const Scalar& value) {
  ops::check_fill_value(op, value, t.dtype());
  if (t.numel() == 0) return;
  StridedArg a = ops::make_arg(op, t);
  ops::collapse_dims({&a});
  // A bool fills with whether the value is not 0 (0.5 and NaN are true, as a float cast to bool);
  // the kernels fill integer dtypes with the integer, which truncates 0.5 to 0.
  const bool to_bool = t.dtype() == DType::Bool && value.is_floating();
  const int64_t int_value = to_bool ? int64_t{value.to_double() != 0.0} : value.to_int();
  ops::launch(op, t.device(), kernels::fill, a, value.to_double(), int_value);
}

// out[i] = start + i * step on out's device.
void arange_on_device(const char* op, const Tensor& t, double start, double step) {
  ops::launch(op, t.device(), kernels::arange, ops::make_arg(op, t), start, step);
}

}  // namespace

Tensor ops::empty_for(const char* op, const Shape& shape, const Shape& strides, const TensorOptions& options) {
  // The element count first (negative sizes, overflow), then the span of the strides and the
  // bytes: each of these sizes the allocation, so none may wrap.
  checked_numel(shape, op);
  const int64_t extent = checked_extent(shape, strides, op);
  int64_t nbytes = 0;
  if (__builtin_mul_overflow(extent, static_cast<int64_t>(element_size(options.dtype)), &nbytes)) {
    throw ShapeError(std::string(op) + ": a tensor of shape " + shape_str(shape) + " and dtype " +
                     dtype_name(options.dtype) + " needs more bytes than int64 can count");
  }
  auto impl = std::make_shared<TensorImpl>();
  try {
    impl->storage = std::make_shared<Storage>(static_cast<size_t>(nbytes), options.device);
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(std::string(op) + ": cannot allocate a tensor of shape " + shape_str(shape) + " and dtype " +
                           dtype_name(options.dtype) + " (" + std::to_string(nbytes) + " bytes): " + e.what());
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(std::string(op) + ": cannot allocate a tensor of shape " + shape_str(shape) + " and dtype " +
                           dtype_name(options.dtype) + " (" + std::to_string(nbytes) + " bytes)");
  }
  impl->dtype = options.dtype;
  impl->sizes = shape;
  impl->strides = strides;
  return finish(Tensor(std::move(impl)), options);
}

Tensor ops::empty_for(const char* op, const Shape& shape, const TensorOptions& options, MemoryFormat format) {
  checked_numel(shape, op);  // before the strides, which would overflow first with a vaguer message
  if (format == MemoryFormat::ChannelsLast && shape.size() != 4) {
    throw ShapeError(std::string(op) + ": the channels-last memory format needs a 4-d shape, got " + shape_str(shape));
  }
  Shape strides = format == MemoryFormat::ChannelsLast ? channels_last_strides(shape) : contiguous_strides(shape);
  return empty_for(op, shape, strides, options);
}

Tensor empty(const Shape& shape, TensorOptions options, MemoryFormat format) {
  return ops::empty_for("empty", shape, options, format);
}

Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions options) {
  return ops::empty_for("empty_strided", shape, strides, options);
}

namespace {

Tensor empty_like_for(const char* op, const Tensor& t, DType dtype, MemoryFormat format) {
  ops::check_defined(op, t, "input");
  TensorOptions o(dtype, t.device());
  if (format == MemoryFormat::Preserve) return ops::empty_for(op, t.sizes(), ops::strides_like(t.sizes(), t), o);
  return ops::empty_for(op, t.sizes(), o, format);
}

Tensor full_for(const char* op, const Shape& shape, const Scalar& value, const TensorOptions& options) {
  Tensor t = ops::empty_for(op, shape, options.with_requires_grad(false));
  fill_tensor(op, t, value);
  return finish(t, options);
}

Tensor full_like_for(const char* op, const Tensor& t, const Scalar& value) {
  Tensor r = empty_like_for(op, t, t.defined() ? t.dtype() : DType::Float32, MemoryFormat::Preserve);
  fill_tensor(op, r, value);
  return r;
}

}  // namespace

Tensor empty_like(const Tensor& t, MemoryFormat format) {
  ops::check_defined("empty_like", t, "input");
  return empty_like_for("empty_like", t, t.dtype(), format);
}

Tensor empty_like(const Tensor& t, DType dtype, MemoryFormat format) {
  return empty_like_for("empty_like", t, dtype, format);
}

Tensor full(const Shape& shape, const Scalar& value, TensorOptions options) {
  return full_for("full", shape, value, options);
}
Tensor zeros(const Shape& shape, TensorOptions options) { return full_for("zeros", shape, 0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full_for("ones", shape, 1, options); }
Tensor zeros_like(const Tensor& t) { return full_like_for("zeros_like", t, 0); }
Tensor ones_like(const Tensor& t) { return full_like_for("ones_like", t, 1); }
Tensor full_like(const Tensor& t, const Scalar& value) { return full_like_for("full_like", t, value); }

Tensor scalar_tensor(const Scalar& value, TensorOptions options) {
  return full_for("scalar_tensor", {}, value, options);
}
Tensor scalar_tensor(const Scalar& value) {
  return full_for("scalar_tensor", {}, value, TensorOptions(value.default_dtype()));
}

Tensor eye(int64_t n, TensorOptions options) { return eye(n, n, options); }

Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  const char* op = "eye";
  if (n < 0 || m < 0) {
    throw ShapeError(std::string(op) + ": sizes must be non-negative, got " + std::to_string(n) + " x " +
                     std::to_string(m));
  }
  Tensor t = ops::empty_for(op, {n, m}, options.with_requires_grad(false));
  fill_tensor(op, t, 0);
  const int64_t count = std::min(n, m);
  // The diagonal: every (m + 1)-th element from the first.
  if (count > 0) fill_tensor(op, ops::make_view(op, t, {count}, {m + 1}, 0), 1);
  return finish(t, options);
}

Tensor arange(const Scalar& end) { return arange(0, end, 1); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step) {
  bool all_int = !start.is_floating() && !end.is_floating() && !step.is_floating();
  return arange(start, end, step, TensorOptions(all_int ? DType::Int64 : kDefaultFloat));
}

namespace {

// "[start, end) in steps of step", for arange's errors.
std::string arange_range(const Scalar& start, const Scalar& end, const Scalar& step) {
  std::string range = "[";  // appended piece by piece: "[" + a temporary trips GCC 12's -Wrestrict
  range += start.str();
  range += ", ";
  range += end.str();
  range += ") in steps of ";
  range += step.str();
  return range;
}

// Checks that step points from start towards end (or stays at an empty range).
void check_arange_direction(bool away, const Scalar& start, const Scalar& end, const Scalar& step) {
  if (away) {
    throw Error("arange: step " + step.str() + " points away from end (start=" + start.str() + ", end=" + end.str() +
                ")");
  }
}

// arange of integers into an integer dtype where an end or the step is past 2^53, which a double
// does not hold (the kernel's start and step are doubles, and the count in double was wrong: from
// 2^60 to 2^60 + 10 it counted 0). Counted in 128 bits, and computed as start + i * step from an
// exact arange of the indices, with the int64 scalars of mul and add (every value lies between the
// ends, so nothing wraps).
Tensor arange_wide(const Scalar& start, const Scalar& end, const Scalar& step, const TensorOptions& options) {
  const int64_t s = start.to_int(), e = end.to_int(), st = step.to_int();
  if (st == 0) throw Error("arange: step must be non-zero, got " + arange_range(start, end, step));
  const __int128 diff = static_cast<__int128>(e) - s;
  check_arange_direction((st > 0 && diff < 0) || (st < 0 && diff > 0), start, end, step);
  const __int128 count = st > 0 ? (diff + st - 1) / st : (diff + st + 1) / st;  // ceil(diff / st)
  if (count > INT64_MAX) {
    throw ShapeError("arange: " + arange_range(start, end, step) + " has more elements than int64 can count");
  }
  // The indices 0 .. count - 1 by the kernel directly (not arange, which would come back here for a
  // count past 2^53: such a count is refused by the allocation, as any arange that large).
  Tensor indices = ops::empty_for("arange", {static_cast<int64_t>(count)}, TensorOptions(DType::Int64, options.device));
  if (count > 0) arange_on_device("arange", indices, 0, 1);
  Tensor t = add(mul(indices, Scalar(st)), Scalar(s));
  return t.dtype() == options.dtype ? t : t.to(options.dtype);
}

}  // namespace

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions options) {
  if (options.dtype == DType::Bool) {  // as PyTorch's: a count has no bool form (it gave false, true, true...)
    throw DTypeError("arange: bool has no evenly spaced values; use an int or float dtype");
  }
  const bool integers = !start.is_floating() && !end.is_floating() && !step.is_floating();
  if (integers && !is_floating(options.dtype) &&
      !(ops::exact_in_double(start) && ops::exact_in_double(end) && ops::exact_in_double(step))) {
    return finish(arange_wide(start, end, step, options.with_requires_grad(false)), options);
  }
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  if (st == 0 || !std::isfinite(s) || !std::isfinite(e) || !std::isfinite(st)) {
    throw Error("arange: start, end and step must be finite and step non-zero, got start=" + start.str() +
                " end=" + end.str() + " step=" + step.str());
  }
  check_arange_direction((st > 0 && e < s) || (st < 0 && e > s), start, end, step);
  // Counted in double: a count past int64 (or an infinite one, from a tiny step) cannot be cast.
  const double count = std::ceil((e - s) / st);
  if (!(count < 9223372036854775807.0)) {
    throw ShapeError("arange: " + arange_range(start, end, step) + " has " + num_str(count) +
                     " elements, more than int64 can count");
  }
  const int64_t n = static_cast<int64_t>(count);
  Tensor t = ops::empty_for("arange", {n}, options.with_requires_grad(false));
  if (n > 0) arange_on_device("arange", t, s, st);
  return finish(t, options);
}

namespace {

// x rounded to the float dtype `real` as its arithmetic rounds: a 16-bit dtype computes in float32
// and rounds the float32 result (float32 first, then 16 bits), as both kiln's kernels and
// PyTorch's Half and BFloat16 operators do; x is a double result of exact float operands, whose
// rounding to float32 is the rounding of the float32 operation.
double round_to(DType real, double x) {
  const float f = static_cast<float>(x);
  switch (real) {
    case DType::Float16: return static_cast<float>(Half(f));
    case DType::BFloat16: return static_cast<float>(BFloat16(f));
    case DType::Float32: return f;
    default: return x;
  }
}

}  // namespace

// linspace by PyTorch's formula: start and end converted to the dtype first (checked: 300 does not
// fit uint8), the step and each point in the dtype's own arithmetic (a float dtype rounds after
// every operation), the first half of the points counted up from start and the second half down
// from end, so both ends are exact and a symmetric range gives mirrored halves. An integer dtype
// computes in float64 and cuts each point toward zero. Composed of arange, mul and add on the
// tensor's device: each op rounds once to the dtype, as each operation of the scalar formula does.
// (Where PyTorch's kernels fuse the multiply-add or count a vector of points on from its first, a
// point can differ from theirs in the last bit; the ends and the formula are the same.)
Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, TensorOptions options) {
  if (steps < 0) throw Error("linspace: steps must be non-negative, got " + std::to_string(steps));
  const DType dtype = options.dtype;
  if (dtype == DType::Bool) throw DTypeError("linspace: bool has no evenly spaced points; use an int or float dtype");
  // The ends as the dtype holds them (checked as a fill), then the real dtype the points use.
  auto held = [&](const Scalar& x) { return full_for("linspace", {}, x, TensorOptions(dtype)).item<double>(); };
  const double s = held(start), e = held(end);
  const DType real = is_floating(dtype) ? dtype : DType::Float64;
  const TensorOptions real_options(real, options.device);
  Tensor t = ops::empty_for("linspace", {steps}, real_options);
  if (steps == 1) fill_tensor("linspace", t, s);
  if (steps > 1) {
    const double step = round_to(real, round_to(real, e - s) / round_to(real, static_cast<double>(steps - 1)));
    const int64_t half = steps / 2;  // points [0, half) from start, [half, steps) from end
    t.narrow(0, 0, half).copy_(add(mul(arange(0, half, 1, real_options), step), s));
    Tensor from_end = arange(steps - 1 - half, -1, -1, real_options);  // steps - 1 - i
    t.narrow(0, half, steps - half).copy_(add(mul(from_end, -step), e));  // e - step * k, exactly
  }
  return finish(t.dtype() == dtype ? t : t.to(dtype), options);
}

Tensor from_blob(const void* data, const Shape& shape, DType dtype, TensorOptions options) {
  const size_t nbytes = static_cast<size_t>(checked_nbytes(shape, dtype, "from_blob"));
  Tensor host = ops::empty_for("from_blob", shape, TensorOptions(dtype));
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
  if (checked_numel(s, "tensor") != static_cast<int64_t>(count)) {
    throw ShapeError("tensor: " + std::to_string(count) + " values do not fill shape " + shape_str(s));
  }
  return from_blob(data, s, dtype, options.value_or(TensorOptions(dtype)));
}

// --- fills in place ------------------------------------------------------------------------------

Tensor& Tensor::fill_(const Scalar& value) {
  ops::check_inplace("fill_", *this, {});
  fill_tensor("fill_", *this, value);
  bump_version();
  ops::record_overwrite("fill_", *this);
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0); }

}  // namespace kiln
