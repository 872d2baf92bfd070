// Hand tests of the spectral family for what the op table's rows cannot see: the defining
// identities (A = V diag(w) V^T, A = U diag(S) Vh, orthonormal vectors) on larger batches,
// matrices whose answer is known by hand, repeated eigenvalues and rank deficiency (orthonormal
// vectors and the Moore-Penrose conditions still hold), reading one triangle only, entries near the
// ends of float32's range, NaN, empty shapes, autocast, and gradients that stay finite where the
// values repeat.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

namespace {

double max_diff(const Tensor& a, const Tensor& b) {
  return max((a.to(DType::Float64) - b.to(DType::Float64)).abs()).item<double>();
}

Tensor mT(const Tensor& x) { return x.transpose(-2, -1); }

Tensor random_matrices(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randn(shape, TensorOptions(dtype), g);
}

Tensor identity_like(int64_t n, const Tensor& like) { return eye(n, TensorOptions(like.dtype())); }

// The tolerance of a dtype scaled by the matrix size: the rotations of a few sweeps each round.
double tolerance(DType dtype, int64_t n) { return (dtype == DType::Float64 ? 1e-13 : 1e-5) * static_cast<double>(n); }

}  // namespace

TEST_CASE("eigh rebuilds its input from orthonormal eigenvectors on larger batches", "[spectral]") {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    for (int64_t n : {2, 7, 16, 31}) {
      INFO(dtype_name(dtype) << " n=" << n);
      const Tensor x = random_matrices({3, n, n}, dtype, 21 + static_cast<uint64_t>(n));
      const Tensor A = x + mT(x);
      const EighResult e = eigh(A);
      CHECK(e.eigenvalues.sizes() == Shape{3, n});
      CHECK(e.eigenvectors.dtype() == dtype);
      const Tensor V = e.eigenvectors;
      CHECK(max_diff(matmul(V * e.eigenvalues.unsqueeze(-2), mT(V)), A) < tolerance(dtype, n) * 10);
      CHECK(max_diff(matmul(mT(V), V), identity_like(n, A)) < tolerance(dtype, n));
      // Ascending.
      CHECK(all(le(e.eigenvalues.narrow(-1, 0, n - 1), e.eigenvalues.narrow(-1, 1, n - 1))).item<bool>());
      CHECK(max_diff(eigvalsh(A), e.eigenvalues) == 0.0);
    }
  }
}

TEST_CASE("eigh of matrices known by hand, repeated eigenvalues included", "[spectral]") {
  // [[2, 1], [1, 2]]: eigenvalues 1 and 3, eigenvectors (1, -1) and (1, 1) over sqrt 2.
  const EighResult e = eigh(tensor({2.0, 1.0, 1.0, 2.0}, {2, 2}));
  CHECK(max_diff(e.eigenvalues, tensor({1.0, 3.0})) < 1e-15);
  CHECK(max_diff(abs(e.eigenvectors), full({2, 2}, 1 / std::sqrt(2.0), TensorOptions(DType::Float64))) < 1e-15);
  // A diagonal matrix is already converged: its eigenvalues sorted, its vectors the unit ones.
  const EighResult d = eigh(diag_embed(tensor({3.0f, -1.0f, 2.0f})));
  CHECK(d.eigenvalues.to_vector<float>() == std::vector<float>{-1.0f, 2.0f, 3.0f});
  CHECK(abs(d.eigenvectors).to_vector<float>() == std::vector<float>{0, 0, 1, 1, 0, 0, 0, 1, 0});
  // Q diag(1, 1, 4) Q^T: the repeated eigenvalue's eigenvectors are any orthonormal basis of its
  // plane, but still orthonormal and still rebuild A.
  const Tensor Q = qr(random_matrices({3, 3}, DType::Float64, 5)).Q;
  const Tensor A = matmul(Q * tensor({1.0, 1.0, 4.0}).unsqueeze(-2), mT(Q));
  const EighResult r = eigh(A);
  CHECK(max_diff(r.eigenvalues, tensor({1.0, 1.0, 4.0})) < 1e-14);
  CHECK(max_diff(matmul(mT(r.eigenvectors), r.eigenvectors), eye(3, TensorOptions(DType::Float64))) < 1e-14);
  CHECK(max_diff(matmul(r.eigenvectors * r.eigenvalues.unsqueeze(-2), mT(r.eigenvectors)), A) < 1e-14);
}

