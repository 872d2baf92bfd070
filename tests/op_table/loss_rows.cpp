// Op table rows of the loss family (the composed losses of core/ops/loss.h): L1, smooth L1 and
// Huber under each reduction, binary cross entropy from logits with and without its weights
// (differentiable in all four inputs) and from probabilities, KL divergence (probability, zero and
// log targets; batchmean), NLL on [N, C], [N, C, d] and [C] inputs with class weights and ignored
// targets, and the metric-learning losses (cosine embedding, margin ranking, triplet margin with
// and without the swap), and the Poisson and Gaussian likelihoods (log-rates or rates, Stirling's
// term, variances per element or per row); each against float64 loops of torch.nn.functional's
// definitions.
#include <algorithm>
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

std::vector<Sample> pair_samples(uint64_t seed) {
  return {{"[3, 4]",
           [=](DType t, Device d) {
             return TensorList{rnd({3, 4}, t, d, seed, 1.5), rnd({3, 4}, t, d, seed + 1)};
           }},
          {"non-contiguous [2, 3, 5]", [=](DType t, Device d) {
             return TensorList{noncontig(rnd({2, 3, 5}, t, d, seed + 2, 1.5)), rnd({2, 3, 5}, t, d, seed + 3)};
           }}};
}

// A pointwise loss of the difference d = |x - y|: one row per reduction.
void pointwise_rows(std::vector<OpRow>& rows, const char* name,
                    std::function<Tensor(const Tensor&, const Tensor&, Reduction)> op,
                    std::function<double(double)> element, uint64_t seed) {
  for (Reduction red : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    OpRow r;
    r.name = std::string(name) + (red == Reduction::Mean ? "" : std::string(" ") + red_name(red));
    r.dtypes = kFloatTypes;
    r.samples = pair_samples(seed);
    r.op = [op, red](const TensorList& x) { return TensorList{op(x[0], x[1], red)}; };
    r.reference = [element, red](const TensorList& x) {
      const Values a = values(x[0]), b = values(x[1]);
      Values l;
      for (size_t i = 0; i < a.size(); ++i) l.push_back(element(std::fabs(a[i] - b[i])));
      return TensorList{reduce_ref(l, x[0].sizes(), red)};
    };
    r.differentiable = {0, 1};
    r.out_dtype = same_dtype;
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    if (red == Reduction::Mean) {
      r.errors = {
          {"shape mismatch",
           [op] {
             op(zeros({4, 1}), zeros({4}), Reduction::Mean);
           },
           {name, "[4, 1]", "[4]"}},
          {"integer target", [op] { op(zeros({4}), zeros({4}, DType::Int64), Reduction::Mean); }, {name, "int64"}}};
    }
    rows.push_back(std::move(r));
  }
}

// x [3, 4] logits, t [3, 4] probabilities, weight [3, 4] and pos_weight [4] (both positive).
OpRow bce_row(const std::string& name, bool weights, Reduction red) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{"[3, 4]", [=](DType t, Device d) {
                  TensorList in{rnd({3, 4}, t, d, 91, 3.0), rnd_range({3, 4}, t, d, 92, 0.0, 1.0)};
                  if (weights) {
                    in.push_back(rnd_range({3, 4}, t, d, 93, 0.2, 2.0));
                    in.push_back(rnd_range({4}, t, d, 94, 0.2, 3.0));
                  }
                  return in;
                }}};
  r.op = [weights, red](const TensorList& x) {
    return TensorList{weights ? binary_cross_entropy_with_logits(x[0], x[1], x[2], x[3], red)
                              : binary_cross_entropy_with_logits(x[0], x[1], Tensor(), Tensor(), red)};
  };
  r.reference = [weights, red](const TensorList& x) {
    const Values xv = values(x[0]), tv = values(x[1]);
    const Values wv = weights ? values(x[2]) : Values(xv.size(), 1.0), pv = weights ? values(x[3]) : Values(4, 1.0);
    Values l;
    for (size_t i = 0; i < xv.size(); ++i) {
      // -w [p t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))], log sigmoid(x) = -log1p(exp(-x)).
      const double log_sig = -std::log1p(std::exp(-xv[i])), log_one_minus = -std::log1p(std::exp(xv[i]));
      l.push_back(-wv[i] * (pv[i % 4] * tv[i] * log_sig + (1 - tv[i]) * log_one_minus));
    }
    return TensorList{reduce_ref(l, x[0].sizes(), red)};
  };
  r.differentiable = weights ? std::vector<size_t>{0, 1, 2, 3} : std::vector<size_t>{0, 1};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
  return r;
}

