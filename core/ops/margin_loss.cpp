// The composed margin losses of core/ops/margin_loss.h: each checks its inputs, builds the
// per-element (or per-class) terms from elementwise ops, where() and gather, and reduces them.
#include "core/ops/margin_loss.h"

#include <cmath>
#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/ops/activation.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/reduce.h"
#include "core/ops/scan.h"
#include "kernels/error.h"

namespace kiln {
namespace {

// input floating, target of any numeric dtype and of input's shape, one device, a known reduction.
void check_labels(const char* op, const Tensor& input, const Tensor& target, Reduction reduction) {
  ops::check_defined(op, input, "input");
  ops::check_defined(op, target, "target");
  ops::check_floating(op, input, "input");
  if (target.dtype() == DType::Bool) {
    throw DTypeError(std::string(op) + ": target must hold numeric labels, got bool (target " +
                     shape_str(target.sizes()) + ")");
  }
  ops::common_device(op, {&input, &target});
  detail::check_reduction(op, reduction);
  if (input.sizes() != target.sizes()) {
    throw ShapeError(std::string(op) + ": input of shape " + shape_str(input.sizes()) + " and target of shape " +
                     shape_str(target.sizes()) + " differ");
  }
}

// Scores [N, C] (or [C]): a kiln::ShapeError naming `op` otherwise.
void check_scores(const char* op, const Tensor& input) {
  if (input.dim() != 1 && input.dim() != 2) {
    throw ShapeError(std::string(op) + ": input must be [N, C] or [C] scores, got shape " + shape_str(input.sizes()));
  }
  if (input.sizes().back() == 0) {
    throw ShapeError(std::string(op) + ": input has no classes (shape " + shape_str(input.sizes()) + ")");
  }
}

// The checks of a loss of scores against class indices: input floating [N, C] (or [C]), target of
// int64/int32 indices, a known reduction.
void check_class_scores(const char* op, const Tensor& input, const Tensor& target, Reduction reduction) {
  ops::check_defined(op, input, "input");
  ops::check_defined(op, target, "target");
  ops::check_floating(op, input, "input");
  detail::check_reduction(op, reduction);
  check_scores(op, input);
  if (target.dtype() != DType::Int64 && target.dtype() != DType::Int32) {
    throw DTypeError(std::string(op) + ": target must hold integer class indices (int64), got " +
                     dtype_name(target.dtype()) + " (target " + shape_str(target.sizes()) + ", input " +
                     shape_str(input.sizes()) + ")");
  }
}

// gather(x, 1, index), a class index out of range found on the CPU renamed for `op`.
Tensor gather_classes(const char* op, const Tensor& x, const Tensor& index, const char* rule) {
  try {
    return gather(x, 1, index);
  } catch (const IndexError& e) {
    throw IndexError(std::string(op) + ": " + rule + " [0, " + std::to_string(x.size(1)) + ") (" + e.what() + ")");
  }
}

}  // namespace

Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* op = "soft_margin_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &target})) {
    return soft_margin_loss((*c)[0], (*c)[1], reduction);
  }
  check_labels(op, input, target, reduction);
  const Tensor y = is_floating(target.dtype()) ? target : target.to(input.dtype());
  return detail::reduce_loss(softplus(neg(y * input)), reduction);
}

Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin, Reduction reduction) {
  const char* op = "hinge_embedding_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &target})) {
    return hinge_embedding_loss((*c)[0], (*c)[1], margin, reduction);
  }
  check_labels(op, input, target, reduction);
  if (!std::isfinite(margin)) throw Error(std::string(op) + ": margin must be finite, got " + num_str(margin));
  const Tensor hinge = clamp(margin - input, 0.0, std::nullopt);
  return detail::reduce_loss(where(ne(target, 1), hinge, 0.0) + where(ne(target, -1), input, 0.0), reduction);
}

Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                                   Reduction reduction) {
  const char* op = "multilabel_soft_margin_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &target, &weight})) {
    return multilabel_soft_margin_loss((*c)[0], (*c)[1], (*c)[2], reduction);
  }
  check_labels(op, input, target, reduction);
  check_scores(op, input);
  const int64_t classes = input.sizes().back();
  ops::check_param(op, weight, "weight", {classes}, "the input's " + std::to_string(classes) + " classes");
  ops::common_device(op, {&input, &weight});
  const Tensor y = is_floating(target.dtype()) ? target : target.to(input.dtype());
  Tensor loss = neg(y * logsigmoid(input) + (1.0 - y) * logsigmoid(neg(input)));
  if (weight.defined()) loss = loss * weight;
  return detail::reduce_loss(sum(loss, {-1}) / static_cast<double>(classes), reduction);
}

