// The normalization layers of nn/norm.h: each forward is a core op (batch norm's synchronized
// statistics excepted, composed here), each constructor registers PyTorch's parameter and buffer
// names with PyTorch's initial values.
#include "nn/norm.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/layer_norm.h"
#include "core/ops/norm.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "kernels/error.h"
#include "kernels/log.h"
#include "nn/layers.h"

namespace kiln::nn {
namespace {

using detail::check_eps;
using detail::check_non_negative;
using detail::filled;
using detail::py_bool;
using detail::py_float;

std::atomic<bool> g_conv_bias_warned{false};

// A conv bias right before batch norm is wasted: batch norm subtracts each channel's mean, and a
// per-channel constant cancels there. The check reads the input's autograd producer rather than a
// Sequential's neighbours, because ResNet-style blocks call conv then bn from their own forward;
// the graph sees every way the two meet. conv2d and conv_transpose2d record their inputs as (x,
// weight, bias), so edge 2 is valid exactly when a bias that requires grad went in (so: with grad
// mode on, as in training). Once warned, or with Warn off, the check costs an atomic load and a
// level check.
void warn_if_conv_bias_feeds(const Tensor& x, const std::string& module, int64_t num_features) {
  if (g_conv_bias_warned.load(std::memory_order_relaxed) || !log_enabled(LogLevel::Warn)) return;
  const std::shared_ptr<Node>& producer = x.grad_fn();
  if (!producer) return;
  const std::string op = producer->name();
  if (op != "conv2d" && op != "conv_transpose2d") return;
  const std::vector<Edge>& edges = producer->next_edges();
  if (edges.size() != 3 || !edges[2].valid()) return;
  if (g_conv_bias_warned.exchange(true)) return;
  const char* layer = op == "conv2d" ? "Conv2d" : "ConvTranspose2d";
  log_message(LogLevel::Warn, module + "(" + std::to_string(num_features) + "): its input comes from a " + op +
                                  " with a bias, which batch norm cancels (it subtracts each channel's mean): the "
                                  "bias only costs memory and time; construct that " +
                                  layer + " with bias=false (warned once)");
}

}  // namespace

void reset_conv_bias_warning_for_testing() { g_conv_bias_warned.store(false); }

// --- BatchNorm1d, BatchNorm2d, BatchNorm3d ------------------------------------------------------

NormBase::NormBase(const char* name, int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                   bool track_running_stats)
    : num_features(num_features),
      eps(eps),
      momentum(momentum),
      affine(affine),
      track_running_stats(track_running_stats) {
  const std::string n = name;
  if (num_features <= 0) throw Error(n + ": num_features must be positive, got " + std::to_string(num_features));
  check_eps(name, eps);
  if (momentum && !(*momentum >= 0.0 && *momentum <= 1.0)) {
    throw Error(n + ": momentum must be in [0, 1] (or none), got " + py_float(*momentum));
  }
  if (affine) {
    weight = register_parameter("weight", filled(name, {num_features}, 1.0));
    bias = register_parameter("bias", filled(name, {num_features}, 0.0));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", filled(name, {num_features}, 0.0));
    running_var = register_buffer("running_var", filled(name, {num_features}, 1.0));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::Int64));
  }
}

