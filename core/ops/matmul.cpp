// matmul and linear: operands whose last two dims are row-major or transposed go to the GEMM as they
// are (a transpose flag and a leading dimension); anything else is made contiguous first. Broadcast
// batch dims become per-batch offsets, so an expanded operand is never copied.
#include "core/ops/matmul.h"

#include <algorithm>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
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

thread_local bool full_float32_matmul = false;  // a FullFloat32MatmulGuard is alive on this thread

// TF32 is read at each call, as PyTorch reads its flag.
bool tf32_allowed() { return cuda::math_switches().allow_tf32_matmul && !full_float32_matmul; }

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
  const bool tf32 = a.is_cuda() && tf32_allowed();
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

namespace {

// The operands of one projection y = in @ weight^T + bias (bias optional) whose input has `in_width`
// features and `x`'s dtype and device. Messages name `op`, the input as `input` with `input_shape`,
// and the operands with `prefix` ("" for linear, "second " for gelu_mlp's down-projection).
void check_projection(const char* op, const Tensor& x, int64_t in_width, const std::string& input,
                      const Shape& input_shape, const Tensor& weight, const Tensor& bias, const std::string& prefix) {
  const std::string name = op, w_name = prefix + "weight", b_name = prefix + "bias";
  ops::check_defined(op, weight, w_name.c_str());
  ops::common_device(op, {&x, &weight, &bias});
  for (const Tensor* t : {&weight, &bias}) {
    if (t->defined() && t->dtype() != x.dtype()) {
      throw DTypeError(name + ": " + (t == &weight ? w_name : b_name) + " is " + dtype_name(t->dtype()) + ", " +
                       input + " is " + dtype_name(x.dtype()) + " (" + input + " " + shape_str(input_shape) + ", " +
                       (t == &weight ? w_name : b_name) + " " + shape_str(t->sizes()) + ")");
    }
  }
  if (weight.dim() != 2) {
    throw ShapeError(name + ": " + w_name + " must be 2-d, got shape " + shape_str(weight.sizes()));
  }
  if (in_width != weight.size(1)) {
    throw ShapeError(name + ": " + input + " has " + std::to_string(in_width) + " features, " + w_name + " expects " +
                     std::to_string(weight.size(1)) + " (" + input + " " + shape_str(input_shape) + ", " + w_name +
                     " " + shape_str(weight.sizes()) + ")");
  }
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0))) {
    throw ShapeError(name + ": " + b_name + " of shape " + shape_str(bias.sizes()) + " does not match " +
                     std::to_string(weight.size(0)) + " output features (" + w_name + " " +
                     shape_str(weight.sizes()) + ")");
  }
}

// The checks linear and linear_gelu share.
void check_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  ops::check_defined(op, x, "input");
  if (x.dim() < 1) {
    throw ShapeError(std::string(op) + ": input must have at least 1 dimension, got shape " + shape_str(x.sizes()) +
                     (weight.defined() ? " (weight " + shape_str(weight.sizes()) + ")" : std::string()));
  }
  check_projection(op, x, x.size(-1), "input", x.sizes(), weight, bias, "");
}

}  // namespace

