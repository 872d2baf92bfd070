// Op table rows of the cross_entropy family: mean, sum and no reduction, ignore_index (outside and
// inside the class range) and label_smoothing, on [N, C], [N, C, d1, d2] and 1-d logits; then the
// composed paths, class weights and class-probability targets, against their own float64 loops. Class
// targets are int64 inputs (they keep their dtype) from a small LCG, independent of kiln's generator.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// logits [N, C, ...] or [C]; target [N, ...] or 0-d. Loss per target element, then reduced.
Tensor ref_cross_entropy(const Tensor& logits, const Tensor& target, Reduction red, int64_t ignore, double eps) {
  Shape ls = logits.sizes();
  if (ls.size() == 1) ls.insert(ls.begin(), 1);
  const int64_t c_n = ls[1];
  Values lv = values(logits), tv = values(target), losses;
  Shape ts = ls;
  ts.erase(ts.begin() + 1);
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < shape_numel(ts); ++r) {
    const int64_t t = static_cast<int64_t>(tv[at(r)]);
    if (t == ignore) {
      losses.push_back(0);
      continue;
    }
    Shape ti = unravel(r, ts);
    Values row;
    for (int64_t c = 0; c < c_n; ++c) {
      Shape li = ti;
      li.insert(li.begin() + 1, c);
      row.push_back(lv[at(ravel(li, ls))]);
    }
    double mx = *std::max_element(row.begin(), row.end()), se = 0, mean_x = 0;
    for (double v : row) {
      se += std::exp(v - mx);
      mean_x += v / static_cast<double>(c_n);
    }
    const double lse = mx + std::log(se);
    // PyTorch's definition: without smoothing there is no mean term (a -inf logit would make it inf).
    const double loss = (1 - eps) * (lse - row[at(t)]) + (eps != 0 ? eps * (lse - mean_x) : 0.0);
    losses.push_back(loss);
    total += loss;
    ++count;
  }
  if (red == Reduction::None) return from_values(losses, target.sizes());
  return from_values({red == Reduction::Sum ? total : total / static_cast<double>(count)}, {});
}

// The definitions with class weights (w, or all ones) or class probabilities (probs: target of the
// logits' shape), in float64 loops: log-probabilities lp per row; for class indices
// (1 - eps) w_t (-lp_t) + eps/C sum_c w_c (-lp_c) per kept target, Mean dividing by the summed w_t;
// for probabilities -sum_c w_c ((1 - eps) p_c + eps/C) lp_c per row, Mean over rows.
Tensor ref_cross_entropy_general(const Tensor& logits, const Tensor& target, const Tensor& weight, bool probs,
                                 Reduction red, int64_t ignore, double eps) {
  Shape ls = logits.sizes();
  if (ls.size() == 1) ls.insert(ls.begin(), 1);
  const int64_t c_n = ls[1];
  const Values lv = values(logits), tv = values(target);
  const Values wv = weight.defined() ? values(weight) : Values(static_cast<size_t>(c_n), 1.0);
  Shape rs = ls;
  rs.erase(rs.begin() + 1);
  Values losses;
  double total = 0, weights = 0;
  for (int64_t r = 0; r < shape_numel(rs); ++r) {
    const Shape ri = unravel(r, rs);
    auto flat = [&](int64_t c) {
      Shape li = ri;
      li.insert(li.begin() + 1, c);
      return at(ravel(li, ls));
    };
    double mx = -INFINITY, se = 0;
    for (int64_t c = 0; c < c_n; ++c) mx = std::max(mx, lv[flat(c)]);
    for (int64_t c = 0; c < c_n; ++c) se += std::exp(lv[flat(c)] - mx);
    auto lp = [&](int64_t c) { return lv[flat(c)] - mx - std::log(se); };
    double loss = 0;
    if (probs) {
      for (int64_t c = 0; c < c_n; ++c) loss -= wv[at(c)] * ((1 - eps) * tv[flat(c)] + eps / c_n) * lp(c);
      weights += 1;
    } else {
      const int64_t t = static_cast<int64_t>(tv[at(r)]);
      if (t == ignore) {
        losses.push_back(0);
        continue;
      }
      loss = -(1 - eps) * wv[at(t)] * lp(t);
      for (int64_t c = 0; c < c_n; ++c) loss -= eps / c_n * wv[at(c)] * lp(c);
      weights += wv[at(t)];
    }
    losses.push_back(loss);
    total += loss;
  }
  if (red == Reduction::None) return from_values(losses, probs ? (logits.dim() == 1 ? Shape{} : rs) : target.sizes());
  return from_values({red == Reduction::Sum ? total : total / weights}, {});
}

