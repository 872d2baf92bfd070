// Hand tests of the linalg family for what the op table's rows cannot see: residuals of larger
// batched systems, LAPACK's pivot convention on matrices worked by hand, singular and indefinite
// inputs (zeros, -inf, NaN, info, the errors' batch element), the determinant's gradient against
// its closed form, autocast leaving the factorizations in float32, and empty batches.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

namespace {

// The largest |a - b| over all elements, in double.
double max_diff(const Tensor& a, const Tensor& b) {
  return max((a.to(DType::Float64) - b.to(DType::Float64)).abs()).item<double>();
}

// A [*, n, n] batch of normal matrices (no dominant diagonal: elimination must pivot).
Tensor random_matrices(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randn(shape, TensorOptions(dtype), g);
}

}  // namespace

TEST_CASE("solve and inv leave small residuals on larger batched systems", "[linalg]") {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    INFO(dtype_name(dtype));
    const double tol = dtype == DType::Float64 ? 1e-9 : 1e-3;
    const Tensor A = random_matrices({3, 24, 24}, dtype, 11), B = random_matrices({3, 24, 5}, dtype, 12);
    const Tensor X = solve(A, B);
    CHECK(X.dtype() == dtype);
    CHECK(max_diff(matmul(A, X), B) < tol);
    const Tensor I = eye(24, TensorOptions(dtype)).expand({3, 24, 24});
    CHECK(max_diff(matmul(inv(A), A), I) < tol);
    // Through the factors: lu_solve, the adjoint one solves A^T X = B.
    const LuFactors f = lu_factor(A);
    CHECK(max_diff(matmul(A.transpose(-2, -1), lu_solve(f.LU, f.pivots, B, true, true)), B) < tol);
    const LuResult plu = lu(A);
    CHECK(max_diff(matmul(plu.P, matmul(plu.L, plu.U)), A) < tol);
    // Cholesky of A A^T + n I, and solving with it.
    const Tensor S = matmul(A, A.transpose(-2, -1)) + I * 24.0;
    const Tensor L = cholesky(S);
    CHECK(max_diff(matmul(L, L.transpose(-2, -1)), S) < tol * 24);
    CHECK(max_diff(matmul(S, cholesky_solve(B, L)), B) < tol * 24);
    CHECK(max_diff(triu(L, 1), zeros_like(L)) == 0.0);
  }
}

TEST_CASE("lu_factor gives LAPACK's pivots and packing on matrices worked by hand", "[linalg]") {
  // [[1, 2], [3, 4]]: row 2 has the larger first entry, so the rows swap (pivots 2, 2); then
  // l = 1/3 and u22 = 2 - 4/3 = 2/3.
  const LuFactors f = lu_factor(tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}));
  CHECK(f.pivots.dtype() == DType::Int32);
  CHECK(f.pivots.to_vector<int32_t>() == std::vector<int32_t>{2, 2});
  const std::vector<double> lu = f.LU.to_vector<double>();
  CHECK(lu[0] == 3.0);
  CHECK(lu[1] == 4.0);
  CHECK(lu[2] == Approx(1.0 / 3.0).epsilon(1e-15));
  CHECK(lu[3] == Approx(2.0 / 3.0).epsilon(1e-15));
  CHECK(f.info.item<int32_t>() == 0);
  // No swap needed: pivots 1, 2. A zero first column: no swap and a zero pivot, info 1.
  CHECK(lu_factor(tensor({4.0, 1.0, 2.0, 3.0}, {2, 2})).pivots.to_vector<int32_t>() == std::vector<int32_t>{1, 2});
  const LuFactors z = lu_factor(tensor({0.0, 1.0, 0.0, 2.0}, {2, 2}));
  CHECK(z.info.item<int32_t>() == 1);
  CHECK(z.pivots.to_vector<int32_t>() == std::vector<int32_t>{1, 2});
  // The swaps replayed by lu_unpack: [[0, 1], [1, 0]] is its own P, with L = U = I.
  const LuFactors s = lu_factor(tensor({0.0, 1.0, 1.0, 0.0}, {2, 2}));
  const LuResult r = lu_unpack(s.LU, s.pivots);
  CHECK(r.P.to_vector<double>() == std::vector<double>{0, 1, 1, 0});
  CHECK(r.L.to_vector<double>() == std::vector<double>{1, 0, 0, 1});
  CHECK(r.U.to_vector<double>() == std::vector<double>{1, 0, 0, 1});
}

