// nn::MultiheadAttention against its formula written out in plain double arithmetic (projections,
// per-head scaled scores, PyTorch's MultiheadAttention mask conventions, softmax, output
// projection), over self- and cross-attention, every mask kind, both paths (need_weights on: the
// scores as tensors; off: the attention op), batch_first, the default [L, N, E] layout and
// unbatched inputs; gradients by gradcheck; names, init and refusals.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/gradcheck.h"
#include "core/kiln.h"
#include "nn/attention.h"

using namespace kiln;
using nn::MultiheadAttention;
using nn::MultiheadAttentionOptions;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> vals(const Tensor& t) { return t.contiguous().to(DType::Float64).to_vector<double>(); }

struct Masks {
  Tensor key_padding;  // [N, S] bool or float, or undefined
  Tensor attn;         // [L, S] or [N * H, L, S], bool or float, or undefined
  bool causal = false;
};

// The additive value of mask m (MultiheadAttention's convention: bool true = not allowed) at flat
// element `at`.
double added(const Tensor& m, int64_t at) {
  const std::vector<double> v = vals(m);
  if (m.dtype() == DType::Bool) return v[static_cast<size_t>(at)] != 0.0 ? -kInf : 0.0;
  return v[static_cast<size_t>(at)];
}

// out [N, L, E] and the probabilities [N, H, L, S], from batch-first inputs q [N, L, E], k [N, S,
// kdim], v [N, S, vdim] and the module's parameters, in double.
struct Reference {
  std::vector<double> out, probs;
};

Reference reference(const MultiheadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Masks& masks) {
  const int64_t n = q.size(0), l = q.size(1), s = k.size(1), e = m.embed_dim, h = m.num_heads, hd = m.head_dim;
  const std::vector<double> xq = vals(q), xk = vals(k), xv = vals(v);
  auto weight = [&](int64_t i) {
    if (m.in_proj_weight.defined()) return vals(m.in_proj_weight.narrow(0, i * e, e));
    return vals(i == 0 ? m.q_proj_weight : i == 1 ? m.k_proj_weight : m.v_proj_weight);
  };
  const std::vector<double> bias = m.in_proj_bias.defined() ? vals(m.in_proj_bias) : std::vector<double>(3 * e, 0.0);
  // y[r, o] = sum_c x[r, c] w[o, c] + b[offset + o]
  auto project = [&](const std::vector<double>& x, int64_t rows, int64_t width, const std::vector<double>& w,
                     int64_t offset) {
    std::vector<double> y(static_cast<size_t>(rows * e));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < e; ++o) {
        double acc = bias[static_cast<size_t>(offset + o)];
        for (int64_t c = 0; c < width; ++c) acc += x[r * width + c] * w[o * width + c];
        y[r * e + o] = acc;
      }
    return y;
  };
  const std::vector<double> pq = project(xq, n * l, q.size(2), weight(0), 0);
  const std::vector<double> pk = project(xk, n * s, k.size(2), weight(1), e);
  const std::vector<double> pv = project(xv, n * s, v.size(2), weight(2), 2 * e);
  Reference ref;
  ref.probs.assign(static_cast<size_t>(n * h * l * s), 0.0);
  std::vector<double> heads_out(static_cast<size_t>(n * l * e), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < l; ++i) {
        std::vector<double> score(static_cast<size_t>(s));
        double top = -kInf;
        for (int64_t j = 0; j < s; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < hd; ++d) acc += pq[(b * l + i) * e + hh * hd + d] * pk[(b * s + j) * e + hh * hd + d];
          acc /= std::sqrt(static_cast<double>(hd));
          if (masks.attn.defined()) {
            acc += masks.attn.dim() == 2 ? added(masks.attn, i * s + j)
                                         : added(masks.attn, ((b * h + hh) * l + i) * s + j);
          }
          if (masks.key_padding.defined()) acc += added(masks.key_padding, b * s + j);
          if (masks.causal && !masks.attn.defined() && j > i) acc = -kInf;
          score[j] = acc;
          top = std::max(top, acc);
        }
        if (top == -kInf) continue;  // no key: zeros
        double total = 0;
        for (double& x : score) total += (x = std::exp(x - top));
        for (int64_t j = 0; j < s; ++j) {
          const double p = score[j] / total;
          ref.probs[((b * h + hh) * l + i) * s + j] = p;
          for (int64_t d = 0; d < hd; ++d)
            heads_out[(b * l + i) * e + hh * hd + d] += p * pv[(b * s + j) * e + hh * hd + d];
        }
      }
  const std::vector<double> wo = vals(m.out_proj->weight);
  const std::vector<double> bo = m.out_proj->bias.defined() ? vals(m.out_proj->bias) : std::vector<double>(e, 0.0);
  ref.out.assign(static_cast<size_t>(n * l * e), 0.0);
  for (int64_t r = 0; r < n * l; ++r)
    for (int64_t o = 0; o < e; ++o) {
      double acc = bo[o];
      for (int64_t c = 0; c < e; ++c) acc += heads_out[r * e + c] * wo[o * e + c];
      ref.out[r * e + o] = acc;
    }
  return ref;
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what << " element " << i << ": got " << got[i] << ", expected " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= 1e-12 + 1e-10 * std::abs(want[i]));
  }
}