// x [3, 4] probabilities in [0.05, 0.95], t [3, 4] in [0, 1], weight [4] (positive) or none.
OpRow probability_bce_row(const std::string& name, bool weighted, Reduction red) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{"[3, 4]", [=](DType t, Device d) {
                  TensorList in{rnd_range({3, 4}, t, d, 95, 0.05, 0.95), rnd_range({3, 4}, t, d, 96, 0.0, 1.0)};
                  if (weighted) in.push_back(rnd_range({4}, t, d, 97, 0.2, 2.0));
                  return in;
                }}};
  r.op = [weighted, red](const TensorList& x) {
    return TensorList{binary_cross_entropy(x[0], x[1], weighted ? x[2] : Tensor(), red)};
  };
  r.reference = [weighted, red](const TensorList& x) {
    const Values xv = values(x[0]), tv = values(x[1]), wv = weighted ? values(x[2]) : Values(4, 1.0);
    Values l;
    for (size_t i = 0; i < xv.size(); ++i) {
      l.push_back(-wv[i % 4] *
                  (tv[i] * std::max(std::log(xv[i]), -100.0) + (1 - tv[i]) * std::max(std::log1p(-xv[i]), -100.0)));
    }
    return TensorList{reduce_ref(l, x[0].sizes(), red)};
  };
  r.differentiable = weighted ? std::vector<size_t>{0, 1, 2} : std::vector<size_t>{0, 1};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
  return r;
}

// kl_div of x [4, 5] (log-probabilities, any values) against t [4, 5]: probabilities in
// [0.05, 1], probabilities with exact zeros (then only x is differentiable: t log t has an
// infinite slope at 0), or log-probabilities (log_target).
enum class KlTarget { Probabilities, WithZeros, Log };
OpRow kl_div_row(const std::string& name, KlTarget target, Reduction red) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{"[4, 5]", [=](DType t, Device d) {
                  Tensor x = rnd({4, 5}, t, d, 171, 1.5);
                  Tensor y = target == KlTarget::Log ? rnd_range({4, 5}, t, d, 172, -3.0, 0.0)
                                                     : rnd_range({4, 5}, t, d, 172, 0.05, 1.0);
                  // Every third element of the zeros sample is exactly 0.
                  if (target == KlTarget::WithZeros) {
                    Values yv = values(y);
                    for (size_t i = 0; i < yv.size(); i += 3) yv[i] = 0.0;
                    y = from_values(yv, {4, 5}, t).to(d);
                  }
                  return TensorList{x, y};
                }}};
  const bool log_target = target == KlTarget::Log;
  r.op = [log_target, red](const TensorList& x) { return TensorList{kl_div(x[0], x[1], red, log_target)}; };
  r.reference = [log_target, red](const TensorList& x) {
    const Values xv = values(x[0]), tv = values(x[1]);
    Values l;
    for (size_t i = 0; i < xv.size(); ++i) {
      if (log_target) {
        l.push_back(std::exp(tv[i]) * (tv[i] - xv[i]));
      } else {
        l.push_back(tv[i] == 0.0 ? 0.0 : tv[i] * (std::log(tv[i]) - xv[i]));
      }
    }
    if (red != Reduction::BatchMean) return TensorList{reduce_ref(l, x[0].sizes(), red)};
    double s = 0;
    for (double e : l) s += e;
    return TensorList{from_values({s / static_cast<double>(x[0].size(0))}, {})};
  };
  r.differentiable = target == KlTarget::WithZeros ? std::vector<size_t>{0} : std::vector<size_t>{0, 1};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  return r;
}