TEST_CASE("singular matrices: det 0, slogdet sign 0 and -inf, logdet NaN for a negative det", "[linalg]") {
  // [[1, 2], [2, 4]]: U = [[2, 4], [0, 0]] exactly.
  const Tensor singular = tensor({1.0, 2.0, 2.0, 4.0}, {2, 2});
  CHECK(det(singular).item<double>() == 0.0);
  const SlogdetResult s = slogdet(singular);
  CHECK(s.sign.item<double>() == 0.0);
  CHECK(s.logabsdet.item<double>() == -std::numeric_limits<double>::infinity());
  CHECK(logdet(singular).item<double>() == -std::numeric_limits<double>::infinity());
  CHECK(lu_factor(singular).info.item<int32_t>() == 2);
  // det [[0, 1], [1, 0]] = -1: one swap. logdet of it is NaN, of its square 0.
  const Tensor swap = tensor({0.0, 1.0, 1.0, 0.0}, {2, 2});
  CHECK(det(swap).item<double>() == -1.0);
  CHECK(slogdet(swap).sign.item<double>() == -1.0);
  CHECK(std::isnan(logdet(swap).item<double>()));
  CHECK(logdet(matmul(swap, swap)).item<double>() == 0.0);
  // solve and inv refuse, naming the batch element.
  const Tensor batch = stack({eye(2, DType::Float64), singular});
  CHECK_THROWS_WITH(inv(batch), Catch::Contains("inv: the matrix is singular") && Catch::Contains("batch element 1"));
}

TEST_CASE("cholesky_ex reports where the factorization failed, and upper reads only the upper triangle", "[linalg]") {
  // [[4, 2], [2, 1]] is singular (order 2 fails), [[1, 0], [0, 1]] factors, [[-1, 0], [0, 1]]
  // fails at order 1.
  const Tensor A = tensor({4.0, 2.0, 2.0, 1.0, 1.0, 0.0, 0.0, 1.0, -1.0, 0.0, 0.0, 1.0}, {3, 2, 2});
  const CholeskyResult r = cholesky_ex(A);
  CHECK(r.info.dtype() == DType::Int32);
  CHECK(r.info.to_vector<int32_t>() == std::vector<int32_t>{2, 0, 1});
  CHECK_THROWS_WITH(cholesky(A), Catch::Contains("cholesky: the input is not positive-definite") &&
                                     Catch::Contains("order 2 (batch element 0)"));
  // The triangle not read may hold anything.
  const Tensor spd = tensor({4.0, 2.0, 2.0, 3.0}, {2, 2});
  const Tensor junk_below = tensor({4.0, 2.0, 99.0, 3.0}, {2, 2}), junk_above = tensor({4.0, 99.0, 2.0, 3.0}, {2, 2});
  CHECK(max_diff(cholesky(junk_below, true), cholesky(spd, true)) == 0.0);
  CHECK(max_diff(cholesky(junk_above), cholesky(spd)) == 0.0);
  CHECK(max_diff(cholesky(spd, true), cholesky(spd).t()) == 0.0);
  // L = [[2, 0], [1, sqrt 2]].
  const std::vector<double> l = cholesky(spd).to_vector<double>();
  CHECK(l[0] == 2.0);
  CHECK(l[1] == 0.0);
  CHECK(l[2] == 1.0);
  CHECK(l[3] == Approx(std::sqrt(2.0)).epsilon(1e-15));
}

