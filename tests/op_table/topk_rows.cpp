// Op table rows of the topk family: the k largest or smallest values along a dim and their indices,
// and sort / argsort (topk of the whole dim), against a reference that stable-sorts each row.
// Inputs come from rnd_distinct, so the winners are unique (no ties for the index outputs or the
// gradient).
#include <algorithm>

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
}

}  // namespace kiln::test
