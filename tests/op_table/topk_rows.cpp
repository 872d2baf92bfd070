// Op table rows of the topk family: the k largest or smallest values along a dim and their indices,
// sort / argsort (topk of the whole dim), kthvalue, median and quantile (every interpolation), and
// nanmedian and nanquantile over inputs with NaNs, against a reference that stable-sorts each row.
// Inputs come from rnd_distinct, so the winners are unique (no ties for the index outputs or the
// gradient).
#include <algorithm>
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// Reference of topk along dim: the k largest (smallest) values and their indices, sorted.
TensorList ref_topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  const Shape& s = x.sizes();
  int64_t d = dim < 0 ? dim + static_cast<int64_t>(s.size()) : dim;
  Shape os = s;
  os[static_cast<size_t>(d)] = k;
  std::vector<double> xv = values(x);
  std::vector<double> vals(static_cast<size_t>(shape_numel(os))), idxs(vals.size());
  for (int64_t o = 0; o < shape_numel(os); ++o) {
    Shape idx = unravel(o, os);
    if (idx[static_cast<size_t>(d)] != 0) continue;  // one pass per row, from its first output
    std::vector<std::pair<double, int64_t>> row;
    for (int64_t j = 0; j < s[static_cast<size_t>(d)]; ++j) {
      Shape src = idx;
      src[static_cast<size_t>(d)] = j;
      row.emplace_back(xv[static_cast<size_t>(ravel(src, s))], j);
    }
    std::stable_sort(row.begin(), row.end(), [largest](const auto& a, const auto& b) {
      return largest ? a.first > b.first : a.first < b.first;
    });
    for (int64_t j = 0; j < k; ++j) {
      Shape dst = idx;
      dst[static_cast<size_t>(d)] = j;
      vals[static_cast<size_t>(ravel(dst, os))] = row[static_cast<size_t>(j)].first;
      idxs[static_cast<size_t>(ravel(dst, os))] = static_cast<double>(row[static_cast<size_t>(j)].second);
    }
  }
  return {from_values(vals, os), from_values(idxs, os)};
}

OpRow topk_row(const std::string& name, int64_t k, int64_t dim, bool largest, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = distinct_samples(seed);
  r.samples.push_back({"1-d 9", [seed](DType t, Device d) { return TensorList{rnd_distinct({9}, t, d, seed + 3)}; }});
  // k is at most the smallest size along dim in the samples (3); the op clamps it for the 1-d sample.
  r.op = [k, dim, largest](const TensorList& x) {
    int64_t dd = x[0].dim() == 1 ? 0 : dim;
    auto [v, i] = topk(x[0], std::min(k, x[0].size(dd)), dd, largest);
    return TensorList{v, i};
  };
  r.reference = [k, dim, largest](const TensorList& x) {
    int64_t dd = x[0].dim() == 1 ? 0 : dim;
    return ref_topk(x[0], std::min(k, x[0].size(dd)), dd, largest);
  };
  r.differentiable = {0};
  r.exact_outputs = {1};
  r.out_dtype = same_dtype;
  r.errors = {
      {"k larger than the dim", [dim] { topk(zeros({3, 4}), 5, dim); }, {"topk", "k = 5", "[3, 4]"}},
      {"negative k", [dim, largest] { topk(zeros({3, 4}), -1, dim, largest); }, {"topk", "k = -1", "[3, 4]"}},
      {"dim out of range", [] { topk(zeros({3, 4}), 1, 2); }, {"topk", "dimension 2", "2-d"}},
      {"bool input", [] { topk(zeros({3, 4}, DType::Bool), 1); }, {"topk", "bool"}},
  };
  return r;
}

// sort (values and indices) or argsort along dim: the reference is topk's over the whole dim.
OpRow sort_row(const std::string& name, int64_t dim, bool descending, bool indices_only, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = distinct_samples(seed);
  r.samples.push_back({"1-d 9", [seed](DType t, Device d) { return TensorList{rnd_distinct({9}, t, d, seed + 3)}; }});
  r.op = [dim, descending, indices_only](const TensorList& x) {
    const int64_t dd = x[0].dim() == 1 ? 0 : dim;
    if (indices_only) return TensorList{argsort(x[0], dd, descending)};
    auto [v, i] = sort(x[0], dd, descending);
    return TensorList{v, i};
  };
  r.reference = [dim, descending, indices_only](const TensorList& x) {
    const int64_t dd = x[0].dim() == 1 ? 0 : dim;
    TensorList both = ref_topk(x[0], x[0].size(dd), dd, descending);
    return indices_only ? TensorList{both[1]} : both;
  };
  if (indices_only) {
    r.exact_outputs = {0};
    r.out_dtype = [](DType) { return DType::Int64; };
  } else {
    r.differentiable = {0};
    r.exact_outputs = {1};
    r.out_dtype = same_dtype;
  }
  r.errors = {
      {"dim out of range",
       [] {
         sort(zeros({3, 4}), 2);
       },
       {"sort", "2"}},
      {"bool input",
       [] {
         argsort(zeros({3, 4}, DType::Bool));
       },
       {"topk", "bool"}},
  };
  return r;
}

