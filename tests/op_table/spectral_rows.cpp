// Op table rows of the spectral family: eigh (lower and upper), eigvalsh, svd (reduced and full),
// svdvals, pinv (general, hermitian, rank-deficient), matrix_rank, cond and the matrix norms of
// singular values (2, -2, nuc). Eigen- and singular vectors are compared through their squared
// entries (v * v), which no sign choice changes; symmetric inputs are made inside the op as
// x + x^T, so gradcheck perturbs x freely. References are plain float64 loops: the cyclic Jacobi
// eigenvalue method, one pair at a time, and the SVD from the eigendecomposition of A^T A (or
// A A^T), a different route from kiln's one-sided Jacobi.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "tests/op_table/matrix_ref.h"
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// The eigenvalues (ascending) and eigenvectors (columns) of the symmetric a, by cyclic Jacobi:
// rotations of each pair (p, q) in turn until the off-diagonal part is below 1e-28 of the total.
std::pair<Values, Mat> eigen_ref(const Mat& a) {
  const int64_t n = a.n;
  Mat A = a, V = identity(n);
  double total = 0;
  for (double e : a.v) total += e * e;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (i != j) off += A(i, j) * A(i, j);
    if (off <= 1e-28 * total) break;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        if (A(p, q) == 0) continue;
        const double zeta = (A(q, q) - A(p, p)) / (2 * A(p, q));
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (std::fabs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), s = t * c;
        for (int64_t k = 0; k < n; ++k) {
          const double kp = A(k, p), kq = A(k, q);
          A(k, p) = c * kp - s * kq;
          A(k, q) = s * kp + c * kq;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double pk = A(p, k), qk = A(q, k);
          A(p, k) = c * pk - s * qk;
          A(q, k) = s * pk + c * qk;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double kp = V(k, p), kq = V(k, q);
          V(k, p) = c * kp - s * kq;
          V(k, q) = s * kp + c * kq;
        }
      }
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return A(i, i) < A(j, j); });
  Values w;
  Mat sorted(n, n);
  for (int64_t j = 0; j < n; ++j) {
    w.push_back(A(order[at(j)], order[at(j)]));
    for (int64_t i = 0; i < n; ++i) sorted(i, j) = V(i, order[at(j)]);
  }
  return {w, sorted};
}

struct SvdRef {
  Values S;  // descending
  Mat U, V;  // [m, k], [n, k]
};

// The SVD of a full-rank a from the eigendecomposition of the smaller Gram matrix: for m >= n,
// A^T A = V S^2 V^T and U = A V / S; for m < n the same on A^T.
SvdRef svd_ref(const Mat& a) {
  if (a.n < a.m) {
    SvdRef t = svd_ref(transposed(a));
    return {t.S, t.V, t.U};
  }
  const auto [w, V] = eigen_ref(product(transposed(a), a));
  const int64_t k = a.m;
  SvdRef r{{}, Mat(a.n, k), Mat(k, k)};
  for (int64_t j = 0; j < k; ++j) {
    const int64_t from = k - 1 - j;  // descending
    r.S.push_back(std::sqrt(std::max(w[at(from)], 0.0)));
    for (int64_t i = 0; i < k; ++i) r.V(i, j) = V(i, from);
  }
  const Mat AV = product(a, r.V);
  for (int64_t i = 0; i < a.n; ++i)
    for (int64_t j = 0; j < k; ++j) r.U(i, j) = r.S[at(j)] > 0 ? AV(i, j) / r.S[at(j)] : 0.0;
  return r;
}

Mat squared(Mat a) {
  for (double& e : a.v) e *= e;
  return a;
}

// The values fn gives per matrix of x, [*, size].
Tensor per_matrix_values(const Tensor& x, int64_t size, const std::function<Values(const Mat&)>& fn) {
  Values out;
  for (const Mat& m : matrices(x)) {
    const Values v = fn(m);
    out.insert(out.end(), v.begin(), v.end());
  }
  Shape shape = batch_shape(x, 2);
  shape.push_back(size);
  return from_values(out, shape);
}

