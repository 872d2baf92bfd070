// Op table rows of the triangle family: tril and triu with diagonal offsets 0, 1 and -1, over the
// last two dims of 2-d and 3-d inputs (wide and tall, non-contiguous and transposed); diagonal,
// diag_embed, diag and trace, with offsets above and below the main diagonal.
#include <algorithm>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

Tensor ref_triangle(const Tensor& x, int64_t k, bool upper) {
  std::vector<double> xv = values(x);
  const Shape& s = x.sizes();
  for (int64_t i = 0; i < x.numel(); ++i) {
    Shape idx = unravel(i, s);
    int64_t diag = idx[s.size() - 1] - idx[s.size() - 2];  // j - i
    if (upper ? diag < k : diag > k) xv[at(i)] = 0;
  }
  return from_values(xv, s);
}

// tril/triu need at least 2 dims.
std::vector<ErrorCase> triangle_errors(const char* name, bool upper) {
  return {{"1-d input", [upper] { upper ? triu(zeros({5})) : tril(zeros({5})); }, {name, "[5]"}}};
}

OpRow triangle_row(const std::string& name, int64_t k, bool upper, uint64_t seed) {
  std::vector<Sample> s = one_input_samples(seed);
  s.push_back({"7x5", [seed](DType t, Device d) { return TensorList{rnd({7, 5}, t, d, seed + 3)}; }});
  s.push_back({"transposed last dims 3x7x5",
               [seed](DType t, Device d) { return TensorList{rnd({3, 5, 7}, t, d, seed + 4).transpose(-1, -2)}; }});
  OpRow r = unary_row(
      name, s, [k, upper](const Tensor& x) { return upper ? triu(x, k) : tril(x, k); },
      [k, upper](const Tensor& x) { return ref_triangle(x, k, upper); });
  r.errors = triangle_errors(upper ? "triu" : "tril", upper);
  return r;
}

// x's offset diagonal over dims d1 < d2, the diagonal last (plain loops).
Tensor ref_diagonal(const Tensor& x, int64_t offset, int64_t d1, int64_t d2) {
  const Values v = values(x);
  Shape rest;
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (k != d1 && k != d2) rest.push_back(x.size(k));
  }
  const int64_t rows = x.size(d1), cols = x.size(d2);
  int64_t n = 0;
  while (n < rows && n < cols && (offset >= 0 ? n + offset < cols : n - offset < rows)) ++n;
  Shape out_shape = rest;
  out_shape.push_back(n);
  Values out;
  for (int64_t i = 0; i < shape_numel(out_shape); ++i) {
    const Shape p = unravel(i, out_shape);
    Shape q;
    size_t r = 0;
    for (int64_t k = 0; k < x.dim(); ++k) {
      if (k == d1) {
        q.push_back(p.back() + (offset < 0 ? -offset : 0));
      } else if (k == d2) {
        q.push_back(p.back() + (offset > 0 ? offset : 0));
      } else {
        q.push_back(p[r++]);
      }
    }
    out.push_back(v[at(ravel(q, x.sizes()))]);
  }
  return from_values(out, out_shape);
}

}  // namespace

