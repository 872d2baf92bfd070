// Op table rows of the other family: cross, kron, rot90, block_diag, cartesian_prod, cov (plain,
// with a correction of 0, with frequency and importance weights) and corrcoef, against float64
// loops written from their definitions. (tril_indices and triu_indices make no values to compare
// in every dtype: tests/core/test_other.cpp.)
#include <algorithm>
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// The covariance of the rows of x (variables x observations) with observation weights w (empty:
// all 1) and importance weights aw (empty: none): numpy's and PyTorch's definition, in double.
Values ref_cov(const Tensor& x, int64_t correction, const Values& w_in, const Values& aw) {
  const int64_t vars = x.dim() < 2 ? 1 : x.size(0), obs = x.dim() < 2 ? x.numel() : x.size(1);
  const Values v = values(x);
  Values w = w_in.empty() ? Values(at(obs), 1.0) : w_in;
  if (!aw.empty()) {
    for (size_t k = 0; k < w.size(); ++k) w[k] *= aw[k];
  }
  double total = 0, total_waw = 0;
  for (size_t k = 0; k < w.size(); ++k) {
    total += w[k];
    total_waw += aw.empty() ? 0.0 : w[k] * aw[k];
  }
  const double c = static_cast<double>(correction);
  double divisor = correction == 0 ? total : aw.empty() ? total - c : total - c * total_waw / total;
  divisor = std::max(divisor, 0.0);
  Values mean(at(vars), 0.0), out;
  for (int64_t i = 0; i < vars; ++i) {
    for (int64_t k = 0; k < obs; ++k) mean[at(i)] += w[at(k)] * v[at(i * obs + k)];
    mean[at(i)] /= total;
  }
  for (int64_t i = 0; i < vars; ++i)
    for (int64_t j = 0; j < vars; ++j) {
      double s = 0;
      for (int64_t k = 0; k < obs; ++k)
        s += w[at(k)] * (v[at(i * obs + k)] - mean[at(i)]) * (v[at(j * obs + k)] - mean[at(j)]);
      out.push_back(s / divisor);
    }
  return out;
}

Sample one(const std::string& name, Shape shape, uint64_t seed) {
  return {name, [=](DType t, Device d) { return TensorList{rnd(shape, t, d, seed)}; }};
}

Sample two(const std::string& name, Shape a, Shape b, uint64_t seed) {
  return {name, [=](DType t, Device d) { return TensorList{rnd(a, t, d, seed), rnd(b, t, d, seed + 1)}; }};
}

}  // namespace