// A cross_entropy sample: logits of `shape` (class dim 1, or 0 for 1-d) and matching targets.
Sample ce_sample(const std::string& name, const Shape& shape, uint64_t seed, int64_t ignore_every, int64_t ignore,
                 bool strided = false) {
  return {name, [=](DType t, Device d) {
            Tensor logits = rnd(shape, t, d, seed, 2.0);
            if (strided) logits = noncontig(logits);
            Shape ts = shape;
            ts.erase(ts.begin() + (shape.size() == 1 ? 0 : 1));
            const int64_t classes = shape.size() == 1 ? shape[0] : shape[1];
            return TensorList{logits, class_targets(ts, classes, seed + 1, ignore_every, ignore, d)};
          }};
}

// Logits [5, 7] with two classes of every row masked to -inf: the ones after its target (mod 7).
Sample masked_ce_sample(uint64_t seed, int64_t ignore_every, int64_t ignore) {
  return {"[5, 7] with -inf logits (masked classes)", [=](DType t, Device d) {
            const Shape shape{5, 7};
            Tensor target = class_targets({5}, 7, seed + 1, ignore_every, ignore, Device::cpu());
            Values lv = values(rnd(shape, DType::Float64, Device::cpu(), seed, 2.0));
            const Values tv = values(target);
            for (int64_t r = 0; r < 5; ++r) {
              const int64_t tr = tv[at(r)] == static_cast<double>(ignore) ? 0 : static_cast<int64_t>(tv[at(r)]);
              for (int64_t k : {1, 3}) lv[at(r * 7 + (tr + k) % 7)] = -std::numeric_limits<double>::infinity();
            }
            return TensorList{from_values(lv, shape, t).to(d), target.to(d)};
          }};
}

// Rows with class weights (input 2, [C] in [0.2, 2]) and/or class-probability targets (input 1,
// the logits' shape, in [0, 1]; differentiable too): [5, 7], 4-d [2, 5, 3, 2] and, without ignored
// targets, 1-d [6].
OpRow general_cross_entropy_row(const std::string& name, bool weighted, bool probs, Reduction red, double eps,
                                int64_t ignore_every) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  auto sample = [=](const Shape& shape, uint64_t seed) {
    return Sample{shape_str(shape), [=](DType t, Device d) {
                    const Tensor logits = rnd(shape, t, d, seed, 2.0);
                    const int64_t classes = shape.size() == 1 ? shape[0] : shape[1];
                    Shape ts = shape;
                    ts.erase(ts.begin() + (shape.size() == 1 ? 0 : 1));
                    TensorList in{logits, probs ? rnd_range(shape, t, d, seed + 1, 0.0, 1.0)
                                                : class_targets(ts, classes, seed + 1, ignore_every, -100, d)};
                    if (weighted) in.push_back(rnd_range({classes}, t, d, seed + 2, 0.2, 2.0));
                    return in;
                  }};
  };
  r.samples = {sample({5, 7}, 241), sample({2, 5, 3, 2}, 251)};
  if (ignore_every == 0) r.samples.push_back(sample({6}, 261));
  r.op = [=](const TensorList& x) {
    return TensorList{cross_entropy(x[0], x[1], red, -100, eps, weighted ? x[2] : Tensor())};
  };
  r.reference = [=](const TensorList& x) {
    return TensorList{ref_cross_entropy_general(x[0], x[1], weighted ? x[2] : Tensor(), probs, red, -100, eps)};
  };
  r.differentiable = {0};
  if (probs) r.differentiable.push_back(1);
  if (weighted) r.differentiable.push_back(2);
  r.out_dtype = [](DType t) { return t; };
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  return r;
}

