// The fractional max-pooling layers: arguments checked where the layer is built, the output size
// resolved per call (a ratio depends on the input), then one op of core/ops/fractional_pool.h.
#include "nn/fractional_pool.h"

#include <vector>

#include "core/ops/fractional_pool.h"
#include "kernels/error.h"
#include "nn/layers.h"

namespace kiln::nn {
namespace {

using detail::check_positive;
using detail::int_or_tuple;
using detail::py_float;

template <size_t N>
void check_ratio(const char* layer, const std::array<double, N>& ratio) {
  for (double r : ratio) {
    if (!(r > 0.0 && r < 1.0)) throw Error(std::string(layer) + ": output_ratio must be in (0, 1), got " + py_float(r));
  }
}

template <size_t N>
std::string ratio_repr(const std::array<double, N>& ratio) {
  std::string s = "(";
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) s += ", ";
    s += py_float(ratio[i]);
  }
  return s + ")";
}

}  // namespace

FractionalMaxPool2d::FractionalMaxPool2d(Pair kernel_size, Pair output_size)
    : kernel_size(kernel_size), output_size(output_size) {
  check_positive("FractionalMaxPool2d", "kernel_size", kernel_size);
  check_positive("FractionalMaxPool2d", "output_size", output_size);
}

FractionalMaxPool2d::FractionalMaxPool2d(Pair kernel_size, double ratio_h, double ratio_w)
    : kernel_size(kernel_size), output_ratio(std::array<double, 2>{ratio_h, ratio_w}) {
  check_positive("FractionalMaxPool2d", "kernel_size", kernel_size);
  check_ratio("FractionalMaxPool2d", *output_ratio);
}

std::string FractionalMaxPool2d::extra_repr() const {
  return "kernel_size=" + int_or_tuple(kernel_size) +
         (output_size ? ", output_size=" + int_or_tuple(*output_size) : ", output_ratio=" + ratio_repr(*output_ratio));
}

Pair FractionalMaxPool2d::output_size_for(const Tensor& x) const {
  if (output_size) return *output_size;
  if (!output_ratio) throw Error("FractionalMaxPool2d: neither output_size nor output_ratio is set");
  return fractional_output_size2d(x, *output_ratio);
}

Tensor FractionalMaxPool2d::forward(const Tensor& x) { return forward_with_indices(x).first; }

std::pair<Tensor, Tensor> FractionalMaxPool2d::forward_with_indices(const Tensor& x) {
  return fractional_max_pool2d_with_indices(x, kernel_size, output_size_for(x), random_samples, generator);
}

FractionalMaxPool3d::FractionalMaxPool3d(Triple kernel_size, Triple output_size)
    : kernel_size(kernel_size), output_size(output_size) {
  check_positive("FractionalMaxPool3d", "kernel_size", kernel_size);
  check_positive("FractionalMaxPool3d", "output_size", output_size);
}

FractionalMaxPool3d::FractionalMaxPool3d(Triple kernel_size, double ratio_t, double ratio_h, double ratio_w)
    : kernel_size(kernel_size), output_ratio(std::array<double, 3>{ratio_t, ratio_h, ratio_w}) {
  check_positive("FractionalMaxPool3d", "kernel_size", kernel_size);
  check_ratio("FractionalMaxPool3d", *output_ratio);
}

std::string FractionalMaxPool3d::extra_repr() const {
  return "kernel_size=" + int_or_tuple(kernel_size) +
         (output_size ? ", output_size=" + int_or_tuple(*output_size) : ", output_ratio=" + ratio_repr(*output_ratio));
}

Triple FractionalMaxPool3d::output_size_for(const Tensor& x) const {
  if (output_size) return *output_size;
  if (!output_ratio) throw Error("FractionalMaxPool3d: neither output_size nor output_ratio is set");
  return fractional_output_size3d(x, *output_ratio);
}

Tensor FractionalMaxPool3d::forward(const Tensor& x) { return forward_with_indices(x).first; }

std::pair<Tensor, Tensor> FractionalMaxPool3d::forward_with_indices(const Tensor& x) {
  return fractional_max_pool3d_with_indices(x, kernel_size, output_size_for(x), random_samples, generator);
}

}  // namespace kiln::nn
