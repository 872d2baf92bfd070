// Op table rows of the linalg family: solve_triangular (lower, upper, on the right, unit diagonal,
// batches that broadcast), cholesky (lower and upper), cholesky_solve, cholesky_inverse, lu_factor,
// lu, lu_solve (left, adjoint, right), lu_unpack, solve (matrices, a vector, on the right, batches
// that broadcast), inv, det, slogdet, logdet and matrix_power (positive and negative). References
// are textbook loops in double: substitution, the Cholesky-Banachiewicz recurrence and Doolittle
// elimination with partial pivoting. Positive-definite inputs are made inside the op as x x^T + n
// I, so gradcheck perturbs x freely.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "tests/op_table/matrix_ref.h"
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// x x^T + n I: a symmetric positive-definite matrix from any square x.
Mat spd(const Mat& x) {
  Mat a = product(x, transposed(x));
  for (int64_t i = 0; i < a.n; ++i) a(i, i) += static_cast<double>(a.n);
  return a;
}

Tensor spd(const Tensor& x) {
  return matmul(x, x.transpose(-2, -1)) +
         diag_embed(full({x.size(-1)}, static_cast<double>(x.size(-1)), TensorOptions(x.dtype(), x.device())));
}

// The lower Cholesky factor, Cholesky-Banachiewicz: row by row.
Mat cholesky_ref(const Mat& a) {
  Mat l(a.n, a.n);
  for (int64_t i = 0; i < a.n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double s = a(i, j);
      for (int64_t p = 0; p < j; ++p) s -= l(i, p) * l(j, p);
      l(i, j) = i == j ? std::sqrt(s) : s / l(j, j);
    }
  return l;
}

double det_ref(const Mat& a) {
  const LuRef f = lu_ref(a);
  double d = 1;
  for (int64_t k = 0; k < a.n; ++k) d *= f.lu(k, k) * (f.pivots[at(k)] != k + 1 ? -1 : 1);
  return d;
}

Sample pair(const std::string& name, Shape a, Shape b, uint64_t seed, bool dominant = true) {
  return {name, [=](DType t, Device d) {
            // A diagonal of about 3 keeps the triangles and the solves well conditioned.
            Tensor A = rnd(a, t, d, seed, 0.5);
            if (dominant) A = A + diag_embed(full({a.back()}, 3.0, TensorOptions(t, d)));
            return TensorList{A, rnd(b, t, d, seed + 1)};
          }};
}

void add_triangular(std::vector<OpRow>& rows) {
  struct Variant {
    const char* name;
    bool upper, left, unit;
  };
  const Variant variants[] = {{"solve_triangular lower", false, true, false},
                              {"solve_triangular upper", true, true, false},
                              {"solve_triangular upper on the right", true, false, false},
                              {"solve_triangular lower unitriangular on the right", false, false, true},
                              {"solve_triangular upper unitriangular", true, true, true}};
  for (const Variant& v : variants) {
    const bool upper = v.upper, left = v.left, unit = v.unit;
    std::vector<Sample> samples{
        pair("[5, 5] and [5, 3]", {5, 5}, left ? Shape{5, 3} : Shape{3, 5}, 3501),
        pair("batches broadcast [2, 1, 4, 4] and [3, 4, 4]", {2, 1, 4, 4}, {3, 4, 4}, 3503),
        {"a transposed A and a non-contiguous B",
         [=](DType t, Device d) {
           const Tensor A = rnd({4, 4}, t, d, 3505, 0.5) + diag_embed(full({4}, 3.0, TensorOptions(t, d)));
           return TensorList{A.t(), noncontig(rnd({4, 4}, t, d, 3506))};
         }},
        pair("an empty B [4, 4] and [4, 0]", {4, 4}, left ? Shape{4, 0} : Shape{0, 4}, 3507)};
    std::vector<ErrorCase> errors;
    if (!unit && !upper && left) {
      errors = {{"A not square",
                 [] {
                   solve_triangular(zeros({3, 4}), zeros({3, 2}), false);
                 },
                 {"solve_triangular", "square", "[3, 4]"}},
                {"B does not fit",
                 [] {
                   solve_triangular(zeros({3, 3}), zeros({4, 2}), false);
                 },
                 {"solve_triangular", "[4, 2]", "[3, 3]"}},
                {"B does not fit on the right",
                 [] {
                   solve_triangular(zeros({3, 3}), zeros({3, 2}), false, false);
                 },
                 {"solve_triangular", "[3, 2]", "right"}},
                {"batches that do not broadcast",
                 [] {
                   solve_triangular(zeros({2, 3, 3}), zeros({4, 3, 1}), false);
                 },
                 {"solve_triangular", "[2]", "[4]"}},
                {"dtypes differ",
                 [] {
                   solve_triangular(zeros({3, 3}), zeros({3, 1}, DType::Float64), false);
                 },
                 {"solve_triangular", "float32", "float64"}},
                {"half precision",
                 [] {
                   solve_triangular(zeros({3, 3}, DType::Float16), zeros({3, 1}, DType::Float16), false);
                 },
                 {"solve_triangular", "float16"}},
                {"a vector B",
                 [] {
                   solve_triangular(zeros({3, 3}), zeros({3}), false);
                 },
                 {"solve_triangular", "[3]"}},
                undefined_input("solve_triangular", [](const Tensor& t) {
                  return solve_triangular(t, zeros({3, 1}), false);
                })};
    }
    rows.push_back(linalg_row(
        v.name, std::move(samples),
        [=](const TensorList& x) { return TensorList{solve_triangular(x[0], x[1], upper, left, unit)}; },
        [=](const TensorList& x) {
          if (left) {
            return TensorList{
                per_pair(x[0], x[1], [=](const Mat& a, const Mat& b) { return substitute(a, b, upper, unit); })};
          }
          // X A = B is A^T X^T = B^T, A^T triangular the other way.
          return TensorList{per_pair(x[0], x[1], [=](const Mat& a, const Mat& b) {
            return transposed(substitute(transposed(a), transposed(b), !upper, unit));
          })};
        },
        {0, 1}, std::move(errors)));
  }
}