namespace {

// The checks of linear_gelu's operands (also gelu_mlp's first projection).
void check_linear_gelu(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear(op, x, weight, bias);
  if (!bias.defined()) {
    throw Error(std::string(op) + ": needs a bias (input " + shape_str(x.sizes()) + ", weight " +
                shape_str(weight.sizes()) + "); without one use gelu(linear(x, w))");
  }
  if (!x.is_floating_point()) {
    throw DTypeError(std::string(op) + ": needs floating operands, got " + dtype_name(x.dtype()));
  }
}

// Whether cuBLASLt's epilogues take a product of `x`'s dtype with sides m, n and k: float32, float16
// and bfloat16, and no side of 1 (its heuristic finds no algorithm for an epilogue GEMM with a
// one-row or one-column operand, as PyTorch's addmm also found). The CPU twin takes any shape.
bool cuda_epilogue_fits(const Tensor& x, int64_t m, int64_t n, int64_t k) {
  return !x.is_cuda() || (x.dtype() != DType::Float64 && m > 1 && n > 1 && k > 1);
}

// Whether a GEMM with a GELU epilogue can produce `width` columns from `in` inputs: on CUDA also an
// aux leading dimension that is a multiple of 8; an empty product has nothing to fuse.
bool gelu_epilogue_fits(const Tensor& x, int64_t in, int64_t width) {
  if (x.numel() == 0 || in == 0) return false;
  return cuda_epilogue_fits(x, x.numel() / in, width, in) && (!x.is_cuda() || width % 8 == 0);
}

// A GEMM with an epilogue: C = op(a) @ op(b) for 2-d a [m, k] and b [k, n] (views as they are), C
// contiguous [m, n]. `configure` sets the epilogue's fields.
void gemm_epilogue(const char* op, const Tensor& a, const Tensor& b, Tensor& c,
                   const std::function<void(GemmArgs&)>& configure) {
  const GemmOperand ga = as_gemm_operand(a), gb = as_gemm_operand(b);
  GemmArgs g = gemm_args(a.dtype(), ga.trans, gb.trans, a.size(0), b.size(1), a.size(1), 1.0, ga.t.data_ptr(), ga.ld,
                         gb.t.data_ptr(), gb.ld, 0.0, c.data_ptr(), b.size(1), {}, a.is_cuda() && tf32_allowed());
  configure(g);
  ops::KernelScope scope(op, {&a, &b});
  scope.run(kernels::gemm, g);
}

// y = gelu_tanh(x2 @ w^T + b) (allocated in y_shape, [rows, out] in memory) and H = x2 @ w^T + b
// ([rows, out]) in one GEMM: no autograd.
std::pair<Tensor, Tensor> bias_gelu_gemm(const char* op, const Tensor& x2, const Tensor& weight, const Tensor& bias,
                                         const Shape& y_shape) {
  const TensorOptions options(x2.dtype(), x2.device());
  Tensor y = ops::empty_for(op, y_shape, options);
  Tensor h = ops::empty_for(op, {x2.size(0), weight.size(0)}, options);
  const Tensor b = bias.detach().contiguous();
  gemm_epilogue(op, x2, weight.detach().t(), y, [&](GemmArgs& g) {
    g.epilogue = GemmEpilogue::BiasGeluAux;
    g.bias = b.data_ptr();
    g.aux = h.data_ptr();
    g.ldaux = weight.size(0);
  });
  return {y, h};
}

// dH = (dg2 @ w2) * gelu_tanh'(H) and db = the column sums of dH, in one GEMM: no autograd.
std::pair<Tensor, Tensor> dgelu_bgrad_gemm(const char* op, const Tensor& dg2, const Tensor& w2, const Tensor& h) {
  const TensorOptions options(dg2.dtype(), dg2.device());
  Tensor dh = ops::empty_for(op, h.sizes(), options);
  Tensor db = ops::empty_for(op, {h.size(1)}, options);
  gemm_epilogue(op, dg2, w2, dh, [&](GemmArgs& g) {
    g.epilogue = GemmEpilogue::DGeluBgrad;
    g.aux = h.data_ptr();
    g.ldaux = h.size(1);
    g.bias_grad = db.data_ptr();
  });
  return {dh, db};
}

Shape with_last(Shape s, int64_t last) {
  s.back() = last;
  return s;
}

// Whether a GEMM with a bias epilogue (Bias, BiasGradA) can run for a projection of `rows` rows
// from `in` to `out_f` features, of `t`'s dtype and device: floating operands and a nonempty
// product that cuBLASLt's epilogues take on CUDA. The forward's sides (rows, out_f, in) are the
// weight gradient's (out_f, in, rows) in another order.
bool bias_epilogue_fits(const Tensor& t, int64_t rows, int64_t in, int64_t out_f) {
  if (rows == 0 || in == 0 || out_f == 0 || !t.is_floating_point()) return false;
  return cuda_epilogue_fits(t, rows, out_f, in);
}

// A projection's weight and bias gradients from its output gradient dy [rows, out] and input x
// [rows, in]: dW = dy^T x and db = dy's column sums. When both are wanted and the epilogue fits, one
// GEMM gives both (BiasGradA: the bias gradient comes from the GEMM's own read of dy); no autograd.
std::pair<Tensor, Tensor> weight_and_bias_grads(const char* op, const Tensor& dy, const Tensor& x, bool want_weight,
                                                bool want_bias) {
  if (!(want_weight && want_bias && bias_epilogue_fits(dy, dy.size(0), x.size(1), dy.size(1)))) {
    return {want_weight ? matmul(dy.t(), x) : Tensor(), want_bias ? sum(dy, {0}) : Tensor()};
  }
  const TensorOptions options(dy.dtype(), dy.device());
  Tensor dw = ops::empty_for(op, {dy.size(1), x.size(1)}, options);
  Tensor db = ops::empty_for(op, {dy.size(1)}, options);
  gemm_epilogue(op, dy.t(), x, dw, [&](GemmArgs& g) {
    g.epilogue = GemmEpilogue::BiasGradA;
    g.bias_grad = db.data_ptr();
  });
  return {dw, db};
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* op = "linear";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x, &weight, &bias})) {
    return linear((*c)[0], (*c)[1], (*c)[2]);
  }
  check_linear(op, x, weight, bias);
  const int64_t in = weight.size(1), out_f = weight.size(0);
  const bool plain = in > 0 && out_f > 0 && x.numel() > 0 && x.is_floating_point();
  const bool epilogue = bias.defined() && in > 0 && bias_epilogue_fits(x, x.numel() / in, in, out_f);
  if (bias.defined() ? !epilogue : !plain) {
    Tensor y = matmul(x, weight.t());
    return bias.defined() ? y + bias : y;
  }
  // One GEMM, with the bias in its epilogue when there is one; the backward's weight GEMM also gives
  // the bias gradient. Without a bias this is matmul(x, weight.t()) with linear's own backward: the
  // weight's gradient comes out as dy^T x, in the weight's [out, in] layout, where matmul's would be
  // weight^T's gradient, transposed. (GPT's lm_head shares its weight with the token embedding,
  // whose gradient is [out, in] too: a transposed one made the sum and the cast before it strided.)
  const Tensor x2 = x.detach().reshape({x.numel() / in, in});
  Tensor y = ops::empty_for(op, with_last(x.sizes(), out_f), TensorOptions(x.dtype(), x.device()));
  const Tensor b = epilogue ? bias.detach().contiguous() : Tensor();
  gemm_epilogue(op, x2, weight.detach().t(), y, [&](GemmArgs& g) {
    if (!epilogue) return;
    g.epilogue = GemmEpilogue::Bias;
    g.bias = b.data_ptr();
  });
  if (needs_grad({&x, &weight, &bias})) {
    // x itself is saved (not its 2-d view) so that the tape's version check sees it change.
    const Shape x_shape = x.sizes();
    record_function(op, {x, weight, bias}, {y}, {x, weight}, [x_shape](const FunctionNode::Context& ctx) {
      const Tensor w = ctx.saved_at(1);
      const Tensor xs = ctx.saved_at(0).reshape({-1, w.size(1)});
      const Tensor dy = ops::dense_grad(ctx.grads[0], w.dtype()).reshape({xs.size(0), w.size(0)});
      TensorList grads(3);
      if (ctx.needs_input_grad[0]) grads[0] = matmul(dy, w).reshape(x_shape);
      std::tie(grads[1], grads[2]) =
          weight_and_bias_grads("linear", dy, xs, ctx.needs_input_grad[1], ctx.needs_input_grad[2]);
      return grads;
    });
  }
  return y;
}

Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias) {
  const char* op = "bilinear";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x1, &x2, &weight, &bias})) {
    return bilinear((*c)[0], (*c)[1], (*c)[2], (*c)[3]);
  }
  ops::check_defined(op, x1, "input1");
  ops::check_defined(op, x2, "input2");
  ops::check_defined(op, weight, "weight");
  for (const Tensor* t : {&x1, &x2, &weight}) ops::check_floating(op, *t, t == &weight ? "weight" : "input");
  const std::string shapes = " (input1 " + shape_str(x1.sizes()) + ", input2 " + shape_str(x2.sizes()) + ", weight " +
                             shape_str(weight.sizes()) + ")";
  if (x1.dim() < 1 || x2.dim() != x1.dim() ||
      !std::equal(x1.sizes().begin(), x1.sizes().end() - 1, x2.sizes().begin())) {
    throw ShapeError(std::string(op) + ": input1 and input2 must be [*, in1] and [*, in2] of the same leading dims" +
                     shapes);
  }
  if (weight.dim() != 3 || weight.size(1) != x1.size(-1) || weight.size(2) != x2.size(-1)) {
    throw ShapeError(std::string(op) + ": weight must be [out, in1, in2] = [out, " + std::to_string(x1.size(-1)) +
                     ", " + std::to_string(x2.size(-1)) + "]" + shapes);
  }
  const int64_t out = weight.size(0), in1 = weight.size(1), in2 = weight.size(2);
  ops::check_param(op, bias, "bias", {out}, "the weight's " + std::to_string(out) + " outputs");
  ops::check_same_dtype(op, x1, "input1", x2, "input2");
  ops::check_same_dtype(op, x1, "input1", weight, "weight");
  if (bias.defined()) ops::check_same_dtype(op, x1, "input1", bias, "bias");
  ops::common_device(op, {&x1, &x2, &weight, &bias});
  // The products and the sum in the operands' dtype: autocast already chose it.
  AutocastGuard as_cast(x1.device().type, /*enabled=*/false);
  const Tensor left = matmul(x1, weight.permute({1, 0, 2}).reshape({in1, out * in2}));  // [*, out * in2]
  Shape split = x1.sizes();
  split.back() = out;
  split.push_back(in2);
  const Tensor y = sum(left.reshape(split) * x2.unsqueeze(-2), {-1});
  return bias.defined() ? y + bias : y;
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* op = "linear_gelu";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x, &weight, &bias})) {
    return linear_gelu((*c)[0], (*c)[1], (*c)[2]);
  }
  check_linear_gelu(op, x, weight, bias);
  const int64_t in = weight.size(1), out_f = weight.size(0);
  if (!gelu_epilogue_fits(x, in, out_f)) return gelu(linear(x, weight, bias), GeluApprox::Tanh);

  const Tensor x2 = x.detach().reshape({x.numel() / in, in});
  auto [y, h] = bias_gelu_gemm(op, x2, weight, bias, with_last(x.sizes(), out_f));
  if (needs_grad({&x, &weight, &bias})) {
    // x itself is saved (not its 2-d view) so that the tape's version check sees it change.
    const Shape x_shape = x.sizes();
    record_function(op, {x, weight, bias}, {y}, {x, weight, h}, [x_shape](const FunctionNode::Context& ctx) {
      const Tensor w = ctx.saved_at(1), hs = ctx.saved_at(2);
      const Tensor xs = ctx.saved_at(0).reshape({hs.size(0), w.size(1)});
      const Tensor g2 = ops::dense_grad(ctx.grads[0], hs.dtype()).reshape(hs.sizes());
      const Tensor dh = ops::backward_kernel(g2, hs, BinaryOp::GeluTanhBackward);
      TensorList grads(3);
      if (ctx.needs_input_grad[0]) grads[0] = matmul(dh, w).reshape(x_shape);
      std::tie(grads[1], grads[2]) =
          weight_and_bias_grads("linear_gelu", dh, xs, ctx.needs_input_grad[1], ctx.needs_input_grad[2]);
      return grads;
    });
  }
  return y;
}