// input [N, C, *] or [C] of any values, targets with every 4th ignored (-100); weight [C] or none.
OpRow nll_row(const std::string& name, const Shape& shape, bool weighted, Reduction red, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{shape_str(shape), [=](DType t, Device d) {
                  Shape ts = shape;
                  ts.erase(ts.begin() + (shape.size() == 1 ? 0 : 1));
                  const int64_t classes = shape.size() == 1 ? shape[0] : shape[1];
                  TensorList in{rnd(shape, t, d, seed, 2.0), class_targets(ts, classes, seed + 1, 4, -100, d)};
                  if (weighted) in.push_back(rnd_range({classes}, t, d, seed + 2, 0.5, 2.0));
                  return in;
                }}};
  r.op = [weighted, red](const TensorList& x) {
    return TensorList{nll_loss(x[0], x[1], weighted ? x[2] : Tensor(), -100, red)};
  };
  r.reference = [weighted, red](const TensorList& x) {
    Shape s = x[0].sizes();
    if (s.size() == 1) s.insert(s.begin(), 1);
    const int64_t classes = s[1];
    Shape ts = s;
    ts.erase(ts.begin() + 1);
    const Values xv = values(x[0]), tv = values(x[1]), wv = weighted ? values(x[2]) : Values(at(classes), 1.0);
    Values l;
    double total = 0, weights = 0;
    for (int64_t e = 0; e < shape_numel(ts); ++e) {
      const int64_t c = static_cast<int64_t>(tv[at(e)]);
      if (c == -100) {
        l.push_back(0.0);
        continue;
      }
      Shape idx = unravel(e, ts);
      idx.insert(idx.begin() + 1, c);
      const double loss = -wv[at(c)] * xv[at(ravel(idx, s))];
      l.push_back(loss);
      total += loss;
      weights += wv[at(c)];
    }
    if (red == Reduction::None) return TensorList{from_values(l, x[1].sizes())};
    return TensorList{from_values({red == Reduction::Sum ? total : total / weights}, {})};
  };
  r.differentiable = weighted ? std::vector<size_t>{0, 2} : std::vector<size_t>{0};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  return r;
}

// --- losses over pairs and triplets of vectors ---------------------------------------------------

double dot_of(const Values& a, const Values& b, size_t from, size_t n) {
  double s = 0;
  for (size_t k = 0; k < n; ++k) s += a[from + k] * b[from + k];
  return s;
}

// cosine_embedding_loss of x1, x2 [N, D] (or [D]) against int64 targets 1, -1 and 0 (which adds 0).
OpRow cosine_embedding_row(const std::string& name, bool batched, double margin, Reduction red, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{batched ? "[5, 4]" : "[4]", [=](DType t, Device d) {
                  const Shape s = batched ? Shape{5, 4} : Shape{4};
                  const Tensor target =
                      batched ? tensor<int64_t>({1, -1, 1, -1, 0}, {5}).to(d) : tensor<int64_t>({-1}, {}).to(d);
                  return TensorList{rnd(s, t, d, seed), rnd(s, t, d, seed + 1), target};
                }}};
  r.op = [=](const TensorList& x) { return TensorList{cosine_embedding_loss(x[0], x[1], x[2], margin, red)}; };
  r.reference = [=](const TensorList& x) {
    const Values a = values(x[0]), b = values(x[1]), t = values(x[2]);
    const size_t dim = static_cast<size_t>(x[0].sizes().back());
    Values l;
    for (size_t i = 0; i < t.size(); ++i) {
      const size_t from = i * dim;
      const double cos =
          dot_of(a, b, from, dim) / std::sqrt((dot_of(a, a, from, dim) + 1e-12) * (dot_of(b, b, from, dim) + 1e-12));
      l.push_back(t[i] == 1 ? 1.0 - cos : t[i] == -1 ? std::max(0.0, cos - margin) : 0.0);
    }
    return TensorList{reduce_ref(l, x[2].sizes(), red)};
  };
  r.differentiable = {0, 1};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  return r;
}