void add_cholesky(std::vector<OpRow>& rows) {
  const std::vector<Sample> squares{single("[4, 4]", {4, 4}, 3511), single("batched [2, 3, 5, 5]", {2, 3, 5, 5}, 3512),
                                    single("[1, 1]", {1, 1}, 3513), single("empty [0, 0]", {0, 0}, 3514)};
  rows.push_back(linalg_row(
      "cholesky of x x^T + n I", squares, [](const TensorList& x) { return TensorList{cholesky(spd(x[0]))}; },
      [](const TensorList& x) {
        return TensorList{per_matrix(x[0], [](const Mat& a) { return cholesky_ref(spd(a)); })};
      },
      {0},
      {{"not positive-definite",
        [] {
          cholesky(tensor({1.0f, 2.0f, 2.0f, 1.0f}, {2, 2}));
        },
        {"cholesky", "positive-definite", "order 2"}},
       {"the second of a batch not positive-definite",
        [] {
          cholesky(tensor({4.0f, 0.0f, 0.0f, 1.0f, -1.0f, 0.0f, 0.0f, 1.0f}, {2, 2, 2}));
        },
        {"cholesky", "order 1", "batch element 1"}},
       {"not square",
        [] {
          cholesky(zeros({2, 3}));
        },
        {"cholesky", "square", "[2, 3]"}},
       {"1-d", [] { cholesky(zeros({4})); }, {"cholesky", "[4]"}},
       {"an integer matrix",
        [] {
          cholesky(zeros({2, 2}, DType::Int64));
        },
        {"cholesky", "int64"}},
       undefined_input("cholesky", [](const Tensor& t) { return cholesky(t); })}));
  rows.push_back(linalg_row(
      "cholesky upper", {squares[0], squares[1]},
      [](const TensorList& x) { return TensorList{cholesky(spd(x[0]), true)}; },
      [](const TensorList& x) {
        return TensorList{per_matrix(x[0], [](const Mat& a) { return transposed(cholesky_ref(spd(a))); })};
      },
      {0}));
  rows.push_back(linalg_row(
      "cholesky_solve",
      {pair("[4, 4] and [4, 3]", {4, 4}, {4, 3}, 3515),
       pair("batches broadcast [3, 1, 3, 3] and [2, 3, 2]", {3, 1, 3, 3}, {2, 3, 2}, 3517)},
      [](const TensorList& x) {
        const Tensor L = cholesky(spd(x[0]));
        return TensorList{cholesky_solve(x[1], L), cholesky_solve(x[1], L.transpose(-2, -1), true)};
      },
      [](const TensorList& x) {
        const Tensor X = per_pair(x[0], x[1], [](const Mat& a, const Mat& b) { return solve_ref(spd(a), b); });
        return TensorList{X, X};
      },
      {0, 1},
      {{"B does not fit",
        [] {
          cholesky_solve(zeros({4, 2}), eye(3));
        },
        {"cholesky_solve", "[4, 2]", "[3, 3]"}},
       {"L not square",
        [] {
          cholesky_solve(zeros({3, 2}), zeros({3, 2}));
        },
        {"cholesky_solve", "L", "square"}}}));
  rows.push_back(linalg_row(
      "cholesky_inverse", {squares[0], squares[1]},
      [](const TensorList& x) { return TensorList{cholesky_inverse(cholesky(spd(x[0])))}; },
      [](const TensorList& x) {
        return TensorList{per_matrix(x[0], [](const Mat& a) { return solve_ref(spd(a), identity(a.n)); })};
      },
      {0}));
}