void NormBase::reset_running_stats() {
  if (!track_running_stats) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

std::string NormBase::extra_repr() const {
  return std::to_string(num_features) + ", eps=" + py_float(eps) +
         ", momentum=" + (momentum ? py_float(*momentum) : std::string("None")) + ", affine=" + py_bool(affine) +
         ", track_running_stats=" + py_bool(track_running_stats);
}

BatchNorm::BatchNorm(const char* name, std::vector<int64_t> dims, const char* layout, int64_t num_features, double eps,
                     std::optional<double> momentum, bool affine, bool track_running_stats)
    : NormBase(name, num_features, eps, momentum, affine, track_running_stats),
      dims_(std::move(dims)),
      layout_(layout) {}

Tensor BatchNorm::forward(const Tensor& x) { return forward(x, BatchNormEpilogue{}); }

Tensor BatchNorm::forward(const Tensor& x, const BatchNormEpilogue& epilogue) {
  const std::string name = type_name();
  if (!x.defined()) throw Error(name + ": the input is an undefined tensor");
  if (std::find(dims_.begin(), dims_.end(), x.dim()) == dims_.end()) {
    throw ShapeError(name + ": expected an input " + layout_ + ", got shape " + shape_str(x.sizes()));
  }
  if (x.size(1) != num_features) {
    throw ShapeError(name + ": input has " + std::to_string(x.size(1)) + " channels, num_features is " +
                     std::to_string(num_features) + " (input " + shape_str(x.sizes()) + ")");
  }
  warn_if_conv_bias_feeds(x, name, num_features);
  const Tensor& z = epilogue.residual;
  // Synchronized in training only, as PyTorch's SyncBatchNorm: evaluation is each rank's own
  // (without running statistics, its own batch's), so one rank may evaluate alone.
  const bool synced = sync && is_training();
  if (synced || (z.defined() && (z.sizes() != x.sizes() || z.dtype() != x.dtype() || z.device() != x.device()))) {
    Tensor y = synced ? synced_forward(x) : forward(x);
    if (z.defined()) y = y + z;
    return epilogue.relu ? relu(y) : y;
  }
  if (!track_running_stats) return batch_norm(x, Tensor(), Tensor(), weight, bias, true, 0.0, eps, epilogue);
  Tensor y = batch_norm(x, running_mean, running_var, weight, bias, is_training(), update_weight(), eps, epilogue);
  if (is_training()) {  // after batch_norm's checks: a refused batch is not counted
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return y;
}

double BatchNorm::update_weight() const {
  if (momentum) return *momentum;
  if (!is_training()) return 0.0;  // not read in eval
  // The cumulative average: this batch counts as one of num_batches_tracked + 1 (a host read).
  return 1.0 / static_cast<double>(num_batches_tracked.to(Device::cpu()).item<int64_t>() + 1);
}

// Synchronized statistics, from differentiable ops: the job's per-channel sum and element count in
// one cross-process sum, then the sum of squared deviations from the job's mean in a second (two
// passes, as the fused kernel, rather than E[x^2] - mean^2, which cancels badly in float32). The
// backward follows through autograd, whose sums over the processes are the cross-process parts of
// batch norm's gradient. Statistics in float32 at least, as the fused kernel's.
Tensor BatchNorm::synced_forward(const Tensor& x) {
  const int64_t c = num_features;
  const DType acc = x.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  const Tensor xf = x.dtype() == acc ? x : x.to(acc);
  Shape per_channel(static_cast<size_t>(x.dim()), 1), reduced{0};
  per_channel[1] = c;
  for (int64_t d = 2; d < x.dim(); ++d) reduced.push_back(d);
  // One value per channel in the whole job has no variance to estimate (the unbiased running
  // variance would divide by 0 and turn NaN): refused as the unsynchronized batch norm refuses it.
  // Decided on the host from this rank's count, as PyTorch's SyncBatchNorm does: with more ranks
  // there are more values, except where the others' batches are empty, which only the job's count
  // (on the device) knows: the running statistics then stay as they were for the step.
  if (x.numel() / std::max<int64_t>(c, 1) <= 1 && sync->ranks() < 2) {
    throw ShapeError("batch_norm: expected more than 1 value per channel when training, got input of shape " +
                     shape_str(x.sizes()) + " on " + std::to_string(sync->ranks()) + " rank");
  }
  const Tensor count = full({1}, static_cast<double>(x.numel() / c), TensorOptions(acc, x.device()));
  const Tensor sums = sync->sum_over_ranks(cat({sum(xf, reduced), count}));
  const Tensor total = sums.narrow(0, c, 1).detach();
  const Tensor mean = sums.narrow(0, 0, c) / total;
  const Tensor centered = xf - mean.view(per_channel);
  const Tensor var = sync->sum_over_ranks(sum(centered * centered, reduced)) / total;
  Tensor y = centered * rsqrt(var + eps).view(per_channel);
  if (affine) y = y * weight.view(per_channel).to(acc) + bias.view(per_channel).to(acc);
  if (track_running_stats) {  // training (evaluation with running statistics never gets here)
    NoGradGuard no_grad;
    const double w = update_weight();
    num_batches_tracked.add_(1);
    const Tensor unbiased = var.detach() * total / (total - 1.0);
    const Tensor sample = total > 1.0;  // no host read: a one-value job keeps its running statistics
    const Tensor new_mean = running_mean * (1.0 - w) + (mean.detach() * w).to(running_mean.dtype());
    const Tensor new_var = running_var * (1.0 - w) + (unbiased * w).to(running_var.dtype());
    running_mean.copy_(where(sample, new_mean, running_mean));
    running_var.copy_(where(sample, new_var, running_var));
  }
  return y.dtype() == x.dtype() ? y : y.to(x.dtype());
}

// --- LayerNorm -----------------------------------------------------------------------------------

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, bool bias)
    : normalized_shape(std::move(normalized_shape)), eps(eps), elementwise_affine(elementwise_affine) {
  if (this->normalized_shape.empty()) throw Error("LayerNorm: normalized_shape must name at least one dim");
  for (int64_t s : this->normalized_shape) check_non_negative("LayerNorm", "normalized_shape", s);
  check_eps("LayerNorm", eps);
  if (elementwise_affine) {
    weight = register_parameter("weight", filled("LayerNorm", this->normalized_shape, 1.0));
    if (bias) this->bias = register_parameter("bias", filled("LayerNorm", this->normalized_shape, 0.0));
  }
}

std::string LayerNorm::extra_repr() const {
  return detail::py_tuple(normalized_shape) + ", eps=" + py_float(eps) +
         ", elementwise_affine=" + py_bool(elementwise_affine);
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

// --- GroupNorm, RMSNorm --------------------------------------------------------------------------

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : num_groups(num_groups), num_channels(num_channels), eps(eps), affine(affine) {
  if (num_groups <= 0 || num_channels < 0 || num_channels % num_groups != 0) {
    throw Error("GroupNorm: num_channels (" + std::to_string(num_channels) + ") must split into num_groups (" +
                std::to_string(num_groups) + ") equal groups");
  }
  check_eps("GroupNorm", eps);
  if (affine) {
    weight = register_parameter("weight", filled("GroupNorm", {num_channels}, 1.0));
    bias = register_parameter("bias", filled("GroupNorm", {num_channels}, 0.0));
  }
}

std::string GroupNorm::extra_repr() const {
  return std::to_string(num_groups) + ", " + std::to_string(num_channels) + ", eps=" + py_float(eps) +
         ", affine=" + py_bool(affine);
}

Tensor GroupNorm::forward(const Tensor& x) {
  if (x.dim() >= 2 && x.size(1) != num_channels) {
    throw ShapeError("GroupNorm: expected " + std::to_string(num_channels) + " channels, got input of shape " +
                     shape_str(x.sizes()));
  }
  return group_norm(x, num_groups, weight, bias, eps);
}

RMSNorm::RMSNorm(Shape normalized_shape, std::optional<double> eps, bool elementwise_affine)
    : normalized_shape(std::move(normalized_shape)), eps(eps), elementwise_affine(elementwise_affine) {
  if (this->normalized_shape.empty()) throw Error("RMSNorm: normalized_shape must name at least one dim");
  for (int64_t s : this->normalized_shape) check_non_negative("RMSNorm", "normalized_shape", s);
  if (eps) check_eps("RMSNorm", *eps);
  if (elementwise_affine) weight = register_parameter("weight", filled("RMSNorm", this->normalized_shape, 1.0));
}

std::string RMSNorm::extra_repr() const {
  return detail::py_tuple(normalized_shape) + ", eps=" + (eps ? py_float(*eps) : std::string("None")) +
         ", elementwise_affine=" + py_bool(elementwise_affine);
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, normalized_shape, weight, eps); }

// --- InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, LocalResponseNorm ---------------------------

InstanceNorm::InstanceNorm(const char* name, int64_t spatial, const char* layout, int64_t num_features, double eps,
                           std::optional<double> momentum, bool affine, bool track_running_stats)
    : NormBase(name, num_features, eps, momentum, affine, track_running_stats), spatial_(spatial), layout_(layout) {}

Tensor InstanceNorm::forward(const Tensor& x) {
  const std::string name = type_name();
  if (!x.defined()) throw Error(name + ": the input is an undefined tensor");
  if (x.dim() != spatial_ + 1 && x.dim() != spatial_ + 2) {
    throw ShapeError(name + ": expected an input " + layout_ + ", got shape " + shape_str(x.sizes()));
  }
  const bool unbatched = x.dim() == spatial_ + 1;
  const Tensor batched = unbatched ? x.unsqueeze(0) : x;
  if ((affine || track_running_stats) && batched.size(1) != num_features) {
    throw ShapeError(name + ": input has " + std::to_string(batched.size(1)) + " channels, num_features is " +
                     std::to_string(num_features) + " (input " + shape_str(x.sizes()) + ")");
  }
  const bool input_stats = is_training() || !track_running_stats;
  const Tensor y =
      instance_norm(batched, running_mean, running_var, weight, bias, input_stats, momentum.value_or(0.0), eps);
  return unbatched ? y.squeeze(0) : y;
}

LocalResponseNorm::LocalResponseNorm(int64_t size, double alpha, double beta, double k)
    : size(size), alpha(alpha), beta(beta), k(k) {
  detail::check_positive("LocalResponseNorm", "size", size);
  for (double v : {alpha, beta, k}) {
    if (!std::isfinite(v)) throw Error("LocalResponseNorm: alpha, beta and k must be finite, got " + py_float(v));
  }
}

std::string LocalResponseNorm::extra_repr() const {
  return std::to_string(size) + ", alpha=" + py_float(alpha) + ", beta=" + py_float(beta) + ", k=" + py_float(k);
}

Tensor LocalResponseNorm::forward(const Tensor& x) { return local_response_norm(x, size, alpha, beta, k); }

}  // namespace kiln::nn