void add_triangle_rows(std::vector<OpRow>& rows) {
  rows.push_back(triangle_row("tril", 0, false, 1600));
  rows.push_back(triangle_row("tril_k1", 1, false, 1610));
  rows.push_back(triangle_row("tril_kneg1", -1, false, 1620));
  rows.push_back(triangle_row("triu", 0, true, 1630));
  rows.push_back(triangle_row("triu_k1", 1, true, 1640));
  rows.push_back(triangle_row("triu_kneg1", -1, true, 1650));

  // --- diagonal, diag_embed, diag, trace -------------------------------------------------------
  {
    // Over dims 0 and 2 of 3-d inputs, one above the main diagonal; output 1 below it over the
    // last two dims.
    OpRow r = unary_row(
        "diagonal", one_input_samples(1660), [](const Tensor& x) { return diagonal(x, 1, 0, 2); },
        [](const Tensor& x) { return ref_diagonal(x, 1, 0, 2); });
    r.op = [](const TensorList& x) { return TensorList{diagonal(x[0], 1, 0, 2), diagonal(x[0], -2, -2, -1)}; };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_diagonal(x[0], 1, 0, 2), ref_diagonal(x[0], -2, 1, 2)};
    };
    r.errors = {
        {"1-d input", [] { diagonal(zeros({5})); }, {"diagonal", "[5]"}},
        {"one dim twice",
         [] {
           diagonal(zeros({3, 4}), 0, 1, -1);
         },
         {"diagonal", "same dimension 1"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // The last dim of 2-d inputs onto new matrices over dims 0 and 2, one below the diagonal.
    std::vector<Sample> samples = {
        {"4x5",
         [](DType t, Device d) {
           return TensorList{rnd({4, 5}, t, d, 1670)};
         }},
        {"transposed 3x4",
         [](DType t, Device d) {
           return TensorList{rnd({4, 3}, t, d, 1671).t()};
         }},
    };
    OpRow r = unary_row(
        "diag_embed", samples, [](const Tensor& x) { return diag_embed(x, -1, 0, 2); },
        [](const Tensor& x) {
          const int64_t n = x.size(1) + 1;
          const Values v = values(x);
          Values out(at(n * x.size(0) * n));
          for (int64_t b = 0; b < x.size(0); ++b) {
            for (int64_t k = 0; k < x.size(1); ++k)
              out[at(ravel({k + 1, b, k}, {n, x.size(0), n}))] = v[at(b * x.size(1) + k)];
          }
          return from_values(out, {n, x.size(0), n});
        });
    r.errors = {{"0-d input", [] { diag_embed(zeros({})); }, {"diag_embed", "0-d"}},
                {"one dim twice", [] { diag_embed(zeros({3}), 0, 0, -2); }, {"diag_embed", "same dimension 0"}}};
    rows.push_back(std::move(r));
  }
  {
    // A 1-d input onto a matrix (two above the diagonal), and a 2-d input's diagonal back (a copy).
    std::vector<Sample> samples = {
        {"5", [](DType t, Device d) { return TensorList{rnd({5}, t, d, 1680)}; }},
        {"non-contiguous 4", [](DType t, Device d) { return TensorList{noncontig(rnd({4}, t, d, 1681))}; }},
    };
    OpRow r = unary_row(
        "diag", samples, [](const Tensor& x) { return diag(diag(x, 2), 2); }, [](const Tensor& x) { return x; });
    r.op = [](const TensorList& x) { return TensorList{diag(x[0], 2), diag(diag(x[0], 2), 2)}; };
    r.reference = [](const TensorList& x) {
      const int64_t n = x[0].numel() + 2;
      const Values v = values(x[0]);
      Values m(at(n * n));
      for (int64_t k = 0; k < x[0].numel(); ++k) m[at(k * n + k + 2)] = v[at(k)];
      return TensorList{from_values(m, {n, n}), from_values(v, {x[0].numel()})};
    };
    r.errors = {{"3-d input", [] { diag(zeros({2, 2, 2})); }, {"diag", "[2, 2, 2]"}}};
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> samples = {
        {"4x6",
         [](DType t, Device d) {
           return TensorList{rnd({4, 6}, t, d, 1690)};
         }},
        {"transposed 5x3",
         [](DType t, Device d) {
           return TensorList{rnd({3, 5}, t, d, 1691).t()};
         }},
    };
    OpRow r = unary_row(
        "trace", samples, [](const Tensor& x) { return trace(x); },
        [](const Tensor& x) {
          const Values v = values(x);
          double s = 0;
          for (int64_t k = 0; k < std::min(x.size(0), x.size(1)); ++k) s += v[at(k * x.size(1) + k)];
          return from_values({s}, {});
        });
    r.out_dtype = [](DType t) { return is_floating(t) ? t : DType::Int64; };
    r.errors = {{"3-d input", [] { trace(zeros({2, 2, 2})); }, {"trace", "[2, 2, 2]"}}};
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