// triplet_margin_loss of anchor, positive, negative [5, 4], order p, with or without the swap.
OpRow triplet_row(const std::string& name, double p, bool swap, Reduction red, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{"[5, 4]", [=](DType t, Device d) {
                  return TensorList{rnd({5, 4}, t, d, seed), rnd({5, 4}, t, d, seed + 1), rnd({5, 4}, t, d, seed + 2)};
                }}};
  r.op = [=](const TensorList& x) {
    return TensorList{triplet_margin_loss(x[0], x[1], x[2], 0.5, p, 1e-6, swap, red)};
  };
  r.reference = [=](const TensorList& x) {
    const Values a = values(x[0]), pos = values(x[1]), neg = values(x[2]);
    auto dist = [p](const Values& u, const Values& v, size_t from) {
      double s = 0;
      for (size_t k = 0; k < 4; ++k) s += std::pow(std::fabs(u[from + k] - v[from + k] + 1e-6), p);
      return std::pow(s, 1.0 / p);
    };
    Values l;
    for (size_t i = 0; i < 5; ++i) {
      double d_an = dist(a, neg, 4 * i);
      if (swap) d_an = std::min(d_an, dist(pos, neg, 4 * i));
      l.push_back(std::max(0.0, dist(a, pos, 4 * i) - d_an + 0.5));
    }
    return TensorList{reduce_ref(l, {5}, red)};
  };
  r.differentiable = {0, 1, 2};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  return r;
}

void add_vector_loss_rows(std::vector<OpRow>& rows) {
  rows.push_back(cosine_embedding_row("cosine_embedding_loss", true, 0.1, Reduction::Mean, 181));
  rows.back().errors = {
      {"x1 and x2 of other shapes",
       [] {
         cosine_embedding_loss(zeros({3, 4}), zeros({3, 5}), zeros({3}));
       },
       {"cosine_embedding_loss", "[3, 4]", "[3, 5]"}},
      {"a target of another length",
       [] {
         cosine_embedding_loss(zeros({3, 4}), zeros({3, 4}), zeros({4}));
       },
       {"cosine_embedding_loss", "target", "[3]", "[4]"}},
      {"3-d inputs",
       [] {
         cosine_embedding_loss(zeros({2, 3, 4}), zeros({2, 3, 4}), zeros({2}));
       },
       {"cosine_embedding_loss", "[N, D]", "[2, 3, 4]"}},
  };
  rows.push_back(cosine_embedding_row("cosine_embedding_loss none, margin -0.2", true, -0.2, Reduction::None, 183));
  rows.push_back(cosine_embedding_row("cosine_embedding_loss [D], sum", false, 0.0, Reduction::Sum, 185));
  for (Reduction red : {Reduction::Mean, Reduction::None}) {
    OpRow r;
    r.name = std::string("margin_ranking_loss ") + red_name(red);
    r.dtypes = kFloatTypes;
    r.samples = {{"[6]", [](DType t, Device d) {
                    return TensorList{rnd({6}, t, d, 191), rnd({6}, t, d, 192),
                                      tensor({1.0, -1.0, 1.0, 1.0, -1.0, -1.0}, {6}).to(t).to(d)};
                  }}};
    r.op = [red](const TensorList& x) { return TensorList{margin_ranking_loss(x[0], x[1], x[2], 0.3, red)}; };
    r.reference = [red](const TensorList& x) {
      return TensorList{reduce_ref(
          values(ref_map(x, [](const Values& v) { return std::max(0.0, -v[2] * (v[0] - v[1]) + 0.3); })), {6}, red)};
    };
    r.differentiable = {0, 1};
    r.out_dtype = same_dtype;
    if (red == Reduction::Mean) {
      r.errors = {{"shapes differ",
                   [] { margin_ranking_loss(zeros({3}), zeros({3}), zeros({4})); },
                   {"margin_ranking_loss", "[3]", "[4]"}}};
    }
    rows.push_back(std::move(r));
  }
  rows.push_back(triplet_row("triplet_margin_loss", 2.0, false, Reduction::Mean, 201));
  rows.back().errors = {
      {"negative of another shape",
       [] {
         triplet_margin_loss(zeros({3, 4}), zeros({3, 4}), zeros({2, 4}));
       },
       {"triplet_margin_loss", "negative", "[3, 4]", "[2, 4]"}},
      {"negative margin",
       [] {
         triplet_margin_loss(zeros({3, 4}), zeros({3, 4}), zeros({3, 4}), -1.0);
       },
       {"triplet_margin_loss", "margin", "-1"}},
      {"Reduction::BatchMean",
       [] {
         triplet_margin_loss(zeros({3, 4}), zeros({3, 4}), zeros({3, 4}), 1.0, 2.0, 1e-6, false, Reduction::BatchMean);
       },
       {"triplet_margin_loss", "BatchMean"}},
  };
  rows.push_back(triplet_row("triplet_margin_loss p 1, swap, sum", 1.0, true, Reduction::Sum, 211));
  rows.push_back(triplet_row("triplet_margin_loss swap, none", 2.0, true, Reduction::None, 221));
}