Tensor multi_margin_loss(const Tensor& input, const Tensor& target, int64_t p, double margin, const Tensor& weight,
                         Reduction reduction) {
  const char* op = "multi_margin_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &weight})) {
    return multi_margin_loss((*c)[0], target, p, margin, (*c)[1], reduction);
  }
  check_class_scores(op, input, target, reduction);
  const Shape rows = input.dim() == 2 ? Shape{input.size(0)} : Shape{};
  if (target.sizes() != rows) {
    throw ShapeError(std::string(op) + ": target of shape " + shape_str(target.sizes()) + " does not match input " +
                     shape_str(input.sizes()) + " (expected target " + shape_str(rows) + ", one class per sample)");
  }
  if (p != 1 && p != 2) throw Error(std::string(op) + ": p must be 1 or 2, got " + std::to_string(p));
  if (!std::isfinite(margin)) throw Error(std::string(op) + ": margin must be finite, got " + num_str(margin));
  const int64_t classes = input.sizes().back();
  ops::check_param(op, weight, "weight", {classes}, "the input's " + std::to_string(classes) + " classes");
  ops::common_device(op, {&input, &target, &weight});
  const Tensor x = input.reshape({-1, classes});
  const Tensor t = target.to(DType::Int64).reshape({-1, 1});
  const Tensor picked = gather_classes(op, x, t, "a target outside");
  const Tensor z = clamp(margin - picked + x, 0.0, std::nullopt);
  Tensor terms = where(ne(arange(0, classes, 1, TensorOptions(DType::Int64, x.device())), t), p == 1 ? z : z * z, 0.0);
  if (weight.defined()) terms = terms * index_select(weight, 0, t.reshape({-1})).unsqueeze(1);
  return detail::reduce_loss((sum(terms, {1}) / static_cast<double>(classes)).reshape(rows), reduction);
}

Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* op = "multilabel_margin_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input})) {
    return multilabel_margin_loss((*c)[0], target, reduction);
  }
  check_class_scores(op, input, target, reduction);
  if (target.sizes() != input.sizes()) {
    throw ShapeError(std::string(op) + ": target of shape " + shape_str(target.sizes()) + " does not match input " +
                     shape_str(input.sizes()) + " (expected one list of class indices per sample, of input's shape)");
  }
  ops::common_device(op, {&input, &target});
  const int64_t classes = input.sizes().back();
  const Tensor x = input.reshape({-1, classes});
  const Tensor t = target.to(DType::Int64).reshape({-1, classes});
  // A position is listed while no -1 came before it or at it.
  const Tensor listed = eq(cumsum(eq(t, -1).to(DType::Int64), 1), 0);
  const Tensor index = where(listed, t, 0);
  const Tensor picked = gather_classes(op, x, index, "a listed class index (before the first -1) outside");
  // in_list[n, k]: class k is listed in row n (counted from a one-hot of the listed positions,
  // whose extra class C takes the positions not listed).
  const Tensor slot = where(listed, index, classes);
  const Tensor in_list = gt(sum(one_hot(slot, classes + 1), {1}).narrow(1, 0, classes), 0);
  // terms[n, j, k] for listed position j and class k not listed.
  const Tensor hinge = clamp(1.0 - picked.unsqueeze(2) + x.unsqueeze(1), 0.0, std::nullopt);
  const Tensor keep = logical_and(listed.unsqueeze(2), logical_not(in_list).unsqueeze(1));
  const Tensor per_sample = sum(where(keep, hinge, 0.0), {1, 2}) / static_cast<double>(classes);
  return detail::reduce_loss(per_sample.reshape(input.dim() == 2 ? Shape{input.size(0)} : Shape{}), reduction);
}

}  // namespace kiln
