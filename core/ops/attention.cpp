// scaled_dot_product_attention: one autograd node. q/k/v whose last dim is contiguous are read in
// place (views of a fused qkv projection included); broadcast batch dims become per-batch
// offsets. The node saves q, k, v, the output and the log-sum-exp, plus the Philox state of its
// dropout, so the backward redraws exactly the forward's mask. On CUDA the kernels find the batch
// offsets from strides (AttentionBatchLayout) instead of the host offset arrays.
#include "core/ops/attention.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/cuda/runtime.h"
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
  std::vector<int64_t> qo, ko, vo, mo;
  AttentionArgs args;
};

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
  p.qo = ops::batch_offsets(p.q, q.dim() - 2, p.batch);
  p.ko = ops::batch_offsets(p.k, k.dim() - 2, p.batch);
  p.vo = ops::batch_offsets(p.v, v.dim() - 2, p.batch);
  a.q_offsets = p.qo.data();
  a.k_offsets = p.ko.data();
  a.v_offsets = p.vo.data();
  a.q_row_stride = p.q.stride(-2);
  a.k_row_stride = p.k.stride(-2);
  a.v_row_stride = p.v.stride(-2);
  if (mask.defined()) {
    Shape full = p.batch;
    full.push_back(a.L);
    full.push_back(a.S);
    if (broadcast_shapes(full, mask.sizes(), kOp) != full) {
      throw ShapeError(std::string(kOp) + ": attn_mask of shape " + shape_str(mask.sizes()) +
                       " does not broadcast to the scores' shape " + shape_str(full));
    }
    p.mask = mask.detach().expand(full);
    p.mo = ops::batch_offsets(p.mask, static_cast<int64_t>(p.batch.size()), p.batch);
    a.mask = p.mask.data_ptr();
    a.mask_dtype = p.mask.dtype();
    a.mask_offsets = p.mo.data();
    a.mask_row_stride = p.mask.stride(-2);
    a.mask_col_stride = p.mask.stride(-1);
  }
  a.causal = causal;
  a.scale = scale;
  a.dropout_p = dropout_p;
  a.philox = philox;
  return p;
}

