// cross_entropy: one fused pass per row (log-sum-exp, loss, ignore_index, label smoothing); the
// forward saves the log-sum-exp and the count of counted rows, and the backward rebuilds softmax
// from them rather than keeping [rows, classes] probabilities.
#include "core/ops/cross_entropy.h"

#include <string>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"
#include "kernels/cross_entropy.h"

namespace kiln {
namespace {

LossReduce to_loss_reduce(Reduction r) {
  switch (r) {
    case Reduction::None: return LossReduce::None;
    case Reduction::Sum: return LossReduce::Sum;
    case Reduction::Mean: return LossReduce::Mean;
  }
  // Only a cast can make another value; refusing it beats guessing one.
  throw Error("cross_entropy: unknown reduction " + std::to_string(static_cast<int>(r)) +
              " (expected Reduction::None, Mean or Sum)");
}

}  // namespace

using ops::dense;

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing) {
  const char* op = "cross_entropy";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&logits, &target})) {
    return cross_entropy((*c)[0], (*c)[1], reduction, ignore_index, label_smoothing);
  }
  ops::check_defined(op, logits, "logits");
  ops::check_defined(op, target, "target");
  const LossReduce red = to_loss_reduce(reduction);
  ops::check_floating(op, logits, "logits");
  if (target.dtype() != DType::Int64 && target.dtype() != DType::Int32) {
    throw DTypeError(std::string("cross_entropy: target must hold integer class indices (int64), got ") +
                     dtype_name(target.dtype()) + " (target " + shape_str(target.sizes()) + ", logits " +
                     shape_str(logits.sizes()) + ")");
  }
  if (logits.dim() == 0) throw ShapeError("cross_entropy: logits must have a class dim, got a 0-d tensor");
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
    throw Error("cross_entropy: label_smoothing must be in [0, 1], got " + num_str(label_smoothing));
  }
  ops::common_device(op, {&logits, &target});
  // [C] logits with a 0-d target are one row; otherwise the class dim is dim 1.
  Tensor lg = logits.dim() == 1 ? logits.detach().unsqueeze(0) : logits.detach();
  Shape expected = lg.sizes();
  expected.erase(expected.begin() + 1);
  Shape expected_user = logits.dim() == 1 ? Shape{} : expected;
  if (target.sizes() != expected_user) {
    throw ShapeError("cross_entropy: target of shape " + shape_str(target.sizes()) + " does not match logits " +
                     shape_str(logits.sizes()) + " (expected target " + shape_str(expected_user) + ")");
  }
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