void add_lu(std::vector<OpRow>& rows) {
  // Normal entries without a dominant diagonal: elimination must pivot.
  const std::vector<Sample> squares{single("[5, 5]", {5, 5}, 3521),
                                    single("batched [2, 3, 4, 4]", {2, 3, 4, 4}, 3522),
                                    {"transposed [4, 4]",
                                     [](DType t, Device d) {
                                       return TensorList{rnd({4, 4}, t, d, 3523).t()};
                                     }},
                                    single("[1, 1]", {1, 1}, 3524)};
  OpRow factor = linalg_row(
      "lu_factor", squares,
      [](const TensorList& x) {
        const LuFactors f = lu_factor(x[0]);
        return TensorList{f.LU, f.pivots, f.info};
      },
      [](const TensorList& x) {
        Values pivots;
        std::vector<Mat> lus;
        for (const Mat& a : matrices(x[0])) {
          LuRef f = lu_ref(a);
          for (int64_t p : f.pivots) pivots.push_back(static_cast<double>(p));
          lus.push_back(f.lu);
        }
        const Shape batch = batch_shape(x[0], 2);
        return TensorList{from_matrices(lus, x[0].sizes()), from_values(pivots, batch_shape(x[0], 1), DType::Int32),
                          zeros(batch, DType::Int32)};
      },
      {0},
      {{"not square",
        [] {
          lu_factor(zeros({3, 4}));
        },
        {"lu_factor", "square", "[3, 4]"}},
       undefined_input("lu_factor", [](const Tensor& t) { return lu_factor(t).LU; })});
  factor.exact_outputs = {1, 2};
  rows.push_back(std::move(factor));
  rows.push_back(linalg_row(
      "lu", squares,
      [](const TensorList& x) {
        const LuResult r = lu(x[0]);
        return TensorList{r.P, r.L, r.U};
      },
      [](const TensorList& x) {
        std::vector<Mat> ps, ls, us;
        for (const Mat& a : matrices(x[0])) {
          const LuRef f = lu_ref(a);
          Mat p(a.n, a.n), l = identity(a.n), u(a.n, a.n);
          for (int64_t i = 0; i < a.n; ++i) {
            p(f.perm[at(i)], i) = 1;
            for (int64_t j = 0; j < a.n; ++j) (j < i ? l(i, j) : u(i, j)) = f.lu(i, j);
          }
          ps.push_back(p);
          ls.push_back(l);
          us.push_back(u);
        }
        return TensorList{from_matrices(ps, x[0].sizes()), from_matrices(ls, x[0].sizes()),
                          from_matrices(us, x[0].sizes())};
      },
      {0}));
  struct Variant {
    const char* name;
    bool left, adjoint;
  };
  const Variant variants[] = {{"lu_solve", true, false},
                              {"lu_solve adjoint", true, true},
                              {"lu_solve on the right", false, false},
                              {"lu_solve adjoint on the right", false, true}};
  for (const Variant& v : variants) {
    const bool left = v.left, adjoint = v.adjoint;
    std::vector<ErrorCase> errors;
    if (left && !adjoint) {
      errors = {{"pivots out of range",
                 [] {
                   lu_solve(eye(3), tensor({1, 4, 3}).to(DType::Int32), zeros({3, 1}));
                 },
                 {"lu_solve", "[1, 3]", "4"}},
                {"pivots of another shape",
                 [] {
                   lu_solve(eye(3), tensor({1, 2}).to(DType::Int32), zeros({3, 1}));
                 },
                 {"lu_solve", "pivots", "[2]", "[3, 3]"}},
                {"float pivots",
                 [] {
                   lu_solve(eye(3), zeros({3}), zeros({3, 1}));
                 },
                 {"lu_solve", "float32"}},
                {"B does not fit",
                 [] {
                   lu_solve(eye(3), tensor({1, 2, 3}).to(DType::Int32), zeros({2, 1}));
                 },
                 {"lu_solve", "[2, 1]", "[3, 3]"}}};
    }
    rows.push_back(linalg_row(
        v.name,
        {pair("[4, 4] and [4, 2]", {4, 4}, left ? Shape{4, 2} : Shape{2, 4}, 3525, false),
         pair("batches broadcast [2, 1, 3, 3] and [3, 3, 3]", {2, 1, 3, 3}, {3, 3, 3}, 3527, false)},
        [=](const TensorList& x) {
          const LuFactors f = lu_factor(x[0]);
          return TensorList{lu_solve(f.LU, f.pivots, x[1], left, adjoint)};
        },
        [=](const TensorList& x) {
          return TensorList{per_pair(x[0], x[1], [=](const Mat& a, const Mat& b) {
            // X A = B is A^T X^T = B^T.
            return left ? solve_ref(a, b, adjoint) : transposed(solve_ref(a, transposed(b), !adjoint));
          })};
        },
        {0, 1}, std::move(errors)));
  }
  rows.push_back(linalg_row(
      "lu_unpack", {squares[0], squares[1]},
      [](const TensorList& x) {
        // The factors from lu_factor, unpacked: P L U is the input again.
        const LuFactors f = lu_factor(x[0]);
        const LuResult r = lu_unpack(f.LU, f.pivots);
        return TensorList{matmul(r.P, matmul(r.L, r.U))};
      },
      [](const TensorList& x) { return TensorList{x[0]}; }, {0},
      {{"pivots out of range",
        [] {
          lu_unpack(eye(2), tensor({0, 2}).to(DType::Int32));
        },
        {"lu_unpack", "[1, 2]", "0"}}}));
}

