// The composed losses of core/ops/loss.h. Each checks its inputs, then builds the per-element loss
// from elementwise ops (where() picks a branch, so no branch's gradient leaks into the other) and
// reduces it.
#include "core/ops/loss.h"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <numbers>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/distance.h"
#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/reduce.h"
#include "kernels/error.h"

namespace kiln {
namespace {

// An optional elementwise weight: undefined, or floating and broadcasting to input's shape.
void check_broadcast_weight(const char* op, const Tensor& input, const Tensor& weight, const char* what) {
  if (!weight.defined()) return;
  ops::check_floating(op, weight, what);
  bool fits = weight.dim() <= input.dim();
  for (int64_t i = 1; fits && i <= weight.dim(); ++i) {
    const int64_t s = weight.size(weight.dim() - i);
    fits = s == 1 || s == input.size(input.dim() - i);
  }
  if (!fits) {
    throw ShapeError(std::string(op) + ": " + what + " of shape " + shape_str(weight.sizes()) +
                     " does not broadcast to the input's shape " + shape_str(input.sizes()));
  }
}

// On the CPU, a kiln::Error naming `op` at the first element of `x` (called `name`) outside
// [lo, hi] or NaN; `holds` says what it should hold. A CUDA tensor is not read: that would wait for
// the device at every call.
void check_cpu_values(const char* op, const Tensor& x, const char* name, const char* holds, double lo, double hi) {
  if (!x.device().is_cpu()) return;
  const Tensor x64 = x.to(DType::Float64).contiguous();
  const double* v = x64.data_ptr<double>();
  for (int64_t i = 0; i < x64.numel(); ++i) {
    if (!(v[i] >= lo && v[i] <= hi)) {
      throw Error(std::string(op) + ": " + name + " holds " + holds + ", got " + num_str(v[i]) + " at flat index " +
                  std::to_string(i) + " (" + name + " " + shape_str(x.sizes()) + ")");
    }
  }
}

// log(x) clamped at -100, PyTorch's floor for the logs of binary_cross_entropy.
Tensor clamped_log(const Tensor& x) { return clamp(log(x), -100.0, std::nullopt); }

}  // namespace

void detail::check_reduction(const char* op, Reduction reduction) {
  if (reduction == Reduction::BatchMean) {
    throw Error(std::string(op) + ": Reduction::BatchMean is kl_div's alone (expected Reduction::None, Mean or Sum)");
  }
  if (reduction != Reduction::None && reduction != Reduction::Sum && reduction != Reduction::Mean) {
    throw Error(std::string(op) + ": unknown reduction " + std::to_string(static_cast<int>(reduction)) +
                " (expected Reduction::None, Mean or Sum)");
  }
}

Tensor detail::reduce_loss(const Tensor& losses, Reduction reduction) {
  switch (reduction) {
    case Reduction::None: return losses;
    case Reduction::Sum: return sum(losses);
    case Reduction::Mean: return mean(losses);
    // A 0-d loss has no batch dim: its sum, as PyTorch.
    case Reduction::BatchMean: return sum(losses) / static_cast<double>(losses.dim() == 0 ? 1 : losses.size(0));
  }
  return mean(losses);
}

void detail::check_pointwise_loss(const char* op, const Tensor& input, const Tensor& target, Reduction reduction) {
  ops::check_defined(op, input, "input");
  ops::check_defined(op, target, "target");
  ops::check_floating(op, input, "input");
  ops::check_floating(op, target, "target");
  ops::common_device(op, {&input, &target});
  check_reduction(op, reduction);
  if (input.sizes() != target.sizes()) {
    throw ShapeError(std::string(op) + ": input of shape " + shape_str(input.sizes()) + " and target of shape " +
                     shape_str(target.sizes()) + " differ");
  }
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* op = "l1_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &target})) {
    return l1_loss((*c)[0], (*c)[1], reduction);
  }
  detail::check_pointwise_loss(op, input, target, reduction);
  return detail::reduce_loss(abs(input - target), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  const char* op = "smooth_l1_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &target})) {
    return smooth_l1_loss((*c)[0], (*c)[1], reduction, beta);
  }
  detail::check_pointwise_loss(op, input, target, reduction);
  if (!(beta >= 0.0) || !std::isfinite(beta)) {
    throw Error(std::string(op) + ": beta must be a finite number >= 0, got " + num_str(beta));
  }
  const Tensor d = abs(input - target);
  // beta 0 is L1 (PyTorch's shortcut too): the quadratic branch would divide by zero, and its
  // infinite slope times where()'s zero gradient would be NaN.
  if (beta == 0.0) return detail::reduce_loss(d, reduction);
  return detail::reduce_loss(where(lt(d, beta), d * d * (0.5 / beta), d - 0.5 * beta), reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  const char* op = "huber_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &target})) {
    return huber_loss((*c)[0], (*c)[1], reduction, delta);
  }
  detail::check_pointwise_loss(op, input, target, reduction);
  if (!(delta > 0.0) || !std::isfinite(delta)) {
    throw Error(std::string(op) + ": delta must be a finite number > 0, got " + num_str(delta));
  }
  const Tensor d = abs(input - target);
  return detail::reduce_loss(where(lt(d, delta), d * d * 0.5, (d - 0.5 * delta) * delta), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  const char* op = "binary_cross_entropy_with_logits";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &target, &weight, &pos_weight})) {
    return binary_cross_entropy_with_logits((*c)[0], (*c)[1], (*c)[2], (*c)[3], reduction);
  }
  detail::check_pointwise_loss(op, input, target, reduction);
  check_broadcast_weight(op, input, weight, "weight");
  check_broadcast_weight(op, input, pos_weight, "pos_weight");
  ops::common_device(op, {&input, &weight, &pos_weight});
  // softplus(-x) = log(1 + exp(-x)), stable for every x: the linear branch takes -x past 20.
  const Tensor positive = softplus(neg(input));
  Tensor loss = pos_weight.defined() ? (1.0 - target) * input + (1.0 + (pos_weight - 1.0) * target) * positive
                                     : (1.0 - target) * input + positive;
  if (weight.defined()) loss = loss * weight;
  return detail::reduce_loss(loss, reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  const char* op = "binary_cross_entropy";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &target, &weight})) {
    return binary_cross_entropy((*c)[0], (*c)[1], (*c)[2], reduction);
  }
  detail::check_pointwise_loss(op, input, target, reduction);
  check_broadcast_weight(op, input, weight, "weight");
  ops::common_device(op, {&input, &weight});
  check_cpu_values(op, input, "input", "probabilities, each in [0, 1]", 0.0, 1.0);
  // The per-element loss is one node: autograd through the clamped logs would give 0 * inf = NaN
  // where x is exactly 0 or 1, so the backward is written out, as PyTorch's.
  Tensor losses;
  {
    NoGradGuard no_grad;
    losses = neg(target * clamped_log(input) + (1.0 - target) * clamped_log(1.0 - input));
  }
  if (needs_grad({&input, &target})) {
    record_function(op, {input, target}, {losses}, {input, target}, [](const FunctionNode::Context& ctx) {
      const Tensor x = ctx.saved_at(0), t = ctx.saved_at(1), g = ctx.grads[0];
      return TensorList{g * (x - t) / clamp(x * (1.0 - x), 1e-12, std::nullopt),
                        g * (clamped_log(1.0 - x) - clamped_log(x))};
    });
  }
  if (weight.defined()) losses = losses * weight;
  return detail::reduce_loss(losses, reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  const char* op = "kl_div";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &target})) {
    return kl_div((*c)[0], (*c)[1], reduction, log_target);
  }
  detail::check_pointwise_loss(op, input, target, reduction == Reduction::BatchMean ? Reduction::Mean : reduction);
  if (log_target) return detail::reduce_loss(exp(target) * (target - input), reduction);
  // target log target is 0 at target 0 (its limit): the log reads 1 there, so no 0 * -inf reaches
  // the value or the gradient. A negative or NaN target gives NaN, as in PyTorch.
  const Tensor xlogx = target * log(where(eq(target, 0.0), 1.0, target));
  return detail::reduce_loss(xlogx - target * input, reduction);
}

