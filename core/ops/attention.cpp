// scaled_dot_product_attention: one autograd node. q/k/v whose last dim is contiguous are read in
// place (views of a fused qkv projection included); broadcast batch dims reach the kernels as
// strides over the batch shape (0 where an operand broadcasts), on both devices. The node saves q,
// k, v, the output and the log-sum-exp, plus the draw of its dropout, so the backward redraws
// exactly the forward's mask.
// Layouts, so that a transformer's heads cost no copies (docs/attention-tensor-cores.md):
// - the output takes q's order of dims: for q a [B, T, H, D] projection viewed as [B, H, T, D], out
//   is [B, T, H, Ev] in memory, and out.transpose(1, 2).reshape(B, T, H * Ev) is a view;
// - the backward reads dout in out's layout, so the gradient of that reshape arrives without a copy;
// - dq, dk and dv take q's, k's and v's orders, and when q, k and v are the three pieces of one
//   buffer (the split of a fused qkv projection) the gradients are the same three pieces of one new
//   buffer, which split's backward then passes on whole instead of copying the pieces into it.
#include "core/ops/attention.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/random.h"
#include "kernels/attention.h"
#include "kernels/error.h"

namespace kiln {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

Shape batch_of(const Tensor& x) { return Shape(x.sizes().begin(), x.sizes().end() - 2); }

Tensor last_dim_contiguous(const Tensor& x) { return x.stride(-1) == 1 || x.size(-1) == 1 ? x : x.contiguous(); }

struct Prepared {
  Tensor q, k, v, mask;  // detached, last dim contiguous
  Shape batch;
  AttentionArgs args;
};

// The stride of each broadcast batch dim of the problem in x (0 where x has size 1 there or lacks
// the dim), x's first `x_batch_dims` dims being its batch dims, right-aligned against the batch.
void batch_strides(int64_t* out, const Tensor& x, int64_t x_batch_dims, const Shape& batch) {
  const int64_t nd = static_cast<int64_t>(batch.size());
  const int64_t lead = nd - x_batch_dims;
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t xd = d - lead;
    out[d] = (xd >= 0 && x.size(xd) != 1) ? x.stride(xd) : 0;
  }
}

// Fills the kernel arguments; offsets count from each tensor's data_ptr().
Prepared prepare(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                 bool causal, double scale, PhiloxState philox) {
  Prepared p;
  p.q = last_dim_contiguous(q.detach());
  p.k = last_dim_contiguous(k.detach());
  p.v = last_dim_contiguous(v.detach());
  p.batch = broadcast_shapes(broadcast_shapes(batch_of(q), batch_of(k), kOp), batch_of(v), kOp);
  AttentionArgs& a = p.args;
  a.dtype = q.dtype();
  a.batch = shape_numel(p.batch);
  a.L = q.size(-2);
  a.S = k.size(-2);
  a.E = q.size(-1);
  a.Ev = v.size(-1);
  if (static_cast<int64_t>(p.batch.size()) > kMaxDims) {
    throw ShapeError(std::string(kOp) + ": more than " + std::to_string(kMaxDims) + " batch dims (batch " +
                     shape_str(p.batch) + ")");
  }
  a.layout.ndim = static_cast<int>(p.batch.size());
  for (size_t d = 0; d < p.batch.size(); ++d) a.layout.sizes[d] = p.batch[d];
  batch_strides(a.layout.q, p.q, p.q.dim() - 2, p.batch);
  batch_strides(a.layout.k, p.k, p.k.dim() - 2, p.batch);
  batch_strides(a.layout.v, p.v, p.v.dim() - 2, p.batch);
  a.q_row_stride = p.q.stride(-2);
  a.k_row_stride = p.k.stride(-2);
  a.v_row_stride = p.v.stride(-2);
  attention_dense_outputs(a);
  if (mask.defined()) {
    Shape full = p.batch;
    full.push_back(a.L);
    full.push_back(a.S);
    bool fits = true;
    try {
      fits = broadcast_shapes(full, mask.sizes(), kOp) == full;
    } catch (const ShapeError&) {
      fits = false;
    }
    if (!fits) {
      throw ShapeError(std::string(kOp) + ": attn_mask of shape " + shape_str(mask.sizes()) +
                       " does not broadcast to the scores' shape " + shape_str(full));
    }
    p.mask = mask.detach().expand(full);
    batch_strides(a.layout.mask, p.mask, static_cast<int64_t>(p.batch.size()), p.batch);
    a.mask = p.mask.data_ptr();
    a.mask_dtype = p.mask.dtype();
    a.mask_row_stride = p.mask.stride(-2);
    a.mask_col_stride = p.mask.stride(-1);
  }
  a.causal = causal;
  a.scale = scale;
  a.dropout_p = dropout_p;
  a.philox = philox;
  a.tensor_cores = q.is_cuda() && cuda::math_switches().attention_tensor_cores;
  a.wgmma = a.tensor_cores && cuda::math_switches().attention_wgmma;
  a.wgmma_producer = cuda::math_switches().attention_wgmma_producer;
  a.wgmma_pingpong = cuda::math_switches().attention_wgmma_pingpong;
  a.wgmma_tma = cuda::math_switches().attention_wgmma_tma;
  a.wgmma_swizzle = cuda::math_switches().attention_wgmma_swizzle;
  a.fused_backward = cuda::math_switches().attention_fused_backward;
  a.wgmma_dq_reduce = cuda::math_switches().attention_wgmma_dq_reduce;
  a.longest_first = cuda::math_switches().attention_longest_first;
  if (a.tensor_cores && a.causal && a.longest_first) {
    const int64_t section = cuda::math_switches().attention_order_section;
    a.order_section = section > 0 ? section : attention_order_section(a, cuda::l2_cache_bytes(q.device().index));
  }
  return p;
}

