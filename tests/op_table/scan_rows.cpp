// Op table rows of the scan family: cumsum, cumprod, logcumsumexp, cummax and cummin along a dim,
// against a running sum, product, log-sum-exp or extreme in float64 along each line. Long lines (70
// elements: seven steps of the logarithmic scan) sit beside the usual 3-d samples, with 0-d and
// empty inputs and an explicit result dtype; cummax and cummin also over lines full of ties.
#include <algorithm>
#include <cmath>
#include <functional>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// out[..., i, ...] = x[..., 0, ...] op ... op x[..., i, ...] along dim, in float64.
Tensor ref_scan(const Tensor& x, int64_t dim, bool product, DType out_dtype = DType::Float64) {
  const Shape& s = x.sizes();
  const std::vector<double> xv = values(x);
  if (s.empty()) return from_values(xv, s, out_dtype);
  const int64_t d = wrap(dim, static_cast<int64_t>(s.size()));
  std::vector<double> out(xv.size());
  for (int64_t o = 0; o < static_cast<int64_t>(xv.size()); ++o) {
    Shape idx = unravel(o, s);
    double acc = product ? 1.0 : 0.0;
    const int64_t upto = idx[static_cast<size_t>(d)];
    for (int64_t j = 0; j <= upto; ++j) {
      idx[static_cast<size_t>(d)] = j;
      const double v = xv[at(ravel(idx, s))];
      acc = product ? acc * v : acc + v;
    }
    out[at(o)] = acc;
  }
  return from_values(out, s, out_dtype);
}

DType scan_dtype(DType t) { return is_floating(t) ? t : DType::Int64; }

// Along `dim` of x in float64, each element's running log-sum-exp (logsumexp) or running maximum or
// minimum and its index (extreme, is_max): PyTorch's rule, a later element taking over where it is
// NaN, or where neither is NaN and it is >= (<=) the value so far.
enum class Running { LogSumExp, Max, Min };
TensorList ref_running(const Tensor& x, int64_t dim, Running kind) {
  const Shape& s = x.sizes();
  const std::vector<double> xv = values(x);
  if (s.empty()) return {from_values(xv, s), from_values({0.0}, s, DType::Int64)};
  const int64_t d = wrap(dim, static_cast<int64_t>(s.size()));
  std::vector<double> out(xv.size()), index(xv.size());
  for (int64_t o = 0; o < static_cast<int64_t>(xv.size()); ++o) {
    Shape idx = unravel(o, s);
    const int64_t upto = idx[static_cast<size_t>(d)];
    double best = 0.0, where = 0.0;
    double top = -INFINITY, total = 0.0;
    for (int64_t j = 0; j <= upto; ++j) {
      idx[static_cast<size_t>(d)] = j;
      const double v = xv[at(ravel(idx, s))];
      if (kind == Running::LogSumExp) {
        top = std::max(top, v);
        continue;
      }
      const bool take =
          j == 0 || std::isnan(v) || (!std::isnan(best) && (kind == Running::Max ? v >= best : v <= best));
      if (take) {
        best = v;
        where = static_cast<double>(j);
      }
    }
    if (kind == Running::LogSumExp) {
      for (int64_t j = 0; j <= upto; ++j) {
        idx[static_cast<size_t>(d)] = j;
        total += std::exp(xv[at(ravel(idx, s))] - top);
      }
      best = top + std::log(total);
    }
    out[at(o)] = best;
    index[at(o)] = where;
  }
  return {from_values(out, s), from_values(index, s, DType::Int64)};
}

// The usual 3-d samples, two long lines, a 0-d input and an empty line, all drawn by `g`.
std::vector<Sample> scan_samples(uint64_t seed, Gen g) {
  std::vector<Sample> s = {
      {"3x5x7",
       [=](DType t, Device d) {
         return TensorList{g({3, 5, 7}, t, d, seed)};
       }},
      {"non-contiguous 3x5x9",
       [=](DType t, Device d) {
         return TensorList{noncontig(g({3, 5, 9}, t, d, seed + 1))};
       }},
      {"transposed 7x5x3",
       [=](DType t, Device d) {
         return TensorList{g({3, 5, 7}, t, d, seed + 2).transpose(0, 2)};
       }},
      {"2x70x2 (seven steps)",
       [=](DType t, Device d) {
         return TensorList{g({2, 70, 2}, t, d, seed + 3)};
       }},
      {"0-d", [=](DType t, Device d) { return TensorList{g({}, t, d, seed + 4)}; }},
      {"empty line 3x0x2",
       [=](DType t, Device d) {
         return TensorList{g({3, 0, 2}, t, d, seed + 5)};
       }},
  };
  return s;
}

