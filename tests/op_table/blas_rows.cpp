// Op table rows of the blas family: mm, bmm, mv, dot, inner, addmm (scaled, with a broadcast input,
// and with beta 0 ignoring a NaN input), baddbmm, addbmm, addmv, addr, tensordot (by count and by
// lists) and multi_dot (vector ends, a chain whose cheapest order is not left to right). References
// are sums in double over plain loops.
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

Sample inputs(const std::string& name, std::vector<Shape> shapes, uint64_t seed) {
  return {name, [=](DType t, Device d) {
            TensorList out;
            for (size_t k = 0; k < shapes.size(); ++k) out.push_back(rnd(shapes[k], t, d, seed + k, 0.5));
            return out;
          }};
}

// Batches of products: a [B, n, k] times b [B, k, m] (row-major values), [B, n, m].
Values ref_products(const Values& a, const Values& b, int64_t batch, int64_t n, int64_t k, int64_t m) {
  Values out;
  for (int64_t q = 0; q < batch; ++q)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += a[at((q * n + i) * k + p)] * b[at((q * k + p) * m + j)];
        out.push_back(s);
      }
  return out;
}

Tensor ref_mm(const Tensor& a, const Tensor& b) {
  return from_values(ref_products(values(a), values(b), 1, a.size(0), a.size(1), b.size(1)), {a.size(0), b.size(1)});
}

// beta input (broadcast to shape) + alpha product.
Tensor ref_scaled(const Tensor& input, const Tensor& prod, double beta, double alpha) {
  const Tensor in = input.to(DType::Float64).expand(prod.sizes()).contiguous();
  const Values iv = values(in), pv = values(prod);
  Values out;
  for (size_t e = 0; e < pv.size(); ++e) out.push_back((beta == 0 ? 0.0 : beta * iv[e]) + alpha * pv[e]);
  return from_values(out, prod.sizes());
}

OpRow product_row(const std::string& name, std::vector<Sample> samples, ListFn op, ListFn reference,
                  std::vector<size_t> differentiable, std::vector<ErrorCase> errors = {}) {
  OpRow r = make_row(name, kFloatTypes, std::move(samples), std::move(op), std::move(reference),
                     std::move(differentiable), same_dtype);
  r.errors = std::move(errors);
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  return r;
}

void add_products(std::vector<OpRow>& rows) {
  rows.push_back(product_row(
      "mm",
      {inputs("[5, 7] @ [7, 3]", {{5, 7}, {7, 3}}, 3401),
       {"transposed [4, 6]^T @ non-contiguous [4, 2]",
        [](DType t, Device d) {
          return TensorList{rnd({4, 6}, t, d, 3403, 0.5).transpose(0, 1), noncontig(rnd({4, 2}, t, d, 3404, 0.5))};
        }}},
      [](const TensorList& x) { return TensorList{mm(x[0], x[1])}; },
      [](const TensorList& x) { return TensorList{ref_mm(x[0], x[1])}; }, {0, 1},
      {{"a 3-d operand",
        [] {
          mm(zeros({2, 3, 4}), zeros({4, 2}));
        },
        {"mm", "2-d", "[2, 3, 4]"}},
       {"inner sizes differ",
        [] {
          mm(zeros({2, 3}), zeros({4, 2}));
        },
        {"mm", "[2, 3]", "[4, 2]"}},
       {"another dtype",
        [] {
          mm(zeros({2, 3}), zeros({3, 2}, DType::Float64));
        },
        {"mm", "float32", "float64"}}}));
  rows.push_back(product_row(
      "bmm", {inputs("[3, 4, 5] @ [3, 5, 2]", {{3, 4, 5}, {3, 5, 2}}, 3411)},
      [](const TensorList& x) { return TensorList{bmm(x[0], x[1])}; },
      [](const TensorList& x) {
        return TensorList{from_values(ref_products(values(x[0]), values(x[1]), 3, 4, 5, 2), {3, 4, 2})};
      },
      {0, 1},
      {{"batch sizes that would broadcast",
        [] {
          bmm(zeros({1, 2, 3}), zeros({4, 3, 2}));
        },
        {"bmm", "[1, 2, 3]", "[4, 3, 2]"}},
       {"a 2-d operand",
        [] {
          bmm(zeros({2, 3}), zeros({1, 3, 2}));
        },
        {"bmm", "3-d", "[2, 3]"}}}));
  rows.push_back(product_row(
      "mv", {inputs("[4, 6] @ [6]", {{4, 6}, {6}}, 3421)},
      [](const TensorList& x) { return TensorList{mv(x[0], x[1])}; },
      [](const TensorList& x) {
        return TensorList{ref_mm(x[0], x[1].reshape({6, 1})).reshape({4})};
      },
      {0, 1},
      {{"a 2-d vector",
        [] {
          mv(zeros({4, 6}), zeros({6, 1}));
        },
        {"mv", "1-d", "[6, 1]"}}}));
  rows.push_back(product_row(
      "dot", {inputs("[9] . [9]", {{9}, {9}}, 3431)}, [](const TensorList& x) { return TensorList{dot(x[0], x[1])}; },
      [](const TensorList& x) {
        return TensorList{ref_mm(x[0].reshape({1, 9}), x[1].reshape({9, 1})).reshape({})};
      },
      {0, 1}, {{"sizes differ", [] { dot(zeros({3}), zeros({4})); }, {"dot", "[3]", "[4]"}}}));
  rows.push_back(product_row(
      "inner",
      {inputs("[2, 3, 5] and [4, 5]", {{2, 3, 5}, {4, 5}}, 3441), inputs("0-d and [3, 2]", {{}, {3, 2}}, 3443)},
      [](const TensorList& x) { return TensorList{inner(x[0], x[1])}; },
      [](const TensorList& x) {
        if (x[0].dim() == 0) return TensorList{ref_map(x, [](const Values& v) { return v[0] * v[1]; })};
        return TensorList{ref_mm(x[0].reshape({6, 5}), x[1].transpose(0, 1)).reshape({2, 3, 4})};
      },
      {0, 1},
      {{"last dims differ",
        [] {
          inner(zeros({2, 3}), zeros({2, 4}));
        },
        {"inner", "[2, 3]", "[2, 4]"}}}));
}