void add_solve(std::vector<OpRow>& rows) {
  rows.push_back(linalg_row(
      "solve",
      {pair("[5, 5] and [5, 2]", {5, 5}, {5, 2}, 3531, false),
       pair("batches broadcast [2, 1, 3, 3] and [4, 3, 2]", {2, 1, 3, 3}, {4, 3, 2}, 3533, false),
       {"a transposed A and a non-contiguous B",
        [](DType t, Device d) {
          return TensorList{rnd({4, 4}, t, d, 3535).t(), noncontig(rnd({4, 4}, t, d, 3536))};
        }}},
      [](const TensorList& x) { return TensorList{solve(x[0], x[1])}; },
      [](const TensorList& x) {
        return TensorList{per_pair(x[0], x[1], [](const Mat& a, const Mat& b) { return solve_ref(a, b); })};
      },
      {0, 1},
      {{"a singular matrix",
        [] {
          solve(zeros({2, 2}), zeros({2, 1}));
        },
        {"solve", "singular"}},
       {"the second of a batch singular",
        [] {
          solve(tensor({1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}, {2, 2, 2}), zeros({2, 2, 1}));
        },
        {"solve", "singular", "batch element 1"}},
       {"B does not fit",
        [] {
          solve(eye(3), zeros({2, 1}));
        },
        {"solve", "[2, 1]", "[3, 3]"}},
       {"a vector that does not fit", [] { solve(eye(3), zeros({2})); }, {"solve", "[2]", "[3, 3]"}},
       {"not square",
        [] {
          solve(zeros({2, 3}), zeros({2, 1}));
        },
        {"solve", "square"}},
       {"dtypes differ",
        [] {
          solve(eye(2), zeros({2, 1}, DType::Float64));
        },
        {"solve", "float32", "float64"}},
       undefined_input("solve", [](const Tensor& t) {
         return solve(t, zeros({2, 1}));
       })}));
  rows.push_back(linalg_row(
      "solve a vector and on the right",
      {pair("[4, 4] and [4]", {4, 4}, {4}, 3537, false),
       pair("batched [3, 4, 4] and [3, 4]", {3, 4, 4}, {3, 4}, 3539, false)},
      [](const TensorList& x) {
        return TensorList{solve(x[0], x[1]), solve(x[0], x[1], false)};
      },
      [](const TensorList& x) {
        TensorList out;
        for (bool left : {true, false}) {
          const Tensor col = x[1].unsqueeze(left ? -1 : -2);
          out.push_back(per_pair(x[0], col, [=](const Mat& a, const Mat& b) {
                          return left ? solve_ref(a, b) : transposed(solve_ref(transposed(a), transposed(b)));
                        }).squeeze(left ? -1 : -2));
        }
        return out;
      },
      {0, 1}));
  rows.push_back(linalg_row(
      "inv",
      {single("[5, 5]", {5, 5}, 3541), single("batched [2, 3, 3]", {2, 3, 3}, 3542),
       single("empty [0, 0]", {0, 0}, 3543)},
      [](const TensorList& x) { return TensorList{inv(x[0])}; },
      [](const TensorList& x) {
        return TensorList{per_matrix(x[0], [](const Mat& a) { return solve_ref(a, identity(a.n)); })};
      },
      {0},
      {{"a singular matrix",
        [] {
          inv(ones({3, 3}));
        },
        {"inv", "singular"}},
       {"not square",
        [] {
          inv(zeros({2, 3}));
        },
        {"inv", "square", "[2, 3]"}}}));
  // inv_ex: the same inverse, and info from the reference's LU (0 for these invertible matrices).
  OpRow inverse_ex = linalg_row(
      "inv_ex", {single("[4, 4]", {4, 4}, 3549), single("batched [2, 3, 3]", {2, 3, 3}, 3550)},
      [](const TensorList& x) {
        const InvResult r = inv_ex(x[0]);
        return TensorList{r.inverse, r.info};
      },
      [](const TensorList& x) {
        const Tensor info = per_matrix_value(x[0], [](const Mat& a) {
          const LuRef f = lu_ref(a);
          for (int64_t k = 0; k < a.n; ++k)
            if (f.lu(k, k) == 0) return static_cast<double>(k + 1);
          return 0.0;
        });
        return TensorList{per_matrix(x[0], [](const Mat& a) { return solve_ref(a, identity(a.n)); }),
                          info.to(DType::Int32)};
      },
      {0},
      {{"not square",
        [] {
          inv_ex(zeros({2, 3}));
        },
        {"inv_ex", "square", "[2, 3]"}}});
  inverse_ex.exact_outputs = {1};
  rows.push_back(std::move(inverse_ex));
  const std::vector<Sample> dets{single("[5, 5]", {5, 5}, 3545), single("batched [2, 3, 4, 4]", {2, 3, 4, 4}, 3546),
                                 single("[1, 1]", {1, 1}, 3547), single("empty [2, 0, 0]", {2, 0, 0}, 3548)};
  rows.push_back(linalg_row(
      "det", dets, [](const TensorList& x) { return TensorList{det(x[0])}; },
      [](const TensorList& x) { return TensorList{per_matrix_value(x[0], det_ref)}; }, {0},
      {{"not square",
        [] {
          det(zeros({2, 3}));
        },
        {"det", "square", "[2, 3]"}}}));
  OpRow s = linalg_row(
      "slogdet", dets,
      [](const TensorList& x) {
        const SlogdetResult r = slogdet(x[0]);
        return TensorList{r.sign, r.logabsdet};
      },
      [](const TensorList& x) {
        return TensorList{per_matrix_value(x[0], [](const Mat& a) { return det_ref(a) < 0 ? -1.0 : 1.0; }),
                          per_matrix_value(x[0], [](const Mat& a) { return std::log(std::fabs(det_ref(a))); })};
      },
      {0});
  s.exact_outputs = {0};
  rows.push_back(std::move(s));
  rows.push_back(linalg_row(
      "logdet", {single("[4, 4]", {4, 4}, 3549), single("batched [3, 2, 2]", {3, 2, 2}, 3550)},
      [](const TensorList& x) {
        // A positive-definite matrix, and its negation (n even: det > 0 with negative pivots). A
        // negative det (NaN) is tests/core/test_linalg.cpp's: gradcheck has no NaN to compare.
        return TensorList{logdet(spd(x[0])), logdet(-spd(x[0]))};
      },
      [](const TensorList& x) {
        const Tensor d = per_matrix_value(x[0], [](const Mat& a) { return std::log(det_ref(spd(a))); });
        return TensorList{d, d};
      },
      {0}));
}