Tensor randn64(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, TensorOptions(DType::Float64), g);
}

}  // namespace

TEST_CASE("MultiheadAttention equals its formula: self and cross attention, every mask kind, both paths, layouts",
          "[attention][nn]") {
  const int64_t n = 2, l = 3, e = 8, h = 2;
  for (const bool cross : {false, true}) {
    manual_seed(cross ? 11 : 10);
    MultiheadAttentionOptions o;
    if (cross) {
      o.kdim = 5;
      o.vdim = 7;
    }
    MultiheadAttention m(e, h, o);
    m.to(DType::Float64);
    const int64_t s = cross ? 4 : l;
    const Tensor x = randn64({n, l, e}, 1);
    const Tensor q = x, k = cross ? randn64({n, s, 5}, 2) : x, v = cross ? randn64({n, s, 7}, 3) : x;
    // Masks: none; bool padding (batch 1's last key); float attn_mask with one -inf; bool [N*H, L, S]
    // attn_mask with padding; causal; every key of batch 0 padded (its rows see nothing).
    std::vector<std::pair<std::string, Masks>> cases;
    cases.push_back({"no mask", {}});
    Tensor pad = zeros({n, s}, TensorOptions(DType::Bool));
    pad.narrow(0, 1, 1).narrow(1, s - 1, 1).fill_(true);
    cases.push_back({"bool key_padding_mask", {pad, Tensor(), false}});
    Tensor additive = randn64({l, s}, 4);
    additive.narrow(0, 0, 1).narrow(1, 0, 1).fill_(-kInf);
    cases.push_back({"float attn_mask [L, S]", {Tensor(), additive, false}});
    cases.push_back({"bool attn_mask [N*H, L, S] and float padding",
                     {masked_fill(zeros({n, s}, TensorOptions(DType::Float64)), pad, -1e4),
                      gt(randn64({n * h, l, s}, 5), Scalar(0.8)), false}});
    cases.push_back({"is_causal alone", {Tensor(), Tensor(), true}});
    Tensor all_padded = zeros({n, s}, TensorOptions(DType::Bool));
    all_padded.narrow(0, 0, 1).fill_(true);
    cases.push_back({"every key of batch 0 padded", {all_padded, Tensor(), false}});
    for (const auto& [name, masks] : cases) {
      const Reference ref = reference(m, q, k, v, masks);
      for (const bool need_weights : {true, false}) {
        for (const int layout : {0, 1, 2}) {  // [L, N, E], batch_first, unbatched (batch 1 alone)
          INFO((cross ? "cross" : "self") << "-attention, " << name << ", need_weights " << need_weights << ", "
                                          << (layout == 0   ? "[L, N, E]"
                                              : layout == 1 ? "batch_first"
                                                            : "unbatched"));
          m.batch_first = layout == 1;
          auto arrange = [&](const Tensor& t) {
            if (layout == 2) return t.narrow(0, 1, 1).squeeze(0);
            return layout == 1 ? t : t.transpose(0, 1);
          };
          // Self-attention passes one tensor three times (the fused projection).
          const Tensor qa = arrange(q), ka = cross ? arrange(k) : qa, va = cross ? arrange(v) : qa;
          const Tensor kpm = masks.key_padding.defined() && layout == 2 ? masks.key_padding.narrow(0, 1, 1).squeeze(0)
                                                                        : masks.key_padding;
          // Unbatched, a per-head mask is [H, L, S]: batch 1's heads of the [N * H, L, S] one.
          const Tensor am =
              masks.attn.defined() && masks.attn.dim() == 3 && layout == 2 ? masks.attn.narrow(0, h, h) : masks.attn;
          auto [out, weights] = m.forward(qa, ka, va, kpm, need_weights, am, true, masks.causal);
          std::vector<double> want = ref.out;
          std::vector<double> probs = ref.probs;
          if (layout == 2) {  // batch 1's rows only
            want.assign(ref.out.begin() + l * e, ref.out.end());
            probs.assign(ref.probs.begin() + h * l * s, ref.probs.end());
          }
          const Tensor batch_major = layout == 0 ? out.transpose(0, 1) : out;
          require_close(vals(batch_major), want, "output");
          REQUIRE(weights.defined() == need_weights);
          if (!need_weights) continue;
          // Averaged over the heads: [N, L, S] (or [L, S]).
          const int64_t nb = layout == 2 ? 1 : n;
          std::vector<double> avg(static_cast<size_t>(nb * l * s), 0.0);
          for (int64_t b = 0; b < nb; ++b)
            for (int64_t hh = 0; hh < h; ++hh)
              for (int64_t r = 0; r < l * s; ++r) avg[b * l * s + r] += probs[(b * h + hh) * l * s + r] / h;
          require_close(vals(weights), avg, "averaged weights");
          auto [out2, per_head] = m.forward(qa, ka, va, kpm, true, am, false, masks.causal);
          CHECK(per_head.sizes() == (layout == 2 ? Shape{h, l, s} : Shape{n, h, l, s}));
          require_close(vals(per_head), probs, "per-head weights");
        }
      }
    }
  }
}

