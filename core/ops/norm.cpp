// group_norm and rms_norm as compositions: the statistics by mean and var, the normalization by
// rsqrt and elementwise ops, all in float32 (float64 for float64 inputs). instance_norm is
// batch_norm over a reshaped input; local_response_norm sums squares over sliding channel windows.
#include "core/ops/norm.h"

#include <cmath>
#include <string>
#include <utility>

#include "core/autocast.h"
#include "core/ops/batch_norm.h"
#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
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

Tensor instance_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  const char* op = "instance_norm";
  ops::check_defined(op, input, "input");
  ops::check_floating(op, input, "input");
  if (input.dim() < 3) {
    throw ShapeError(std::string(op) + ": input must be [N, C, *] with at least one dim of positions, got shape " +
                     shape_str(input.sizes()));
  }
  const int64_t n = input.size(0), channels = input.size(1);
  const std::string expected = "the input's " + std::to_string(channels) + " channels";
  ops::check_param(op, weight, "weight", {channels}, expected);
  ops::check_param(op, bias, "bias", {channels}, expected);
  ops::check_param(op, running_mean, "running_mean", {channels}, expected);
  ops::check_param(op, running_var, "running_var", {channels}, expected);
  if (running_mean.defined() != running_var.defined()) {
    throw Error(std::string(op) + ": running_mean and running_var must be given together (got only " +
                (running_mean.defined() ? "running_mean" : "running_var") + ")");
  }
  if (!use_input_stats && !running_mean.defined()) {
    throw Error(std::string(op) + ": running_mean and running_var are required without use_input_stats (input " +
                shape_str(input.sizes()) + ")");
  }
  ops::common_device(op, {&input, &running_mean, &running_var, &weight, &bias});
  if (input.numel() == 0) return input.clone();  // nothing to normalize, no statistics to update
  if (use_input_stats && input.numel() / (n * channels) <= 1) {
    throw ShapeError(std::string(op) + ": expected more than 1 position per channel with use_input_stats, got input " +
                     shape_str(input.sizes()));
  }
  // Each (sample, channel) is one channel of a batch of one; the [C] tensors repeat per sample.
  Shape flat = input.sizes();
  flat[0] = 1;
  flat[1] = n * channels;
  auto per_sample = [n](const Tensor& t) { return t.defined() ? repeat(t, {n}) : t; };
  const Tensor rm = per_sample(running_mean), rv = per_sample(running_var);
  const Tensor y =
      batch_norm(input.reshape(flat), rm, rv, per_sample(weight), per_sample(bias), use_input_stats, momentum, eps)
          .reshape(input.sizes());
  if (use_input_stats && running_mean.defined() && n > 0) {
    NoGradGuard no_grad;
    Tensor mean_out = running_mean, var_out = running_var;  // handles to the caller's buffers
    mean_out.copy_(mean(rm.reshape({n, channels}), {0}));
    var_out.copy_(mean(rv.reshape({n, channels}), {0}));
  }
  return y;
}

Tensor local_response_norm(const Tensor& input, int64_t size, double alpha, double beta, double k) {
  const char* op = "local_response_norm";
  ops::check_defined(op, input, "input");
  ops::check_floating(op, input, "input");
  if (input.dim() < 3) {
    throw ShapeError(std::string(op) + ": input must be [N, C, *] with at least 3 dims, got shape " +
                     shape_str(input.sizes()));
  }
  if (size < 1) throw Error(std::string(op) + ": size must be >= 1, got " + std::to_string(size));
  for (const auto& [name, value] : {std::pair<const char*, double>{"alpha", alpha}, {"beta", beta}, {"k", k}}) {
    if (!std::isfinite(value)) throw Error(std::string(op) + ": " + name + " must be finite, got " + num_str(value));
  }
  // The squares padded with zeros along the channels, then averaged over windows of `size`.
  Shape pads(static_cast<size_t>(2 * (input.dim() - 1)), 0);
  pads[pads.size() - 2] = size / 2;
  pads[pads.size() - 1] = (size - 1) / 2;
  const Tensor squares = pad(input * input, pads);
  const Tensor window_mean = mean(squares.unfold(1, size, 1), {-1});
  return input / pow(window_mean * alpha + k, beta);
}

}  // namespace kiln
