// Op table rows of core/ops/search.h: nonzero, masked_select, bincount, searchsorted, bucketize,
// unique and unique_consecutive, against loops over the values (std::sort for unique). Inputs hold
// zeros, repeats and ties with the boundaries, so the counts, the runs and the two sides of
// searchsorted all matter.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

Tensor make(const Values& v, const Shape& shape, DType t, Device d) { return from_values(v, shape).to(t).to(d); }

// rnd's values with about half of them set to 0 (bool: a coin with more false).
Gen sparse() {
  return [](const Shape& s, DType t, Device d, uint64_t seed) {
    Values v = values(rnd(s, t == DType::Bool ? DType::Int64 : t, Device::cpu(), seed));
    for (double& x : v) x = x > 0 ? x : 0.0;
    return make(v, s, t, d);
  };
}

// Sorted boundaries: n small integers (as values of any dtype), ascending, with a repeat.
Tensor sorted_boundaries(const Shape& shape, DType t, Device d, uint64_t seed) {
  Values v = values(rnd(shape, DType::Int64, Device::cpu(), seed));
  const int64_t n = shape.back();
  for (size_t row = 0; row < v.size(); row += static_cast<size_t>(n)) {
    std::sort(v.begin() + static_cast<std::ptrdiff_t>(row), v.begin() + static_cast<std::ptrdiff_t>(row) + n);
  }
  return make(v, shape, t, d);
}

// The count of boundaries (of row `row`, n per row) below v, or at or below it.
double count_below(const Values& b, int64_t row, int64_t n, double v, bool right) {
  double c = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double e = b[static_cast<size_t>(row * n + k)];
    if (right ? !(e > v) : e < v) c += 1;
  }
  return std::isnan(v) ? static_cast<double>(n) : c;
}

Tensor ref_searchsorted(const Tensor& b, const Tensor& v, bool right) {
  const Values bv = values(b), vv = values(v);
  const int64_t n = b.size(-1);
  const int64_t m = b.dim() == 1 ? v.numel() : v.size(-1);
  Values out;
  for (int64_t i = 0; i < v.numel(); ++i) {
    out.push_back(count_below(bv, b.dim() == 1 ? 0 : i / m, n, vv[static_cast<size_t>(i)], right));
  }
  return from_values(out, v.sizes());
}

// unique's three outputs from a list of values in the order runs are read (sorted or as given).
TensorList ref_unique(const Tensor& x, bool sorted) {
  const Values v = values(x);
  Values line = v;
  if (sorted) std::sort(line.begin(), line.end());
  Values uniq, counts;
  for (double e : line) {
    if (uniq.empty() || uniq.back() != e) {
      uniq.push_back(e);
      counts.push_back(0);
    }
    counts.back() += 1;
  }
  Values inverse;
  if (sorted) {
    for (double e : v)
      inverse.push_back(static_cast<double>(std::lower_bound(uniq.begin(), uniq.end(), e) - uniq.begin()));
  } else {
    double g = -1;
    for (size_t i = 0; i < v.size(); ++i) {
      if (i == 0 || v[i] != v[i - 1]) g += 1;
      inverse.push_back(g);
    }
  }
  const int64_t k = static_cast<int64_t>(uniq.size());
  return {from_values(uniq, {k}), from_values(inverse, x.sizes()), from_values(counts, {k})};
}

}  // namespace