TEST_CASE("MultiheadAttention: gradients by gradcheck on both paths, a hidden row without NaN", "[attention][nn]") {
  manual_seed(21);
  MultiheadAttention m(4, 2, {.kdim = 3, .vdim = 5});
  m.to(DType::Float64);
  Tensor q = randn64({3, 2, 4}, 31).set_requires_grad(true);  // [L, N, E]
  Tensor k = randn64({2, 2, 3}, 32).set_requires_grad(true);
  Tensor v = randn64({2, 2, 5}, 33).set_requires_grad(true);
  Tensor pad = zeros({2, 2}, TensorOptions(DType::Bool));
  pad.narrow(0, 0, 1).fill_(true);  // batch 0 sees no key
  Tensor attn = randn64({3, 2}, 34);
  TensorList inputs = {q, k, v};
  for (const Tensor& p : m.parameters()) inputs.push_back(p);
  for (const bool need_weights : {true, false}) {
    INFO("need_weights " << need_weights);
    const GradcheckResult r = gradcheck(
        [&](const TensorList&) {
          auto [out, w] = m.forward(q, k, v, pad, need_weights, attn);
          return need_weights ? TensorList{out, w} : TensorList{out};
        },
        inputs);
    INFO(r.message);
    CHECK(r.ok);
  }
  m.zero_grad();
  auto [out, w] = m.forward(q, k, v, pad, true, attn);
  (out.sum() + w.sum()).backward();
  for (const Tensor& t : TensorList{q, k, v, m.in_proj_bias, m.q_proj_weight}) {
    CHECK(vals(isnan(t.grad()).to(DType::Float64)) == std::vector<double>(static_cast<size_t>(t.numel()), 0.0));
  }
}