namespace {

// Operands of a pair or triplet loss: defined and floating, with the target (when given, of any
// numeric dtype) defined and on their device, and a known reduction.
void check_vector_loss(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> operands,
                       const Tensor* target, Reduction reduction) {
  std::vector<const Tensor*> all;
  for (const auto& [t, name] : operands) {
    ops::check_defined(op, *t, name);
    ops::check_floating(op, *t, name);
    all.push_back(t);
  }
  if (target) {
    ops::check_defined(op, *target, "target");
    all.push_back(target);
  }
  ops::common_device(op, all);
  detail::check_reduction(op, reduction);
}

// [N, D] (or [D]) vectors of one shape, for `op`'s `a` and `b`.
void check_vectors(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  if ((a.dim() != 1 && a.dim() != 2) || a.sizes() != b.sizes()) {
    throw ShapeError(std::string(op) + ": " + an + " and " + bn + " must be [N, D] or [D] of one shape, got " +
                     shape_str(a.sizes()) + " and " + shape_str(b.sizes()));
  }
}

}  // namespace

Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin,
                             Reduction reduction) {
  const char* op = "cosine_embedding_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x1, &x2})) {
    return cosine_embedding_loss((*c)[0], (*c)[1], target, margin, reduction);
  }
  check_vector_loss(op, {{&x1, "x1"}, {&x2, "x2"}}, &target, reduction);
  check_vectors(op, x1, "x1", x2, "x2");
  const Shape rows = x1.dim() == 2 ? Shape{x1.size(0)} : Shape{};
  if (target.sizes() != rows) {
    throw ShapeError(std::string(op) + ": target must have shape " + shape_str(rows) + " (one per pair of x1 " +
                     shape_str(x1.sizes()) + "), got " + shape_str(target.sizes()));
  }
  const int64_t d = x1.dim() - 1;
  const double eps = 1e-12;
  const Tensor cos = sum(x1 * x2, {d}) / sqrt((sum(x1 * x1, {d}) + eps) * (sum(x2 * x2, {d}) + eps));
  const Tensor losses =
      where(eq(target, 1), 1.0 - cos, 0.0) + where(eq(target, -1), clamp(cos - margin, 0.0, std::nullopt), 0.0);
  return detail::reduce_loss(losses, reduction);
}

Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin,
                           Reduction reduction) {
  const char* op = "margin_ranking_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x1, &x2, &target})) {
    return margin_ranking_loss((*c)[0], (*c)[1], (*c)[2], margin, reduction);
  }
  check_vector_loss(op, {{&x1, "x1"}, {&x2, "x2"}}, &target, reduction);
  if (x1.sizes() != x2.sizes() || x1.sizes() != target.sizes()) {
    throw ShapeError(std::string(op) + ": x1, x2 and target must have one shape, got " + shape_str(x1.sizes()) + ", " +
                     shape_str(x2.sizes()) + " and " + shape_str(target.sizes()));
  }
  return detail::reduce_loss(clamp(-target * (x1 - x2) + margin, 0.0, std::nullopt), reduction);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative, double margin,
                           double p, double eps, bool swap, Reduction reduction) {
  const char* op = "triplet_margin_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&anchor, &positive, &negative})) {
    return triplet_margin_loss((*c)[0], (*c)[1], (*c)[2], margin, p, eps, swap, reduction);
  }
  check_vector_loss(op, {{&anchor, "anchor"}, {&positive, "positive"}, {&negative, "negative"}}, nullptr, reduction);
  check_vectors(op, anchor, "anchor", positive, "positive");
  check_vectors(op, anchor, "anchor", negative, "negative");
  if (!(margin >= 0.0) || !std::isfinite(margin)) {
    throw Error(std::string(op) + ": margin must be a finite number >= 0, got " + num_str(margin));
  }
  const Tensor d_ap = pairwise_distance(anchor, positive, p, eps);
  Tensor d_an = pairwise_distance(anchor, negative, p, eps);
  if (swap) d_an = minimum(d_an, pairwise_distance(positive, negative, p, eps));
  return detail::reduce_loss(clamp(d_ap - d_an + margin, 0.0, std::nullopt), reduction);
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input, bool full, double eps,
                        Reduction reduction) {
  const char* op = "poisson_nll_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &target})) {
    return poisson_nll_loss((*c)[0], (*c)[1], log_input, full, eps, reduction);
  }
  detail::check_pointwise_loss(op, input, target, reduction);
  ops::check_eps(op, eps);
  Tensor loss = log_input ? exp(input) - target * input : input - target * log(input + eps);
  if (full) {
    // Stirling's term reads log(1) where t <= 1, so the branch not taken has a finite gradient.
    const Tensor above = gt(target, 1.0);
    const Tensor t = where(above, target, 1.0);
    loss = loss + where(above, t * log(t) - t + 0.5 * log(t * (2.0 * std::numbers::pi)), 0.0);
  }
  return detail::reduce_loss(loss, reduction);
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var, bool full, double eps,
                         Reduction reduction) {
  const char* op = "gaussian_nll_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &target, &var})) {
    return gaussian_nll_loss((*c)[0], (*c)[1], (*c)[2], full, eps, reduction);
  }
  detail::check_pointwise_loss(op, input, target, reduction);
  ops::check_defined(op, var, "var");
  ops::check_floating(op, var, "var");
  ops::common_device(op, {&input, &var});
  ops::check_eps(op, eps);
  Tensor v = var;
  if (var.sizes() != input.sizes()) {
    const Shape rows(input.sizes().begin(), input.sizes().end() - (input.dim() > 0 ? 1 : 0));
    Shape rows_of_one = rows;
    rows_of_one.push_back(1);
    if (input.dim() > 0 && var.sizes() == rows) {
      v = var.unsqueeze(-1);
    } else if (input.dim() == 0 || var.sizes() != rows_of_one) {
      throw ShapeError(std::string(op) + ": var of shape " + shape_str(var.sizes()) + " fits neither input " +
                       shape_str(input.sizes()) + " nor one variance per row (" + shape_str(rows_of_one) + " or " +
                       shape_str(rows) + ")");
    }
  }
  check_cpu_values(op, var, "var", "variances, each >= 0", 0.0, std::numeric_limits<double>::infinity());
  // The clamp's value with var's gradient: PyTorch clamps in place without recording it.
  v = v + (clamp(v, eps, std::nullopt) - v).detach();
  const Tensor d = input - target;
  Tensor loss = 0.5 * (log(v) + d * d / v);
  if (full) loss = loss + 0.5 * std::log(2.0 * std::numbers::pi);
  return detail::reduce_loss(loss, reduction);
}