#if defined(KILN_WITH_CUDA)
// The batch strides of a prepared problem: for each operand, the stride of each broadcast batch dim
// (0 where the operand has size 1 there or lacks the dim), as ops::batch_offsets walks them.
AttentionBatchLayout batch_layout(const Prepared& p) {
  const int64_t nd = static_cast<int64_t>(p.batch.size());
  if (nd > kMaxDims) {
    throw ShapeError(std::string(kOp) + ": more than " + std::to_string(kMaxDims) + " batch dims (batch " +
                     shape_str(p.batch) + ")");
  }
  AttentionBatchLayout l;
  l.ndim = static_cast<int>(nd);
  auto fill = [&](int64_t* out, const Tensor& x, int64_t x_batch_dims) {
    const int64_t lead = nd - x_batch_dims;
    for (int64_t d = 0; d < nd; ++d) {
      const int64_t xd = d - lead;
      out[d] = (xd >= 0 && x.size(xd) != 1) ? x.stride(xd) : 0;
    }
  };
  for (int64_t d = 0; d < nd; ++d) l.sizes[d] = p.batch[static_cast<size_t>(d)];
  fill(l.q, p.q, p.q.dim() - 2);
  fill(l.k, p.k, p.k.dim() - 2);
  fill(l.v, p.v, p.v.dim() - 2);
  if (p.mask.defined()) fill(l.mask, p.mask, nd);
  return l;
}
#endif

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
    throw Error(std::string(kOp) + ": dropout_p must be in [0, 1), got " + std::to_string(dropout_p));
  }
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale) {
  check_inputs(q, k, v, attn_mask, dropout_p);
  if (is_causal && attn_mask.defined()) {
    throw Error(std::string(kOp) + ": pass either attn_mask or is_causal, not both");
  }
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  PhiloxState philox{};
  if (dropout_p > 0) philox = default_generator(q.device()).next();
  Prepared p = prepare(q, k, v, attn_mask, dropout_p, is_causal, sc, philox);
  Shape out_shape = p.batch;
  out_shape.push_back(p.args.L);
  out_shape.push_back(p.args.Ev);
  Shape lse_shape = p.batch;
  lse_shape.push_back(p.args.L);
  DType lse_dtype = q.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor out = empty(out_shape, TensorOptions(q.dtype(), q.device()));
  Tensor lse = empty(lse_shape, TensorOptions(lse_dtype, q.device()));
  if (out.numel() > 0) {
    if (q.is_cpu()) {
      attention_forward_cpu(out.data_ptr(), lse.data_ptr(), p.q.data_ptr(), p.k.data_ptr(), p.v.data_ptr(), p.args);
    } else {
#if defined(KILN_WITH_CUDA)
      const int dev = q.device().index;
      cuda::DeviceGuard guard(dev);
      attention_forward_cuda(out.data_ptr(), lse.data_ptr(), p.q.data_ptr(), p.k.data_ptr(), p.v.data_ptr(), p.args,
                             batch_layout(p), cuda::current_stream(dev));
#else
      ops::no_cuda_kernel(kOp);
#endif
    }
  }
  if (needs_grad({&q, &k, &v})) {
    Shape qs = q.sizes(), ks = k.sizes(), vs = v.sizes();
    record_function(kOp, {q, k, v}, {out}, {q, k, v, out, lse, attn_mask},
                    [=](const FunctionNode::Context& ctx) {
                      Tensor qv = ctx.saved_at(0), kv = ctx.saved_at(1), vv = ctx.saved_at(2);
                      Tensor o = ctx.saved_at(3), l = ctx.saved_at(4), m = ctx.saved_at(5);
                      Prepared bp = prepare(qv, kv, vv, m, dropout_p, is_causal, sc, philox);
                      Tensor g = ctx.grads[0].contiguous();
                      const AttentionArgs& a = bp.args;
                      Shape dq_shape = bp.batch, dk_shape = bp.batch, dv_shape = bp.batch;
                      dq_shape.insert(dq_shape.end(), {a.L, a.E});
                      dk_shape.insert(dk_shape.end(), {a.S, a.E});
                      dv_shape.insert(dv_shape.end(), {a.S, a.Ev});
                      TensorOptions opt(qv.dtype(), qv.device());
                      Tensor dq = empty(dq_shape, opt), dk = empty(dk_shape, opt), dv = empty(dv_shape, opt);
                      if (a.batch * a.L > 0 && a.S > 0 && qv.is_cpu()) {
                        attention_backward_cpu(dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), g.data_ptr(),
                                               o.data_ptr(), l.data_ptr(), bp.q.data_ptr(), bp.k.data_ptr(),
                                               bp.v.data_ptr(), a);
                      } else if (a.batch * a.L > 0 && a.S > 0) {
#if defined(KILN_WITH_CUDA)
                        const int dev = qv.device().index;
                        cuda::DeviceGuard guard(dev);
                        const size_t bytes = attention_backward_cuda_workspace_bytes(a);
                        Tensor ws = empty({static_cast<int64_t>(bytes)}, TensorOptions(DType::UInt8, qv.device()));
                        // The kernels read dO with out's dtype and layout.
                        Tensor gd = g.to(qv.dtype()).contiguous();
                        attention_backward_cuda(dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), gd.data_ptr(),
                                                o.data_ptr(), l.data_ptr(), bp.q.data_ptr(), bp.k.data_ptr(),
                                                bp.v.data_ptr(), a, batch_layout(bp), ws.data_ptr(), bytes,
                                                cuda::current_stream(dev));
#else
                        ops::no_cuda_kernel(kOp);
#endif
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