void add_search_rows(std::vector<OpRow>& rows) {
  {
    OpRow r = make_row(
        "nonzero", numeric_and_bool(), unary_samples(7000, sparse()),
        [](const TensorList& x) { return TensorList{nonzero(x[0])}; },
        [](const TensorList& x) {
          const Values v = values(x[0]);
          Values out;
          int64_t count = 0;
          for (int64_t i = 0; i < x[0].numel(); ++i) {
            if (v[static_cast<size_t>(i)] == 0) continue;
            for (int64_t k : unravel(i, x[0].sizes())) out.push_back(static_cast<double>(k));
            ++count;
          }
          return TensorList{from_values(out, {count, x[0].dim()})};
        },
        {}, [](DType) { return DType::Int64; });
    r.exact_outputs = {0};
    r.errors = {undefined_input("nonzero", [](const Tensor& a) { return nonzero(a); })};
    rows.push_back(std::move(r));
  }
  {
    // The mask broadcasts against x ([5, 1] beside [5, 7]; [7] beside [3, 5, 7]).
    OpRow r;
    r.name = "masked_select";
    r.dtypes = numeric_and_bool();
    r.samples = {
        {"5x7, mask 5x1",
         [](DType t, Device d) {
           return TensorList{rnd({5, 7}, t, d, 7050), rnd({5, 1}, DType::Bool, d, 7051)};
         }},
        {"non-contiguous 3x5x7, mask 7",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({3, 5, 7}, t, d, 7052)), rnd({7}, DType::Bool, d, 7053)};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{masked_select(x[0], x[1])}; };
    r.reference = [](const TensorList& x) {
      Shape shape = x[0].sizes();
      const Values xv = values(x[0]), mv = values(x[1]);
      Values out;
      for (int64_t i = 0; i < shape_numel(shape); ++i) {
        Shape p = unravel(i, shape), pm(p.end() - x[1].dim(), p.end());
        for (int64_t k = 0; k < x[1].dim(); ++k) {
          if (x[1].size(k) == 1) pm[static_cast<size_t>(k)] = 0;
        }
        if (mv[static_cast<size_t>(ravel(pm, x[1].sizes()))] != 0) out.push_back(xv[static_cast<size_t>(i)]);
      }
      return TensorList{from_values(out, {static_cast<int64_t>(out.size())})};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"mask not bool", [] { masked_select(zeros({3}), zeros({3})); }, {"masked_select", "bool", "float32"}},
        {"shapes do not broadcast",
         [] { masked_select(zeros({3}), zeros({2}, DType::Bool)); },
         {"masked_select", "[3]", "[2]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // Counts, weighted sums (float32 weights give float32) and a minlength past the largest value.
    OpRow r;
    r.name = "bincount";
    r.dtypes = {DType::Int64, DType::Int32, DType::UInt8};
    auto sample = [](int64_t n, uint64_t seed) {
      return Sample{"length " + std::to_string(n), [=](DType t, Device d) {
                      Values v = values(rnd({n}, DType::UInt8, Device::cpu(), seed));
                      return TensorList{make(v, {n}, t, d), rnd({n}, DType::Float32, d, seed + 1)};
                    }};
    };
    r.samples = {sample(40, 7100), sample(1, 7102), sample(0, 7104)};
    r.op = [](const TensorList& x) {
      return TensorList{bincount(x[0]), bincount(x[0], x[1]), bincount(x[0], Tensor(), 12)};
    };
    r.reference = [](const TensorList& x) {
      const Values v = values(x[0]), w = values(x[1]);
      int64_t top = 0;
      for (double e : v) top = std::max(top, static_cast<int64_t>(e) + 1);
      Values counts(static_cast<size_t>(top)), sums(static_cast<size_t>(top)),
          wide(static_cast<size_t>(std::max<int64_t>(top, 12)));
      for (size_t i = 0; i < v.size(); ++i) {
        counts[static_cast<size_t>(v[i])] += 1;
        sums[static_cast<size_t>(v[i])] += w[i];
        wide[static_cast<size_t>(v[i])] += 1;
      }
      return TensorList{from_values(counts, {top}), from_values(sums, {top}),
                        from_values(wide, {static_cast<int64_t>(wide.size())})};
    };
    r.exact_outputs = {0, 2};
    r.tolerance[DType::UInt8] = default_tolerance(DType::Float32);  // the weighted sums are float32
    r.tolerance[DType::Int32] = default_tolerance(DType::Float32);
    r.tolerance[DType::Int64] = default_tolerance(DType::Float32);
    r.out_dtype = [](DType) { return DType::Int64; };
    r.errors = {
        {"negative value",
         [] {
           bincount(tensor<int64_t>({1, -2}));
         },
         {"bincount", "-2"}},
        {"2-d input",
         [] {
           bincount(zeros({2, 2}, DType::Int64));
         },
         {"bincount", "1-d", "[2, 2]"}},
        {"float input", [] { bincount(zeros({2})); }, {"bincount", "float32"}},
        {"weights of another length",
         [] { bincount(zeros({2}, DType::Int64), zeros({3})); },
         {"bincount", "weights", "[3]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // Values drawn like the boundaries, so many equal one: left and right differ there. 1-d
    // boundaries for values of any shape; 2-d ones row by row.
    OpRow r;
    r.name = "searchsorted";
    r.dtypes = {DType::Float32, DType::BFloat16, DType::Float64, DType::Int32, DType::Int64};
    r.samples = {
        {"boundaries 9, values 4x6",
         [](DType t, Device d) {
           return TensorList{sorted_boundaries({9}, t, d, 7200), rnd({4, 6}, DType::Int64, d, 7201).to(t)};
         }},
        {"boundaries 3x8, values 3x5",
         [](DType t, Device d) {
           return TensorList{sorted_boundaries({3, 8}, t, d, 7202), rnd({3, 5}, DType::Int64, d, 7203).to(t)};
         }},
        {"boundaries 9, 0-d value",
         [](DType t, Device d) {
           return TensorList{sorted_boundaries({9}, t, d, 7204), from_values({2}, {}).to(t).to(d)};
         }},
    };
    r.op = [](const TensorList& x) {
      return TensorList{searchsorted(x[0], x[1]), searchsorted(x[0], x[1], true),
                        searchsorted(x[0], x[1], false, true)};
    };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_searchsorted(x[0], x[1], false), ref_searchsorted(x[0], x[1], true),
                        ref_searchsorted(x[0], x[1], false)};
    };
    r.exact_outputs = {0, 1, 2};
    r.out_dtype = [](DType) { return DType::Int64; };
    r.errors = {
        {"0-d boundaries", [] { searchsorted(zeros({}), zeros({2})); }, {"searchsorted", "0-d"}},
        {"leading dims differ",
         [] {
           searchsorted(zeros({2, 3}), zeros({3, 3}));
         },
         {"searchsorted", "[2, 3]", "[3, 3]"}},
        {"bool values", [] { searchsorted(zeros({3}), zeros({2}, DType::Bool)); }, {"searchsorted", "bool"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "bucketize";
    r.dtypes = {DType::Float32, DType::Float16, DType::Float64, DType::Int64};
    r.samples = {{"input 5x7, boundaries 6", [](DType t, Device d) {
                    return TensorList{rnd({5, 7}, t, d, 7250), sorted_boundaries({6}, t, d, 7251)};
                  }}};
    r.op = [](const TensorList& x) { return TensorList{bucketize(x[0], x[1]), bucketize(x[0], x[1], true)}; };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_searchsorted(x[1], x[0], false), ref_searchsorted(x[1], x[0], true)};
    };
    r.exact_outputs = {0, 1};
    r.out_dtype = [](DType) { return DType::Int64; };
    r.errors = {{"2-d boundaries", [] { bucketize(zeros({2}), zeros({2, 2})); }, {"bucketize", "1-d", "[2, 2]"}}};
    rows.push_back(std::move(r));
  }
  for (const bool sorted : {true, false}) {
    // Small integers in every dtype: many repeats, and runs of them.
    OpRow r = make_row(
        sorted ? "unique" : "unique_consecutive", numeric_and_bool(), unary_samples(sorted ? 7300 : 7350, sparse()),
        [sorted](const TensorList& x) {
          const UniqueResult u = sorted ? unique(x[0]) : unique_consecutive(x[0]);
          return TensorList{u.values, u.inverse, u.counts};
        },
        [sorted](const TensorList& x) { return ref_unique(x[0], sorted); }, {}, [](DType t) { return t; });
    r.exact_outputs = {0, 1, 2};
    r.errors = {undefined_input(sorted ? "unique" : "unique_consecutive", [sorted](const Tensor& a) {
      return sorted ? unique(a).values : unique_consecutive(a).values;
    })};
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