Tensor detail::reduce_weighted(const Tensor& losses, const Tensor& weights, Reduction reduction,
                               const Shape& none_shape) {
  switch (reduction) {
    case Reduction::None: return losses.reshape(none_shape);
    case Reduction::Sum: return sum(losses);
    case Reduction::Mean:
    case Reduction::BatchMean: break;  // refused by check_reduction
  }
  return sum(losses) / sum(weights);
}

Shape detail::check_class_target(const char* op, const Tensor& input, const char* what, const Tensor& target,
                                 Reduction reduction) {
  ops::check_defined(op, input, what);
  ops::check_defined(op, target, "target");
  ops::check_floating(op, input, what);
  check_reduction(op, reduction);
  if (target.dtype() != DType::Int64 && target.dtype() != DType::Int32) {
    throw DTypeError(std::string(op) + ": target must hold integer class indices (int64), got " +
                     dtype_name(target.dtype()) + " (target " + shape_str(target.sizes()) + ", " + what + " " +
                     shape_str(input.sizes()) + ")");
  }
  if (input.dim() == 0) {
    throw ShapeError(std::string(op) + ": " + what + " must have a class dim, got a 0-d tensor");
  }
  // [C] with a 0-d target is one row; otherwise the class dim is dim 1.
  Shape expected = input.sizes();
  if (input.dim() == 1) expected.insert(expected.begin(), 1);
  expected.erase(expected.begin() + 1);
  const Shape expected_user = input.dim() == 1 ? Shape{} : expected;
  if (target.sizes() != expected_user) {
    throw ShapeError(std::string(op) + ": target of shape " + shape_str(target.sizes()) + " does not match " + what +
                     " " + shape_str(input.sizes()) + " (expected target " + shape_str(expected_user) + ")");
  }
  ops::common_device(op, {&input, &target});
  return expected;
}