OpRow cross_entropy_row(const std::string& name, Reduction red, int64_t ignore, double eps, int64_t ignore_every) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {
      ce_sample("[5, 7]", {5, 7}, 41, ignore_every, ignore),
      ce_sample("[6, 29] (past the CPU row loops' 8 lanes, with a tail)", {6, 29}, 45, ignore_every, ignore),
      ce_sample("4-d [2, 5, 3, 2]", {2, 5, 3, 2}, 42, ignore_every, ignore),
      ce_sample("non-contiguous [4, 6]", {4, 6}, 43, ignore_every, ignore, true),
  };
  // A single [C] row with a 0-d target cannot hold an ignored target without making the mean 0/0.
  if (ignore_every == 0) r.samples.push_back(ce_sample("1-d [6]", {6}, 44, 0, ignore));
  // Masked classes (-inf logits, never at the target): a finite loss without smoothing, +inf with it,
  // so only the rows without smoothing take this sample.
  if (eps == 0.0) r.samples.push_back(masked_ce_sample(46, ignore_every, ignore));
  r.op = [red, ignore, eps](const TensorList& x) { return TensorList{cross_entropy(x[0], x[1], red, ignore, eps)}; };
  r.reference = [red, ignore, eps](const TensorList& x) {
    return TensorList{ref_cross_entropy(x[0], x[1], red, ignore, eps)};
  };
  r.differentiable = {0};
  r.out_dtype = [](DType t) { return t; };
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  r.errors = {
      {"target out of range",
       [] {
         cross_entropy(zeros({4, 10}), tensor<int64_t>({1, 12, 3, 4}), Reduction::Mean);
       },
       {"cross_entropy: target 12 is out of range for 10 classes"}},
      {"negative target that is not ignore_index",
       [] {
         cross_entropy(zeros({2, 10}), tensor<int64_t>({-1, 3}), Reduction::Mean);
       },
       {"cross_entropy", "target -1", "10 classes"}},
      {"target shape",
       [] {
         cross_entropy(zeros({4, 10}), tensor<int64_t>({1, 2, 3}));
       },
       {"cross_entropy", "[3]", "[4, 10]", "expected target [4]"}},
      {"4-d target shape",
       [] {
         cross_entropy(zeros({2, 5, 3, 2}), zeros({2, 5, 3}, DType::Int64));
       },
       {"cross_entropy", "[2, 5, 3]", "[2, 3, 2]"}},
      {"float target",
       [] {
         cross_entropy(zeros({4, 10}), zeros({4}));
       },
       {"cross_entropy", "float32", "[4]", "probabilities", "[4, 10]"}},
      {"a class weight of another size",
       [] {
         cross_entropy(zeros({4, 10}), zeros({4}, DType::Int64), Reduction::Mean, -100, 0.0, ones({9}));
       },
       {"cross_entropy", "weight of shape [9]", "10 classes"}},
      {"Reduction::BatchMean",
       [] {
         cross_entropy(zeros({4, 10}), zeros({4}, DType::Int64), Reduction::BatchMean);
       },
       {"cross_entropy", "BatchMean"}},
      {"integer logits",
       [] {
         cross_entropy(zeros({4, 10}, DType::Int64), zeros({4}, DType::Int64));
       },
       {"cross_entropy", "logits", "int64"}},
      {"label_smoothing above 1",
       [] {
         cross_entropy(zeros({4, 10}), zeros({4}, DType::Int64), Reduction::Mean, -100, 1.5);
       },
       {"cross_entropy", "label_smoothing", "1.5"}},
  };
  return r;
}