Tensor symmetric(const Tensor& x) { return x + x.transpose(-2, -1); }
Mat symmetric(const Mat& x) {
  Mat s = x;
  for (int64_t i = 0; i < x.n; ++i)
    for (int64_t j = 0; j < x.m; ++j) s(i, j) = x(i, j) + x(j, i);
  return s;
}

std::vector<ErrorCase> matrix_errors(const std::string& name, const std::function<void(const Tensor&)>& call,
                                     bool square) {
  std::vector<ErrorCase> errors{{"1-d", [=] { call(zeros({4})); }, {name, "[4]"}},
                                {"an integer matrix",
                                 [=] {
                                   call(zeros({2, 2}, DType::Int64));
                                 },
                                 {name, "int64"}},
                                {"float16",
                                 [=] {
                                   call(zeros({2, 2}, DType::Float16));
                                 },
                                 {name, "float16"}},
                                undefined_input(name, [=](const Tensor& t) {
                                  call(t);
                                  return t;
                                })};
  if (square) errors.push_back({"not square", [=] { call(zeros({2, 3})); }, {name, "square", "[2, 3]"}});
  return errors;
}

void add_eigh(std::vector<OpRow>& rows) {
  const std::vector<Sample> squares{single("[4, 4]", {4, 4}, 3601), single("batched [2, 3, 3]", {2, 3, 3}, 3602),
                                    single("odd [5, 5]", {5, 5}, 3603), single("[1, 1]", {1, 1}, 3604),
                                    single("empty [0, 0]", {0, 0}, 3605)};
  rows.push_back(linalg_row(
      "eigh of x + x^T, lower and upper", squares,
      [](const TensorList& x) {
        const EighResult e = eigh(symmetric(x[0]));
        return TensorList{e.eigenvalues, square(e.eigenvectors), eigh(symmetric(x[0]), true).eigenvalues};
      },
      [](const TensorList& x) {
        const int64_t n = x[0].size(-1);
        const Tensor w = per_matrix_values(x[0], n, [](const Mat& a) { return eigen_ref(symmetric(a)).first; });
        const Tensor v2 = per_matrix(x[0], [](const Mat& a) { return squared(eigen_ref(symmetric(a)).second); });
        return TensorList{w, v2, w};
      },
      {0},
      matrix_errors(
          "eigh", [](const Tensor& t) { eigh(t); }, true)));
  rows.push_back(linalg_row(
      "eigvalsh of x + x^T", {squares[0], squares[1], squares[2]},
      [](const TensorList& x) {
        return TensorList{eigvalsh(symmetric(x[0])), eigvalsh(symmetric(x[0]), true)};
      },
      [](const TensorList& x) {
        const Tensor w =
            per_matrix_values(x[0], x[0].size(-1), [](const Mat& a) { return eigen_ref(symmetric(a)).first; });
        return TensorList{w, w};
      },
      {0},
      matrix_errors(
          "eigvalsh", [](const Tensor& t) { eigvalsh(t); }, true)));
}

// svd_ref's S, U * U and Vh * Vh for the matrices of x.
TensorList svd_squares_ref(const Tensor& x) {
  const int64_t k = std::min(x.size(-2), x.size(-1));
  return {per_matrix_values(x, k, [](const Mat& a) { return svd_ref(a).S; }),
          per_matrix(x, [](const Mat& a) { return squared(svd_ref(a).U); }),
          per_matrix(x, [](const Mat& a) { return squared(transposed(svd_ref(a).V)); })};
}