TEST_CASE("eigh reads one triangle only", "[spectral]") {
  const Tensor x = random_matrices({2, 5, 5}, DType::Float64, 31);
  const Tensor S = x + mT(x);
  const Tensor garbage = random_matrices({2, 5, 5}, DType::Float64, 32) * 100.0;
  const Tensor lower = tril(S) + triu(garbage, 1), upper = triu(S) + tril(garbage, -1);
  const EighResult ref = eigh(S);
  CHECK(max_diff(eigh(lower).eigenvalues, ref.eigenvalues) == 0.0);
  CHECK(max_diff(eigh(upper, true).eigenvalues, ref.eigenvalues) < 1e-13);
  CHECK(max_diff(eigvalsh(upper, true), ref.eigenvalues) < 1e-13);
  CHECK(max_diff(eigh(lower, true).eigenvalues, ref.eigenvalues) > 1.0);  // the garbage is read
}

TEST_CASE("svd rebuilds tall, wide and square batches with orthonormal vectors", "[spectral]") {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    for (const Shape& shape : {Shape{2, 9, 4}, Shape{2, 4, 9}, Shape{3, 12, 12}, Shape{1, 7, 5}}) {
      INFO(dtype_name(dtype) << " " << shape_str(shape));
      const int64_t m = shape[1], n = shape[2], k = std::min(m, n);
      const Tensor A = random_matrices(shape, dtype, 41 + static_cast<uint64_t>(m * n));
      const double tol = tolerance(dtype, std::max(m, n));
      const SvdResult r = svd(A, false);
      CHECK(r.U.sizes() == Shape{shape[0], m, k});
      CHECK(r.S.sizes() == Shape{shape[0], k});
      CHECK(r.Vh.sizes() == Shape{shape[0], k, n});
      CHECK(max_diff(matmul(r.U * r.S.unsqueeze(-2), r.Vh), A) < tol * 10);
      CHECK(max_diff(matmul(mT(r.U), r.U), identity_like(k, A)) < tol);
      CHECK(max_diff(matmul(r.Vh, mT(r.Vh)), identity_like(k, A)) < tol);
      CHECK(all(ge(r.S.narrow(-1, 0, k - 1), r.S.narrow(-1, 1, k - 1))).item<bool>());
      CHECK(max_diff(svdvals(A), r.S) == 0.0);
      // Full matrices: orthogonal U and Vh whose first k columns (rows) are the reduced ones.
      const SvdResult f = svd(A, true);
      CHECK(f.U.sizes() == Shape{shape[0], m, m});
      CHECK(f.Vh.sizes() == Shape{shape[0], n, n});
      CHECK(max_diff(matmul(mT(f.U), f.U), identity_like(m, A)) < tol);
      CHECK(max_diff(matmul(f.Vh, mT(f.Vh)), identity_like(n, A)) < tol);
      CHECK(max_diff(f.U.narrow(-1, 0, k), r.U) < tol);
      CHECK(max_diff(f.S, r.S) == 0.0);
    }
  }
}

TEST_CASE("svd of rank-deficient and zero matrices keeps its vectors orthonormal", "[spectral]") {
  // u v^T: one singular value |u| |v|, the others exactly 0.
  const Tensor u = tensor({1.0, 2.0, 3.0}, {3, 1}), v = tensor({1.0, -1.0, 0.5, 2.0}, {1, 4});
  const Tensor A = matmul(u, v);
  const SvdResult r = svd(A, true);
  const double s1 = std::sqrt(14.0) * std::sqrt(6.25);
  CHECK(std::fabs(r.S.select(-1, 0).item<double>() - s1) < 1e-14);
  CHECK(max_diff(r.S.narrow(-1, 1, 2), zeros({2}, DType::Float64)) < 1e-14);
  CHECK(max_diff(matmul(mT(r.U), r.U), eye(3, TensorOptions(DType::Float64))) < 1e-14);
  CHECK(max_diff(matmul(r.Vh, mT(r.Vh)), eye(4, TensorOptions(DType::Float64))) < 1e-14);
  CHECK(max_diff(matmul(r.U * r.S.unsqueeze(-2), r.Vh.narrow(-2, 0, 3)), A) < 1e-14);
  CHECK(matrix_rank(A).item<int64_t>() == 1);
  CHECK(matrix_rank(matmul(A, mT(A)), std::nullopt, std::nullopt, true).item<int64_t>() == 1);
  // The zero matrix: S = 0 and U, Vh orthonormal all the same.
  const SvdResult z = svd(zeros({4, 3}, DType::Float32), false);
  CHECK(max(abs(z.S)).item<float>() == 0.0f);
  CHECK(max_diff(matmul(mT(z.U), z.U), eye(3, TensorOptions(DType::Float32))) < 1e-6);
  CHECK(matrix_rank(zeros({4, 3})).item<int64_t>() == 0);
}