TEST_CASE("det's gradient is the cofactor matrix, slogdet's the inverse transpose", "[linalg]") {
  // det [[a, b], [c, d]] = ad - bc: its gradient is [[d, -c], [-b, a]].
  Tensor A = tensor({2.0, -1.0, 0.5, 3.0}, {2, 2});
  A.set_requires_grad(true);
  det(A).backward();
  CHECK(A.grad().to_vector<double>() == std::vector<double>{3.0, -0.5, 1.0, 2.0});
  // Singular: the same cofactors, from the SVD (det A^-T is not finite there). A batch of
  // [[1, 2], [2, 4]] (rank 1), the zero matrix (rank 0: all cofactors 0) and an invertible one.
  Tensor S = tensor({1.0, 2.0, 2.0, 4.0, 0.0, 0.0, 0.0, 0.0, 2.0, -1.0, 0.5, 3.0}, {3, 2, 2});
  S.set_requires_grad(true);
  sum(det(S)).backward();
  const std::vector<double> cof = S.grad().to_vector<double>(),
                            want_cof{4.0, -2.0, -2.0, 1.0, 0.0, 0.0, 0.0, 0.0, 3.0, -0.5, 1.0, 2.0};
  for (size_t i = 0; i < want_cof.size(); ++i) CHECK(cof[i] == Approx(want_cof[i]).margin(1e-14));
  // A 3 x 3 of rank 2 whose elimination is exact (det exactly 0), [[1, 2, 3], [2, 4, 6], [1, 0, 1]]:
  // cofactors by hand (cofactor (0, 0) is 4 * 1 - 6 * 0).
  Tensor R = tensor({1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 1.0, 0.0, 1.0}, {3, 3});
  R.set_requires_grad(true);
  det(R).backward();
  const std::vector<double> r = R.grad().to_vector<double>(), want_r{4.0, 4.0, -4.0, -2.0, -2.0, 2.0, 0.0, 0.0, 0.0};
  for (size_t i = 0; i < want_r.size(); ++i) CHECK(r[i] == Approx(want_r[i]).margin(1e-12));
  // log |det A| = log 6.5: gradient [[d, -c], [-b, a]] / 6.5.
  Tensor B = tensor({2.0, -1.0, 0.5, 3.0}, {2, 2});
  B.set_requires_grad(true);
  slogdet(B).logabsdet.backward();
  const std::vector<double> g = B.grad().to_vector<double>(), want{3.0 / 6.5, -0.5 / 6.5, 1.0 / 6.5, 2.0 / 6.5};
  for (size_t i = 0; i < 4; ++i) CHECK(g[i] == Approx(want[i]).epsilon(1e-14));
  // No input that requires grad: no history.
  CHECK_FALSE(solve(eye(2), ones({2, 1})).requires_grad());
  CHECK(solve(A, ones({2, 1}, DType::Float64)).requires_grad());
}

TEST_CASE("autocast leaves linalg in float32", "[linalg]") {
  const Tensor A = random_matrices({4, 4}, DType::Float32, 21), B = random_matrices({4, 2}, DType::Float32, 22);
  const Tensor plain = solve(A, B), chol = cholesky(matmul(A, A.t()) + eye(4) * 4.0);
  const Tensor plain_lstsq = lstsq(A, B).solution, plain_exp = matrix_exp(A);
  Tensor cast, cast_chol, cast_lstsq, cast_exp;
  {
    AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
    cast = solve(A, B);
    cast_lstsq = lstsq(A, B).solution;
    cast_exp = matrix_exp(A);
    cast_chol = cholesky(matmul(A, A.t()).to(DType::Float32) + eye(4) * 4.0);
  }
  CHECK(cast.dtype() == DType::Float32);
  CHECK(max_diff(cast, plain) == 0.0);
  CHECK(max_diff(cast_lstsq, plain_lstsq) == 0.0);
  CHECK(max_diff(cast_exp, plain_exp) == 0.0);
  CHECK(cast_chol.dtype() == DType::Float32);
  CHECK(max_diff(cast_chol, chol) < 0.05);  // the product before it ran in bfloat16 under autocast
}