// Points the kernels at an output's layout: x is [batch..., rows, cols].
void output_layout(int64_t* batch_out, int64_t& row_stride, const Tensor& x, const Shape& batch) {
  batch_strides(batch_out, x, x.dim() - 2, batch);
  row_stride = x.stride(-2);
}

// The spacing of q, k and v when they are equally shaped, equally strided views of one storage,
// k `step` elements after q and v `step` after k, and the three together fill a block of memory
// densely: the three pieces of a fused [B, T, 3 * H * D] projection split on its last dim.
std::optional<int64_t> packed_step(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.numel() == 0 || q.storage() != k.storage() || q.storage() != v.storage()) return std::nullopt;
  if (q.sizes() != k.sizes() || q.sizes() != v.sizes() || q.strides() != k.strides() || q.strides() != v.strides()) {
    return std::nullopt;
  }
  const int64_t step = k.storage_offset() - q.storage_offset();
  if (step <= 0 || v.storage_offset() - k.storage_offset() != step) return std::nullopt;
  Shape sizes = q.sizes(), strides = q.strides();
  sizes.insert(sizes.begin(), 3);
  strides.insert(strides.begin(), step);
  if (!non_overlapping_and_dense(sizes, strides)) return std::nullopt;
  return step;
}

// New dq, dk and dv ([batch..., L, E], [batch..., S, E], [batch..., S, Ev]) in q's, k's and v's dim
// orders, or, when q, k and v are packed (packed_step), at their places in one new buffer.
TensorList gradient_buffers(const Prepared& p, const Shape& dq_shape, const Shape& dk_shape, const Shape& dv_shape) {
  const TensorOptions opt(p.q.dtype(), p.q.device());
  if (dq_shape == p.q.sizes() && dk_shape == p.k.sizes() && dv_shape == p.v.sizes()) {
    if (std::optional<int64_t> step = packed_step(p.q, p.k, p.v)) {
      Tensor buf = ops::empty_for(kOp, {3 * p.q.numel()}, opt);
      TensorList g;
      for (int64_t i = 0; i < 3; ++i) g.push_back(ops::make_view(kOp, buf, p.q.sizes(), p.q.strides(), i * *step));
      return g;
    }
  }
  auto like = [&](const Shape& shape, const Tensor& x) {
    return ops::empty_for(kOp, shape, ops::dense_strides_in_order_of(shape, x), opt);
  };
  return {like(dq_shape, p.q), like(dk_shape, p.k), like(dv_shape, p.v)};
}