TEST_CASE("pinv meets the Moore-Penrose conditions on a rank-deficient batch", "[spectral]") {
  for (bool hermitian : {false, true}) {
    INFO("hermitian " << hermitian);
    // Rank 2 of 5: x y^T with x [2, 5, 2].
    const Tensor x = random_matrices({2, 5, 2}, DType::Float64, 51);
    const Tensor A = hermitian ? matmul(x, mT(x)) : matmul(x, mT(random_matrices({2, 5, 2}, DType::Float64, 52)));
    const Tensor P = pinv(A, std::nullopt, std::nullopt, hermitian);
    CHECK(max_diff(matmul(matmul(A, P), A), A) < 1e-12);
    CHECK(max_diff(matmul(matmul(P, A), P), P) < 1e-12);
    CHECK(max_diff(mT(matmul(A, P)), matmul(A, P)) < 1e-12);
    CHECK(max_diff(mT(matmul(P, A)), matmul(P, A)) < 1e-12);
    CHECK(matrix_rank(A, std::nullopt, std::nullopt, hermitian).to_vector<int64_t>() == std::vector<int64_t>{2, 2});
  }
  // An atol above the largest singular value drops them all: the pseudo-inverse is 0.
  const Tensor A = random_matrices({3, 4}, DType::Float64, 53);
  CHECK(max(abs(pinv(A, 1e6))).item<double>() == 0.0);
  // atol 0 given explicitly keeps the default rtol: a rank-1 matrix's rounding noise stays out.
  const Tensor rank1 = matmul(random_matrices({6, 1}, DType::Float64, 54), random_matrices({1, 5}, DType::Float64, 55));
  CHECK(matrix_rank(rank1, 0.0).item<int64_t>() == 1);
  CHECK(matrix_rank(rank1, std::nullopt, 0.0).item<int64_t>() > 1);  // rtol 0: the noise counts
  // rtol given alone keeps atol at 0; rtol 0.99 keeps only values within 1% of the largest.
  CHECK(matrix_rank(A, std::nullopt, 0.0).item<int64_t>() == 3);
  CHECK(matrix_rank(A, std::nullopt, 0.99).item<int64_t>() == 1);
}

TEST_CASE("cond is inf for a singular matrix and matches its closed form", "[spectral]") {
  const Tensor singular = tensor({1.0, 2.0, 2.0, 4.0}, {2, 2});
  CHECK(std::isinf(cond(singular, "fro").item<double>()));
  CHECK(std::isinf(cond(singular, 1.0).item<double>()));
  // The zero matrix's inverse is NaN (0 / 0), its condition number still inf.
  CHECK(std::isinf(cond(zeros({2, 2}), "nuc").item<float>()));
  // diag(4, 0.5): 2-norm condition 8, Frobenius sqrt(16.25) sqrt(4.0625).
  const Tensor d = diag_embed(tensor({4.0, 0.5}));
  CHECK(std::fabs(cond(d).item<double>() - 8.0) < 1e-14);
  CHECK(std::fabs(cond(d, -2.0).item<double>() - 0.125) < 1e-15);
  CHECK(std::fabs(cond(d, "fro").item<double>() - std::sqrt(16.25) * std::sqrt(4.0625)) < 1e-13);
  CHECK(std::fabs(matrix_norm(d, "nuc").item<double>() - 4.5) < 1e-15);
  CHECK(std::fabs(cond(d, "nuc").item<double>() - 4.5 * 2.25) < 1e-14);
  // Empty matrices: 0, whatever p.
  CHECK(cond(zeros({2, 0})).item<float>() == 0.0f);
  CHECK(cond(zeros({3, 0, 0}), "fro").to_vector<float>() == std::vector<float>{0, 0, 0});
  // inv_ex reports the singular matrix instead of throwing.
  const InvResult i = inv_ex(tensor({1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f}, {2, 2, 2}));
  CHECK(i.info.to_vector<int32_t>() == std::vector<int32_t>{0, 2});
  CHECK(max_diff(i.inverse.select(0, 0), eye(2)) == 0.0);
}