TEST_CASE("qr: orthonormal Q, LAPACK's signs, and no gradient where Q is not determined", "[linalg]") {
  const Tensor A = random_matrices({2, 7, 4}, DType::Float64, 31);
  const QrResult c = qr(A, QrMode::Complete);
  CHECK(c.Q.sizes() == Shape{2, 7, 7});
  CHECK(c.R.sizes() == Shape{2, 7, 4});
  CHECK(max_diff(matmul(c.Q.transpose(-2, -1), c.Q), eye(7, DType::Float64).expand({2, 7, 7})) < 1e-13);
  CHECK(max_diff(matmul(c.Q, c.R), A) < 1e-13);
  CHECK(max_diff(tril(c.R, -1), zeros_like(c.R)) == 0.0);
  // Reduced is Complete's first columns and rows; mode R the same R.
  const QrResult r = qr(A);
  CHECK(max_diff(r.Q, c.Q.narrow(-1, 0, 4)) == 0.0);
  CHECK(max_diff(r.R, c.R.narrow(-2, 0, 4)) == 0.0);
  CHECK(max_diff(qr(A, QrMode::R).R, r.R) == 0.0);
  CHECK_FALSE(qr(A, QrMode::R).Q.defined());
  // An upper-triangular matrix is left as it is: no reflection where the column below is zero, so
  // a negative diagonal entry stays (LAPACK's geqrf; a reflection would flip it).
  const Tensor upper = tensor({-2.0, 1.0, 0.0, 3.0}, {2, 2});
  const QrResult u = qr(upper);
  CHECK(u.R.to_vector<double>() == std::vector<double>{-2.0, 1.0, 0.0, 3.0});
  CHECK(u.Q.to_vector<double>() == std::vector<double>{1.0, 0.0, 0.0, 1.0});
  // A positive first entry with something below it: R's diagonal entry is -|column|.
  CHECK(qr(tensor({3.0, 4.0}, {2, 1})).R.item<double>() == Approx(-5.0).epsilon(1e-15));
  // Complete with m > n and mode R have no gradient: backward says so.
  for (QrMode mode : {QrMode::Complete, QrMode::R}) {
    Tensor x = random_matrices({4, 2}, DType::Float64, 32);
    x.set_requires_grad(true);
    const Tensor loss = sum(qr(x, mode).R);
    CHECK_THROWS_WITH(loss.backward(), Catch::Contains("qr: no gradient") &&
                                           Catch::Contains(mode == QrMode::R ? "mode R" : "more rows than columns"));
  }
}

TEST_CASE("lstsq: the residual of a tall system is orthogonal to A's columns, a wide one is solved exactly",
          "[linalg]") {
  const Tensor A = random_matrices({3, 30, 6}, DType::Float64, 41), B = random_matrices({3, 30, 2}, DType::Float64, 42);
  const LstsqResult r = lstsq(A, B);
  const Tensor residual = matmul(A, r.solution) - B;
  CHECK(max_diff(matmul(A.transpose(-2, -1), residual), zeros({3, 6, 2}, DType::Float64)) < 1e-12);
  CHECK(max_diff(r.residuals, sum(square(residual), {-2})) < 1e-12);
  // Wide: A X = B exactly, and X is in the row space of A (the least-norm solution).
  const Tensor W = A.transpose(-2, -1), C = random_matrices({3, 6, 2}, DType::Float64, 43);
  const Tensor X = lstsq(W, C).solution;
  CHECK(X.sizes() == Shape{3, 30, 2});
  CHECK(max_diff(matmul(W, X), C) < 1e-12);
  CHECK(max_diff(X, matmul(W.transpose(-2, -1), solve(matmul(W, W.transpose(-2, -1)), C))) < 1e-12);
  CHECK_FALSE(lstsq(W, C).residuals.defined());
}

TEST_CASE("matrix_norm: fro is the vector norm of the entries, keepdim keeps both dims", "[linalg]") {
  const Tensor A = random_matrices({2, 3, 5}, DType::Float64, 51);
  CHECK(max_diff(matrix_norm(A), vector_norm(A.reshape({2, 15}), 2.0, {1})) < 1e-14);
  CHECK(matrix_norm(A, "fro", true).sizes() == Shape{2, 1, 1});
  CHECK(matrix_norm(A, 1.0, true).sizes() == Shape{2, 1, 1});
  CHECK(matrix_norm(A, -1.0).sizes() == Shape{2});
  // 1 and inf swap under transposition.
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(max_diff(matrix_norm(A, 1.0), matrix_norm(A.transpose(-2, -1), inf)) == 0.0);
}