void add_scaled_sums(std::vector<OpRow>& rows) {
  rows.push_back(product_row(
      "addmm beta 0.5 alpha 2, a row input",
      {inputs("[3] + [4, 5] @ [5, 3]", {{3}, {4, 5}, {5, 3}}, 3451),
       inputs("[4, 3] + ...", {{4, 3}, {4, 5}, {5, 3}}, 3454)},
      [](const TensorList& x) { return TensorList{addmm(x[0], x[1], x[2], 0.5, 2.0)}; },
      [](const TensorList& x) { return TensorList{ref_scaled(x[0], ref_mm(x[1], x[2]), 0.5, 2.0)}; }, {0, 1, 2},
      {{"an input that does not broadcast",
        [] {
          addmm(zeros({4}), zeros({4, 5}), zeros({5, 3}));
        },
        {"addmm", "[4]", "[4, 3]"}},
       {"an input of another dtype",
        [] {
          addmm(zeros({3}, DType::Float64), zeros({4, 5}), zeros({5, 3}));
        },
        {"addmm", "float64", "float32"}}}));
  {
    // beta 0 ignores the input, NaNs included (PyTorch's rule).
    OpRow r = product_row(
        "addmm beta 0 ignores a NaN input",
        {{"NaN [4, 3] + [4, 5] @ [5, 3]",
          [](DType t, Device d) {
            return TensorList{full({4, 3}, NAN, TensorOptions(t, d)), rnd({4, 5}, t, d, 3461, 0.5),
                              rnd({5, 3}, t, d, 3462, 0.5)};
          }}},
        [](const TensorList& x) { return TensorList{addmm(x[0], x[1], x[2], 0.0, 1.5)}; },
        [](const TensorList& x) { return TensorList{ref_scaled(x[0], ref_mm(x[1], x[2]), 0.0, 1.5)}; }, {1, 2});
    rows.push_back(std::move(r));
  }
  rows.push_back(product_row(
      "baddbmm alpha 0.25, a broadcast bias",
      {inputs("[1, 4, 2] + [3, 4, 5] @ [3, 5, 2]", {{1, 4, 2}, {3, 4, 5}, {3, 5, 2}}, 3471)},
      [](const TensorList& x) { return TensorList{baddbmm(x[0], x[1], x[2], 1.0, 0.25)}; },
      [](const TensorList& x) {
        const Tensor prod = from_values(ref_products(values(x[1]), values(x[2]), 3, 4, 5, 2), {3, 4, 2});
        return TensorList{ref_scaled(x[0], prod, 1.0, 0.25)};
      },
      {0, 1, 2},
      {{"batch sizes differ",
        [] {
          baddbmm(zeros({1}), zeros({2, 2, 3}), zeros({3, 3, 2}));
        },
        {"baddbmm", "[2, 2, 3]", "[3, 3, 2]"}}}));
  rows.push_back(product_row(
      "addbmm beta 2", {inputs("[4, 2] + sum of [3, 4, 5] @ [3, 5, 2]", {{4, 2}, {3, 4, 5}, {3, 5, 2}}, 3481)},
      [](const TensorList& x) { return TensorList{addbmm(x[0], x[1], x[2], 2.0)}; },
      [](const TensorList& x) {
        const Values p = ref_products(values(x[1]), values(x[2]), 3, 4, 5, 2);
        Values sum(8, 0.0);
        for (size_t e = 0; e < p.size(); ++e) sum[e % 8] += p[e];
        return TensorList{ref_scaled(x[0], from_values(sum, {4, 2}), 2.0, 1.0)};
      },
      {0, 1, 2}));
  rows.push_back(product_row(
      "addmv", {inputs("[4] + [4, 6] @ [6]", {{4}, {4, 6}, {6}}, 3491)},
      [](const TensorList& x) { return TensorList{addmv(x[0], x[1], x[2], 0.5, -1.0)}; },
      [](const TensorList& x) {
        return TensorList{ref_scaled(x[0], ref_mm(x[1], x[2].reshape({6, 1})).reshape({4}), 0.5, -1.0)};
      },
      {0, 1, 2}));
  rows.push_back(product_row(
      "addr", {inputs("[1, 5] + [3] x [5]", {{1, 5}, {3}, {5}}, 3501)},
      [](const TensorList& x) { return TensorList{addr(x[0], x[1], x[2], 1.0, 3.0)}; },
      [](const TensorList& x) {
        return TensorList{ref_scaled(x[0], ref_mm(x[1].reshape({3, 1}), x[2].reshape({1, 5})), 1.0, 3.0)};
      },
      {0, 1, 2},
      {{"a 2-d vector",
        [] {
          addr(zeros({3, 5}), zeros({3, 1}), zeros({5}));
        },
        {"addr", "1-d", "[3, 1]"}}}));
}

