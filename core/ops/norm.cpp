// group_norm and rms_norm as compositions: the statistics by mean and var, the normalization by
// rsqrt and elementwise ops, all in float32 (float64 for float64 inputs).
#include "core/ops/norm.h"

#include <cmath>
#include <string>

#include "core/autocast.h"
#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "kernels/error.h"

namespace kiln {
namespace {

// The dtype the statistics are computed in: float32 for 16-bit floats, the input's otherwise.
DType compute_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

// The machine epsilon of a floating dtype (torch.finfo(dtype).eps).
double machine_eps(DType t) {
  switch (t) {
    case DType::Float64: return 0x1p-52;
    case DType::Float16: return 0x1p-10;
    case DType::BFloat16: return 0x1p-7;
    default: return 0x1p-23;
  }
}

}  // namespace

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "group_norm";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &weight, &bias})) {
    return group_norm((*c)[0], num_groups, (*c)[1], (*c)[2], eps);
  }
  ops::check_defined(op, input, "input");
  ops::check_floating(op, input, "input");
  if (input.dim() < 2) {
    throw ShapeError(std::string(op) + ": input must be [N, C, *], got shape " + shape_str(input.sizes()));
  }
  const int64_t n = input.size(0), channels = input.size(1);
  if (num_groups <= 0 || channels % num_groups != 0) {
    throw ShapeError(std::string(op) + ": the " + std::to_string(channels) + " channels of input " +
                     shape_str(input.sizes()) + " must split into num_groups = " + std::to_string(num_groups) +
                     " equal groups");
  }
  const std::string expected = "the input's " + std::to_string(channels) + " channels";
  ops::check_param(op, weight, "weight", {channels}, expected);
  ops::check_param(op, bias, "bias", {channels}, expected);
  ops::common_device(op, {&input, &weight, &bias});
  ops::check_eps(op, eps);

  const DType ct = compute_dtype(input.dtype());
  int64_t per_group = channels / num_groups;  // elements of one group of one sample
  for (int64_t d = 2; d < input.dim(); ++d) per_group *= input.size(d);
  const Tensor grouped = input.to(ct).reshape({n, num_groups, per_group});
  const Tensor mu = mean(grouped, {2}, true), variance = var(grouped, {2}, 0.0, true);
  Tensor y = ((grouped - mu) * rsqrt(variance + eps)).reshape(input.sizes());
  Shape per_channel(static_cast<size_t>(input.dim()), 1);  // [1, C, 1, ...]
  per_channel[1] = channels;
  if (weight.defined()) y = y * weight.reshape(per_channel);
  if (bias.defined()) y = y + bias.reshape(per_channel);
  return y.dtype() == input.dtype() ? y : y.to(input.dtype());
}

Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps) {
  const char* op = "rms_norm";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &weight})) {
    return rms_norm((*c)[0], normalized_shape, (*c)[1], eps);
  }
  ops::check_defined(op, input, "input");
  ops::check_floating(op, input, "input");
  ops::check_normalized_shape(op, input, normalized_shape);
  ops::check_param(op, weight, "weight", normalized_shape, "normalized_shape " + shape_str(normalized_shape));
  ops::common_device(op, {&input, &weight});
  const double e = eps.value_or(machine_eps(input.dtype()));
  ops::check_eps(op, e);

  Shape dims;
  for (size_t i = 0; i < normalized_shape.size(); ++i) dims.push_back(input.dim() - 1 - static_cast<int64_t>(i));
  const Tensor x = input.to(compute_dtype(input.dtype()));
  Tensor y = x * rsqrt(mean(x * x, dims, true) + e);
  if (weight.defined()) y = y * weight;
  return y.dtype() == input.dtype() ? y : y.to(input.dtype());
}

}  // namespace kiln