// --- likelihood losses ------------------------------------------------------------------------

// Counts for poisson_nll_loss [3, 4]: zeros, fractions, 1 itself (where full's Stirling term, which
// starts above 1, would jump) and values above it.
Tensor poisson_counts(DType t, Device d) {
  return tensor({0.0, 0.5, 2.0, 3.5, 1.5, 0.25, 5.0, 7.0, 1.0, 2.5, 3.0, 4.0}, {3, 4}).to(t).to(d);
}

OpRow poisson_row(const std::string& name, bool log_input, bool full, Reduction red, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{"[3, 4]", [=](DType t, Device d) {
                  return TensorList{log_input ? rnd({3, 4}, t, d, seed) : rnd_range({3, 4}, t, d, seed, 0.2, 3.0),
                                    poisson_counts(t, d)};
                }}};
  r.op = [=](const TensorList& x) { return TensorList{poisson_nll_loss(x[0], x[1], log_input, full, 1e-8, red)}; };
  r.reference = [=](const TensorList& x) {
    const Values in = values(x[0]), tv = values(x[1]);
    Values l;
    for (size_t i = 0; i < in.size(); ++i) {
      const double v = in[i], t = tv[i];
      double e = log_input ? std::exp(v) - t * v : v - t * std::log(v + 1e-8);
      if (full && t > 1) e += t * std::log(t) - t + 0.5 * std::log(2 * M_PI * t);
      l.push_back(e);
    }
    return TensorList{reduce_ref(l, x[0].sizes(), red)};
  };
  // full's jump at a count of 1 is no place for central differences in the target.
  r.differentiable = full ? std::vector<size_t>{0} : std::vector<size_t>{0, 1};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  return r;
}

