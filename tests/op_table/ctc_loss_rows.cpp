// Op table rows of ctc_loss: padded and concatenated targets, an unbatched sample, repeated labels
// (where the recursion may not skip the blank between them), an empty target, samples shorter than
// T, a blank other than 0, each reduction, and an impossible target with and without
// zero_infinity. The reference is the forward recursion in long double over plain loops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

using Real = long double;

Real log_add(Real a, Real b) {
  if (a == -INFINITY) return b;
  if (b == -INFINITY) return a;
  const Real m = std::max(a, b);
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

// -log P(target | frames) for one sample: lp[t][c] over its frames (none: the empty prefix).
Real ctc_nll(const std::vector<std::vector<Real>>& lp, const std::vector<int64_t>& target, int64_t blank) {
  const size_t l = 2 * target.size() + 1;
  auto label = [&](size_t s) { return s % 2 == 0 ? blank : target[s / 2]; };
  std::vector<Real> alpha(l, -INFINITY);
  alpha[0] = 0;  // before the first frame
  for (const std::vector<Real>& frame : lp) {
    std::vector<Real> next(l);
    for (size_t s = 0; s < l; ++s) {
      Real a = alpha[s];
      if (s >= 1) a = log_add(a, alpha[s - 1]);
      if (s >= 2 && label(s) != blank && label(s) != label(s - 2)) a = log_add(a, alpha[s - 2]);
      next[s] = a + frame[static_cast<size_t>(label(s))];
    }
    alpha = next;
  }
  return -(l >= 2 ? log_add(alpha[l - 1], alpha[l - 2]) : alpha[0]);
}

// The row's reference: inputs (log_probs, targets, input_lengths, target_lengths) as the op takes
// them.
Tensor ref_ctc(const TensorList& in, int64_t blank, Reduction red, bool zero_infinity) {
  const Tensor& x = in[0];
  const bool batched = x.dim() == 3;
  const int64_t n = batched ? x.size(1) : 1, c = x.size(batched ? 2 : 1);
  const Values xv = values(x), tv = values(in[1]), il = values(in[2]), tl = values(in[3]);
  Values losses;
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<std::vector<Real>> lp(static_cast<size_t>(il[at(i)]), std::vector<Real>(static_cast<size_t>(c)));
    for (int64_t t = 0; t < static_cast<int64_t>(lp.size()); ++t) {
      for (int64_t k = 0; k < c; ++k) lp[at(t)][at(k)] = xv[at((t * n + i) * c + k)];
    }
    std::vector<int64_t> target;
    const int64_t len = static_cast<int64_t>(tl[at(i)]);
    for (int64_t s = 0; s < len; ++s) {
      const int64_t pos = in[1].dim() == 2 ? i * in[1].size(1) + s : offset + s;
      target.push_back(static_cast<int64_t>(tv[at(pos)]));
    }
    offset += len;
    Real nll = ctc_nll(lp, target, blank);
    if (std::isinf(nll) && zero_infinity) nll = 0;
    losses.push_back(static_cast<double>(nll));
  }
  if (red == Reduction::None) return from_values(losses, batched ? Shape{n} : Shape{});
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    total += red == Reduction::Mean ? losses[at(i)] / std::max(tl[at(i)], 1.0) : losses[at(i)];
  }
  return from_values({red == Reduction::Mean ? total / static_cast<double>(n) : total}, {});
}

// log_softmax of normal draws: [T, N, C] (N = 0: unbatched [T, C]).
Tensor log_probs(int64_t t, int64_t n, int64_t c, uint64_t seed, DType dt, Device d) {
  const Shape s = n == 0 ? Shape{t, c} : Shape{t, n, c};
  return log_softmax(rnd(s, DType::Float64, Device::cpu(), seed, 2.0), -1).to(dt).to(d);
}

Tensor longs(const std::vector<int64_t>& v, const Shape& s, Device d) {
  return tensor(v, s, TensorOptions(DType::Int64, d));
}

// Samples for blank `blank` of C = 5 classes; labels avoid it.
std::vector<Sample> ctc_samples(int64_t blank, uint64_t seed) {
  auto label = [blank](int64_t k) { return k >= blank ? k + 1 : k; };  // k in [0, 4)
  const int64_t a = label(0), b = label(1), c = label(2), e = label(3);
  return {
      // Repeated labels (a a), an empty target, a sample shorter than T.
      {"padded [3, 4], T 7",
       [=](DType t, Device d) {
         return TensorList{log_probs(7, 3, 5, seed, t, d), longs({a, a, b, c, e, b, a, a, 0, 0, 0, 0}, {3, 4}, d),
                           longs({7, 5, 4}, {3}, d), longs({4, 3, 0}, {3}, d)};
       }},
      {"concatenated, T 6",
       [=](DType t, Device d) {
         return TensorList{log_probs(6, 2, 5, seed + 1, t, d), longs({b, b, c, a, e}, {5}, d), longs({6, 6}, {2}, d),
                           longs({3, 2}, {2}, d)};
       }},
      {"unbatched, T 5",
       [=](DType t, Device d) {
         return TensorList{log_probs(5, 0, 5, seed + 2, t, d), longs({c, a, c}, {3}, d), longs({5}, {}, d),
                           longs({3}, {}, d)};
       }},
  };
}