TEST_CASE("matrix_exp: rotations, nilpotent matrices and inverses", "[linalg]") {
  // e^[[0, -t], [t, 0]] is the rotation by t; t = 20 needs squarings.
  for (double t : {0.3, 20.0}) {
    const Tensor e = matrix_exp(tensor({0.0, -t, t, 0.0}, {2, 2}));
    const std::vector<double> want{std::cos(t), -std::sin(t), std::sin(t), std::cos(t)};
    const std::vector<double> got = e.to_vector<double>();
    for (size_t i = 0; i < 4; ++i) CHECK(got[i] == Approx(want[i]).margin(1e-13));
  }
  // A nilpotent N: e^N = I + N + N^2 / 2 exactly.
  const Tensor N = tensor({0.0, 2.0, 3.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0}, {3, 3});
  CHECK(max_diff(matrix_exp(N), eye(3, DType::Float64) + N + matmul(N, N) * 0.5) < 1e-14);
  // e^A e^-A = I, also for a large norm.
  const Tensor A = random_matrices({2, 5, 5}, DType::Float64, 61) * 3.0;
  CHECK(max_diff(matmul(matrix_exp(A), matrix_exp(-A)), eye(5, DType::Float64).expand({2, 5, 5})) < 1e-8);
  // NaN in, NaN out (no error, no endless scaling).
  CHECK(std::isnan(matrix_exp(full({2, 2}, std::nan(""), DType::Float64)).to_vector<double>()[0]));
}

TEST_CASE("inv and negative powers of a batch as long as the matrices are wide", "[linalg]") {
  // [3, 3, 3]: the identity inv solves against must not be taken for a batch of 3 vectors.
  const Tensor A = random_matrices({3, 3, 3}, DType::Float64, 71);
  const Tensor I = eye(3, DType::Float64).expand({3, 3, 3});
  CHECK(inv(A).sizes() == Shape{3, 3, 3});
  CHECK(max_diff(matmul(inv(A), A), I) < 1e-12);
  const Tensor B = random_matrices({2, 2, 2}, DType::Float64, 72);
  CHECK(max_diff(matmul(matrix_power(B, -2), matmul(B, B)), eye(2, DType::Float64).expand({2, 2, 2})) < 1e-12);
  // One A against a batch of B: factored once, the gradient summed back to A's shape.
  Tensor a = random_matrices({4, 4}, DType::Float64, 73);
  a.set_requires_grad(true);
  const Tensor b = random_matrices({5, 4, 2}, DType::Float64, 74);
  sum(solve(a, b)).backward();
  Tensor a2 = a.detach().clone();
  a2.set_requires_grad(true);
  sum(solve(a2.expand({5, 4, 4}), b)).backward();
  CHECK(a.grad().sizes() == Shape{4, 4});
  CHECK(max_diff(a.grad(), a2.grad()) < 1e-12);
}

TEST_CASE("qr scales its columns, and a NaN below the diagonal spreads", "[linalg]") {
  // float32 squares of 1e-23 underflow and of 1e20 overflow: |x| must come from scaled entries.
  for (float e : {1e-23f, 1e20f}) {
    const Tensor A = tensor({e, 2 * e, e, -e, 3 * e, e}, {3, 2});
    const QrResult r = qr(A);
    const double size = std::fabs(static_cast<double>(e));
    CHECK(max_diff(matmul(r.Q, r.R), A) / size < 1e-6);
    CHECK(max_diff(matmul(r.Q.t(), r.Q), eye(2)) < 1e-6);
  }
  const QrResult n = qr(tensor({1.0, std::nan("")}, {2, 1}));
  CHECK(std::isnan(n.R.item<double>()));
}