TEST_CASE("MultiheadAttention: PyTorch's parameter names, shapes and init, dropout in training only",
          "[attention][nn]") {
  manual_seed(5);
  MultiheadAttention m(12, 3);
  const auto sd = m.state_dict();
  CHECK(sd.size() == 4);
  CHECK(sd.at("in_proj_weight").sizes() == Shape{36, 12});
  CHECK(sd.at("in_proj_bias").sizes() == Shape{36});
  CHECK(sd.at("out_proj.weight").sizes() == Shape{12, 12});
  CHECK(sd.at("out_proj.bias").sizes() == Shape{12});
  CHECK(m.str() ==
        "MultiheadAttention(\n  (out_proj): NonDynamicallyQuantizableLinear(in_features=12, out_features=12, "
        "bias=True)\n)");
  CHECK(max(abs(m.in_proj_bias)).item<double>() == 0.0);
  CHECK(max(abs(m.out_proj->bias)).item<double>() == 0.0);
  // xavier_uniform_ on [36, 12]: bound sqrt(6 / (12 + 36)); PyTorch's bound for out_proj.weight
  // (a Linear's kaiming_uniform_(sqrt(5))) is 1 / sqrt(12).
  const double bound = std::sqrt(6.0 / 48.0);
  CHECK(max(abs(m.in_proj_weight)).item<double>() <= bound);
  CHECK(max(abs(m.in_proj_weight)).item<double>() > 0.9 * bound);
  CHECK(max(abs(m.out_proj->weight)).item<double>() <= 1.0 / std::sqrt(12.0));
  MultiheadAttention cross(12, 3, {.bias = false, .kdim = 4});
  const auto names = cross.state_dict();
  CHECK(names.size() == 4);
  CHECK(names.at("q_proj_weight").sizes() == Shape{12, 12});
  CHECK(names.at("k_proj_weight").sizes() == Shape{12, 4});
  CHECK(names.at("v_proj_weight").sizes() == Shape{12, 12});
  CHECK(names.count("out_proj.weight") == 1);

  MultiheadAttention drop(8, 2, {.dropout = 0.5, .batch_first = true});
  const Tensor x = randn({2, 5, 8});
  drop.eval();
  auto [a, wa] = drop.forward(x, x, x);
  auto [b, wb] = drop.forward(x, x, x, Tensor(), false);
  CHECK(max(abs(a - b)).item<double>() < 1e-5);  // eval: no dropout, either path
  drop.train();
  auto [c, wc] = drop.forward(x, x, x);
  CHECK(max(abs(a - c)).item<double>() > 1e-3);
  // Dropped probabilities are zero, kept ones scaled by 2: some of each.
  auto [d, per_head] = drop.forward(x, x, x, Tensor(), true, Tensor(), false);
  CHECK(vals(eq(per_head, Scalar(0.0)).to(DType::Float64)) !=
        std::vector<double>(static_cast<size_t>(per_head.numel()), 0.0));
}

TEST_CASE("MultiheadAttention: empty queries or keys give empty or zero attention on both paths", "[attention][nn]") {
  MultiheadAttention m(8, 2);
  for (const auto& [l, s] : std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 0}, {0, 0}}) {
    for (const bool need_weights : {true, false}) {
      INFO("L " << l << ", S " << s << ", need_weights " << need_weights);
      const Tensor q = randn({l, 2, 8}), kv = randn({s, 2, 8});
      const Tensor pad = zeros({2, s}, TensorOptions(DType::Bool));
      auto [out, weights] = m.forward(q, kv, kv, pad, need_weights);
      CHECK(out.sizes() == Shape{l, 2, 8});
      if (need_weights) CHECK(weights.sizes() == Shape{2, l, s});
      // No key: the heads' output is zero, so the output is out_proj's bias (zeros at init).
      if (out.numel() > 0) CHECK(max(abs(out)).item<double>() == 0.0);
    }
  }
}

TEST_CASE("MultiheadAttention refuses bad arguments by name and shape", "[attention][nn]") {
  CHECK_THROWS_WITH(MultiheadAttention(10, 3), Catch::Contains("embed_dim must be a positive multiple of num_heads") &&
                                                   Catch::Contains("10") && Catch::Contains("3"));
  CHECK_THROWS_WITH(MultiheadAttention(8, 2, {.dropout = 1.5}), Catch::Contains("dropout"));
  CHECK_THROWS_WITH(MultiheadAttention(8, 2, {.kdim = 0}), Catch::Contains("kdim and vdim must be positive"));
  MultiheadAttention m(8, 2);
  const Tensor x = zeros({3, 2, 8});
  CHECK_THROWS_WITH(m.forward(zeros({3, 2, 6}), x, x),
                    Catch::Contains("feature sizes 8") && Catch::Contains("query [3, 2, 6]"));
  CHECK_THROWS_WITH(m.forward(x, zeros({4, 3, 8}), zeros({4, 3, 8})), Catch::Contains("one batch size"));
  CHECK_THROWS_WITH(m.forward(x, zeros({2, 8}), zeros({2, 8})), Catch::Contains("must all be 3-d"));
  CHECK_THROWS_WITH(m.forward(x, x, x, zeros({2, 4}, TensorOptions(DType::Bool))),
                    Catch::Contains("key_padding_mask must be [2, 3], got [2, 4]"));
  CHECK_THROWS_WITH(m.forward(x, x, x, Tensor(), true, zeros({5, 3, 3})),
                    Catch::Contains("attn_mask must be [3, 3] or [4, 3, 3], got [5, 3, 3]"));
  CHECK_THROWS_WITH(m.forward(x, x, x, zeros({2, 3}, TensorOptions(DType::Int64))),
                    Catch::Contains("key_padding_mask must be bool") && Catch::Contains("int64"));
  CHECK_THROWS_AS(m.forward(x, x, x.to(DType::Float64)), DTypeError);
}
