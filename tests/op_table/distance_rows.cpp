// Op table rows of the distance family: vector_norm (orders 1, 2, 3 and inf), normalize,
// cosine_similarity, pairwise_distance, cdist (both of its routes) and pdist, against float64
// loops. A zero vector sits in the norm's samples: its gradient must be 0, which gradcheck's
// central difference also finds there.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

double norm_of(const Values& v, double ord) {
  if (std::isinf(ord)) {
    double m = 0;
    for (double x : v) m = std::max(m, std::fabs(x));
    return m;
  }
  double s = 0;
  for (double x : v) s += std::pow(std::fabs(x), ord);
  return std::pow(s, 1.0 / ord);
}

Tensor ref_norm(const Tensor& x, double ord, const Shape& dims, bool keepdim) {
  return ref_reduce(x, dims, keepdim, [ord](const Values& v) { return norm_of(v, ord); });
}

// The 3-d samples of a reduction, and one whose [.., 2, :] line is all zeros.
std::vector<Sample> norm_samples(uint64_t seed) {
  return {
      {"3x5x7",
       [seed](DType t, Device d) {
         return TensorList{rnd({3, 5, 7}, t, d, seed)};
       }},
      {"non-contiguous 3x5x9",
       [seed](DType t, Device d) {
         return TensorList{noncontig(rnd({3, 5, 9}, t, d, seed + 1))};
       }},
      {"a zero line",
       [seed](DType t, Device d) {
         Tensor x = rnd({3, 4, 6}, t, d, seed + 2);
         NoGradGuard g;
         x.select(1, 2).fill_(0.0);
         return TensorList{x};
       }},
  };
}

OpRow norm_row(const std::string& name, double ord, Shape dims, bool keepdim, uint64_t seed) {
  return make_row(
      name, kFloatTypes, norm_samples(seed),
      [=](const TensorList& in) { return TensorList{vector_norm(in[0], ord, dims, keepdim)}; },
      [=](const TensorList& in) { return TensorList{ref_norm(in[0], ord, dims, keepdim)}; }, {0}, same_dtype);
}

// Broadcast pairs of a distance op: same shapes, and x2 broadcast over x1's leading dims.
std::vector<Sample> pair_samples(uint64_t seed, Shape a, Shape b) {
  return {
      {"same shapes",
       [=](DType t, Device d) {
         return TensorList{rnd(a, t, d, seed), rnd(a, t, d, seed + 1)};
       }},
      {"broadcast",
       [=](DType t, Device d) {
         return TensorList{rnd(a, t, d, seed + 2), rnd(b, t, d, seed + 3)};
       }},
  };
}

// sum over dim of x1 / max(|x1|, eps) * x2 / max(|x2|, eps), broadcast, in float64.
Tensor ref_cosine(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  const Tensor prod = ref_map({x1, x2}, [](const Values& v) { return v[0] * v[1]; });
  const Shape& shape = prod.sizes();
  const int64_t d = wrap(dim, static_cast<int64_t>(shape.size()));
  const Tensor a = ref_map({x1, zeros(shape, TensorOptions(DType::Float64))}, [](const Values& v) { return v[0]; });
  const Tensor b = ref_map({x2, zeros(shape, TensorOptions(DType::Float64))}, [](const Values& v) { return v[0]; });
  const Tensor na = ref_norm(a, 2.0, {d}, true), nb = ref_norm(b, 2.0, {d}, true);
  const Tensor terms = ref_map(
      {a, na, b, nb}, [eps](const Values& v) { return v[0] / std::max(v[1], eps) * (v[2] / std::max(v[3], eps)); });
  return ref_reduce(terms, {d}, false, [](const Values& v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
  });
}

// Every distance between rows of x1 [*, P, M] and x2 [*, R, M] (equal batch dims), in float64.
Tensor ref_cdist(const Tensor& x1, const Tensor& x2, double p) {
  const Shape s1 = x1.sizes(), s2 = x2.sizes();
  const int64_t m = s1.back(), rows1 = s1[s1.size() - 2], rows2 = s2[s2.size() - 2];
  const int64_t batch = shape_numel(s1) / (rows1 * m);
  const Values a = values(x1), b = values(x2);
  Values out;
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t i = 0; i < rows1; ++i)
      for (int64_t j = 0; j < rows2; ++j) {
        Values diff;
        for (int64_t k = 0; k < m; ++k) diff.push_back(a[at((n * rows1 + i) * m + k)] - b[at((n * rows2 + j) * m + k)]);
        out.push_back(norm_of(diff, p));
      }
  Shape os = s1;
  os.back() = rows2;
  return from_values(out, os);
}

}  // namespace