// The n-th power of each matrix of t, in double (a negative n: of its inverse).
Tensor power_ref(const Tensor& t, int64_t n) {
  return per_matrix(t, [=](const Mat& a) {
    const Mat base = n < 0 ? solve_ref(a, identity(a.n)) : a;
    Mat p = identity(a.n);
    for (int64_t k = 0; k < (n < 0 ? -n : n); ++k) p = product(p, base);
    return p;
  });
}

void add_matrix_power(std::vector<OpRow>& rows) {
  // Batched matrices of small entries (rnd scaled by 0.5), so their powers stay small; a
  // non-negative power is matmuls only, in every float dtype.
  OpRow r = make_row(
      "matrix_power 0, 1, 3 and 6", kFloatTypes, {single("[2, 3, 3]", {2, 3, 3}, 3551, 0.5)},
      [](const TensorList& x) {
        return TensorList{matrix_power(x[0], 0), matrix_power(x[0], 1), matrix_power(x[0], 3), matrix_power(x[0], 6)};
      },
      [](const TensorList& x) {
        return TensorList{power_ref(x[0], 0), power_ref(x[0], 1), power_ref(x[0], 3), power_ref(x[0], 6)};
      },
      {0}, same_dtype);
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  r.errors = {{"not square", [] { matrix_power(zeros({2, 3}), 2); }, {"matrix_power", "[2, 3]"}}};
  rows.push_back(std::move(r));
  // A diagonal of about 3 keeps the inverse's powers near 1.
  rows.push_back(linalg_row(
      "matrix_power -1 and -3", {pair("[2, 3, 3]", {2, 3, 3}, {1, 1}, 3553)},
      [](const TensorList& x) {
        return TensorList{matrix_power(x[0], -1), matrix_power(x[0], -3)};
      },
      [](const TensorList& x) {
        return TensorList{power_ref(x[0], -1), power_ref(x[0], -3)};
      },
      {0},
      {{"a singular matrix",
        [] {
          matrix_power(zeros({2, 2}), -1);
        },
        {"matrix_power", "singular"}},
       {"float16", [] { matrix_power(eye(2, DType::Float16), -2); }, {"matrix_power", "float16"}}}));
}

// LAPACK's geqrf in float64: R on and above the diagonal, below it each reflection's vector
// scaled to start with 1, and the scales tau (0 where the column is zero below the diagonal).
std::pair<Mat, Values> geqrf_ref(const Mat& a) {
  const int64_t m = a.n, n = a.m, k = std::min(m, n);
  Mat r = a;
  Values taus;
  for (int64_t j = 0; j < k; ++j) {
    double below = 0;
    for (int64_t i = j + 1; i < m; ++i) below += r(i, j) * r(i, j);
    const double alpha = r(j, j), beta = -std::copysign(std::sqrt(alpha * alpha + below), alpha);
    Values v(at(m), 0.0);
    v[at(j)] = 1;
    double tau = 0;
    if (below > 0) {
      for (int64_t i = j + 1; i < m; ++i) v[at(i)] = r(i, j) / (alpha - beta);
      tau = (beta - alpha) / beta;  // 2 / |v|^2 for this v
    }
    for (int64_t c = j; c < n; ++c) {
      double dotv = 0;
      for (int64_t i = j; i < m; ++i) dotv += v[at(i)] * r(i, c);
      for (int64_t i = j; i < m; ++i) r(i, c) -= tau * v[at(i)] * dotv;
    }
    for (int64_t i = j + 1; i < m; ++i) r(i, j) = v[at(i)];
    taus.push_back(tau);
  }
  return {r, taus};
}

