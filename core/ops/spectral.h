// The spectral decompositions of batches of small matrices, and what they give: the symmetric
// eigendecomposition (eigh, eigvalsh), the singular value decomposition (svd, svdvals), and the
// pseudo-inverse, rank and condition number made of them, as torch.linalg has them.
//
// Both decompositions are Jacobi methods written in kiln's ops, so the same code runs on the CPU
// and on a GPU: eigh rotates pairs of rows and columns of the symmetric matrix until it is
// diagonal (two-sided Jacobi), svd rotates pairs of columns of A until they are orthogonal
// (one-sided Jacobi, Hestenes). Each step rotates n/2 disjoint pairs at once (the round-robin
// ordering of Brent and Luk; an odd n gets one more, idle, index), a sweep of n - 1 steps meets
// every pair once, and the sweeps repeat until the matrix is diagonal (the columns orthogonal) to
// the dtype's precision. Whether to sweep again is read on the host once per sweep, which waits
// for a GPU. eigh's eigenvalues are accurate to eps times the matrix's norm, as LAPACK's; svd's
// test is relative to each pair of columns, so its small singular values keep high relative
// precision. Made for the many small matrices of deep learning (a batch of covariances, a
// whitening layer's 64x64), not for one 4096x4096 matrix: a sweep is O(n) steps of O(n^2) work
// each, and Jacobi converges quadratically once the matrix is near diagonal, so a handful of
// sweeps do.
//
// Eigenvectors and singular vectors are determined up to sign only (and up to a rotation within
// the space of a repeated value): kiln's signs are those its rotations give, not LAPACK's, so a
// loss should not depend on them (use the values, or v v^T, or v squared). Their gradients are
// defined where the values are distinct (and, for svd of a matrix that is not square, nonzero), as
// PyTorch's: the part of the gradient that reaches A through the vectors divides by the gaps
// between values, and where a gap is 0 kiln gives inf or NaN (0 only where that part is exactly
// zero, as when the loss does not use the vectors). A gradient through the values alone (eigvalsh,
// svdvals) is finite everywhere.
//
// Matrices are the last two dims, float32 or float64; NaN or inf entries give NaN results.
#pragma once

#include <optional>
#include <string>

#include "core/tensor.h"

namespace kiln {

// The eigenvalues (ascending, [*, n]) and orthonormal eigenvectors (the columns of [*, n, n]) of a
// symmetric A [*, n, n]: A = V diag(w) V^T. Only A's lower triangle is read, or its upper one with
// `upper` (torch.linalg.eigh's UPLO). The gradient is symmetric, as PyTorch's.
struct EighResult {
  Tensor eigenvalues, eigenvectors;
};
EighResult eigh(const Tensor& A, bool upper = false);
// eigh's eigenvalues alone (their gradient V diag(g) V^T is finite at repeated eigenvalues too).
Tensor eigvalsh(const Tensor& A, bool upper = false);

// A = U diag(S) Vh for A [*, m, n], k = min(m, n): S [*, k] descending and non-negative; U
// [*, m, k] and Vh [*, k, n] with orthonormal columns (rows), or, with `full_matrices`, U [*, m, m]
// and Vh [*, n, n] orthogonal (their columns beyond k an orthonormal completion; their gradient is
// ignored, as PyTorch's). torch.linalg.svd.
struct SvdResult {
  Tensor U, S, Vh;
};
SvdResult svd(const Tensor& A, bool full_matrices = true);
// svd's singular values alone: torch.linalg.svdvals (gradient U diag(g) Vh, finite everywhere).
Tensor svdvals(const Tensor& A);

// The Moore-Penrose pseudo-inverse [*, n, m] of A [*, m, n]: V diag(1/S) U^T with the singular
// values at or below max(atol, rtol * S_max) taken as zero. torch.linalg.pinv's defaults: with
// neither given (or atol 0 alone), rtol = max(m, n) * eps of the dtype; with an atol > 0 alone,
// rtol = 0. `hermitian`: A is symmetric (its lower triangle read), and eigh is used (|eigenvalues|
// in place of S). The gradient is the pseudo-inverse's own (Golub and Pereyra), defined wherever
// the rank does not change, repeated values included.
Tensor pinv(const Tensor& A, std::optional<double> atol = std::nullopt, std::optional<double> rtol = std::nullopt,
            bool hermitian = false);
// The number of singular values (|eigenvalues| with `hermitian`) above max(atol, rtol * S_max),
// int64 [*], with pinv's defaults: torch.linalg.matrix_rank.
Tensor matrix_rank(const Tensor& A, std::optional<double> atol = std::nullopt,
                   std::optional<double> rtol = std::nullopt, bool hermitian = false);

// The condition number of A in the norm `p`: 2 (S_max / S_min, any [*, m, n]; inf where S_min is
// 0) or -2 (S_min / S_max); for the others ("fro", "nuc", 1, -1, inf, -inf) |A| |A^-1| with A
// square, inf where A is singular (an exact zero pivot of its LU; for "nuc", which needs no
// inverse (A^-1's singular values are 1/S), a zero singular value). Empty matrices give 0, as
// NumPy's and PyTorch's. torch.linalg.cond.
Tensor cond(const Tensor& A, double p = 2.0);
Tensor cond(const Tensor& A, const std::string& p);

}  // namespace kiln