// gaussian_nll_loss of input and target [3, 4] with var of `var_shape` ([3, 4], [3, 1] or [3]).
OpRow gaussian_row(const std::string& name, const Shape& var_shape, bool full, Reduction red, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{"var " + shape_str(var_shape), [=](DType t, Device d) {
                  return TensorList{rnd({3, 4}, t, d, seed), rnd({3, 4}, t, d, seed + 1),
                                    rnd_range(var_shape, t, d, seed + 2, 0.2, 2.0)};
                }}};
  r.op = [=](const TensorList& x) { return TensorList{gaussian_nll_loss(x[0], x[1], x[2], full, 1e-6, red)}; };
  r.reference = [=](const TensorList& x) {
    const Values in = values(x[0]), tv = values(x[1]), var = values(x[2]);
    const bool per_row = x[2].numel() == 3;
    Values l;
    for (size_t i = 0; i < in.size(); ++i) {
      const double v = std::max(var[per_row ? i / 4 : i], 1e-6), dx = in[i] - tv[i];
      l.push_back(0.5 * (std::log(v) + dx * dx / v) + (full ? 0.5 * std::log(2 * M_PI) : 0.0));
    }
    return TensorList{reduce_ref(l, {3, 4}, red)};
  };
  r.differentiable = {0, 1, 2};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  return r;
}

void add_likelihood_loss_rows(std::vector<OpRow>& rows) {
  rows.push_back(poisson_row("poisson_nll_loss", true, false, Reduction::Mean, 231));
  rows.back().errors = {
      {"target of another shape",
       [] {
         poisson_nll_loss(zeros({3, 4}), zeros({4}));
       },
       {"poisson_nll_loss", "[3, 4]", "[4]"}},
      {"negative eps",
       [] { poisson_nll_loss(zeros({2}), zeros({2}), false, false, -1.0); },
       {"poisson_nll_loss", "eps", "-1"}},
  };
  rows.push_back(poisson_row("poisson_nll_loss rates, full, sum", false, true, Reduction::Sum, 233));
  rows.push_back(poisson_row("poisson_nll_loss full, none", true, true, Reduction::None, 235));
  rows.push_back(gaussian_row("gaussian_nll_loss", {3, 4}, false, Reduction::Mean, 241));
  rows.back().errors = {
      {"var of a shape that fits neither",
       [] {
         gaussian_nll_loss(zeros({3, 4}), zeros({3, 4}), ones({4}));
       },
       {"gaussian_nll_loss", "var", "[4]", "[3, 4]", "[3, 1]"}},
      {"a negative var",
       [] {
         gaussian_nll_loss(zeros({2}), zeros({2}), tensor(std::vector<double>{1.0, -0.5}).to(DType::Float32));
       },
       {"gaussian_nll_loss", "var", ">= 0", "-0.5", "flat index 1"}},
      {"target of another shape",
       [] {
         gaussian_nll_loss(zeros({3, 4}), zeros({3}), ones({3, 4}));
       },
       {"gaussian_nll_loss", "[3, 4]", "[3]"}},
  };
  rows.push_back(gaussian_row("gaussian_nll_loss var [N, 1], full, sum", {3, 1}, true, Reduction::Sum, 243));
  rows.push_back(gaussian_row("gaussian_nll_loss var [N], none", {3}, false, Reduction::None, 245));
}

}  // namespace