// The first `cols` columns of H_0 ... H_{k-1}, H_j = I - tau_j v_j v_j^T with v_j column j of a
// below the diagonal and 1 on it: LAPACK's orgqr in float64.
Mat householder_ref(const Mat& a, const Values& tau, int64_t cols) {
  const int64_t m = a.n, k = static_cast<int64_t>(tau.size());
  Mat q(m, cols);
  for (int64_t i = 0; i < std::min(m, cols); ++i) q(i, i) = 1;
  for (int64_t j = k - 1; j >= 0; --j) {
    for (int64_t c = 0; c < cols; ++c) {
      double dotv = q(j, c);
      for (int64_t i = j + 1; i < m; ++i) dotv += a(i, j) * q(i, c);
      q(j, c) -= tau[at(j)] * dotv;
      for (int64_t i = j + 1; i < m; ++i) q(i, c) -= tau[at(j)] * a(i, j) * dotv;
    }
  }
  return q;
}

// Householder QR with LAPACK's signs: Q [m, m or min(m, n)] and R [m or min(m, n), n].
std::pair<Mat, Mat> qr_ref(const Mat& a, bool complete) {
  const int64_t m = a.n, n = a.m, k = std::min(m, n);
  const auto [packed, tau] = geqrf_ref(a);
  const int64_t rows = complete ? m : k;
  Mat rr(rows, n);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = i; c < n; ++c) rr(i, c) = packed(i, c);
  return {householder_ref(packed, tau, rows), rr};
}

void add_qr(std::vector<OpRow>& rows) {
  const std::vector<Sample> shapes{single("tall [5, 3]", {5, 3}, 3561), single("square [4, 4]", {4, 4}, 3562),
                                   single("wide [3, 5]", {3, 5}, 3563), single("batched [2, 4, 3]", {2, 4, 3}, 3564)};
  auto qr_row = [&](const std::string& name, QrMode mode, std::vector<Sample> samples) {
    const bool complete = mode == QrMode::Complete;
    return linalg_row(
        name, std::move(samples),
        [=](const TensorList& x) {
          const QrResult r = qr(x[0], mode);
          return mode == QrMode::R ? TensorList{r.R} : TensorList{r.Q, r.R};
        },
        [=](const TensorList& x) {
          const Tensor q = per_matrix(x[0], [=](const Mat& a) { return qr_ref(a, complete).first; });
          const Tensor r = per_matrix(x[0], [=](const Mat& a) { return qr_ref(a, complete).second; });
          return mode == QrMode::R ? TensorList{r} : TensorList{q, r};
        },
        mode == QrMode::R ? std::vector<size_t>{} : std::vector<size_t>{0});
  };
  OpRow reduced = qr_row("qr", QrMode::Reduced, shapes);
  reduced.errors = {{"1-d", [] { qr(zeros({3})); }, {"qr", "[3]"}},
                    {"an integer matrix",
                     [] {
                       qr(zeros({3, 3}, DType::Int32));
                     },
                     {"qr", "int32"}},
                    undefined_input("qr", [](const Tensor& t) { return qr(t).R; })};
  rows.push_back(std::move(reduced));
  // Complete is differentiable where it is Reduced (m <= n); the tall case is the hand tests'.
  rows.push_back(qr_row("qr complete", QrMode::Complete, {shapes[1], shapes[2]}));
  rows.push_back(qr_row("qr mode R", QrMode::R, shapes));

  OpRow packed = linalg_row(
      "geqrf", shapes,
      [](const TensorList& x) {
        const GeqrfResult r = geqrf(x[0]);
        return TensorList{r.a, r.tau};
      },
      [](const TensorList& x) {
        const Tensor a = per_matrix(x[0], [](const Mat& m) { return geqrf_ref(m).first; });
        const Tensor tau = per_matrix(x[0], [](const Mat& m) {
          const Values t = geqrf_ref(m).second;
          Mat out(1, static_cast<int64_t>(t.size()));
          out.v = t;
          return out;
        });
        return TensorList{a, tau.squeeze(-2)};
      },
      {});
  packed.errors = {{"1-d", [] { geqrf(zeros({3})); }, {"geqrf", "[3]"}},
                   {"float16",
                    [] {
                      geqrf(zeros({3, 3}, DType::Float16));
                    },
                    {"geqrf", "float16"}},
                   undefined_input("geqrf", [](const Tensor& t) { return geqrf(t).a; })};
  rows.push_back(std::move(packed));

  // Any A and tau: the product is a polynomial in them (orthogonal only for tau = 2 / |v|^2).
  auto reflections = [](const std::string& name, Shape a, Shape tau, uint64_t seed) {
    return Sample{name, [=](DType t, Device d) { return TensorList{rnd(a, t, d, seed), rnd(tau, t, d, seed + 1)}; }};
  };
  rows.push_back(linalg_row(
      "householder_product",
      {reflections("[5, 3] with 3 reflections", {5, 3}, {3}, 3601),
       reflections("[4, 4] with 2 reflections", {4, 4}, {2}, 3603),
       reflections("batched [2, 4, 3] with 3", {2, 4, 3}, {2, 3}, 3605)},
      [](const TensorList& x) { return TensorList{householder_product(x[0], x[1])}; },
      [](const TensorList& x) {
        const std::vector<Mat> as = matrices(x[0]);
        const std::vector<double> taus = x[1].to_vector_double();
        const int64_t k = x[1].size(-1);
        std::vector<Mat> out;
        for (size_t b = 0; b < as.size(); ++b) {
          const Values tau(taus.begin() + static_cast<std::ptrdiff_t>(b) * k,
                           taus.begin() + static_cast<std::ptrdiff_t>(b + 1) * k);
          out.push_back(householder_ref(as[b], tau, as[b].m));
        }
        return TensorList{from_matrices(out, x[0].sizes())};
      },
      {0, 1},
      {{"wide A",
        [] {
          householder_product(zeros({2, 3}), zeros({2}));
        },
        {"householder_product", "[2, 3]", "m >= n"}},
       {"more reflections than columns",
        [] {
          householder_product(zeros({4, 2}), zeros({3}));
        },
        {"householder_product", "[3]", "[4, 2]"}},
       {"batches differ",
        [] {
          householder_product(zeros({2, 4, 2}), zeros({3, 2}));
        },
        {"householder_product", "[3, 2]", "[2, 4, 2]"}},
       {"dtypes differ",
        [] {
          householder_product(zeros({4, 2}), zeros({2}, DType::Float64));
        },
        {"householder_product", "float32", "float64"}}}));
}

