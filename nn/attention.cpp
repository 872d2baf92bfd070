// nn::MultiheadAttention (see attention.h): composed of kiln ops (linear, the attention op or
// matmul/softmax, dropout), so it runs wherever they do and autograd differentiates it.
#include "nn/attention.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops/attention.h"
#include "core/ops/dropout.h"
#include "core/ops/factory.h"
#include "core/ops/matmul.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "core/ops/softmax.h"
#include "kernels/error.h"
#include "nn/init.h"

namespace kiln::nn {
namespace {

constexpr const char* kOp = "MultiheadAttention";
constexpr double kInf = std::numeric_limits<double>::infinity();

// A mask of MultiheadAttention's conventions as an additive one in `dtype`: bool true (not
// allowed) becomes -inf, a floating mask is converted.
Tensor additive_mask(const Tensor& m, const char* name, DType dtype, Device device) {
  if (m.device() != device) {
    throw DeviceError(std::string(kOp) + ": " + name + " is on " + m.device().str() + ", the query on " + device.str());
  }
  if (m.dtype() == DType::Bool) return masked_fill(zeros(m.sizes(), TensorOptions(dtype, device)), m, -kInf);
  if (!m.is_floating_point()) {
    throw DTypeError(std::string(kOp) + ": " + name + " must be bool (true: not allowed) or floating (added), got " +
                     dtype_name(m.dtype()) + " of shape " + shape_str(m.sizes()));
  }
  return m.to(dtype);
}

}  // namespace

Tensor causal_mask(int64_t l, int64_t s, TensorOptions options) {
  const TensorOptions i64(DType::Int64, options.device);
  const Tensor above = gt(arange(0, s, 1, i64).view({1, s}), arange(0, l, 1, i64).view({l, 1}));
  return masked_fill(zeros({l, s}, options), above, -kInf);
}

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options)
    : embed_dim(embed_dim),
      num_heads(num_heads),
      head_dim(0),
      kdim(options.kdim.value_or(embed_dim)),
      vdim(options.vdim.value_or(embed_dim)),
      dropout(options.dropout),
      batch_first(options.batch_first) {
  if (embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads != 0) {
    throw Error(std::string(kOp) + ": embed_dim must be a positive multiple of num_heads, got embed_dim " +
                std::to_string(embed_dim) + " and num_heads " + std::to_string(num_heads));
  }
  if (embed_dim > std::numeric_limits<int64_t>::max() / 3) {
    throw ShapeError(std::string(kOp) + ": embed_dim " + std::to_string(embed_dim) +
                     " is too large: the stacked projection has 3 * embed_dim rows");
  }
  if (kdim <= 0 || vdim <= 0) {
    throw Error(std::string(kOp) + ": kdim and vdim must be positive, got " + std::to_string(kdim) + " and " +
                std::to_string(vdim));
  }
  if (!(dropout >= 0.0 && dropout <= 1.0)) {
    throw Error(std::string(kOp) + ": dropout must be a probability in [0, 1], got " + num_str(dropout));
  }
  head_dim = embed_dim / num_heads;
  const int64_t e = embed_dim;
  if (kdim == e && vdim == e) {
    in_proj_weight = register_parameter("in_proj_weight", detail::new_tensor(kOp, {3 * e, e}));
    init::xavier_uniform_(in_proj_weight);
  } else {
    q_proj_weight = register_parameter("q_proj_weight", detail::new_tensor(kOp, {e, e}));
    k_proj_weight = register_parameter("k_proj_weight", detail::new_tensor(kOp, {e, kdim}));
    v_proj_weight = register_parameter("v_proj_weight", detail::new_tensor(kOp, {e, vdim}));
    for (const Tensor& w : {q_proj_weight, k_proj_weight, v_proj_weight}) init::xavier_uniform_(w);
  }
  if (options.bias) in_proj_bias = register_parameter("in_proj_bias", detail::new_tensor(kOp, {3 * e}).zero_());
  out_proj = register_module("out_proj", std::make_shared<NonDynamicallyQuantizableLinear>(e, e, options.bias));
  if (options.bias) init::zeros_(out_proj->bias);
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                      const Tensor& key_padding_mask, bool need_weights,
                                                      const Tensor& attn_mask, bool average_attn_weights,
                                                      bool is_causal) {
  auto shapes = [&] {  // for the errors only: no string is built on the way through
    auto one = [](const Tensor& t) { return t.defined() ? shape_str(t.sizes()) : std::string("undefined"); };
    return " (query " + one(query) + ", key " + one(key) + ", value " + one(value) + ")";
  };
  if (!query.defined() || !key.defined() || !value.defined()) {
    throw Error(std::string(kOp) + ": query, key and value must be defined" + shapes());
  }
  const bool batched = query.dim() == 3;
  if ((query.dim() != 2 && query.dim() != 3) || key.dim() != query.dim() || value.dim() != query.dim()) {
    throw ShapeError(std::string(kOp) + ": query, key and value must all be 3-d (" +
                     (batch_first ? "[N, L, E], batch_first" : "[L, N, E]") + ") or all 2-d (unbatched [L, E])" +
                     shapes());
  }
  if (!query.is_floating_point() || key.dtype() != query.dtype() || value.dtype() != query.dtype()) {
    throw DTypeError(std::string(kOp) + ": query, key and value must share one floating dtype, got " +
                     dtype_name(query.dtype()) + ", " + dtype_name(key.dtype()) + " and " + dtype_name(value.dtype()));
  }
  // Everything batch-first inside: [N, L, E].
  auto batch_major = [&](const Tensor& t) {
    if (!batched) return t.unsqueeze(0);
    return batch_first ? t : t.transpose(0, 1);
  };
  const Tensor q_in = batch_major(query), k_in = batch_major(key), v_in = batch_major(value);
  const int64_t n = q_in.size(0), l = q_in.size(1), s = k_in.size(1), e = embed_dim, h = num_heads;
  if (q_in.size(2) != e || k_in.size(2) != kdim || v_in.size(2) != vdim) {
    throw ShapeError(std::string(kOp) + ": expected feature sizes " + std::to_string(e) + " (query), " +
                     std::to_string(kdim) + " (key) and " + std::to_string(vdim) + " (value)" + shapes());
  }
  if (k_in.size(0) != n || v_in.size(0) != n || v_in.size(1) != s) {
    throw ShapeError(std::string(kOp) + ": query, key and value must have one batch size, key and value one length" +
                     shapes());
  }

  // The input projections: one GEMM for self-attention (one tensor as query, key and value).
  Tensor q, k, v;
  auto bias_of = [&](int64_t i) { return in_proj_bias.defined() ? in_proj_bias.narrow(0, i * e, e) : Tensor(); };
  if (in_proj_weight.defined() && query.impl() == key.impl() && key.impl() == value.impl()) {
    const TensorList qkv = split(linear(q_in, in_proj_weight, in_proj_bias), e, 2);
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  } else {
    auto weight_of = [&](int64_t i) {
      if (in_proj_weight.defined()) return in_proj_weight.narrow(0, i * e, e);
      return i == 0 ? q_proj_weight : i == 1 ? k_proj_weight : v_proj_weight;
    };
    q = linear(q_in, weight_of(0), bias_of(0));
    k = linear(k_in, weight_of(1), bias_of(1));
    v = linear(v_in, weight_of(2), bias_of(2));
  }
  auto heads = [&](const Tensor& t, int64_t len) { return t.view({n, len, h, head_dim}).transpose(1, 2); };
  const Tensor qh = heads(q, l), kh = heads(k, s), vh = heads(v, s);  // [N, H, len, head_dim]

  // One additive mask, broadcastable to [N, H, L, S].
  const DType dt = q.dtype();
  Tensor mask;
  if (attn_mask.defined()) {
    const Shape batched_3d = {n * h, l, s}, unbatched_3d = {h, l, s};
    if (attn_mask.sizes() == Shape{l, s}) {
      mask = additive_mask(attn_mask, "attn_mask", dt, q.device());
    } else if (attn_mask.sizes() == (batched ? batched_3d : unbatched_3d)) {
      mask = additive_mask(attn_mask, "attn_mask", dt, q.device()).view({n, h, l, s});
    } else {
      throw ShapeError(std::string(kOp) + ": attn_mask must be [" + std::to_string(l) + ", " + std::to_string(s) +
                       "] or [" + (batched ? std::to_string(n * h) : std::to_string(h)) + ", " + std::to_string(l) +
                       ", " + std::to_string(s) + "], got " + shape_str(attn_mask.sizes()) + shapes());
    }
  }
  // is_causal without a mask: scaled_dot_product_attention's own causal path where nothing else
  // is masked and no weights are returned, a causal mask otherwise (query i sees keys j <= i).
  const bool causal_flag = is_causal && !attn_mask.defined() && !key_padding_mask.defined() && !need_weights;
  if (is_causal && !attn_mask.defined() && !causal_flag) mask = causal_mask(l, s, TensorOptions(dt, q.device()));
  if (key_padding_mask.defined()) {
    if (key_padding_mask.sizes() != (batched ? Shape{n, s} : Shape{s})) {
      throw ShapeError(std::string(kOp) + ": key_padding_mask must be [" +
                       (batched ? std::to_string(n) + ", " : std::string()) + std::to_string(s) + "], got " +
                       shape_str(key_padding_mask.sizes()) + shapes());
    }
    const Tensor padding = additive_mask(key_padding_mask, "key_padding_mask", dt, q.device()).view({n, 1, 1, s});
    mask = mask.defined() ? mask + padding : padding;
  }

  const double p = is_training() ? dropout : 0.0;
  Tensor out, weights;
  if (!need_weights) {
    out = scaled_dot_product_attention(qh, kh, vh, mask, p, causal_flag);
  } else {
    Tensor scores = matmul(qh * Scalar(1.0 / std::sqrt(static_cast<double>(head_dim))), kh.transpose(-2, -1));
    Tensor probs;
    if (mask.defined()) scores = scores + mask;
    if (mask.defined() && s > 0) {  // with no key at all, the probabilities are empty
      // A row every key is hidden from: softmax would give NaN (and a NaN gradient); zeros, as the
      // attention op gives. Its scores are replaced before the softmax, its probabilities after.
      Tensor hidden;
      {
        NoGradGuard no_grad;
        hidden = eq(amax(scores.detach(), {-1}, /*keepdim=*/true), Scalar(-kInf));
      }
      probs = masked_fill(softmax(masked_fill(scores, hidden, 0.0), -1), hidden, 0.0);
    } else {
      probs = softmax(scores, -1);
    }
    probs = kiln::dropout(probs, p, p > 0.0);
    out = matmul(probs, vh);
    weights = average_attn_weights ? mean(probs, {1}) : probs;
    if (!batched) weights = weights.squeeze(0);
  }
  out = (*out_proj)(out.transpose(1, 2).reshape({n, l, e}));
  if (!batched) return {out.squeeze(0), weights};
  return {batch_first ? out : out.transpose(0, 1), weights};
}

}  // namespace kiln::nn