Tensor gelu_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
  const char* op = "gelu_mlp";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x, &w1, &b1, &w2, &b2})) {
    return gelu_mlp((*c)[0], (*c)[1], (*c)[2], (*c)[3], (*c)[4]);
  }
  check_linear_gelu(op, x, w1, b1);
  ops::check_defined(op, b2, "second bias");
  check_projection(op, x, w1.size(0), "the hidden activation", with_last(x.sizes(), w1.size(0)), w2, b2, "second ");
  const int64_t in = w1.size(1), hidden = w1.size(0);
  // The backward's epilogue GEMM (rows x hidden, k = w2's rows) sums over w2's rows: with none there
  // is nothing to fuse.
  if (!gelu_epilogue_fits(x, in, hidden) || w2.size(0) == 0 ||
      !cuda_epilogue_fits(x, x.numel() / in, hidden, w2.size(0))) {
    return linear(linear_gelu(x, w1, b1), w2, b2);
  }

  const int64_t rows = x.numel() / in;
  const Tensor x2 = x.detach().reshape({rows, in});
  Tensor z, g, h;
  {
    NoGradGuard no_grad;
    std::tie(g, h) = bias_gelu_gemm(op, x2, w1, b1, {rows, hidden});
    z = linear(g.view(with_last(x.sizes(), hidden)), w2.detach(), b2.detach());
  }
  if (needs_grad({&x, &w1, &b1, &w2, &b2})) {
    const Shape x_shape = x.sizes();
    record_function(op, {x, w1, b1, w2, b2}, {z}, {x, w1, h, g, w2}, [x_shape](const FunctionNode::Context& ctx) {
      const Tensor w1s = ctx.saved_at(1), hs = ctx.saved_at(2), gs = ctx.saved_at(3), w2s = ctx.saved_at(4);
      const Tensor xs = ctx.saved_at(0).reshape({hs.size(0), w1s.size(1)});
      const Tensor dz = ops::dense_grad(ctx.grads[0], hs.dtype()).reshape({hs.size(0), w2s.size(0)});
      TensorList grads(5);
      std::tie(grads[3], grads[4]) =
          weight_and_bias_grads("gelu_mlp", dz, gs, ctx.needs_input_grad[3], ctx.needs_input_grad[4]);
      if (ctx.needs_input_grad[0] || ctx.needs_input_grad[1] || ctx.needs_input_grad[2]) {
        // Through the down-projection and GELU in one GEMM: dH and the first bias's gradient.
        auto [dh, db1] = dgelu_bgrad_gemm("gelu_mlp", dz, w2s, hs);
        if (ctx.needs_input_grad[0]) grads[0] = matmul(dh, w1s).reshape(x_shape);
        if (ctx.needs_input_grad[1]) grads[1] = matmul(dh.t(), xs);
        if (ctx.needs_input_grad[2]) grads[2] = db1;
      }
      return grads;
    });
  }
  return z;
}

FullFloat32MatmulGuard::FullFloat32MatmulGuard() : prev_(full_float32_matmul) { full_float32_matmul = true; }
FullFloat32MatmulGuard::~FullFloat32MatmulGuard() { full_float32_matmul = prev_; }

}  // namespace kiln