void add_other_rows(std::vector<OpRow>& rows) {
  {
    OpRow r = make_row(
        "cross", kFloatTypes,
        {two("[4, 3] x [4, 3]", {4, 3}, {4, 3}, 11), two("[3, 5] x [3, 1] along dim 0, broadcast", {3, 5}, {3, 1}, 13)},
        [](const TensorList& in) { return TensorList{cross(in[0], in[1], in[0].size(0) == 3 ? 0 : -1)}; },
        [](const TensorList& in) {
          const int64_t dim = in[0].size(0) == 3 ? 0 : 1;
          const Shape shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), "cross");
          const Tensor a = in[0].expand(shape).contiguous(), b = in[1].expand(shape).contiguous();
          const Values av = values(a), bv = values(b);
          Values out(av.size());
          for (int64_t e = 0; e < a.numel(); ++e) {
            Shape idx = unravel(e, shape);
            auto comp = [&](const Values& v, int64_t c) {
              Shape i = idx;
              i[at(dim)] = c;
              return v[at(ravel(i, shape))];
            };
            const int64_t c = idx[at(dim)], c1 = (c + 1) % 3, c2 = (c + 2) % 3;
            out[at(e)] = comp(av, c1) * comp(bv, c2) - comp(av, c2) * comp(bv, c1);
          }
          return TensorList{from_values(out, shape)};
        },
        {0, 1}, same_dtype);
    r.errors = {{"no dim of 3",
                 [] {
                   cross(ones({4, 2}), ones({4, 2}));
                 },
                 {"cross", "3 elements", "[4, 2]"}},
                {"different ranks",
                 [] {
                   cross(ones({3}), ones({2, 3}));
                 },
                 {"cross", "[3]", "[2, 3]"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "kron", kFloatTypes,
        {two("[2, 3] and [3, 2]", {2, 3}, {3, 2}, 21), two("[3] and [2, 2] (a's shape padded)", {3}, {2, 2}, 23),
         two("[2, 1, 2] and [2, 3, 1]", {2, 1, 2}, {2, 3, 1}, 25)},
        [](const TensorList& in) { return TensorList{kron(in[0], in[1])}; },
        [](const TensorList& in) {
          const int64_t rank = std::max(in[0].dim(), in[1].dim());
          auto padded = [rank](const Tensor& t) {
            Shape s(at(rank - t.dim()), 1);
            s.insert(s.end(), t.sizes().begin(), t.sizes().end());
            return s;
          };
          const Shape as = padded(in[0]), bs = padded(in[1]);
          Shape os;
          for (size_t k = 0; k < as.size(); ++k) os.push_back(as[k] * bs[k]);
          const Values av = values(in[0]), bv = values(in[1]);
          Values out;
          for (int64_t e = 0; e < shape_numel(os); ++e) {
            const Shape idx = unravel(e, os);
            Shape i, j;
            for (size_t k = 0; k < idx.size(); ++k) {
              i.push_back(idx[k] / bs[k]);
              j.push_back(idx[k] % bs[k]);
            }
            out.push_back(av[at(ravel(i, as))] * bv[at(ravel(j, bs))]);
          }
          return TensorList{from_values(out, os)};
        },
        {0, 1}, same_dtype);
    rows.push_back(std::move(r));
  }
  for (const int64_t k : {1, 2, 3, -1, 6}) {
    OpRow r = make_row(
        "rot90 k " + std::to_string(k), kFloatTypes,
        {one("[3, 4]", {3, 4}, 31), one("[2, 3, 4] in dims (2, 0)", {2, 3, 4}, 33)},
        [k](const TensorList& in) {
          return TensorList{in[0].dim() == 2 ? rot90(in[0], k) : rot90(in[0], k, {2, 0})};
        },
        [k](const TensorList& in) {
          // A quarter turn from dim a toward dim b: out[.., i (along a), .., j (along b)] reads
          // x[.., j, .., n_a' - 1 - i] with the sizes swapped; applied (k mod 4) times.
          const int64_t a = in[0].dim() == 2 ? 0 : 2, b = in[0].dim() == 2 ? 1 : 0;
          Tensor x = in[0];
          for (int64_t turn = 0; turn < ((k % 4) + 4) % 4; ++turn) {
            Shape os = x.sizes();
            std::swap(os[at(a)], os[at(b)]);
            const Values v = values(x);
            Values out;
            for (int64_t e = 0; e < shape_numel(os); ++e) {
              const Shape o = unravel(e, os);
              Shape src = o;
              src[at(a)] = o[at(b)];
              src[at(b)] = x.size(b) - 1 - o[at(a)];
              out.push_back(v[at(ravel(src, x.sizes()))]);
            }
            x = from_values(out, os);
          }
          return TensorList{x.to(DType::Float64)};
        },
        {0}, same_dtype);
    for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};  // copies
    if (k == 1) {
      r.errors = {{"one dim", [] { rot90(ones({3}), 1); }, {"rot90", "2 dims", "[3]"}},
                  {"the same dim twice",
                   [] {
                     rot90(ones({3, 3}), 1, {1, -1});
                   },
                   {"rot90", "different"}}};
    }
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "block_diag", kFloatTypes,
        {{"[2, 3], [1], 0-d, [2, 2]",
          [](DType t, Device d) {
            return TensorList{rnd({2, 3}, t, d, 41), rnd({1}, t, d, 42), rnd({}, t, d, 43), rnd({2, 2}, t, d, 44)};
          }}},
        [](const TensorList& in) { return TensorList{block_diag(in)}; },
        [](const TensorList& in) {
          int64_t rows_total = 0, cols_total = 0;
          for (const Tensor& t : in) {
            rows_total += t.dim() == 2 ? t.size(0) : 1;
            cols_total += t.dim() == 0 ? 1 : t.size(-1);
          }
          Values out(at(rows_total * cols_total), 0.0);
          int64_t r0 = 0, c0 = 0;
          for (const Tensor& t : in) {
            const int64_t nr = t.dim() == 2 ? t.size(0) : 1, nc = t.dim() == 0 ? 1 : t.size(-1);
            const Values v = values(t);
            for (int64_t i = 0; i < nr; ++i)
              for (int64_t j = 0; j < nc; ++j) out[at((r0 + i) * cols_total + c0 + j)] = v[at(i * nc + j)];
            r0 += nr;
            c0 += nc;
          }
          return TensorList{from_values(out, {rows_total, cols_total})};
        },
        {0, 1, 2, 3}, same_dtype);
    for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};  // copies
    r.errors = {{"a 3-d block", [] { block_diag({ones({2, 2}), ones({1, 2, 2})}); }, {"block_diag", "[1, 2, 2]"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "cartesian_prod", kFloatTypes,
        {{"[3], [2], [2]",
          [](DType t, Device d) {
            return TensorList{rnd({3}, t, d, 51), rnd({2}, t, d, 52), rnd({2}, t, d, 53)};
          }}},
        [](const TensorList& in) { return TensorList{cartesian_prod(in)}; },
        [](const TensorList& in) {
          Values out;
          const Values a = values(in[0]), b = values(in[1]), c = values(in[2]);
          for (const double x : a)
            for (const double y : b)
              for (const double z : c) out.insert(out.end(), {x, y, z});
          return TensorList{from_values(out, {static_cast<int64_t>(out.size() / 3), 3})};
        },
        {0, 1, 2}, same_dtype);
    for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};  // copies
    r.errors = {{"a 2-d tensor", [] { cartesian_prod({ones({2}), ones({2, 2})}); }, {"cartesian_prod", "[2, 2]"}}};
    rows.push_back(std::move(r));
  }
  {
    // cov: samples carry their weights; params: correction, and which weights (0 none, 1 fweights,
    // 2 aweights, 3 both).
    auto sample = [](const std::string& name, Shape shape, int64_t correction, int64_t weights, uint64_t seed) {
      return Sample{name, [=](DType t, Device d) {
                      const int64_t obs = shape.back();
                      TensorList in{rnd(shape, t, d, seed), params({correction, weights}, d)};
                      std::vector<int64_t> frequencies;
                      for (int64_t k = 0; k < obs; ++k)
                        frequencies.push_back(static_cast<int64_t>((seed + 5 * k) % 3 + 1));
                      in.push_back(tensor(frequencies).to(d));
                      in.push_back(rnd_range({obs}, t, d, seed + 2, 0.5, 2.0));
                      return in;
                    }};
    };
    OpRow r = make_row(
        "cov", kFloatTypes,
        {sample("3 variables x 6 observations", {3, 6}, 1, 0, 61), sample("correction 0", {2, 5}, 0, 0, 63),
         sample("one variable (1-d)", {7}, 1, 0, 65), sample("fweights", {3, 6}, 1, 1, 67),
         sample("aweights", {3, 6}, 1, 2, 69), sample("both weights, correction 2", {2, 8}, 2, 3, 71)},
        [](const TensorList& in) {
          const std::vector<int64_t> q = param_values(in[1]);
          return TensorList{cov(in[0], q[0], q[1] & 1 ? in[2] : Tensor(), q[1] & 2 ? in[3] : Tensor())};
        },
        [](const TensorList& in) {
          const std::vector<int64_t> q = param_values(in[1]);
          const Values c =
              ref_cov(in[0], q[0], q[1] & 1 ? values(in[2]) : Values(), q[1] & 2 ? values(in[3]) : Values());
          const int64_t vars = in[0].dim() < 2 ? 1 : in[0].size(0);
          return TensorList{in[0].dim() < 2 ? from_values(c, {}) : from_values(c, {vars, vars})};
        },
        {0}, same_dtype);
    // Means and sums of products over the observations, each rounded in a half type.
    r.tolerance[DType::Float16] = {4e-3, 4e-3};
    r.tolerance[DType::BFloat16] = {3e-2, 3e-2};
    r.errors = {{"a 3-d input",
                 [] {
                   cov(ones({2, 3, 4}));
                 },
                 {"cov", "[2, 3, 4]"}},
                {"fweights of the wrong length",
                 [] {
                   cov(ones({2, 4}), 1, ones({3}, DType::Int64));
                 },
                 {"cov", "fweights", "4", "[3]"}},
                {"floating fweights",
                 [] {
                   cov(ones({2, 4}), 1, ones({4}));
                 },
                 {"cov", "fweights", "integers"}},
                {"negative aweights",
                 [] {
                   cov(ones({2, 4}), 1, Tensor(), full({4}, -1.0));
                 },
                 {"cov", "aweights", "negative"}}};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "corrcoef", kFloatTypes, {one("3 variables x 7 observations", {3, 7}, 81), one("2 x 4", {2, 4}, 83)},
        [](const TensorList& in) { return TensorList{corrcoef(in[0])}; },
        [](const TensorList& in) {
          const int64_t vars = in[0].size(0);
          Values c = ref_cov(in[0], 1, {}, {});
          Values out;
          for (int64_t i = 0; i < vars; ++i)
            for (int64_t j = 0; j < vars; ++j) {
              const double r = c[at(i * vars + j)] / std::sqrt(c[at(i * vars + i)] * c[at(j * vars + j)]);
              out.push_back(std::clamp(r, -1.0, 1.0));
            }
          return TensorList{from_values(out, {vars, vars})};
        },
        {0}, same_dtype);
    r.tolerance[DType::Float16] = {4e-3, 4e-3};
    r.tolerance[DType::BFloat16] = {3e-2, 3e-2};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