// Cross-entropy (mean) over GPT-2's vocabulary of 50257 classes, rows from --elements (4096 at
// the default), logits in float32 or bfloat16, the targets all class 1 (where a target points does
// not change the traffic). Forward: the logits read once; with the backward, read twice more and
// their gradient written. The targets are read once per pass.
BenchCase cross_entropy_bench(bool backward) {
  BenchCase b;
  b.name = backward ? "cross_entropy_fwd_bwd" : "cross_entropy";
  b.dtypes = {DType::Float32, DType::BFloat16};
  b.op = b.name;
  b.setup = [backward](DType t, int64_t n) {
    const int64_t classes = 50257, rows = std::max<int64_t>(1, n / 16384);
    BenchSetup s;
    s.shape = {rows, classes};
    s.inputs = {{{rows, classes}, t}, {{rows}, DType::Int64, BenchInput::Fill::Ones}};
    const double logits = static_cast<double>(rows * classes) * static_cast<double>(element_size(t));
    const double targets = 8.0 * static_cast<double>(rows);
    s.bytes = backward ? 3 * logits + 2 * targets : logits + targets;
    return s;
  };
  b.run = [backward](const TensorList& x) {
    if (!backward) return TensorList{cross_entropy(x[0], x[1])};
    Tensor logits = x[0].detach().set_requires_grad(true);
    cross_entropy(logits, x[1]).backward();
    return TensorList{logits.grad()};
  };
  return b;
}

}  // namespace

void add_cross_entropy_rows(std::vector<OpRow>& rows) {
  rows.push_back(cross_entropy_row("cross_entropy", Reduction::Mean, -100, 0.0, 0));
  rows.back().bench = {cross_entropy_bench(false), cross_entropy_bench(true)};
  rows.push_back(cross_entropy_row("cross_entropy sum", Reduction::Sum, -100, 0.0, 0));
  rows.push_back(cross_entropy_row("cross_entropy none", Reduction::None, -100, 0.0, 0));
  rows.push_back(cross_entropy_row("cross_entropy ignore_index", Reduction::Mean, -100, 0.0, 3));
  // An ignore_index inside the class range: those targets are skipped, not treated as class 2.
  rows.push_back(cross_entropy_row("cross_entropy none ignore_index 2", Reduction::None, 2, 0.0, 4));
  rows.push_back(cross_entropy_row("cross_entropy label_smoothing", Reduction::Mean, -100, 0.1, 0));
  rows.push_back(cross_entropy_row("cross_entropy sum label_smoothing ignore_index", Reduction::Sum, -100, 0.1, 3));
  rows.push_back(
      general_cross_entropy_row("cross_entropy weighted ignore_index", true, false, Reduction::Mean, 0.0, 3));
  rows.push_back(general_cross_entropy_row("cross_entropy weighted label_smoothing ignore_index", true, false,
                                           Reduction::Mean, 0.2, 3));
  rows.push_back(
      general_cross_entropy_row("cross_entropy weighted none label_smoothing", true, false, Reduction::None, 0.1, 0));
  rows.push_back(general_cross_entropy_row("cross_entropy weighted sum", true, false, Reduction::Sum, 0.0, 4));
  rows.push_back(general_cross_entropy_row("cross_entropy probabilities", false, true, Reduction::Mean, 0.0, 0));
  rows.push_back(general_cross_entropy_row("cross_entropy probabilities weighted label_smoothing sum", true, true,
                                           Reduction::Sum, 0.1, 0));
  rows.push_back(general_cross_entropy_row("cross_entropy probabilities none", false, true, Reduction::None, 0.0, 0));
}

}  // namespace kiln::test
