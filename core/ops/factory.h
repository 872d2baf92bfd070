// Tensor factories: new tensors, fills, ranges, window functions and copies of host values. Random
// factories are in core/ops/random.h.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace kiln {

struct TensorOptions {
  DType dtype = kDefaultFloat;
  Device device = Device::cpu();
  bool requires_grad = false;

  TensorOptions() = default;
  TensorOptions(DType t) : dtype(t) {}  // NOLINT: zeros({2}, DType::Int64)
  TensorOptions(Device d) : device(d) {}  // NOLINT
  TensorOptions(DType t, Device d, bool rg = false) : dtype(t), device(d), requires_grad(rg) {}
  TensorOptions with_dtype(DType t) const { return TensorOptions(t, device, requires_grad); }
  TensorOptions with_device(Device d) const { return TensorOptions(dtype, d, requires_grad); }
  TensorOptions with_requires_grad(bool rg) const { return TensorOptions(dtype, device, rg); }
};

Tensor empty(const Shape& shape, TensorOptions options = {}, MemoryFormat format = MemoryFormat::Contiguous);
Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions options = {});
// Same shape, dtype and device; with Preserve, the same memory layout when `t` is dense.
Tensor empty_like(const Tensor& t, MemoryFormat format = MemoryFormat::Preserve);
Tensor empty_like(const Tensor& t, DType dtype, MemoryFormat format = MemoryFormat::Preserve);
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, const Scalar& value, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, const Scalar& value);
// A 0-d tensor; its dtype follows the scalar (bool, int64 or float32) unless given.
Tensor scalar_tensor(const Scalar& value, TensorOptions options);
Tensor scalar_tensor(const Scalar& value);

// The n x m identity (ones on the main diagonal, zeros elsewhere; m = n when not given): torch.eye.
Tensor eye(int64_t n, TensorOptions options = {});
Tensor eye(int64_t n, int64_t m, TensorOptions options = {});

// [start, end) in steps; dtype int64 when all three are integers, else float32, unless given.
Tensor arange(const Scalar& end);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions options);
// steps points from start to end, both included and exact, by PyTorch's formula: the ends
// converted to the dtype first (an Error if one overflows it, as a fill), the first half counted
// up from start and the second down from end in the dtype's arithmetic; in an integer dtype each
// point is the real one (float64) cut toward zero. Bool is a DTypeError.
Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, TensorOptions options = {});

// Window functions, as torch's factories of the same names: the tapers a short-time Fourier
// transform or a filter design multiplies a signal by. Each returns a 1-d tensor of window_length
// values; periodic (the default) gives the first window_length of a symmetric window one longer,
// the form that tiles when shifted by its length (spectral analysis), and periodic = false the
// symmetric window itself (filter design). Lengths 0 and 1 give [] and [1]. The values are computed
// in float64 on the host and rounded once to options' floating dtype; a non-floating dtype is a
// DTypeError, a negative length an Error. As in PyTorch's C++ API, each also takes (window_length,
// options) and hamming and kaiser (window_length, periodic, options) with their default parameters.
//
// With N = window_length (+ 1 when periodic) and n = 0 .. window_length - 1:
// 0.5 - 0.5 cos(2 pi n / (N - 1)).
Tensor hann_window(int64_t window_length, bool periodic = true, TensorOptions options = {});
// alpha - beta cos(2 pi n / (N - 1)); the defaults are Hamming's.
Tensor hamming_window(int64_t window_length, bool periodic = true, double alpha = 0.54, double beta = 0.46,
                      TensorOptions options = {});
// 0.42 - 0.5 cos(2 pi n / (N - 1)) + 0.08 cos(4 pi n / (N - 1)).
Tensor blackman_window(int64_t window_length, bool periodic = true, TensorOptions options = {});
// The triangle 1 - |2 n / (N - 1) - 1|.
Tensor bartlett_window(int64_t window_length, bool periodic = true, TensorOptions options = {});
// i0(beta sqrt(1 - (2 n / (N - 1) - 1)^2)) / i0(beta) (core/ops/special.h), computed as a ratio of
// i0e values so that a large beta does not overflow. A larger beta lowers the side lobes of the
// window's spectrum and widens its main lobe; -beta gives beta's window (i0 is even, as PyTorch
// has it), and a beta that is not finite is an Error.
Tensor kaiser_window(int64_t window_length, bool periodic = true, double beta = 12.0, TensorOptions options = {});

Tensor hann_window(int64_t window_length, TensorOptions options);
Tensor hamming_window(int64_t window_length, TensorOptions options);
Tensor hamming_window(int64_t window_length, bool periodic, TensorOptions options);
Tensor blackman_window(int64_t window_length, TensorOptions options);
Tensor bartlett_window(int64_t window_length, TensorOptions options);
Tensor kaiser_window(int64_t window_length, TensorOptions options);
Tensor kaiser_window(int64_t window_length, bool periodic, TensorOptions options);

// Copies `count` elements of type `dtype` from host memory into a new contiguous tensor.
Tensor from_blob(const void* data, const Shape& shape, DType dtype, TensorOptions options = {});
// A tensor from values: its dtype follows T (float32, float64, int64 for integers, bool) unless
// `options` names one, in which case the values are cast. An empty shape means 1-d, except that
// an initializer list of one value, tensor({2.0f}), makes a 0-d tensor; a std::vector is always
// 1-d, whatever its length (a one-element batch must not lose its dimension).
namespace detail {
Tensor tensor_from_host(const void* data, size_t count, DType dtype, const Shape& shape,
                        const std::optional<TensorOptions>& options);
template <typename T> Tensor tensor_from_range(const T* begin, size_t count, const Shape& shape,
                                               const std::optional<TensorOptions>& options) {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> v(begin, begin + count);
    return tensor_from_host(v.data(), count, DType::Bool, shape, options);
  } else if constexpr (std::is_integral_v<T>) {
    std::vector<int64_t> v(begin, begin + count);
    return tensor_from_host(v.data(), count, DType::Int64, shape, options);
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return tensor_from_host(begin, count, dtype_of<T>(), shape, options);
  } else {
    std::vector<float> v(begin, begin + count);
    return tensor_from_host(v.data(), count, DType::Float32, shape, options);
  }
}
}  // namespace detail

template <typename T>
Tensor tensor(std::initializer_list<T> values, const Shape& shape = {}, std::optional<TensorOptions> options = {}) {
  return detail::tensor_from_range(values.begin(), values.size(), shape, options);
}
template <typename T>
Tensor tensor(const std::vector<T>& values, const Shape& shape = {}, std::optional<TensorOptions> options = {}) {
  const Shape s = shape.empty() ? Shape{static_cast<int64_t>(values.size())} : shape;
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> v(values.begin(), values.end());
    return detail::tensor_from_host(v.data(), v.size(), DType::Bool, s, options);
  } else {
    return detail::tensor_from_range(values.data(), values.size(), s, options);
  }
}

}  // namespace kiln
