// Dense linear algebra on batches of small matrices: triangular solves, the Cholesky and LU
// factorizations (partial pivoting), and what they give (solve, inv, det, slogdet, logdet,
// cholesky_solve, cholesky_inverse, lu_solve, lu_unpack, matrix_power), Householder QR with lstsq
// on it, and the matrix norms, as torch.linalg has them (the spectral decompositions are in
// core/ops/spectral.h).
//
// Each factorization is the textbook column loop written in kiln's ops (narrow, matmul, argmax,
// gather, div): one step per column, every step a few ops on the whole batch at once. So the same
// code runs on the CPU and on a GPU without a LAPACK or cuSOLVER kernel, at O(n) steps of O(n^2)
// work each: made for the many small matrices of deep learning (a batch of 3x3 transforms, the
// 64x64 covariance of a whitening layer), not for one 4096x4096 system. Each factorization and
// solve records one autograd node with the analytic gradient (the inverse-transpose formulas, the
// Cholesky, LU and QR backward of Murray 2016 and PyTorch), never differentiating through its loop;
// the ops composed of them (lu_solve, cholesky_solve, inv, lstsq, matrix_exp) get theirs through
// those nodes.
//
// Matrices are the last two dims of a tensor, [*, n, n]; batch dims broadcast between operands.
// Only float32 and float64 (as PyTorch's linalg: half precision has too few digits for a
// factorization); operands share one dtype and device. Autocast leaves them alone: a float32
// factorization stays float32 inside an autocast region.
#pragma once

#include <string>

#include "core/tensor.h"

namespace kiln {

// X with A X = B (left) or X A = B (right), A triangular: lower, or upper when `upper`; with
// `unitriangular` its diagonal is taken as ones and never read. Only A's triangle is read (and
// differentiated). A [*, n, n], B [*, n, k] (left) or [*, k, n] (right): torch.linalg.
// solve_triangular. A zero on the diagonal gives infs and NaNs, as a triangular solve does in
// LAPACK; no error.
Tensor solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool left = true, bool unitriangular = false);

// The lower-triangular L with A = L L^T (or, with `upper`, the upper U = L^T with A = U^T U), for a
// symmetric positive-definite A [*, n, n], of which only the lower (upper) triangle is read:
// torch.linalg.cholesky. A matrix that is not positive-definite is an Error naming the batch
// element and the order of its leading minor that is not (this reads a flag on the host, which
// waits for a GPU; cholesky_ex does not). The gradient is symmetric, as PyTorch's.
Tensor cholesky(const Tensor& A, bool upper = false);
struct CholeskyResult {
  Tensor L;     // as cholesky's; NaNs from the failed step on where info > 0
  Tensor info;  // int32 [*]: 0, or k when the leading minor of order k is not positive-definite
};
// cholesky without the check: torch.linalg.cholesky_ex.
CholeskyResult cholesky_ex(const Tensor& A, bool upper = false);
// X with A X = B where A = L L^T (or U^T U with `upper`), given the factor: torch.cholesky_solve
// (B first, as there). B [*, n, k].
Tensor cholesky_solve(const Tensor& B, const Tensor& L, bool upper = false);
// A^-1 from A's Cholesky factor: torch.cholesky_inverse.
Tensor cholesky_inverse(const Tensor& L, bool upper = false);

// The LU factorization with partial pivoting of a square A [*, n, n]: A = P L U, L unit lower
// triangular and U upper, packed into one matrix LU (L below the diagonal, U on and above it);
// pivots (int32 [*, n], 1-based) as LAPACK's getrf gives them: row k was swapped with row
// pivots[k] - 1 at step k. A singular matrix factors too (a zero on U's diagonal; info says where).
// torch.linalg.lu_factor_ex for square matrices; LU is differentiable (its gradient reaches A).
struct LuFactors {
  Tensor LU;
  Tensor pivots;
  Tensor info;  // int32 [*]: 0, or k when U[k-1, k-1] is exactly 0
};
LuFactors lu_factor(const Tensor& A);
// P, L and U apart: P a permutation matrix (A's dtype), L unit lower triangular, U upper.
struct LuResult {
  Tensor P, L, U;
};
// torch.linalg.lu for square matrices.
LuResult lu(const Tensor& A);
// torch.lu_unpack: the factors of lu_factor apart. pivots must hold values in [1, n] (read on the
// host, which waits for a GPU).
LuResult lu_unpack(const Tensor& LU, const Tensor& pivots);
// X with A X = B (left) or X A = B (right), or with A^T in A's place when `adjoint`, from A's
// factors: torch.linalg.lu_solve. Differentiable in LU and B.
Tensor lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& B, bool left = true, bool adjoint = false);

// X with A X = B (left) or X A = B (right), A [*, n, n] square and invertible: torch.linalg.solve.
// B is [*, n, k], or a vector: [n], or [*, n] with A's batch dims exactly (PyTorch's rule), giving
// one of the same shape. A singular A (an exact zero pivot) is an Error naming the batch element
// (read on the host).
Tensor solve(const Tensor& A, const Tensor& B, bool left = true);
// A^-1: torch.linalg.inv. A singular A is an Error, as in solve.
Tensor inv(const Tensor& A);
// inv without the check: torch.linalg.inv_ex. Where info > 0 the inverse holds infs and NaNs.
struct InvResult {
  Tensor inverse;
  Tensor info;  // int32 [*]: 0, or k when U[k-1, k-1] of A's LU is exactly 0
};
InvResult inv_ex(const Tensor& A);