void add_contractions(std::vector<OpRow>& rows) {
  rows.push_back(product_row(
      "tensordot 2", {inputs("[2, 3, 4] and [3, 4, 5]", {{2, 3, 4}, {3, 4, 5}}, 3511)},
      [](const TensorList& x) { return TensorList{tensordot(x[0], x[1], 2)}; },
      [](const TensorList& x) {
        return TensorList{ref_mm(x[0].reshape({2, 12}), x[1].reshape({12, 5}))};
      },
      {0, 1},
      {{"too many dims",
        [] {
          tensordot(zeros({2, 3}), zeros({3}), 2);
        },
        {"tensordot", "[0, 1]", "[2, 3]"}}}));
  rows.push_back(product_row(
      "tensordot dims {0, 2} and {1, 0}", {inputs("[3, 2, 4] and [4, 3, 5]", {{3, 2, 4}, {4, 3, 5}}, 3521)},
      [](const TensorList& x) {
        return TensorList{tensordot(x[0], x[1], {0, 2}, {1, 0})};
      },
      [](const TensorList& x) {
        // out[j, m] = sum over i, k of a[i, j, k] b[k, i, m].
        const Values a = values(x[0]), b = values(x[1]);
        Values out;
        for (int64_t j = 0; j < 2; ++j)
          for (int64_t m = 0; m < 5; ++m) {
            double s = 0;
            for (int64_t i = 0; i < 3; ++i)
              for (int64_t k = 0; k < 4; ++k) s += a[at((i * 2 + j) * 4 + k)] * b[at((k * 3 + i) * 5 + m)];
            out.push_back(s);
          }
        return TensorList{from_values(out, {2, 5})};
      },
      {0, 1},
      {{"contracted sizes differ",
        [] {
          tensordot(zeros({3, 2}), zeros({2, 3}), {0}, {0});
        },
        {"tensordot", "3", "2"}},
       {"a dim named twice",
        [] {
          tensordot(zeros({3, 3}), zeros({3, 3}), {0, 0}, {0, 1});
        },
        {"tensordot", "once"}}}));
  rows.push_back(product_row(
      "multi_dot [3] [3, 8] [8, 2] [2]",
      {inputs("a row, two matrices, a column", {{3}, {3, 8}, {8, 2}, {2}}, 3541),
       inputs("[6, 2] [2, 7] [7, 3] (cheapest right first)", {{6, 2}, {2, 7}, {7, 3}}, 3545)},
      [](const TensorList& x) { return TensorList{multi_dot(x)}; },
      [](const TensorList& x) {
        Tensor acc = x[0].dim() == 1 ? x[0].reshape({1, x[0].size(0)}) : x[0];
        for (size_t i = 1; i < x.size(); ++i)
          acc = ref_mm(acc, x[i].dim() == 1 ? x[i].reshape({x[i].size(0), 1}) : x[i]);
        return TensorList{x[0].dim() == 1 ? acc.reshape({}) : acc};
      },
      {0, 1, 2},
      {{"one tensor",
        [] {
          multi_dot({zeros({2, 2})});
        },
        {"multi_dot", "two"}},
       {"a 1-d tensor inside",
        [] {
          multi_dot({zeros({2, 3}), zeros({3}), zeros({3, 2})});
        },
        {"multi_dot", "tensor 1", "2-d"}},
       {"sizes that do not chain",
        [] {
          multi_dot({zeros({2, 3}), zeros({4, 2})});
        },
        {"multi_dot", "[2, 3], [4, 2]"}}}));
}

}  // namespace

void add_blas_rows(std::vector<OpRow>& rows) {
  add_products(rows);
  add_scaled_sums(rows);
  add_contractions(rows);
}

}  // namespace kiln::test