OpRow scan_row(const std::string& name, bool product, int64_t dim, Gen g, uint64_t seed) {
  OpRow r = make_row(
      name, kAllNumeric, scan_samples(seed, g),
      [product, dim](const TensorList& in) {
        const int64_t dd = in[0].dim() == 0 ? 0 : dim;
        return TensorList{product ? cumprod(in[0], dd) : cumsum(in[0], dd)};
      },
      [product, dim](const TensorList& in) { return TensorList{ref_scan(in[0], in[0].dim() == 0 ? 0 : dim, product)}; },
      {0}, scan_dtype);
  return r;
}

// Values distinct within a tensor (no ties, so the float64 gradcheck sees a smooth function).
Tensor distinct_values(const Shape& s, DType t, Device d, uint64_t seed) { return rnd_distinct(s, t, d, seed); }

OpRow extreme_row(const std::string& name, bool is_max, int64_t dim, Gen g, uint64_t seed) {
  OpRow r = make_row(
      name, kAllNumeric, scan_samples(seed, g),
      [is_max, dim](const TensorList& in) {
        const int64_t dd = in[0].dim() == 0 ? 0 : dim;
        auto [values, index] = is_max ? cummax(in[0], dd) : cummin(in[0], dd);
        return TensorList{values, index};
      },
      [is_max, dim](const TensorList& in) {
        return ref_running(in[0], in[0].dim() == 0 ? 0 : dim, is_max ? Running::Max : Running::Min);
      },
      {0}, same_dtype);
  r.exact_outputs = {1};
  return r;
}

}  // namespace