// The bad inputs, on the first row.
std::vector<ErrorCase> ctc_errors() {
  const Tensor lp = zeros({4, 2, 3});
  const Tensor tg = tensor<int64_t>({1, 2, 1, 1}, {2, 2});
  return {
      {"log_probs 1-d", [] { ctc_loss(zeros({4}), zeros({2}, DType::Int64), {4}, {2}); }, {"ctc_loss", "[4]"}},
      {"blank past C",
       [lp, tg] {
         ctc_loss(lp, tg, {4, 4}, {2, 2}, 3);
       },
       {"ctc_loss", "blank 3", "[4, 2, 3]"}},
      {"input length past T",
       [lp, tg] {
         ctc_loss(lp, tg, {5, 4}, {2, 2});
       },
       {"ctc_loss", "input_lengths [5, 4]", "T = 4"}},
      {"target length past S",
       [lp, tg] {
         ctc_loss(lp, tg, {4, 4}, {3, 2});
       },
       {"ctc_loss", "target_lengths [3, 2]", "[2, 2]"}},
      {"lengths for another batch",
       [lp, tg] { ctc_loss(lp, tg, {4}, {2}); },
       {"ctc_loss", "input_lengths [4]", "[4, 2, 3]"}},
      {"a label equal to blank",
       [lp] {
         ctc_loss(lp, tensor<int64_t>({1, 0, 1, 1}, {2, 2}), {4, 4}, {2, 2});
       },
       {"ctc_loss", "target 0", "label 0", "position 1"}},
      {"a label past C",
       [lp] {
         ctc_loss(lp, tensor<int64_t>({1, 2, 3, 1}, {2, 2}), {4, 4}, {2, 2});
       },
       {"ctc_loss", "target 1", "label 3"}},
      {"concatenated targets of another total",
       [lp] {
         ctc_loss(lp, tensor<int64_t>({1, 2, 1}), {4, 4}, {2, 2});
       },
       {"ctc_loss", "[3]", "[2, 2]", "= 4"}},
      {"float targets",
       [lp] {
         ctc_loss(lp, zeros({2, 2}), {4, 4}, {2, 2});
       },
       {"ctc_loss", "float32"}},
      {"float lengths",
       [lp, tg] { ctc_loss(lp, tg, zeros({2}), zeros({2})); },
       {"ctc_loss", "input_lengths", "float32"}},
      {"integer log_probs",
       [tg] {
         ctc_loss(zeros({4, 2, 3}, DType::Int64), tg, {4, 4}, {2, 2});
       },
       {"ctc_loss", "int64"}},
      {"BatchMean",
       [lp, tg] {
         ctc_loss(lp, tg, {4, 4}, {2, 2}, 0, Reduction::BatchMean);
       },
       {"ctc_loss", "BatchMean"}},
  };
}

}  // namespace

void add_ctc_loss_rows(std::vector<OpRow>& rows) {
  struct Variant {
    Reduction red;
    int64_t blank;
    bool zero_infinity;
  };
  uint64_t seed = 8000;
  for (const Variant v :
       {Variant{Reduction::Mean, 0, false}, Variant{Reduction::Sum, 2, false}, Variant{Reduction::None, 4, false}}) {
    const std::string name = std::string("ctc_loss ") + red_name(v.red) + " blank=" + std::to_string(v.blank);
    OpRow r = make_row(
        name, kFloatTypes, ctc_samples(v.blank, seed),
        [v](const TensorList& x) {
          return TensorList{ctc_loss(x[0], x[1], x[2], x[3], v.blank, v.red, v.zero_infinity)};
        },
        [v](const TensorList& x) { return TensorList{ref_ctc(x, v.blank, v.red, v.zero_infinity)}; }, {0}, same_dtype);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
    if (v.red == Reduction::Mean) r.errors = ctc_errors();
    rows.push_back(std::move(r));
    seed += 10;
  }
  {
    // Sample 1 needs 3 frames for "a a" plus the blank between them but gets 2: inf, or 0 with
    // zero_infinity, beside a possible sample whose loss and gradient are unchanged.
    for (const bool zero_infinity : {false, true}) {
      const std::vector<Sample> s = {
          {"an impossible target",
           [](DType t, Device d) {
             return TensorList{log_probs(4, 2, 3, 8100, t, d), longs({1, 2, 1, 1}, {2, 2}, d), longs({4, 2}, {2}, d),
                               longs({2, 2}, {2}, d)};
           }},
      };
      OpRow r = make_row(
          zero_infinity ? "ctc_loss zero_infinity" : "ctc_loss impossible", kFloatTypes, s,
          [zero_infinity](const TensorList& x) {
            return TensorList{ctc_loss(x[0], x[1], x[2], x[3], 0, Reduction::None, zero_infinity)};
          },
          [zero_infinity](const TensorList& x) { return TensorList{ref_ctc(x, 0, Reduction::None, zero_infinity)}; },
          zero_infinity ? std::vector<size_t>{0} : std::vector<size_t>{}, same_dtype);
      r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
      rows.push_back(std::move(r));
    }
  }
}

}  // namespace kiln::test