TEST_CASE("geqrf packs qr: householder_product of it is qr's Q, it has no gradient, and only the vectors are read",
          "[linalg]") {
  for (const Shape& shape : {Shape{5, 3}, Shape{4, 4}, Shape{2, 4, 3}}) {
    const Tensor A = random_matrices(shape, DType::Float64, 77);
    const GeqrfResult g = geqrf(A);
    const QrResult r = qr(A);
    CHECK(max_diff(householder_product(g.a, g.tau), r.Q) < 1e-12);
    CHECK(max_diff(triu(g.a).narrow(-2, 0, r.R.size(-2)), r.R) < 1e-12);
  }
  // A column already zero below the diagonal takes no reflection: tau 0.
  const GeqrfResult z = geqrf(tensor({2.0, 1.0, 0.0, 3.0}, {2, 2}));
  CHECK(z.tau.to_vector<float>() == std::vector<float>{0.0f, 0.0f});
  Tensor x = random_matrices({3, 3}, DType::Float64, 78);
  x.set_requires_grad(true);
  CHECK_THROWS_WITH(sum(geqrf(x).a).backward(), Catch::Contains("geqrf: has no gradient"));
  // Entries on and above the diagonal are never read, NaN or not (LAPACK's orgqr does the same).
  const GeqrfResult g = geqrf(random_matrices({4, 3}, DType::Float64, 79));
  const Tensor poisoned = where(gt(triu(ones({4, 3}, DType::Float64)), 0.0), std::nan(""), g.a);
  CHECK(max_diff(householder_product(poisoned, g.tau), householder_product(g.a, g.tau)) == 0.0);
  // No reflection: the identity's first columns, with zero gradients.
  Tensor a = g.a.clone(), none = zeros({0}, DType::Float64);
  a.set_requires_grad(true);
  none.set_requires_grad(true);
  const Tensor q = householder_product(a, none);
  CHECK(max_diff(q, eye(4, 3, DType::Float64)) == 0.0);
  sum(q).backward();
  CHECK(max_diff(a.grad(), zeros({4, 3}, DType::Float64)) == 0.0);
}

TEST_CASE("matrix_norm fro: a zero gradient at zero, float16 without overflow", "[linalg]") {
  Tensor z = zeros({2, 2}, DType::Float64);
  z.set_requires_grad(true);
  matrix_norm(z).backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 0});
  // 300^2 overflows float16's 65504; the norm 600 does not.
  CHECK(matrix_norm(full({2, 2}, 300.0, DType::Float16)).to(DType::Float32).item<float>() == 600.0f);
}

TEST_CASE("linalg errors name the op, and Complete qr's Q has no gradient either", "[linalg]") {
  CHECK_THROWS_WITH(lstsq(zeros({2, 3, 2}), zeros({3, 3, 1})), Catch::Contains("lstsq") && Catch::Contains("[2]"));
  Tensor x = random_matrices({4, 2}, DType::Float64, 75);
  x.set_requires_grad(true);
  const Tensor loss = sum(qr(x, QrMode::Complete).Q);
  CHECK_THROWS_WITH(loss.backward(), Catch::Contains("qr: no gradient"));
  // matrix_power's products stay float32 under autocast.
  const Tensor m = random_matrices({3, 3}, DType::Float32, 76);
  const Tensor plain = matrix_power(m, 3);
  AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
  CHECK(matrix_power(m, 3).dtype() == DType::Float32);
  CHECK(max_diff(matrix_power(m, 3), plain) == 0.0);
}

TEST_CASE("linalg on empty batches and 0 x 0 matrices", "[linalg]") {
  CHECK(solve(zeros({0, 3, 3}), zeros({0, 3, 2})).sizes() == Shape{0, 3, 2});
  CHECK(inv(zeros({0, 0})).sizes() == Shape{0, 0});
  CHECK(det(zeros({2, 0, 0})).to_vector<float>() == std::vector<float>{1.0f, 1.0f});
  CHECK(slogdet(zeros({0, 0})).logabsdet.item<float>() == 0.0f);
  CHECK(lu_factor(zeros({3, 0, 0})).info.sizes() == Shape{3});
  CHECK(cholesky_ex(zeros({2, 0, 0})).info.to_vector<int32_t>() == std::vector<int32_t>{0, 0});
  CHECK(matrix_power(zeros({0, 0}), -2).sizes() == Shape{0, 0});
}

TEST_CASE("eye makes identities of any dtype, and takes requires_grad", "[linalg]") {
  CHECK(eye(2, 3, DType::Bool).to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0, 1, 0});
  const Tensor e = eye(3, TensorOptions(DType::Float64, Device::cpu(), true));
  CHECK(e.requires_grad());
  CHECK(e.is_leaf());
  CHECK(e.to_vector<double>() == std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1});
}