TEST_CASE("eigh and svd keep their precision near the ends of float32's range", "[spectral]") {
  for (double scale : {1e-30, 1e30}) {
    INFO("scale " << scale);
    // [[2, 1], [1, 2]] scaled: eigenvalues scale and 3 scale, singular values the same.
    const Tensor A = tensor({2.0f, 1.0f, 1.0f, 2.0f}, {2, 2}) * scale;
    const std::vector<float> w = eigvalsh(A).to_vector<float>();
    CHECK(std::fabs(w[0] / static_cast<float>(scale) - 1.0f) < 1e-6f);
    CHECK(std::fabs(w[1] / static_cast<float>(scale) - 3.0f) < 1e-6f);
    const std::vector<float> s = svdvals(A).to_vector<float>();
    CHECK(std::fabs(s[0] / static_cast<float>(scale) - 3.0f) < 1e-6f);
    CHECK(std::fabs(s[1] / static_cast<float>(scale) - 1.0f) < 1e-6f);
  }
}

TEST_CASE("NaN and inf inputs give NaN results without sweeping forever", "[spectral]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // The second matrix of each batch is finite and keeps its own answer.
  const Tensor A = tensor({1.0f, nan, nan, 2.0f, 2.0f, 1.0f, 1.0f, 2.0f}, {2, 2, 2});
  const EighResult e = eigh(A);
  CHECK(all(isnan(e.eigenvalues.select(0, 0))).item<bool>());
  CHECK(all(isnan(e.eigenvectors.select(0, 0))).item<bool>());
  CHECK(max_diff(e.eigenvalues.select(0, 1), tensor({1.0f, 3.0f})) < 1e-6);
  // Alone, a NaN off the diagonal stops the sweeps at once: the diagonal left is no answer.
  CHECK(all(isnan(eigvalsh(tensor({1.0f, nan, nan, 2.0f}, {2, 2})))).item<bool>());
  CHECK(all(isnan(svdvals(tensor({nan, 0.0f, 0.0f, 2.0f}, {2, 2})))).item<bool>());
  const Tensor B = tensor({inf, 1.0f, 1.0f, 2.0f, 2.0f, 1.0f, 1.0f, 2.0f}, {2, 2, 2});
  const SvdResult r = svd(B);
  CHECK(all(isnan(r.S.select(0, 0))).item<bool>());
  CHECK(all(isnan(r.U.select(0, 0))).item<bool>());
  CHECK(max_diff(r.S.select(0, 1), tensor({3.0f, 1.0f})) < 1e-6);
}

TEST_CASE("empty matrices and batches", "[spectral]") {
  const EighResult e = eigh(zeros({3, 0, 0}));
  CHECK(e.eigenvalues.sizes() == Shape{3, 0});
  CHECK(e.eigenvectors.sizes() == Shape{3, 0, 0});
  CHECK(eigh(zeros({0, 4, 4})).eigenvalues.sizes() == Shape{0, 4});
  const SvdResult full = svd(zeros({2, 0, 3}), true);
  CHECK(full.U.sizes() == Shape{2, 0, 0});
  CHECK(full.S.sizes() == Shape{2, 0});
  CHECK(max_diff(full.Vh, eye(3).expand({2, 3, 3})) == 0.0);
  const SvdResult reduced = svd(zeros({3, 0}), false);
  CHECK(reduced.U.sizes() == Shape{3, 0});
  CHECK(reduced.Vh.sizes() == Shape{0, 0});
  CHECK(pinv(zeros({3, 0})).sizes() == Shape{0, 3});
  CHECK(matrix_rank(zeros({2, 3, 0})).to_vector<int64_t>() == std::vector<int64_t>{0, 0});
  CHECK(matrix_norm(zeros({3, 0}), "nuc").item<float>() == 0.0f);
}