void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p) {
  ops::check_defined(kOp, q, "query");
  ops::check_defined(kOp, k, "key");
  ops::check_defined(kOp, v, "value");
  ops::common_device(kOp, {&q, &k, &v, &mask});
  auto shapes = [&] {
    return " (query " + shape_str(q.sizes()) + ", key " + shape_str(k.sizes()) + ", value " + shape_str(v.sizes()) + ")";
  };
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2) throw ShapeError(std::string(kOp) + ": inputs need at least 2 dims" + shapes());
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype()) {
    throw DTypeError(std::string(kOp) + ": query, key and value must share a dtype, got " + dtype_name(q.dtype()) + ", " +
                     dtype_name(k.dtype()) + ", " + dtype_name(v.dtype()));
  }
  ops::check_floating(kOp, q, "query");
  if (q.size(-1) != k.size(-1)) {
    throw ShapeError(std::string(kOp) + ": query and key embedding dims differ (" + std::to_string(q.size(-1)) + " vs " +
                     std::to_string(k.size(-1)) + ")" + shapes());
  }
  if (k.size(-2) != v.size(-2)) {
    throw ShapeError(std::string(kOp) + ": key and value lengths differ (" + std::to_string(k.size(-2)) + " vs " +
                     std::to_string(v.size(-2)) + ")" + shapes());
  }
  if (mask.defined() && mask.dtype() != DType::Bool && mask.dtype() != q.dtype()) {
    throw DTypeError(std::string(kOp) + ": attn_mask must be bool or " + dtype_name(q.dtype()) + ", got " +
                     dtype_name(mask.dtype()));
  }
  if (!(dropout_p >= 0.0 && dropout_p < 1.0)) {
    throw Error(std::string(kOp) + ": dropout_p must be in [0, 1), got " + num_str(dropout_p));
  }
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale,
                                    const std::optional<Generator>& generator) {
  if (std::optional<TensorList> c = autocast::cast_inputs(kOp, {&q, &k, &v, &attn_mask})) {
    return scaled_dot_product_attention((*c)[0], (*c)[1], (*c)[2], (*c)[3], dropout_p, is_causal, scale, generator);
  }
  check_inputs(q, k, v, attn_mask, dropout_p);
  if (is_causal && attn_mask.defined()) {
    throw Error(std::string(kOp) + ": pass either attn_mask or is_causal, not both");
  }
  // The backward computes no gradient for the mask: a learned bias (relative positions, ALiBi
  // slopes) passed here would silently stop learning, so it is refused.
  if (attn_mask.defined() && needs_grad({&attn_mask})) {
    throw AutogradError(std::string(kOp) + ": attn_mask requires grad, but its gradient is not computed; add a "
                        "learned bias to the scores of a hand-written attention, or pass attn_mask.detach()");
  }
  if (scale && !std::isfinite(*scale)) {
    throw Error(std::string(kOp) + ": scale must be finite, got " + num_str(*scale));
  }
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  ops::KernelScope scope(kOp, {&q, &k, &v, &attn_mask});  // the op's tensor inputs: autocast's entry
  PhiloxState philox{};
  if (dropout_p > 0) philox = generator_for(kOp, q.device(), generator).next();
  Prepared p = prepare(q, k, v, attn_mask, dropout_p, is_causal, sc, philox);
  Shape out_shape = p.batch;
  out_shape.push_back(p.args.L);
  out_shape.push_back(p.args.Ev);
  Shape lse_shape = p.batch;
  lse_shape.push_back(p.args.L);
  DType lse_dtype = q.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor out = ops::empty_for(kOp, out_shape, ops::dense_strides_in_order_of(out_shape, p.q),
                              TensorOptions(q.dtype(), q.device()));
  output_layout(p.args.layout.o, p.args.o_row_stride, out, p.batch);
  Tensor lse = ops::empty_for(kOp, lse_shape, TensorOptions(lse_dtype, q.device()));
  if (out.numel() > 0 && p.args.S == 0) {
    // No key at all: every query sees none, as a fully masked row (zeros, lse -inf). The kernels
    // are not launched on the empty key and value tensors.
    NoGradGuard no_grad;
    out.zero_();
    lse.fill_(-std::numeric_limits<double>::infinity());
  } else if (out.numel() > 0) {
    scope.run(kernels::attention_forward, out.data_ptr(), lse.data_ptr(), p.q.data_ptr(), p.k.data_ptr(),
              p.v.data_ptr(), p.args);
  }
  if (needs_grad({&q, &k, &v})) {
    Shape qs = q.sizes(), ks = k.sizes(), vs = v.sizes();
    record_function(kOp, {q, k, v}, {out}, {q, k, v, out, lse, attn_mask},
                    [=](const FunctionNode::Context& ctx) {
                      Tensor qv = ctx.saved_at(0), kv = ctx.saved_at(1), vv = ctx.saved_at(2);
                      Tensor o = ctx.saved_at(3), l = ctx.saved_at(4), m = ctx.saved_at(5);
                      Prepared bp = prepare(qv, kv, vv, m, dropout_p, is_causal, sc, philox);
                      AttentionArgs& a = bp.args;
                      Shape dq_shape = bp.batch, dk_shape = bp.batch, dv_shape = bp.batch;
                      dq_shape.insert(dq_shape.end(), {a.L, a.E});
                      dk_shape.insert(dk_shape.end(), {a.S, a.E});
                      dv_shape.insert(dv_shape.end(), {a.S, a.Ev});
                      TensorList grads = gradient_buffers(bp, dq_shape, dk_shape, dv_shape);
                      Tensor &dq = grads[0], &dk = grads[1], &dv = grads[2];
                      output_layout(a.layout.o, a.o_row_stride, o, bp.batch);
                      output_layout(a.layout.dq, a.dq_row_stride, dq, bp.batch);
                      output_layout(a.layout.dk, a.dk_row_stride, dk, bp.batch);
                      output_layout(a.layout.dv, a.dv_row_stride, dv, bp.batch);
                      if (a.batch * a.L > 0 && a.S > 0) {
                        // The kernels read dO with out's dtype and layout: a copy only when the
                        // gradient arrives otherwise.
                        Tensor gd = ctx.grads[0];
                        if (gd.dtype() != o.dtype() || !same_layout(gd, o)) {
                          Tensor c = ops::empty_for(kOp, o.sizes(), o.strides(), TensorOptions(o.dtype(), o.device()));
                          ops::copy_raw(c, gd);
                          gd = c;
                        }
                        ops::launch(kOp, qv.device(), kernels::attention_backward, dq.data_ptr(), dk.data_ptr(),
                                    dv.data_ptr(), gd.data_ptr(), o.data_ptr(), l.data_ptr(), bp.q.data_ptr(),
                                    bp.k.data_ptr(), bp.v.data_ptr(), a);
                      } else {
                        dq.zero_();
                        dk.zero_();
                        dv.zero_();
                      }
                      return TensorList{sum_to(dq, qs), sum_to(dk, ks), sum_to(dv, vs)};
                    });
  }
  return out;
}

}  // namespace kiln
