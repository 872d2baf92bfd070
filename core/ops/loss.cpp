// The composed losses of core/ops/loss.h. Each checks its inputs, then builds the per-element loss
// from elementwise ops (where() picks a branch, so no branch's gradient leaks into the other) and
// reduces it.
#include "core/ops/loss.h"

#include <cmath>
#include <string>

#include "core/autocast.h"
#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/reduce.h"
#include "kernels/error.h"

namespace kiln {

void detail::check_reduction(const char* op, Reduction reduction) {
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
  for (const auto& [t, what] : {std::pair{&weight, "weight"}, std::pair{&pos_weight, "pos_weight"}}) {
    if (!t->defined()) continue;
    ops::check_floating(op, *t, what);
    bool fits = t->dim() <= input.dim();
    for (int64_t i = 1; fits && i <= t->dim(); ++i) {
      const int64_t s = t->size(t->dim() - i);
      fits = s == 1 || s == input.size(input.dim() - i);
    }
    if (!fits) {
      throw ShapeError(std::string(op) + ": " + what + " of shape " + shape_str(t->sizes()) +
                       " does not broadcast to the input's shape " + shape_str(input.sizes()));
    }
  }
  ops::common_device(op, {&input, &weight, &pos_weight});
  // softplus(-x) = log(1 + exp(-x)), stable for every x: the linear branch takes -x past 20.
  const Tensor positive = softplus(neg(input));
  Tensor loss = pos_weight.defined() ? (1.0 - target) * input + (1.0 + (pos_weight - 1.0) * target) * positive
                                     : (1.0 - target) * input + positive;
  if (weight.defined()) loss = loss * weight;
  return detail::reduce_loss(loss, reduction);
}

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                Reduction reduction) {
  const char* op = "nll_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &weight})) {
    return nll_loss((*c)[0], target, (*c)[1], ignore_index, reduction);
  }
  ops::check_defined(op, input, "input");
  ops::check_defined(op, target, "target");
  ops::check_floating(op, input, "input");
  detail::check_reduction(op, reduction);
  if (target.dtype() != DType::Int64 && target.dtype() != DType::Int32) {
    throw DTypeError(std::string(op) + ": target must hold integer class indices (int64), got " +
                     dtype_name(target.dtype()) + " (target " + shape_str(target.sizes()) + ", input " +
                     shape_str(input.sizes()) + ")");
  }
  if (input.dim() == 0) throw ShapeError(std::string(op) + ": input must have a class dim, got a 0-d tensor");
  // [C] with a 0-d target is one row; otherwise the class dim is dim 1.
  const Tensor x = input.dim() == 1 ? input.unsqueeze(0) : input;
  Shape expected = x.sizes();
  expected.erase(expected.begin() + 1);
  const Shape expected_user = input.dim() == 1 ? Shape{} : expected;
  if (target.sizes() != expected_user) {
    throw ShapeError(std::string(op) + ": target of shape " + shape_str(target.sizes()) + " does not match input " +
                     shape_str(input.sizes()) + " (expected target " + shape_str(expected_user) + ")");
  }
  const int64_t classes = x.size(1);
  ops::check_param(op, weight, "weight", {classes}, "the input's " + std::to_string(classes) + " classes");
  ops::common_device(op, {&input, &target, &weight});

  const Tensor t = target.to(DType::Int64).reshape(expected);
  const Tensor kept = ne(t, ignore_index);
  // An ignored element reads class 0, then counts for nothing.
  const Tensor index = where(kept, t, 0);
  Tensor picked;
  try {
    picked = gather(x, 1, index.unsqueeze(1)).squeeze(1);
  } catch (const IndexError& e) {  // a class index out of range, found on the CPU
    throw IndexError(std::string(op) + ": a target outside [0, " + std::to_string(classes) + ") that is not " +
                     "ignore_index " + std::to_string(ignore_index) + " (" + e.what() + ")");
  }
  const Tensor w = weight.defined() ? where(kept, index_select(weight, 0, index.reshape({-1})).reshape(expected), 0.0)
                                    : kept.to(picked.dtype());
  const Tensor losses = neg(picked) * w;
  switch (reduction) {
    case Reduction::None: return input.dim() == 1 ? losses.reshape({}) : losses;
    case Reduction::Sum: return sum(losses);
    case Reduction::Mean: return sum(losses) / sum(w);
  }
  return sum(losses) / sum(w);
}

}  // namespace kiln