detail::ClassTerms detail::nll_terms(const char* op, const Tensor& x, const Tensor& t, const Tensor& weight,
                                     int64_t ignore_index) {
  const int64_t classes = x.size(1);
  ClassTerms terms;
  terms.kept = ne(t, ignore_index);
  // An ignored element reads class 0, then counts for nothing.
  const Tensor index = where(terms.kept, t, 0);
  Tensor picked;
  try {
    picked = gather(x, 1, index.unsqueeze(1)).squeeze(1);
  } catch (const IndexError& e) {  // a class index out of range, found on the CPU
    throw IndexError(std::string(op) + ": a target outside [0, " + std::to_string(classes) + ") that is not " +
                     "ignore_index " + std::to_string(ignore_index) + " (" + e.what() + ")");
  }
  terms.weights = weight.defined()
                      ? where(terms.kept, index_select(weight, 0, index.reshape({-1})).reshape(t.sizes()), 0.0)
                      : terms.kept.to(picked.dtype());
  terms.losses = neg(picked) * terms.weights;
  return terms;
}

Tensor detail::class_weight_view(const Tensor& weight, int64_t dims, int64_t class_dim) {
  Shape s(static_cast<size_t>(dims), 1);
  s[static_cast<size_t>(class_dim)] = weight.numel();
  return weight.reshape(s);
}

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                Reduction reduction) {
  const char* op = "nll_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &weight})) {
    return nll_loss((*c)[0], target, (*c)[1], ignore_index, reduction);
  }
  const Shape rows = detail::check_class_target(op, input, "input", target, reduction);
  const Tensor x = input.dim() == 1 ? input.unsqueeze(0) : input;
  const int64_t classes = x.size(1);
  ops::check_param(op, weight, "weight", {classes}, "the input's " + std::to_string(classes) + " classes");
  ops::common_device(op, {&input, &weight});
  const detail::ClassTerms terms =
      detail::nll_terms(op, x, target.to(DType::Int64).reshape(rows), weight, ignore_index);
  return detail::reduce_weighted(terms.losses, terms.weights, reduction, target.sizes());
}

}  // namespace kiln