void add_loss_rows(std::vector<OpRow>& rows) {
  pointwise_rows(
      rows, "l1_loss", [](const Tensor& a, const Tensor& b, Reduction r) { return l1_loss(a, b, r); },
      [](double d) { return d; }, 101);
  pointwise_rows(
      rows, "smooth_l1_loss",
      [](const Tensor& a, const Tensor& b, Reduction r) { return smooth_l1_loss(a, b, r, 0.5); },
      [](double d) { return d < 0.5 ? 0.5 * d * d / 0.5 : d - 0.25; }, 111);
  pointwise_rows(
      rows, "huber_loss", [](const Tensor& a, const Tensor& b, Reduction r) { return huber_loss(a, b, r, 0.7); },
      [](double d) { return d < 0.7 ? 0.5 * d * d : 0.7 * (d - 0.35); }, 121);
  rows.push_back(bce_row("binary_cross_entropy_with_logits", false, Reduction::Mean));
  rows.back().errors = {
      {"target of another shape",
       [] {
         binary_cross_entropy_with_logits(zeros({3, 4}), zeros({4}));
       },
       {"binary_cross_entropy_with_logits", "[3, 4]", "[4]"}},
      {"pos_weight that does not broadcast",
       [] {
         binary_cross_entropy_with_logits(zeros({3, 4}), zeros({3, 4}), Tensor(), zeros({3}));
       },
       {"binary_cross_entropy_with_logits", "pos_weight", "[3]"}},
  };
  rows.push_back(bce_row("binary_cross_entropy_with_logits with weight and pos_weight, sum", true, Reduction::Sum));
  rows.push_back(probability_bce_row("binary_cross_entropy", false, Reduction::Mean));
  rows.back().errors = {
      {"an input outside [0, 1]",
       [] {
         binary_cross_entropy(tensor(std::vector<double>{0.5, 1.5}), zeros({2}, DType::Float64));
       },
       {"binary_cross_entropy", "[0, 1]", "1.5", "flat index 1"}},
      {"a NaN input",
       [] { binary_cross_entropy(tensor(std::vector<double>{NAN}), zeros({1}, DType::Float64)); },
       {"binary_cross_entropy", "nan"}},
      {"a weight that does not broadcast",
       [] {
         binary_cross_entropy(zeros({3, 4}), zeros({3, 4}), zeros({3}));
       },
       {"binary_cross_entropy", "weight", "[3]", "[3, 4]"}},
      {"Reduction::BatchMean",
       [] { binary_cross_entropy(zeros({2}), zeros({2}), Tensor(), Reduction::BatchMean); },
       {"binary_cross_entropy", "BatchMean", "kl_div"}},
  };
  rows.push_back(probability_bce_row("binary_cross_entropy weighted, sum", true, Reduction::Sum));
  rows.push_back(probability_bce_row("binary_cross_entropy none", false, Reduction::None));
  rows.push_back(kl_div_row("kl_div", KlTarget::Probabilities, Reduction::Mean));
  rows.back().errors = {
      {"target of another shape",
       [] {
         kl_div(zeros({3, 4}), zeros({4}));
       },
       {"kl_div", "[3, 4]", "[4]"}},
  };
  rows.push_back(kl_div_row("kl_div batchmean, zero targets", KlTarget::WithZeros, Reduction::BatchMean));
  rows.push_back(kl_div_row("kl_div sum, log_target", KlTarget::Log, Reduction::Sum));
  rows.push_back(kl_div_row("kl_div none", KlTarget::Probabilities, Reduction::None));
  rows.push_back(nll_row("nll_loss", {6, 5}, false, Reduction::Mean, 131));
  rows.back().errors = {
      {"a float target",
       [] {
         nll_loss(zeros({2, 3}), zeros({2}));
       },
       {"nll_loss", "float32"}},
      {"a target of another shape",
       [] {
         nll_loss(zeros({2, 3}), zeros({3}, DType::Int64));
       },
       {"nll_loss", "[3]", "[2, 3]", "expected target [2]"}},
      {"a class out of range",
       [] {
         nll_loss(zeros({2, 3}), tensor<int64_t>({0, 3}, {2}));
       },
       {"nll_loss", "[0, 3)", "ignore_index -100"}},
      {"a weight of another size",
       [] {
         nll_loss(zeros({2, 3}), zeros({2}, DType::Int64), zeros({4}));
       },
       {"nll_loss", "weight of shape [4]", "3 classes"}},
  };
  rows.push_back(nll_row("nll_loss weighted, [N, C, d]", {3, 4, 5}, true, Reduction::Mean, 141));
  rows.push_back(nll_row("nll_loss weighted sum", {7, 3}, true, Reduction::Sum, 151));
  rows.push_back(nll_row("nll_loss none, [C]", {6}, false, Reduction::None, 161));
  add_vector_loss_rows(rows);
  add_likelihood_loss_rows(rows);
}

}  // namespace kiln::test