void add_svd(std::vector<OpRow>& rows) {
  const std::vector<Sample> shapes{single("tall [5, 3]", {5, 3}, 3611), single("wide [3, 5]", {3, 5}, 3612),
                                   single("batched [2, 4, 4]", {2, 4, 4}, 3613),
                                   single("a column [4, 1]", {4, 1}, 3614), single("odd [3, 3]", {3, 3}, 3615)};
  rows.push_back(linalg_row(
      "svd", shapes,
      [](const TensorList& x) {
        const SvdResult r = svd(x[0], false);
        return TensorList{r.S, square(r.U), square(r.Vh)};
      },
      [](const TensorList& x) { return svd_squares_ref(x[0]); }, {0},
      matrix_errors(
          "svd", [](const Tensor& t) { svd(t); }, false)));
  // Full matrices: the first k columns (rows of Vh) as reduced, and U and Vh orthogonal. No
  // gradcheck: the completion is any orthonormal basis, which may jump as A moves.
  rows.push_back(linalg_row(
      "svd full_matrices", {shapes[0], shapes[1], shapes[2], single("empty [0, 3]", {0, 3}, 3616)},
      [](const TensorList& x) {
        const SvdResult r = svd(x[0], true);
        const int64_t k = r.S.size(-1);
        return TensorList{r.S, square(r.U.narrow(-1, 0, k)), square(r.Vh.narrow(-2, 0, k)),
                          matmul(r.U.transpose(-2, -1), r.U), matmul(r.Vh, r.Vh.transpose(-2, -1))};
      },
      [](const TensorList& x) {
        TensorList out = svd_squares_ref(x[0]);
        out.push_back(per_matrix(x[0], [](const Mat& a) { return identity(a.n); }));
        out.push_back(per_matrix(x[0], [](const Mat& a) { return identity(a.m); }));
        return out;
      },
      {}));
  rows.push_back(linalg_row(
      "svdvals", {shapes[0], shapes[1], shapes[2]}, [](const TensorList& x) { return TensorList{svdvals(x[0])}; },
      [](const TensorList& x) {
        return TensorList{
            per_matrix_values(x[0], std::min(x[0].size(-2), x[0].size(-1)), [](const Mat& a) { return svd_ref(a).S; })};
      },
      {0},
      matrix_errors(
          "svdvals", [](const Tensor& t) { svdvals(t); }, false)));
}

// The pseudo-inverse of a full-rank a: (A^T A)^-1 A^T (tall) or A^T (A A^T)^-1 (wide).
Mat pinv_ref(const Mat& a) {
  if (a.n >= a.m) return solve_ref(product(transposed(a), a), transposed(a));
  return transposed(solve_ref(product(a, transposed(a)), a));
}

void add_pinv(std::vector<OpRow>& rows) {
  rows.push_back(linalg_row(
      "pinv",
      {single("tall [5, 3]", {5, 3}, 3621), single("wide [3, 4]", {3, 4}, 3622),
       single("batched [2, 3, 3]", {2, 3, 3}, 3623)},
      [](const TensorList& x) { return TensorList{pinv(x[0])}; },
      [](const TensorList& x) { return TensorList{per_matrix(x[0], pinv_ref)}; }, {0},
      {{"a negative atol",
        [] {
          pinv(zeros({2, 2}), -1.0);
        },
        {"pinv", "atol", "-1"}},
       {"a NaN rtol",
        [] {
          pinv(zeros({2, 2}), std::nullopt, std::numeric_limits<double>::quiet_NaN());
        },
        {"pinv", "rtol", "nan"}},
       {"hermitian and not square",
        [] {
          pinv(zeros({2, 3}), std::nullopt, std::nullopt, true);
        },
        {"pinv", "square", "[2, 3]"}},
       {"float16",
        [] {
          pinv(zeros({2, 2}, DType::Float16));
        },
        {"pinv", "float16"}},
       undefined_input("pinv", [](const Tensor& t) { return pinv(t); })}));
  rows.push_back(linalg_row(
      "pinv hermitian of x + x^T", {single("[4, 4]", {4, 4}, 3624), single("batched [2, 3, 3]", {2, 3, 3}, 3625)},
      [](const TensorList& x) { return TensorList{pinv(symmetric(x[0]), std::nullopt, std::nullopt, true)}; },
      [](const TensorList& x) {
        return TensorList{per_matrix(x[0], [](const Mat& a) { return solve_ref(symmetric(a), identity(a.n)); })};
      },
      {0}));
  // u v^T has rank 1: its pseudo-inverse is v u^T / (|u|^2 |v|^2), the zero singular values
  // dropped by the default rtol.
  rows.push_back(linalg_row(
      "pinv of a rank-1 u v^T",
      {{"[4, 1] and [1, 3]",
        [](DType t, Device d) {
          return TensorList{rnd({4, 1}, t, d, 3626), rnd({1, 3}, t, d, 3627)};
        }},
       {"batched [2, 3, 1] and [2, 1, 3]",
        [](DType t, Device d) {
          return TensorList{rnd({2, 3, 1}, t, d, 3628), rnd({2, 1, 3}, t, d, 3629)};
        }}},
      [](const TensorList& x) { return TensorList{pinv(matmul(x[0], x[1]))}; },
      [](const TensorList& x) {
        return TensorList{per_pair(x[0], x[1], [](const Mat& u, const Mat& v) {
          double uu = 0, vv = 0;
          for (double e : u.v) uu += e * e;
          for (double e : v.v) vv += e * e;
          Mat r = product(transposed(v), transposed(u));
          for (double& e : r.v) e /= uu * vv;
          return r;
        })};
      },
      {}));
}

