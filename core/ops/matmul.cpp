// matmul and linear: operands whose last two dims are row-major or transposed go to the GEMM as they
// are (a transpose flag and a leading dimension); anything else is made contiguous first. Broadcast
// batch dims become per-batch offsets, so an expanded operand is never copied.
#include "core/ops/matmul.h"

#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/dispatch.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "core/ops/view.h"
#include "kernels/error.h"
#include "kernels/matmul.h"

namespace kiln {
namespace {

// How a [.., rows, cols] operand reaches the GEMM: its tensor (maybe a contiguous copy), whether
// it is transposed in memory, and its leading dimension.
struct GemmOperand {
  Tensor t;
  bool trans = false;
  int64_t ld = 1;
};

GemmOperand as_gemm_operand(const Tensor& x) {
  const int64_t r = x.size(-2), c = x.size(-1);
  const int64_t sr = x.stride(-2), sc = x.stride(-1);
  if ((sc == 1 || c == 1) && sr >= std::max<int64_t>(c, 1)) return {x, false, std::max<int64_t>(sr, 1)};
  if ((sr == 1 || r == 1) && sc >= std::max<int64_t>(r, 1)) return {x, true, std::max<int64_t>(sc, 1)};
  Tensor cx = x.contiguous();
  return {cx, false, std::max<int64_t>(c, 1)};
}


// a: [..., m, k], b: [..., k, n] (both at least 2-d), same dtype and device.
Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Shape ba(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch;
  try {
    batch = broadcast_shapes(ba, bb, "matmul");
  } catch (const ShapeError& e) {  // name the operands, not just their batch dims
    throw ShapeError("matmul: batch dims of " + shape_str(a.sizes()) + " and " + shape_str(b.sizes()) +
                     " do not broadcast (" + e.what() + ")");
  }
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = ops::empty_for("matmul", out_shape, TensorOptions(a.dtype(), a.device()));
  if (out.numel() == 0) return out;
  if (k == 0) {
    out.zero_();
    return out;
  }
  GemmOperand ga = as_gemm_operand(a), gb = as_gemm_operand(b);
  std::vector<int64_t> ao = ops::batch_offsets(ga.t, ga.t.dim() - 2, batch);
  std::vector<int64_t> bo = ops::batch_offsets(gb.t, gb.t.dim() - 2, batch);
  std::vector<int64_t> co(ao.size());
  for (size_t i = 0; i < co.size(); ++i) co[i] = static_cast<int64_t>(i) * m * n;
  const GemmBatch gemm_batch{static_cast<int64_t>(co.size()), ao.data(), bo.data(), co.data()};
  // TF32 is read at each call, as PyTorch reads its flag.
  const bool tf32 = a.is_cuda() && cuda::math_switches().allow_tf32_matmul;
  ops::KernelScope scope("matmul", {&a, &b});  // the op's tensor inputs: autocast's entry
  scope.run(kernels::gemm, gemm_args(a.dtype(), ga.trans, gb.trans, m, n, k, 1.0, ga.t.data_ptr(), ga.ld,
                                     gb.t.data_ptr(), gb.ld, 0.0, out.data_ptr(), n, gemm_batch, tf32));
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (std::optional<TensorList> c = autocast::cast_inputs("matmul", {&a, &b})) return matmul((*c)[0], (*c)[1]);
  ops::check_defined("matmul", a, "first operand");
  ops::check_defined("matmul", b, "second operand");
  ops::common_device("matmul", {&a, &b});
  if (a.dim() == 0 || b.dim() == 0) {
    throw ShapeError("matmul: both operands need at least 1 dim, got shapes " + shape_str(a.sizes()) + " and " +
                     shape_str(b.sizes()));
  }
  if (a.dtype() != b.dtype()) {
    throw DTypeError(std::string("matmul: operands must share a dtype, got ") + dtype_name(a.dtype()) + " and " +
                     dtype_name(b.dtype()) + " (shapes " + shape_str(a.sizes()) + " and " + shape_str(b.sizes()) + ")");
  }
  if (!a.is_floating_point()) {
    throw DTypeError(std::string("matmul: needs floating operands, got ") + dtype_name(a.dtype()));
  }
  if (a.size(-1) != b.size(b.dim() == 1 ? 0 : -2)) {
    throw ShapeError("matmul: inner dimensions differ: " + shape_str(a.sizes()) + " @ " + shape_str(b.sizes()) + " (" +
                     std::to_string(a.size(-1)) + " vs " + std::to_string(b.size(b.dim() == 1 ? 0 : -2)) + ")");
  }
  // a [..., m, k] @ b [k, n] whose batch and row dims view as one: a single [B*m, k] @ [k, n] product
  // instead of B of them against a broadcast b, and in the backward one product for b's gradient
  // instead of B products and a sum (as PyTorch folds). An a that would need a copy is not folded.
  if (a.dim() >= 3 && b.dim() == 2 && a.size(-1) > 0) {
    const Shape rows{a.numel() / a.size(-1), a.size(-1)};
    if (can_view(a, rows)) {
      Shape out_shape = a.sizes();
      out_shape.back() = b.size(1);
      return matmul(a.view(rows), b).view(out_shape);
    }
  }
  Tensor a2 = a.dim() == 1 ? a.detach().unsqueeze(0) : a.detach();
  Tensor b2 = b.dim() == 1 ? b.detach().unsqueeze(1) : b.detach();
  Tensor out = matmul_nd(a2, b2);
  if (a.dim() == 1) out = out.squeeze(-2);
  if (b.dim() == 1) out = out.squeeze(-1);
  if (needs_grad({&a, &b})) {
    Shape as = a.sizes(), bs = b.sizes();
    record_function("matmul", {a, b}, {out}, {a, b}, [as, bs](const FunctionNode::Context& ctx) {
      Tensor g = ctx.grads[0];
      Tensor av = ctx.saved_at(0), bv = ctx.saved_at(1);
      // Work in the promoted 2-d+ forms, then drop the added dims and sum broadcast batches.
      Tensor a2 = av.dim() == 1 ? av.unsqueeze(0) : av;
      Tensor b2 = bv.dim() == 1 ? bv.unsqueeze(1) : bv;
      // Undo the forward's squeezes in reverse order (1-d @ 1-d: g is 0-d, so -1 must come first).
      if (bs.size() == 1) g = g.unsqueeze(-1);
      if (as.size() == 1) g = g.unsqueeze(-2);
      TensorList r(2);
      if (ctx.needs_input_grad[0]) {
        Tensor ga = matmul(g, b2.transpose(-1, -2));
        if (as.size() == 1) ga = ga.squeeze(-2);
        r[0] = sum_to(ga, as);
      }
      if (ctx.needs_input_grad[1]) {
        Tensor gb = matmul(a2.transpose(-1, -2), g);
        if (bs.size() == 1) gb = gb.squeeze(-1);
        r[1] = sum_to(gb, bs);
      }
      return r;
    });
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (std::optional<TensorList> c = autocast::cast_inputs("linear", {&x, &weight, &bias})) {
    return linear((*c)[0], (*c)[1], (*c)[2]);
  }
  ops::check_defined("linear", x, "input");
  ops::check_defined("linear", weight, "weight");
  ops::common_device("linear", {&x, &weight, &bias});
  for (const Tensor* t : {&weight, &bias}) {
    if (t->defined() && t->dtype() != x.dtype()) {
      throw DTypeError(std::string("linear: ") + (t == &weight ? "weight" : "bias") + " is " + dtype_name(t->dtype()) +
                       ", input is " + dtype_name(x.dtype()) + " (input " + shape_str(x.sizes()) + ", " +
                       (t == &weight ? "weight " : "bias ") + shape_str(t->sizes()) + ")");
    }
  }
  if (weight.dim() != 2) throw ShapeError("linear: weight must be 2-d, got shape " + shape_str(weight.sizes()));
  if (x.dim() < 1 || x.size(-1) != weight.size(1)) {
    throw ShapeError("linear: input has " + std::to_string(x.dim() ? x.size(-1) : 0) + " features, weight expects " +
                     std::to_string(weight.size(1)) + " (input " + shape_str(x.sizes()) + ", weight " +
                     shape_str(weight.sizes()) + ")");
  }
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0))) {
    throw ShapeError("linear: bias of shape " + shape_str(bias.sizes()) + " does not match " +
                     std::to_string(weight.size(0)) + " output features (weight " + shape_str(weight.sizes()) + ")");
  }
  Tensor y = matmul(x, weight.t());
  return bias.defined() ? y + bias : y;
}

}  // namespace kiln