void add_distance_rows(std::vector<OpRow>& rows) {
  {
    OpRow r = norm_row("vector_norm 2 dim 2", 2.0, {2}, false, 11);
    const double inf = std::numeric_limits<double>::infinity();
    r.errors = {
        {"order below 1",
         [] {
           vector_norm(ones({2, 3}), 0.5);
         },
         {"vector_norm", "0.5", "[2, 3]"}},
        {"order -inf",
         [inf] {
           vector_norm(ones({2, 3}), -inf);
         },
         {"vector_norm", "-inf"}},
        {"integer input",
         [] {
           vector_norm(ones({2, 3}, TensorOptions(DType::Int64)));
         },
         {"vector_norm", "int64"}},
        {"inf-norm of nothing",
         [inf] {
           vector_norm(ones({2, 0}), inf, {1});
         },
         {"vector_norm", "empty", "[2, 0]"}},
        undefined_input("vector_norm", [](const Tensor& x) { return vector_norm(x); }),
    };
    rows.push_back(std::move(r));
  }
  rows.push_back(norm_row("vector_norm 1 dims 0 2 keepdim", 1.0, {0, 2}, true, 21));
  rows.push_back(norm_row("vector_norm 3 all", 3.0, {}, false, 31));
  {
    // Distinct values: no ties for the max's gradient to split.
    OpRow r = norm_row("vector_norm inf dim -1", std::numeric_limits<double>::infinity(), {-1}, false, 41);
    r.samples = distinct_samples(41);
    rows.push_back(std::move(r));
  }
  {
    // No zero vectors: the clamp's kink at eps is no place for a finite difference.
    OpRow r = make_row(
        "normalize", kFloatTypes, one_input_samples(51),
        [](const TensorList& in) {
          return TensorList{normalize(in[0]), normalize(in[0], 1.0, -1)};
        },
        [](const TensorList& in) {
          auto unit = [&](double p, int64_t dim) {
            const int64_t d = wrap(dim, in[0].dim());
            return ref_map({in[0], ref_norm(in[0], p, {d}, true)},
                           [](const Values& v) { return v[0] / std::max(v[1], 1e-12); });
          };
          return TensorList{unit(2.0, 1), unit(1.0, -1)};
        },
        {0}, same_dtype);
    r.errors = {{"negative eps",
                 [] {
                   normalize(ones({2, 3}), 2.0, 1, -1.0);
                 },
                 {"normalize", "eps", "-1"}},
                {"dim out of range",
                 [] {
                   normalize(ones({2, 3}), 2.0, 2);
                 },
                 {"normalize", "2"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "cosine_similarity", kFloatTypes, pair_samples(61, {4, 3, 5}, {3, 5}),
        [](const TensorList& in) { return TensorList{cosine_similarity(in[0], in[1], -1)}; },
        [](const TensorList& in) { return TensorList{ref_cosine(in[0], in[1], -1, 1e-8)}; }, {0, 1}, same_dtype);
    r.samples.push_back({"dim 1, [4, 5, 1] with [5, 3]", [](DType t, Device d) {
                           return TensorList{rnd({4, 5, 1}, t, d, 67), rnd({5, 3}, t, d, 68)};
                         }});
    r.op = [](const TensorList& in) {
      return TensorList{cosine_similarity(in[0], in[1], in[0].dim() == 3 && in[0].size(2) == 1 ? 1 : -1)};
    };
    r.reference = [](const TensorList& in) {
      return TensorList{ref_cosine(in[0], in[1], in[0].dim() == 3 && in[0].size(2) == 1 ? 1 : -1, 1e-8)};
    };
    r.errors = {
        {"shapes that do not broadcast",
         [] {
           cosine_similarity(ones({2, 3}), ones({4, 3}));
         },
         {"cosine_similarity", "[2, 3]", "[4, 3]"}},
        {"integer x2",
         [] {
           cosine_similarity(ones({2, 3}), ones({2, 3}, TensorOptions(DType::Int64)));
         },
         {"cosine_similarity", "int64"}},
    };
    rows.push_back(std::move(r));
  }
  for (double p : {2.0, 1.0, 3.0}) {
    const std::string name = "pairwise_distance p " + std::to_string(static_cast<int>(p));
    OpRow r = make_row(
        name, kFloatTypes, pair_samples(71 + static_cast<uint64_t>(p), {4, 6}, {6}),
        [p](const TensorList& in) {
          return TensorList{pairwise_distance(in[0], in[1], p), pairwise_distance(in[0], in[1], p, 1e-6, true)};
        },
        [p](const TensorList& in) {
          const Tensor diff = ref_map({in[0], in[1]}, [](const Values& v) { return v[0] - v[1] + 1e-6; });
          return TensorList{ref_norm(diff, p, {-1}, false), ref_norm(diff, p, {-1}, true)};
        },
        {0, 1}, same_dtype);
    if (p == 2.0) {
      r.errors = {
          {"0-d operands", [] { pairwise_distance(ones({}), ones({})); }, {"pairwise_distance", "no dim"}},
          {"order below 1", [] { pairwise_distance(ones({2}), ones({2}), 0.0); }, {"pairwise_distance", "order"}}};
    }
    rows.push_back(std::move(r));
  }
  {
    auto sample = [](const std::string& name, Shape a, Shape b, uint64_t seed) {
      return Sample{name, [=](DType t, Device d) { return TensorList{rnd(a, t, d, seed), rnd(b, t, d, seed + 1)}; }};
    };
    for (double p : {2.0, 1.0}) {
      OpRow r = make_row(
          "cdist p " + std::to_string(static_cast<int>(p)), kFloatTypes,
          {sample("3x4 and 5x4", {3, 4}, {5, 4}, 81), sample("batched 2x3x4 and 2x5x4", {2, 3, 4}, {2, 5, 4}, 83),
           // Above 25 rows p = 2 takes the matrix-product route.
           sample("30x3 and 4x3", {30, 3}, {4, 3}, 85)},
          [p](const TensorList& in) { return TensorList{cdist(in[0], in[1], p)}; },
          [p](const TensorList& in) { return TensorList{ref_cdist(in[0], in[1], p)}; }, {0, 1}, same_dtype);
      if (p == 2.0) {
        r.errors = {{"rows of other lengths",
                     [] {
                       cdist(ones({3, 4}), ones({5, 3}));
                     },
                     {"cdist", "one length", "[3, 4]", "[5, 3]"}},
                    {"1-d operand",
                     [] {
                       cdist(ones({4}), ones({5, 4}));
                     },
                     {"cdist", "[*, P, M]", "[4]"}}};
        r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
      }
      rows.push_back(std::move(r));
    }
  }
  {
    // pdist: the norm of row i less row j for every i < j, in that order.
    auto ref_pdist = [](const Tensor& x, double p) {
      const Values v = values(x);
      const int64_t n = x.size(0), m = x.size(1);
      Values out;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i + 1; j < n; ++j) {
          Values d;
          for (int64_t k = 0; k < m; ++k) d.push_back(v[at(i * m + k)] - v[at(j * m + k)]);
          out.push_back(norm_of(d, p));
        }
      return from_values(out, {static_cast<int64_t>(out.size())});
    };
    for (double p : {2.0, 1.0, 3.0}) {
      OpRow r = make_row(
          "pdist p " + std::to_string(static_cast<int>(p)), kFloatTypes,
          {{"5x3",
            [](DType t, Device d) {
              return TensorList{rnd({5, 3}, t, d, 91)};
            }},
           {"non-contiguous 4x6",
            [](DType t, Device d) {
              return TensorList{noncontig(rnd({4, 6}, t, d, 93))};
            }}},
          [p](const TensorList& in) { return TensorList{pdist(in[0], p)}; },
          [p, ref_pdist](const TensorList& in) { return TensorList{ref_pdist(in[0], p)}; }, {0}, same_dtype);
      if (p == 2.0) {
        r.errors = {{"a 3-d input",
                     [] {
                       pdist(ones({2, 3, 4}));
                     },
                     {"pdist", "[N, M]", "[2, 3, 4]"}},
                    {"an integer input",
                     [] {
                       pdist(ones({3, 4}, DType::Int64));
                     },
                     {"pdist", "int64"}}};
      }
      r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
      rows.push_back(std::move(r));
    }
  }
}

}  // namespace kiln::test