// The number of singular values above rtol S_max.
double rank_ref(const Mat& a, double rtol) {
  const Values s = svd_ref(a).S;
  const double cutoff = (s.empty() ? 0.0 : s[0]) * rtol;
  return static_cast<double>(std::count_if(s.begin(), s.end(), [&](double v) { return v > cutoff; }));
}

void add_matrix_rank(std::vector<OpRow>& rows) {
  // Full rank (default tolerance: random matrices are far from it), rank 1 (a column of x times a
  // row of x, and a column times itself for the hermitian case) with rtol 1e-5 (float32's rounding
  // leaves the zero singular values near 1e-7 of the largest; the reference's, from A^T A, near
  // 1e-8), rank 0, and atol above every singular value.
  OpRow r = make_row(
      "matrix_rank", linalg_types(), {single("[3, 4]", {3, 4}, 3631), single("batched [2, 4, 3]", {2, 4, 3}, 3632)},
      [](const TensorList& x) {
        const Tensor column = x[0].narrow(-1, 0, 1);
        return TensorList{matrix_rank(x[0]), matrix_rank(matmul(column, x[0].narrow(-2, 0, 1)), std::nullopt, 1e-5),
                          matrix_rank(zeros_like(x[0])), matrix_rank(x[0], 1e6),
                          matrix_rank(matmul(column, column.transpose(-2, -1)), std::nullopt, 1e-5, true)};
      },
      [](const TensorList& x) {
        const DType t = x[0].dtype();
        const double eps =
            t == DType::Float64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
        const double default_rtol = eps * static_cast<double>(std::max(x[0].size(-2), x[0].size(-1)));
        auto ranks = [&](const std::function<Mat(const Mat&)>& make, double rtol) {
          return per_matrix_value(x[0], [&](const Mat& a) { return rank_ref(make(a), rtol); }).to(DType::Int64);
        };
        // a(:, 0) times a(0, :) (outer) or times a(:, 0)^T.
        auto outer = [](bool symmetric_outer) {
          return [=](const Mat& a) {
            const int64_t cols = symmetric_outer ? a.n : a.m;
            Mat r(a.n, cols);
            for (int64_t i = 0; i < a.n; ++i)
              for (int64_t j = 0; j < cols; ++j) r(i, j) = a(i, 0) * (symmetric_outer ? a(j, 0) : a(0, j));
            return r;
          };
        };
        const Tensor none = per_matrix_value(x[0], [](const Mat&) { return 0.0; }).to(DType::Int64);
        return TensorList{ranks([](const Mat& a) { return a; }, default_rtol), ranks(outer(false), 1e-5), none, none,
                          ranks(outer(true), 1e-5)};
      },
      {}, [](DType) { return DType::Int64; });
  r.exact_outputs = {0, 1, 2, 3, 4};
  r.errors = {{"a negative rtol",
               [] {
                 matrix_rank(zeros({2, 2}), std::nullopt, -0.5);
               },
               {"matrix_rank", "rtol", "-0.5"}},
              {"an integer matrix",
               [] {
                 matrix_rank(zeros({2, 2}, DType::Int32));
               },
               {"matrix_rank", "int32"}}};
  rows.push_back(std::move(r));
}