// A line's values sorted ascending with their positions (stable).
std::vector<std::pair<double, double>> sorted_line(const std::vector<double>& v) {
  std::vector<std::pair<double, double>> s;
  for (size_t i = 0; i < v.size(); ++i) s.emplace_back(v[i], static_cast<double>(i));
  std::stable_sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return s;
}

// The value and index at sorted position position(n) of each line along dim.
OpRow order_row(const std::string& name, int64_t dim, bool keepdim, std::function<int64_t(int64_t)> position,
                std::function<std::pair<Tensor, Tensor>(const Tensor&)> op, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = distinct_samples(seed);
  r.op = [op](const TensorList& x) {
    auto [v, i] = op(x[0]);
    return TensorList{v, i};
  };
  r.reference = [dim, keepdim, position](const TensorList& x) {
    auto at = [position](const std::vector<double>& v, bool index) {
      const auto s = sorted_line(v);
      const auto& e = s[static_cast<size_t>(position(static_cast<int64_t>(v.size())))];
      return index ? e.second : e.first;
    };
    return TensorList{ref_reduce(x[0], {dim}, keepdim, [at](const std::vector<double>& v) { return at(v, false); }),
                      ref_reduce(x[0], {dim}, keepdim, [at](const std::vector<double>& v) { return at(v, true); })};
  };
  r.differentiable = {0};
  r.exact_outputs = {1};
  r.out_dtype = same_dtype;
  return r;
}

// torch.quantile's value at q of a line, by `how`.
double quantile_of(std::vector<double> v, double q, QuantileInterpolation how) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const double lo = v[static_cast<size_t>(std::floor(pos))], hi = v[static_cast<size_t>(std::ceil(pos))];
  switch (how) {
    case QuantileInterpolation::Lower: return lo;
    case QuantileInterpolation::Higher: return hi;
    case QuantileInterpolation::Midpoint: return (lo + hi) / 2;
    case QuantileInterpolation::Nearest: return v[static_cast<size_t>(std::nearbyint(pos))];
    case QuantileInterpolation::Linear: break;
  }
  return lo + (hi - lo) * (pos - std::floor(pos));
}

// The values of a line that are not NaN.
std::vector<double> without_nans(const std::vector<double>& v) {
  std::vector<double> kept;
  for (double e : v) {
    if (!std::isnan(e)) kept.push_back(e);
  }
  return kept;
}

// quantile's row, or with `nan` nanquantile's over inputs holding NaNs (nan_samples).
OpRow quantile_row(const std::string& name, std::vector<double> qs, std::optional<int64_t> dim, bool keepdim,
                   QuantileInterpolation how, uint64_t seed, bool nan = false) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = nan ? nan_samples(seed) : distinct_samples(seed);
  r.op = [qs, dim, keepdim, how, nan](const TensorList& x) {
    return TensorList{nan ? nanquantile(x[0], qs, dim, keepdim, how) : quantile(x[0], qs, dim, keepdim, how)};
  };
  r.reference = [qs, dim, keepdim, how, nan](const TensorList& x) {
    TensorList each;
    for (double q : qs) {
      auto fn = [q, how, nan](const std::vector<double>& v) {
        return nan ? quantile_of(without_nans(v), q, how) : quantile_of(v, q, how);
      };
      each.push_back(dim ? ref_reduce(x[0], {*dim}, keepdim, fn) : ref_reduce(x[0], {}, keepdim, fn));
    }
    Shape shape = each[0].sizes();
    shape.insert(shape.begin(), static_cast<int64_t>(qs.size()));
    std::vector<double> all;
    for (const Tensor& t : each) {
      const std::vector<double> v = values(t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return TensorList{from_values(all, shape)};
  };
  r.differentiable = {0};
  r.out_dtype = same_dtype;
  return r;
}

}  // namespace