void add_lstsq(std::vector<OpRow>& rows) {
  // The references solve the normal equations in double: A^T A x = A^T b (tall), x = A^T (A A^T)^-1
  // b (square and wide); the random matrices are well conditioned enough for that.
  rows.push_back(linalg_row(
      "lstsq tall",
      {pair("[6, 3] and [6, 2]", {6, 3}, {6, 2}, 3571, false),
       pair("batches broadcast [2, 1, 5, 2] and [3, 5, 2]", {2, 1, 5, 2}, {3, 5, 2}, 3575, false)},
      [](const TensorList& x) {
        const LstsqResult r = lstsq(x[0], x[1]);
        return TensorList{r.solution, r.residuals};
      },
      [](const TensorList& x) {
        const Tensor X = per_pair(x[0], x[1], [](const Mat& a, const Mat& b) {
          return solve_ref(product(transposed(a), a), product(transposed(a), b));
        });
        const Tensor res = per_pair(x[0], x[1], [](const Mat& a, const Mat& b) {
          const Mat r = product(a, solve_ref(product(transposed(a), a), product(transposed(a), b)));
          Mat out(1, b.m);
          for (int64_t i = 0; i < b.n; ++i)
            for (int64_t j = 0; j < b.m; ++j) out(0, j) += (r(i, j) - b(i, j)) * (r(i, j) - b(i, j));
          return out;
        });
        return TensorList{X, res.squeeze(-2)};
      },
      {0, 1},
      {{"B does not fit",
        [] {
          lstsq(zeros({4, 2}), zeros({3, 1}));
        },
        {"lstsq", "[3, 1]", "[4, 2]"}},
       {"dtypes differ",
        [] {
          lstsq(zeros({4, 2}), zeros({4, 1}, DType::Float64));
        },
        {"lstsq", "float32", "float64"}},
       {"a vector B",
        [] {
          lstsq(zeros({4, 2}), zeros({4}));
        },
        {"lstsq", "[4]"}}}));
  rows.push_back(linalg_row(
      "lstsq square and wide (least norm)",
      {pair("[4, 4] and [4, 1]", {4, 4}, {4, 1}, 3573, false), pair("[3, 5] and [3, 2]", {3, 5}, {3, 2}, 3577, false)},
      [](const TensorList& x) { return TensorList{lstsq(x[0], x[1]).solution}; },
      [](const TensorList& x) {
        return TensorList{per_pair(x[0], x[1], [](const Mat& a, const Mat& b) {
          return product(transposed(a), solve_ref(product(a, transposed(a)), b));
        })};
      },
      {0, 1}));
}

