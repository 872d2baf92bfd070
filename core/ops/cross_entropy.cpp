// cross_entropy: for class indices without class weights (nearly every call), one fused pass per
// row (log-sum-exp, loss, ignore_index, label smoothing); the forward saves the log-sum-exp and the
// count of counted rows, and the backward rebuilds softmax from them rather than keeping
// [rows, classes] probabilities. Class weights and class-probability targets are composed of
// log_softmax, gather and reductions, their gradients autograd's through them.
#include "core/ops/cross_entropy.h"

#include <string>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "core/ops/softmax.h"
#include "kernels/error.h"
#include "kernels/cross_entropy.h"

namespace kiln {
namespace {

LossReduce to_loss_reduce(Reduction r) {
  switch (r) {
    case Reduction::None: return LossReduce::None;
    case Reduction::Sum: return LossReduce::Sum;
    case Reduction::Mean: return LossReduce::Mean;
    case Reduction::BatchMean: break;  // kl_div's alone: check_reduction refuses it first
  }
  // Only a cast can make another value; refusing it beats guessing one.
  throw Error("cross_entropy: unknown reduction " + std::to_string(static_cast<int>(r)) +
              " (expected Reduction::None, Mean or Sum)");
}

// Class probabilities (soft labels, of the logits' shape): per row -sum_c weight_c p_c
// log_softmax(x)_c, with p smoothed towards uniform; Mean is the mean over rows, as in PyTorch.
Tensor cross_entropy_probabilities(const Tensor& logits, const Tensor& target, Reduction reduction,
                                   double label_smoothing, const Tensor& weight) {
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1, classes = logits.size(class_dim);
  const Tensor p = label_smoothing == 0.0
                       ? target
                       : target * (1.0 - label_smoothing) + label_smoothing / static_cast<double>(classes);
  Tensor terms = log_softmax(logits, class_dim) * p;
  if (weight.defined()) terms = terms * detail::class_weight_view(weight, logits.dim(), class_dim);
  return detail::reduce_loss(neg(sum(terms, {class_dim})), reduction);
}

// Class indices with class weights: nll_loss's terms over log_softmax, plus the smoothing term
// -sum_c weight_c log_softmax(x)_c / C; Mean divides both by the summed weights of the kept
// targets.
Tensor cross_entropy_weighted(const Tensor& logits, const Tensor& target, const Shape& rows, Reduction reduction,
                              int64_t ignore_index, double label_smoothing, const Tensor& weight) {
  const Tensor lp = log_softmax(logits.dim() == 1 ? logits.unsqueeze(0) : logits, 1);
  const detail::ClassTerms terms =
      detail::nll_terms("cross_entropy", lp, target.to(DType::Int64).reshape(rows), weight, ignore_index);
  Tensor losses = terms.losses;
  if (label_smoothing != 0.0) {
    const Tensor smooth = neg(sum(lp * detail::class_weight_view(weight, lp.dim(), 1), {1}));
    losses = losses * (1.0 - label_smoothing) +
             where(terms.kept, smooth, 0.0) * (label_smoothing / static_cast<double>(lp.size(1)));
  }
  return detail::reduce_weighted(losses, terms.weights, reduction, target.sizes());
}

}  // namespace

using ops::dense;

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing, const Tensor& weight) {
  const char* op = "cross_entropy";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&logits, &target, &weight})) {
    return cross_entropy((*c)[0], (*c)[1], reduction, ignore_index, label_smoothing, (*c)[2]);
  }
  ops::check_defined(op, logits, "logits");
  ops::check_defined(op, target, "target");
  ops::check_floating(op, logits, "logits");
  if (logits.dim() == 0) throw ShapeError("cross_entropy: logits must have a class dim, got a 0-d tensor");
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
    throw Error("cross_entropy: label_smoothing must be in [0, 1], got " + num_str(label_smoothing));
  }
  const int64_t classes = logits.size(logits.dim() == 1 ? 0 : 1);
  ops::check_param(op, weight, "weight", {classes}, "the logits' " + std::to_string(classes) + " classes");
  ops::common_device(op, {&logits, &target, &weight});
  if (is_floating(target.dtype())) {
    detail::check_reduction(op, reduction);
    if (target.sizes() != logits.sizes()) {
      throw ShapeError("cross_entropy: a " + std::string(dtype_name(target.dtype())) + " target of shape " +
                       shape_str(target.sizes()) + " holds class probabilities and must have the logits' shape " +
                       shape_str(logits.sizes()) + " (class indices are int64)");
    }
    return cross_entropy_probabilities(logits, target, reduction, label_smoothing, weight);
  }
  const Shape target_rows = detail::check_class_target(op, logits, "logits", target, reduction);
  if (weight.defined()) {
    return cross_entropy_weighted(logits, target, target_rows, reduction, ignore_index, label_smoothing, weight);
  }
  const LossReduce red = to_loss_reduce(reduction);
  Tensor lg = logits.dim() == 1 ? logits.detach().unsqueeze(0) : logits.detach();
  CrossEntropyShape cs;
  cs.n = lg.size(0);
  cs.c = lg.size(1);
  cs.s = 1;
  for (int64_t d = 2; d < lg.dim(); ++d) cs.s *= lg.size(d);
  cs.ignore_index = ignore_index;
  cs.label_smoothing = label_smoothing;
  const int64_t rows = cs.n * cs.s;
  if (cs.c == 0 && rows > 0) {
    throw ShapeError("cross_entropy: logits have no classes (shape " + shape_str(logits.sizes()) + ")");
  }
  Tensor lc = dense(lg);
  Tensor tc = dense(target.to(DType::Int64));
  // Under autocast a float16/bfloat16 loss comes out in float32 (core/autocast.cpp says why).
  const DType out_dtype = autocast::float32_result(op, logits) ? DType::Float32 : logits.dtype();
  Tensor out = ops::empty_for(op, red == LossReduce::None ? target.sizes() : Shape{},
                              TensorOptions(out_dtype, logits.device()));
  Tensor stats = empty({rows, 2}, TensorOptions(norm_stat_dtype(logits.dtype()), logits.device()));
  Tensor count = empty({1}, TensorOptions(DType::Int64, logits.device()));
  // On CUDA targets are range-checked on the device: a bad one is an IndexError at the next sync.
  ops::launch(op, logits.device(), kernels::cross_entropy_forward, out.data_ptr(), out.dtype(), stats.data_ptr(),
              count.data_ptr<int64_t>(), lc.data_ptr(), lc.dtype(), tc.data_ptr<int64_t>(), cs, red);
  if (needs_grad({&logits})) {
    Shape ls = logits.sizes();
    record_function(op, {logits}, {out}, {lc, tc, stats, count}, [cs, red, ls](const FunctionNode::Context& ctx) {
      Tensor x = ctx.saved_at(0), t = ctx.saved_at(1), l = ctx.saved_at(2), cnt = ctx.saved_at(3);
      Tensor g = dense(ctx.grads[0]);
      Tensor dx = empty(x.sizes(), TensorOptions(x.dtype(), x.device()));
      if (dx.numel() > 0) {
        ops::launch("cross_entropy", x.device(), kernels::cross_entropy_backward, dx.data_ptr(), g.data_ptr(),
                    g.dtype(), x.data_ptr(), x.dtype(), l.data_ptr(), cnt.data_ptr<int64_t>(),
                    t.data_ptr<int64_t>(), cs, red);
      }
      return TensorList{dx.reshape(ls)};
    });
  }
  return out;
}

}  // namespace kiln