void add_topk_rows(std::vector<OpRow>& rows) {
  rows.push_back(topk_row("topk_largest_last", 3, -1, true, 700));
  rows.push_back(topk_row("topk_smallest_last", 3, -1, false, 710));
  rows.push_back(topk_row("topk_largest_dim0", 2, 0, true, 720));
  rows.push_back(topk_row("topk_smallest_dim0", 3, 0, false, 730));
  rows.push_back(sort_row("sort", -1, false, false, 740));
  rows.push_back(sort_row("sort descending dim0", 0, true, false, 750));
  rows.push_back(sort_row("argsort dim1", 1, false, true, 760));
  rows.push_back(sort_row("argsort descending", -1, true, true, 770));

  rows.push_back(order_row(
      "kthvalue k 2 last", -1, false, [](int64_t) { return 1; }, [](const Tensor& x) { return kthvalue(x, 2); }, 780));
  rows.back().errors = {
      {"k past the dim",
       [] {
         kthvalue(zeros({3, 4}), 5);
       },
       {"kthvalue", "k = 5", "[3, 4]"}},
      {"k 0",
       [] {
         kthvalue(zeros({3, 4}), 0);
       },
       {"kthvalue", "k = 0"}},
      {"an empty dim",
       [] {
         kthvalue(zeros({3, 0}), 1);
       },
       {"kthvalue", "empty", "[3, 0]"}},
  };
  rows.push_back(order_row(
      "kthvalue k 3 dim0 keepdim", 0, true, [](int64_t) { return 2; },
      [](const Tensor& x) { return kthvalue(x, 3, 0, true); }, 785));
  rows.push_back(order_row(
      "median dim1", 1, false, [](int64_t n) { return (n - 1) / 2; }, [](const Tensor& x) { return median(x, 1); },
      790));
  rows.back().errors = {{"an empty dim",
                         [] {
                           median(zeros({3, 0}), 1);
                         },
                         {"median", "empty", "[3, 0]"}},
                        {"bool input",
                         [] {
                           median(zeros({3, 4}, DType::Bool), 1);
                         },
                         {"median", "bool"}}};
  {
    OpRow r;
    r.name = "median of all";
    r.dtypes = kAllNumeric;
    r.samples = distinct_samples(795);
    r.op = [](const TensorList& x) { return TensorList{median(x[0])}; };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_reduce(
          x[0], {}, false, [](const std::vector<double>& v) { return sorted_line(v)[(v.size() - 1) / 2].first; })};
    };
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    rows.push_back(std::move(r));
  }
  rows.push_back(quantile_row("quantile 0.3 dim1 linear", {0.3}, 1, false, QuantileInterpolation::Linear, 800));
  rows.back().errors = {
      {"q past 1",
       [] {
         quantile(zeros({3, 4}), 1.5);
       },
       {"quantile", "q", "1.5"}},
      {"an integer input",
       [] {
         quantile(zeros({3, 4}, DType::Int64), 0.5);
       },
       {"quantile", "int64"}},
      {"an empty dim",
       [] {
         quantile(zeros({3, 0}), 0.5, 1);
       },
       {"quantile", "empty", "[3, 0]"}},
  };
  rows.push_back(quantile_row("quantiles of all keepdim linear", {0.0, 0.25, 0.5, 0.9, 1.0}, std::nullopt, true,
                              QuantileInterpolation::Linear, 805));
  rows.push_back(quantile_row("quantiles dim-1 lower", {0.1, 0.5, 0.75}, -1, false, QuantileInterpolation::Lower, 810));
  rows.push_back(quantile_row("quantiles dim0 higher", {0.1, 0.5, 0.75}, 0, true, QuantileInterpolation::Higher, 815));
  rows.push_back(
      quantile_row("quantiles dim2 midpoint", {0.1, 0.5, 0.75}, 2, false, QuantileInterpolation::Midpoint, 820));
  // Positions 0.5 and 2.5 away from 0 round to even: 0 and 2 (as torch.round).
  rows.push_back(
      quantile_row("quantiles dim1 nearest", {0.125, 0.5, 0.625}, 1, false, QuantileInterpolation::Nearest, 825));
  // Every fourth element NaN: each line reads its own count of values.
  rows.push_back(
      quantile_row("nanquantiles dim1 linear", {0.0, 0.3, 1.0}, 1, false, QuantileInterpolation::Linear, 830, true));
  rows.back().errors = {{"q past 1", [] { nanquantile(zeros({3, 4}), -0.5); }, {"nanquantile", "q", "-0.5"}}};
  rows.push_back(quantile_row("nanquantiles of all keepdim midpoint", {0.25, 0.5}, std::nullopt, true,
                              QuantileInterpolation::Midpoint, 835, true));
  rows.push_back(
      quantile_row("nanquantiles dim2 nearest", {0.5, 0.75}, 2, true, QuantileInterpolation::Nearest, 840, true));
  {
    // The lower median of each line's values that are not NaN, and its index.
    OpRow r;
    r.name = "nanmedian dim1";
    r.dtypes = kAllNumeric;
    r.samples = nan_samples(845);
    r.op = [](const TensorList& x) {
      auto [v, i] = nanmedian(x[0], 1);
      return TensorList{v, i};
    };
    r.reference = [](const TensorList& x) {
      auto at = [](const std::vector<double>& v, bool index) {
        // The NaNs out before sorting (a NaN has no place in a < order).
        std::vector<std::pair<double, double>> s;
        for (size_t i = 0; i < v.size(); ++i) {
          if (!std::isnan(v[i])) s.emplace_back(v[i], static_cast<double>(i));
        }
        std::stable_sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        const auto& e = s[(s.size() - 1) / 2];
        return index ? e.second : e.first;
      };
      return TensorList{ref_reduce(x[0], {1}, false, [at](const std::vector<double>& v) { return at(v, false); }),
                        ref_reduce(x[0], {1}, false, [at](const std::vector<double>& v) { return at(v, true); })};
    };
    r.differentiable = {0};
    r.exact_outputs = {1};
    r.out_dtype = same_dtype;
    r.errors = {{"an empty dim", [] { nanmedian(zeros({3, 0}), 1); }, {"nanmedian", "empty", "[3, 0]"}}};
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
