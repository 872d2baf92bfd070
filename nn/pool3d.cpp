// The 3-d pooling layers: each constructor checks its arguments where the layer is built (PyTorch
// checks most at the first forward), each forward is one op of core/ops/volume.h.
#include "nn/pool3d.h"

#include <cmath>
#include <optional>

#include "core/ops/pool.h"
#include "kernels/error.h"
#include "nn/layers.h"

namespace kiln::nn {
namespace {

using detail::check_positive;
using detail::int_or_tuple;
using detail::py_bool;
using detail::py_float;
using detail::py_tuple;

Shape tuple(const Triple& t) { return {t[0], t[1], t[2]}; }

// A pool's padding: PyTorch's rule, checked here so that a bad layer fails where it is built.
void check_pool_padding(const char* layer, const Triple& padding, const Triple& kernel_size) {
  for (size_t i = 0; i < 3; ++i) {
    if (padding[i] < 0 || padding[i] > kernel_size[i] / 2) {
      throw Error(std::string(layer) + ": padding " + py_tuple(tuple(padding)) +
                  " must be non-negative and at most half the kernel size " + py_tuple(tuple(kernel_size)));
    }
  }
}

Triple or_kernel(const Triple& stride, const Triple& kernel_size) {
  return stride == Triple{0, 0, 0} ? kernel_size : stride;
}

}  // namespace

MaxPool3d::MaxPool3d(Triple kernel_size, Triple stride, Triple padding, Triple dilation, bool ceil_mode)
    : kernel_size(kernel_size),
      stride(or_kernel(stride, kernel_size)),
      padding(padding),
      dilation(dilation),
      ceil_mode(ceil_mode) {
  check_positive("MaxPool3d", "kernel_size", kernel_size);
  check_positive("MaxPool3d", "stride", this->stride);
  check_positive("MaxPool3d", "dilation", dilation);
  check_pool_padding("MaxPool3d", padding, kernel_size);
}

std::string MaxPool3d::extra_repr() const {
  return "kernel_size=" + int_or_tuple(kernel_size) + ", stride=" + int_or_tuple(stride) +
         ", padding=" + int_or_tuple(padding) + ", dilation=" + int_or_tuple(dilation) +
         ", ceil_mode=" + py_bool(ceil_mode);
}

Tensor MaxPool3d::forward(const Tensor& x) { return max_pool3d(x, kernel_size, stride, padding, dilation, ceil_mode); }

std::pair<Tensor, Tensor> MaxPool3d::forward_with_indices(const Tensor& x) {
  return max_pool3d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode);
}

MaxUnpool3d::MaxUnpool3d(Triple kernel_size, Triple stride, Triple padding)
    : kernel_size(kernel_size), stride(or_kernel(stride, kernel_size)), padding(padding) {
  check_positive("MaxUnpool3d", "kernel_size", kernel_size);
  check_positive("MaxUnpool3d", "stride", this->stride);
}

std::string MaxUnpool3d::extra_repr() const {
  return "kernel_size=" + py_tuple(tuple(kernel_size)) + ", stride=" + py_tuple(tuple(stride)) +
         ", padding=" + py_tuple(tuple(padding));
}

Tensor MaxUnpool3d::forward(const Tensor& x, const Tensor& indices, const Shape& output_size) {
  const Shape size = detail::unpool_size("MaxUnpool3d", output_size, 3);
  return max_unpool3d(x, indices, kernel_size, stride, padding,
                      size.empty() ? std::nullopt : std::optional<Triple>(Triple{size[0], size[1], size[2]}));
}

AvgPool3d::AvgPool3d(Triple kernel_size, Triple stride, Triple padding, bool ceil_mode, bool count_include_pad,
                     std::optional<int64_t> divisor_override)
    : kernel_size(kernel_size),
      stride(or_kernel(stride, kernel_size)),
      padding(padding),
      ceil_mode(ceil_mode),
      count_include_pad(count_include_pad),
      divisor_override(divisor_override) {
  check_positive("AvgPool3d", "kernel_size", kernel_size);
  check_positive("AvgPool3d", "stride", this->stride);
  check_pool_padding("AvgPool3d", padding, kernel_size);
  ops::check_divisor("AvgPool3d", divisor_override);
}

std::string AvgPool3d::extra_repr() const {
  return "kernel_size=" + int_or_tuple(kernel_size) + ", stride=" + int_or_tuple(stride) +
         ", padding=" + int_or_tuple(padding);
}

Tensor AvgPool3d::forward(const Tensor& x) {
  return avg_pool3d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
}

AdaptiveAvgPool3d::AdaptiveAvgPool3d(Triple output_size) : output_size(output_size) {
  check_positive("AdaptiveAvgPool3d", "output_size", output_size);
}

std::string AdaptiveAvgPool3d::extra_repr() const { return "output_size=" + int_or_tuple(output_size); }

Tensor AdaptiveAvgPool3d::forward(const Tensor& x) { return adaptive_avg_pool3d(x, output_size); }

AdaptiveMaxPool3d::AdaptiveMaxPool3d(Triple output_size) : output_size(output_size) {
  check_positive("AdaptiveMaxPool3d", "output_size", output_size);
}

std::string AdaptiveMaxPool3d::extra_repr() const { return "output_size=" + int_or_tuple(output_size); }

Tensor AdaptiveMaxPool3d::forward(const Tensor& x) { return adaptive_max_pool3d(x, output_size); }

std::pair<Tensor, Tensor> AdaptiveMaxPool3d::forward_with_indices(const Tensor& x) {
  return adaptive_max_pool3d_with_indices(x, output_size);
}

LPPool3d::LPPool3d(double norm_type, Triple kernel_size, Triple stride, bool ceil_mode)
    : norm_type(norm_type), kernel_size(kernel_size), stride(stride), ceil_mode(ceil_mode) {
  if (!std::isfinite(norm_type) || norm_type == 0.0) {
    throw Error("LPPool3d: norm_type must be finite and nonzero, got " + py_float(norm_type));
  }
  check_positive("LPPool3d", "kernel_size", kernel_size);
  if (stride != Triple{0, 0, 0}) check_positive("LPPool3d", "stride", stride);
}

std::string LPPool3d::extra_repr() const {
  const bool no_stride = stride == Triple{0, 0, 0};
  return "norm_type=" + py_float(norm_type) + ", kernel_size=" + int_or_tuple(kernel_size) +
         ", stride=" + (no_stride ? std::string("None") : int_or_tuple(stride)) + ", ceil_mode=" + py_bool(ceil_mode);
}

Tensor LPPool3d::forward(const Tensor& x) { return lp_pool3d(x, norm_type, kernel_size, stride, ceil_mode); }

}  // namespace kiln::nn