// The determinant, [*]: torch.linalg.det. Its gradient is the cofactor matrix: det A^-T from the
// LU where A is invertible, and from A's SVD where det A = 0 (as PyTorch; finding those reads a
// flag on the host in backward).
Tensor det(const Tensor& A);
struct SlogdetResult {
  Tensor sign;       // -1, 0 or 1 (no gradient)
  Tensor logabsdet;  // log |det A|; -inf for a singular matrix
};
// torch.linalg.slogdet: the determinant as a sign and a logarithm, finite where det over- or
// underflows. logabsdet's gradient is A^-T.
SlogdetResult slogdet(const Tensor& A);
// log det A: NaN where det < 0, -inf where it is 0 (torch.logdet).
Tensor logdet(const Tensor& A);

// The QR factorization A = Q R of A [*, m, n] by Householder reflections, with LAPACK's signs
// (geqrf: R's diagonal entry k is minus the sign of the entry it replaces, unless the column below
// it is zero already, which no reflection touches). With k = min(m, n):
// - Reduced: Q [*, m, k] with orthonormal columns, R [*, k, n] upper triangular;
// - Complete: Q [*, m, m] orthogonal, R [*, m, n];
// - R: R alone (as Reduced's; Q undefined).
// torch.linalg.qr. Differentiable (with R of full rank) in Reduced mode, and in Complete mode when
// m <= n (where the two agree); the other cases have no gradient, as in PyTorch (an AutogradError
// when backward reaches them).
enum class QrMode { Reduced, Complete, R };
struct QrResult {
  Tensor Q, R;
};
QrResult qr(const Tensor& A, QrMode mode = QrMode::Reduced);

// A's Householder QR packed as LAPACK's geqrf leaves it: a [*, m, n] holds R on and above the
// diagonal and, below it, the vectors of the reflections (each with an implied 1 on the diagonal);
// tau [*, min(m, n)] their scales, so that householder_product(a, tau) is qr(A)'s Q (for m >= n)
// and the signs are qr's. torch.geqrf. No gradient (as PyTorch): an AutogradError when backward
// reaches it.
struct GeqrfResult {
  Tensor a, tau;
};
GeqrfResult geqrf(const Tensor& A);

// The first n columns of H_1 H_2 ... H_k, H_i = I - tau_i v_i v_i^T, where v_i is column i of A
// [*, m, n] below the diagonal with a 1 on it and zeros above (what geqrf packs), for tau [*, k]
// with A's batch dims, k <= n <= m: [*, m, n], orthonormal columns when each tau_i = 2 / |v_i|^2.
// torch.linalg.householder_product (LAPACK's orgqr); differentiable in A and tau, as the matmuls
// it is made of.
Tensor householder_product(const Tensor& A, const Tensor& tau);

// The least-squares solution X of A X = B for A [*, m, n] of full rank and B [*, m, k] (batches
// broadcast): with m >= n the X minimizing |A X - B| (R^-1 Q^T B from A's QR), with m < n the X of
// least norm among those with A X = B (Q R^-T B from the QR of A^T). residuals: with m > n the
// squared residual norms of the columns, [*, k]; otherwise undefined. torch.linalg.lstsq with the
// driver 'gels' (the one PyTorch has on the GPU): a rank-deficient A gives infs and NaNs, not the
// minimum-norm solution of 'gelsd'. Differentiable in A and B.
struct LstsqResult {
  Tensor solution, residuals;
};
LstsqResult lstsq(const Tensor& A, const Tensor& B);

// The matrix norm over the last two dims of A [*, m, n]: "fro" (Frobenius: the root of the sum of
// squares) or an ord of 1, -1 (the largest and smallest column sum of |a|), inf, -inf (the same
// over rows), 2 and -2 (the largest and smallest singular value) or "nuc" (the nuclear norm: their
// sum); torch.linalg.matrix_norm. The singular values come from core/ops/spectral.h's svdvals
// (float32 and float64 only); the others take any floating dtype. [*] (or [*, 1, 1] with keepdim).
Tensor matrix_norm(const Tensor& A, const std::string& ord = "fro", bool keepdim = false);
Tensor matrix_norm(const Tensor& A, double ord, bool keepdim = false);

// e^A for square A [*, n, n]: the [13/13] Pade approximant of e^(A / 2^s) squared s times, s the
// fewest halvings that bring the 1-norm of every matrix of the batch under 5.37 (Higham 2005),
// read on the host (which waits for a GPU). torch.linalg.matrix_exp. The gradient is the
// derivative of that algorithm (matmuls and a solve), which approximates the Frechet derivative of
// e^A as closely as the algorithm approximates e^A (Al-Mohy and Higham 2009).
Tensor matrix_exp(const Tensor& A);

// x [*, m, m] multiplied by itself n times, by repeated squaring; 0 gives the identity (in x's
// shape) and a negative n the power -n of inv(x) (float32 or float64 only, as inv):
// torch.linalg.matrix_power. A non-negative power is matmuls only, in any dtype matmul takes.
Tensor matrix_power(const Tensor& x, int64_t n);

}  // namespace kiln