void add_scan_rows(std::vector<OpRow>& rows) {
  {
    OpRow r = scan_row("cumsum dim 1", false, 1, normal(), 11);
    r.errors = {
        {"dim out of range",
         [] {
           cumsum(zeros({2, 3}), 2);
         },
         {"cumsum", "2"}},
        {"dim out of range of a 0-d input", [] { cumsum(zeros({}), 1); }, {"cumsum", "1"}},
        {"into bool",
         [] {
           cumsum(zeros({2, 3}), 0, DType::Bool);
         },
         {"cumsum", "bool", "float32", "[2, 3]"}},
        {"float into an integer dtype",
         [] {
           cumsum(zeros({2, 3}), 0, DType::Int64);
         },
         {"cumsum", "float32", "int64", "[2, 3]"}},
        undefined_input("cumsum", [](const Tensor& x) { return cumsum(x, 0); }),
    };
    rows.push_back(std::move(r));
  }
  rows.push_back(scan_row("cumsum dim -1", false, -1, normal(), 21));
  {
    // An explicit dtype: the input is cast first and summed there (an integer input in float64, a
    // float32 input in float64).
    OpRow r = make_row(
        "cumsum (dtype float64)", kAllNumeric, scan_samples(31, normal()),
        [](const TensorList& in) { return TensorList{cumsum(in[0], 0, DType::Float64)}; },
        [](const TensorList& in) { return TensorList{ref_scan(in[0], 0, false)}; }, {0},
        [](DType) { return DType::Float64; });
    rows.push_back(std::move(r));
  }
  {
    // Values in [0.5, 1.5] keep 70-long products in range; the 3-d samples include exact zeros,
    // whose gradient (the product of the others) needs no division.
    Gen around_one = [](const Shape& s, DType t, Device d, uint64_t seed) {
      if (!is_floating(t)) return rnd(s, t, d, seed);
      return rnd_range(s, t, d, seed, 0.5, 1.5);
    };
    OpRow r = scan_row("cumprod dim 2", true, 2, around_one, 41);
    r.samples.push_back({"zeros in a line", [](DType t, Device d) {
                           Tensor x = rnd({2, 3, 6}, t, d, 47);
                           NoGradGuard g;
                           x.select(2, 2).fill_(0.0);
                           return TensorList{x};
                         }});
    r.errors = {
        {"dim out of range",
         [] {
           cumprod(zeros({2, 3}), -3);
         },
         {"cumprod", "-3"}},
        {"into bool",
         [] {
           cumprod(zeros({2, 3}), 0, DType::Bool);
         },
         {"cumprod", "bool", "product"}},
        undefined_input("cumprod", [](const Tensor& x) { return cumprod(x, 0); }),
    };
    rows.push_back(std::move(r));
  }
  rows.push_back(scan_row(
      "cumprod dim 0", true, 0,
      [](const Shape& s, DType t, Device d, uint64_t seed) {
        return is_floating(t) ? rnd_range(s, t, d, seed, 0.5, 1.5) : rnd(s, t, d, seed);
      },
      51));

  {
    // Lines spanning 40 units: the running log-sum-exp of such values in float32 overflows exp but
    // not the scan.
    Gen wide = [](const Shape& s, DType t, Device d, uint64_t seed) { return rnd(s, t, d, seed, 40.0); };
    OpRow r = make_row(
        "logcumsumexp dim 1", kFloatTypes, scan_samples(61, wide),
        [](const TensorList& in) { return TensorList{logcumsumexp(in[0], in[0].dim() == 0 ? 0 : 1)}; },
        [](const TensorList& in) {
          return TensorList{ref_running(in[0], in[0].dim() == 0 ? 0 : 1, Running::LogSumExp)[0]};
        },
        {0}, same_dtype);
    r.errors = {
        {"integer input",
         [] {
           logcumsumexp(zeros({2, 3}, DType::Int64), 0);
         },
         {"logcumsumexp", "int64", "[2, 3]"}},
        {"dim out of range",
         [] {
           logcumsumexp(zeros({2, 3}), 2);
         },
         {"logcumsumexp", "2"}},
        undefined_input("logcumsumexp", [](const Tensor& x) { return logcumsumexp(x, 0); }),
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = extreme_row("cummax dim 1", true, 1, distinct_values, 71);
    r.errors = {
        {"dim out of range",
         [] {
           cummax(zeros({2, 3}), -3);
         },
         {"cummax", "-3"}},
        undefined_input("cummax", [](const Tensor& x) { return cummax(x, 0).first; }),
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = extreme_row("cummin dim -1", false, -1, distinct_values, 81);
    r.errors = {undefined_input("cummin", [](const Tensor& x) { return cummin(x, 0).first; })};
    rows.push_back(std::move(r));
  }
  {
    // n 1 and 2 along dim 1, with a prepended and an appended slice; n past the length leaves an
    // empty dim. Integers subtract exactly; bool gives xor.
    std::vector<Sample> lines = scan_samples(101, normal());
    lines.erase(std::remove_if(lines.begin(), lines.end(), [](const Sample& s) { return s.name == "0-d"; }),
                lines.end());  // diff needs a dim (refused below)
    OpRow r = make_row(
        "diff", kAllNumeric, lines,
        [](const TensorList& in) {
          const Tensor& x = in[0];
          const int64_t d = x.dim() == 3 ? 1 : 0;
          const Tensor edge = x.narrow(d, 0, std::min<int64_t>(1, x.size(d)));
          return TensorList{diff(x, 1, d), diff(x, 2, d, edge, edge), diff(x, 80, d)};
        },
        [](const TensorList& in) {
          const Tensor& x = in[0];
          const int64_t d = x.dim() == 3 ? 1 : 0;
          // The differences of the joined line, element by element along d, n times over.
          auto differences = [d](Tensor y, int64_t n) {
            for (int64_t k = 0; k < n && y.size(d) > 0; ++k) {
              const Shape& s = y.sizes();
              Shape os = s;
              os[static_cast<size_t>(d)] = s[static_cast<size_t>(d)] - 1;
              const std::vector<double> v = values(y);
              std::vector<double> out;
              for (int64_t o = 0; o < shape_numel(os); ++o) {
                Shape idx = unravel(o, os);
                const double a = v[at(ravel(idx, s))];
                idx[static_cast<size_t>(d)] += 1;
                out.push_back(v[at(ravel(idx, s))] - a);
              }
              y = from_values(out, os);
            }
            return y;
          };
          const Tensor x64 = from_values(values(x), x.sizes());
          const Tensor edge = x64.narrow(d, 0, std::min<int64_t>(1, x.size(d)));
          return TensorList{differences(x64, 1), differences(cat({edge, x64, edge}, d), 2), differences(x64, 80)};
        },
        {0}, same_dtype);
    r.dtypes = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int32, DType::Int64};
    r.errors = {{"a 0-d input", [] { diff(zeros({})); }, {"diff", "0-d"}},
                {"negative n", [] { diff(zeros({3}), -1); }, {"diff", "n", "-1"}},
                {"a prepend of another rank",
                 [] {
                   diff(zeros({2, 3}), 1, 1, zeros({3}));
                 },
                 {"diff", "[3]", "[2, 3]"}}};
    rows.push_back(std::move(r));
  }
  // Lines of small integers, full of ties: the index is the latest of the equal values. Not
  // gradchecked (at a tie the function has no derivative).
  for (const bool is_max : {true, false}) {
    Gen ties = [](const Shape& s, DType t, Device d, uint64_t seed) {
      return is_floating(t) ? rnd(s, DType::Int64, Device::cpu(), seed).to(t).to(d) : rnd(s, t, d, seed);
    };
    OpRow r = extreme_row(is_max ? "cummax dim 0 (ties)" : "cummin dim 2 (ties)", is_max, is_max ? 0 : 2, ties,
                          is_max ? 91 : 95);
    r.differentiable = {};
    r.dtypes.push_back(DType::Bool);
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