void add_matrix_norm(std::vector<OpRow>& rows) {
  // Distinct values, so the largest and smallest sums are unique (gradcheck at a tie is undefined).
  const double inf = std::numeric_limits<double>::infinity();
  OpRow r = make_row(
      "matrix_norm fro, 1, -1, inf and -inf", kFloatTypes,
      {{"[3, 4]",
        [](DType t, Device d) {
          return TensorList{rnd_distinct({3, 4}, t, d, 3581)};
        }},
       {"batched [2, 3, 3]",
        [](DType t, Device d) {
          return TensorList{rnd_distinct({2, 3, 3}, t, d, 3582)};
        }}},
      [=](const TensorList& x) {
        return TensorList{matrix_norm(x[0]), matrix_norm(x[0], 1.0), matrix_norm(x[0], -1.0), matrix_norm(x[0], inf),
                          matrix_norm(x[0], -inf, true)};
      },
      [](const TensorList& x) {
        const Tensor fro = per_matrix_value(x[0], [](const Mat& a) {
          double s = 0;
          for (double e : a.v) s += e * e;
          return std::sqrt(s);
        });
        // The sums of |a| over rows (per column, columns) or over columns (per row).
        auto sums = [](const Mat& a, bool columns) {
          Values s(at(columns ? a.m : a.n), 0.0);
          for (int64_t i = 0; i < a.n; ++i)
            for (int64_t j = 0; j < a.m; ++j) s[at(columns ? j : i)] += std::fabs(a(i, j));
          return s;
        };
        auto extreme = [&](bool columns, bool largest) {
          return per_matrix_value(x[0], [=](const Mat& a) {
            const Values s = sums(a, columns);
            return largest ? *std::max_element(s.begin(), s.end()) : *std::min_element(s.begin(), s.end());
          });
        };
        return TensorList{fro, extreme(true, true), extreme(true, false), extreme(false, true),
                          extreme(false, false).unsqueeze(-1).unsqueeze(-1)};
      },
      {0}, same_dtype);
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  r.errors = {{"ord 3",
               [] {
                 matrix_norm(zeros({2, 2}), 3.0);
               },
               {"matrix_norm", "3"}},
              {"an unknown name",
               [] {
                 matrix_norm(zeros({2, 2}), "frobenius");
               },
               {"matrix_norm", "'frobenius'"}},
              {"1-d", [] { matrix_norm(zeros({4})); }, {"matrix_norm", "[4]"}},
              {"integers",
               [] {
                 matrix_norm(zeros({2, 2}, DType::Int64));
               },
               {"matrix_norm", "int64"}}};
  rows.push_back(std::move(r));
}

// e^A by its Taylor series (40 terms) of A / 2^s with every entry at most 1/8 in size, squared s
// times.
Mat exp_ref(const Mat& a) {
  double largest = 0;
  for (double e : a.v) largest = std::max(largest, std::fabs(e));
  int s = 0;
  while (largest * a.n > 0.125 * std::ldexp(1.0, s)) ++s;
  Mat x = a;
  for (double& e : x.v) e = std::ldexp(e, -s);
  Mat sum = identity(a.n), term = identity(a.n);
  for (int k = 1; k <= 40; ++k) {
    term = product(term, x);
    for (double& e : term.v) e /= k;
    for (size_t i = 0; i < sum.v.size(); ++i) sum.v[i] += term.v[i];
  }
  for (int k = 0; k < s; ++k) sum = product(sum, sum);
  return sum;
}

void add_matrix_exp(std::vector<OpRow>& rows) {
  // Norms below theta_13 (no squaring), above it (squarings), and a batch that mixes both.
  rows.push_back(linalg_row(
      "matrix_exp",
      {single("[3, 3] of norm about 1", {3, 3}, 3591, 0.5),
       single("[4, 4] of norm about 12", {4, 4}, 3592, 3.0),
       {"a batch [2, 3, 3] of small and large norms",
        [](DType t, Device d) {
          return TensorList{rnd({2, 3, 3}, t, d, 3593) * tensor({0.1, 2.5}, {2, 1, 1}).to(t).to(d)};
        }},
       single("[1, 1]", {1, 1}, 3594)},
      [](const TensorList& x) { return TensorList{matrix_exp(x[0])}; },
      [](const TensorList& x) { return TensorList{per_matrix(x[0], exp_ref)}; }, {0},
      {{"not square",
        [] {
          matrix_exp(zeros({2, 3}));
        },
        {"matrix_exp", "square", "[2, 3]"}},
       {"float16",
        [] {
          matrix_exp(zeros({2, 2}, DType::Float16));
        },
        {"matrix_exp", "float16"}}}));
}

}  // namespace

void add_linalg_rows(std::vector<OpRow>& rows) {
  add_triangular(rows);
  add_cholesky(rows);
  add_lu(rows);
  add_solve(rows);
  add_matrix_power(rows);
  add_qr(rows);
  add_lstsq(rows);
  add_matrix_norm(rows);
  add_matrix_exp(rows);
}

}  // namespace kiln::test