TEST_CASE("autocast leaves the spectral ops in float32", "[spectral]") {
  // Inside an autocast region every result is the one computed outside it, to the bit: no product
  // of the sweeps, of the QR or of pinv ran in bfloat16.
  const Tensor x = random_matrices({4, 3}, DType::Float32, 61);
  const Tensor A = matmul(x, mT(x)) + eye(4);
  const EighResult e = eigh(A);
  const SvdResult r = svd(x);
  const Tensor P = pinv(x), H = pinv(A, std::nullopt, std::nullopt, true), c = cond(A, "nuc");
  AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
  CHECK(max_diff(eigh(A).eigenvectors, e.eigenvectors) == 0.0);
  const SvdResult in = svd(x);
  CHECK(max_diff(in.U, r.U) == 0.0);
  CHECK(max_diff(in.Vh, r.Vh) == 0.0);
  CHECK(pinv(x).dtype() == DType::Float32);
  CHECK(max_diff(pinv(x), P) == 0.0);
  CHECK(max_diff(pinv(A, std::nullopt, std::nullopt, true), H) == 0.0);
  CHECK(max_diff(cond(A, "nuc"), c) == 0.0);
}

TEST_CASE("gradients through the values stay finite where the values repeat", "[spectral]") {
  // At the identity every eigenvalue repeats: eigvalsh's gradient V diag(g) V^T is still defined,
  // and so is eigh's when the loss uses only the eigenvalues.
  Tensor A = eye(3, TensorOptions(DType::Float64));
  A.set_requires_grad(true);
  const Tensor g = tensor({1.0, 2.0, 3.0});
  sum(eigvalsh(A) * g).backward();
  CHECK(all(isfinite(A.grad())).item<bool>());
  // d(sum g w) / dA = V diag(g) V^T has trace sum g.
  CHECK(std::fabs(trace(A.grad()).item<double>() - 6.0) < 1e-14);
  Tensor B = eye(3, TensorOptions(DType::Float64));
  B.set_requires_grad(true);
  sum(eigh(B).eigenvalues * g).backward();
  CHECK(max_diff(B.grad(), A.grad()) < 1e-14);
  // pinv has its own derivative, finite at repeated singular values: at 2 I, gA = -P^T g P^T.
  Tensor E = eye(3, TensorOptions(DType::Float64)) * 2.0;
  E.set_requires_grad(true);
  const Tensor G = random_matrices({3, 3}, DType::Float64, 71);
  sum(pinv(E) * G).backward();
  CHECK(max_diff(E.grad(), G * -0.25) < 1e-14);
  // hermitian reads the lower triangle, and so does the gradient's formula: garbage above the
  // diagonal changes neither.
  const Tensor x = random_matrices({4, 4}, DType::Float64, 72);
  Tensor S = x + mT(x), T = tril(x + mT(x)) + triu(random_matrices({4, 4}, DType::Float64, 73), 1);
  S.set_requires_grad(true);
  T.set_requires_grad(true);
  const Tensor W = random_matrices({4, 4}, DType::Float64, 74);
  sum(pinv(S, std::nullopt, std::nullopt, true) * W).backward();
  sum(pinv(T, std::nullopt, std::nullopt, true) * W).backward();
  CHECK(max_diff(T.grad(), S.grad()) < 1e-12);
  // svdvals of a rank-1 matrix: U diag(g) Vh, finite at the repeated zeros; the largest value's
  // gradient is u1 v1^T, here u v^T / (|u| |v|) whatever the signs.
  const Tensor u = tensor({1.0, 2.0}, {2, 1}), v = tensor({3.0, 1.0, 1.0}, {1, 3});
  Tensor C = matmul(u, v);
  C.set_requires_grad(true);
  sum(svdvals(C)).backward();
  CHECK(all(isfinite(C.grad())).item<bool>());
  Tensor D = matmul(u, v);
  D.set_requires_grad(true);
  svdvals(D).select(-1, 0).backward();
  CHECK(max_diff(D.grad(), matmul(u, v) / (std::sqrt(5.0) * std::sqrt(11.0))) < 1e-14);
}