// Sums of |a| per column (columns) or per row.
Values abs_sums(const Mat& a, bool columns) {
  Values s(at(columns ? a.m : a.n), 0.0);
  for (int64_t i = 0; i < a.n; ++i)
    for (int64_t j = 0; j < a.m; ++j) s[at(columns ? j : i)] += std::fabs(a(i, j));
  return s;
}

double fro_ref(const Mat& a) {
  double s = 0;
  for (double e : a.v) s += e * e;
  return std::sqrt(s);
}

double nuc_ref(const Mat& a) {
  const Values s = svd_ref(a).S;
  return std::accumulate(s.begin(), s.end(), 0.0);
}

void add_cond(std::vector<OpRow>& rows) {
  const double inf = std::numeric_limits<double>::infinity();
  rows.push_back(linalg_row(
      "cond 2, -2, fro, nuc, 1 and -inf",
      {single("[3, 3]", {3, 3}, 3641), single("batched [2, 4, 4]", {2, 4, 4}, 3642)},
      [=](const TensorList& x) {
        return TensorList{cond(x[0]),        cond(x[0], -2.0), cond(x[0], "fro"),
                          cond(x[0], "nuc"), cond(x[0], 1.0),  cond(x[0], -inf)};
      },
      [](const TensorList& x) {
        auto both = [&](const std::function<double(const Mat&)>& norm) {
          return per_matrix_value(x[0], [&](const Mat& a) { return norm(a) * norm(solve_ref(a, identity(a.n))); });
        };
        const Tensor two = per_matrix_value(x[0], [](const Mat& a) {
          const Values s = svd_ref(a).S;
          return s.front() / s.back();
        });
        const Tensor max_column = both([](const Mat& a) {
          const Values s = abs_sums(a, true);
          return *std::max_element(s.begin(), s.end());
        });
        const Tensor min_row = both([](const Mat& a) {
          const Values s = abs_sums(a, false);
          return *std::min_element(s.begin(), s.end());
        });
        return TensorList{two, 1 / two, both(fro_ref), both(nuc_ref), max_column, min_row};
      },
      {0},
      {{"p 3", [] { cond(eye(2), 3.0); }, {"cond", "3"}},
       {"an unknown name", [] { cond(eye(2), "frobenius"); }, {"cond", "'frobenius'"}},
       {"p fro of a matrix that is not square",
        [] {
          cond(zeros({2, 3}), "fro");
        },
        {"cond", "square", "[2, 3]"}},
       undefined_input("cond", [](const Tensor& t) { return cond(t); })}));
}

void add_singular_norms(std::vector<OpRow>& rows) {
  rows.push_back(linalg_row(
      "matrix_norm 2, -2 and nuc",
      {single("[3, 4]", {3, 4}, 3651), single("batched [2, 3, 3]", {2, 3, 3}, 3652),
       single("tall [5, 2]", {5, 2}, 3653)},
      [](const TensorList& x) {
        return TensorList{matrix_norm(x[0], 2.0), matrix_norm(x[0], -2.0), matrix_norm(x[0], "nuc"),
                          matrix_norm(x[0], 2.0, true)};
      },
      [](const TensorList& x) {
        const Tensor largest = per_matrix_value(x[0], [](const Mat& a) { return svd_ref(a).S.front(); });
        const Tensor smallest = per_matrix_value(x[0], [](const Mat& a) { return svd_ref(a).S.back(); });
        return TensorList{largest, smallest, per_matrix_value(x[0], nuc_ref), largest.unsqueeze(-1).unsqueeze(-1)};
      },
      {0},
      {{"ord 2 of float16",
        [] {
          matrix_norm(zeros({2, 2}, DType::Float16), 2.0);
        },
        {"matrix_norm", "float16"}},
       {"ord -2 of empty matrices",
        [] {
          matrix_norm(zeros({3, 0}), -2.0);
        },
        {"matrix_norm", "-2", "[3, 0]"}}}));
}

}  // namespace

void add_spectral_rows(std::vector<OpRow>& rows) {
  add_eigh(rows);
  add_svd(rows);
  add_pinv(rows);
  add_matrix_rank(rows);
  add_cond(rows);
  add_singular_norms(rows);
}

}  // namespace kiln::test
