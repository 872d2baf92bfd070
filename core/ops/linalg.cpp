// The factorizations and solves of core/ops/linalg.h. The *_raw functions compute without autograd
// (under NoGradGuard, autocast off) on operands whose batch dims already agree; the public ops
// check their arguments, broadcast, call them and record one node whose backward is made of the
// same raw functions and matmul.
#include "core/ops/linalg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/distance.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/linalg_common.h"
#include "core/ops/index.h"
#include "core/ops/math.h"
#include "core/ops/matmul.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "core/ops/spectral.h"
#include "core/ops/topk.h"
#include "core/ops/triangle.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln {

using namespace linalg_detail;

namespace {

// The second operand of a solve: a matrix of A's dtype and device.
void check_operand(const char* op, const Tensor& A, const Tensor& B, const char* what) {
  check_matrix(op, B, what);
  if (B.dtype() != A.dtype()) {
    throw DTypeError(std::string(op) + ": the operands must share a dtype, got " + ops::dtype_str(A.dtype()) + " and " +
                     ops::dtype_str(B.dtype()));
  }
  ops::common_device(op, {&A, &B});
}

// The right-hand side B of a solve with the square A (called `a_name`): a matrix of A's dtype and
// device with A's n rows (left: A X = B) or columns (right: X A = B).
void check_rhs(const char* op, const Tensor& A, const char* a_name, const Tensor& B, bool left) {
  check_operand(op, A, B, "B");
  if ((left ? B.size(-2) : B.size(-1)) == A.size(-1)) return;
  throw ShapeError(std::string(op) + ": B " + shape_str(B.sizes()) + " does not fit " + a_name + " " +
                   shape_str(A.sizes()) +
                   (left ? " on the left (A X = B needs B [*, n, k])" : " on the right (X A = B needs B [*, k, n])"));
}

// A [*, n, n] and B [*, r, c] expanded to their broadcast batch dims (differentiable views).
std::pair<Tensor, Tensor> broadcast_batch(const char* op, const Tensor& A, const Tensor& B) {
  const Shape batch = broadcast_shapes(batch_of(A, 2), batch_of(B, 2), op);
  return {A.expand(with(batch, {A.size(-2), A.size(-1)})), B.expand(with(batch, {B.size(-2), B.size(-1)}))};
}

Tensor identity(int64_t n, const Tensor& like) { return eye(n, TensorOptions(like.dtype(), like.device())); }

// The int32 index (1-based) of the first true of `bad` [*, n] along the last dim, 0 where none.
Tensor first_failure(const Tensor& bad) {
  if (bad.size(-1) == 0) return zeros(batch_of(bad, 1), TensorOptions(DType::Int32, bad.device()));
  const Tensor position = argmax(bad.to(DType::Int32), -1) + 1;
  return where(any(bad, {-1}), position, 0).to(DType::Int32);
}

// Where info is not 0: an Error naming op, the batch element and the step (reads info on the host).
void check_info(const char* op, const Tensor& info, const std::string& what) {
  const std::vector<int64_t> v = info.to(DType::Int64).to_vector<int64_t>();
  for (size_t b = 0; b < v.size(); ++b) {
    if (v[b] == 0) continue;
    const std::string where = info.dim() == 0 ? "" : " (batch element " + std::to_string(b) + ")";
    throw Error(std::string(op) + ": " + what + std::to_string(v[b]) + where);
  }
}

// --- raw computations ----------------------------------------------------------------------------

// X with A X = B, A [*, n, n] lower (or upper) triangular, B [*, n, k] with A's batch dims: forward
// (backward) substitution, one row of X per step.
Tensor triangular_raw(const Tensor& A, const Tensor& B, bool upper, bool unit) {
  RawScope scope(A.device());
  const int64_t n = A.size(-1);
  Tensor X = empty(B.sizes(), TensorOptions(B.dtype(), B.device()));
  for (int64_t s = 0; s < n; ++s) {
    const int64_t i = upper ? n - 1 - s : s;
    const Tensor row = A.narrow(-2, i, 1);
    Tensor r = B.narrow(-2, i, 1);
    if (s > 0) {
      // What the rows solved already give: A[i, :i] X[:i] (lower), A[i, i+1:] X[i+1:] (upper).
      const int64_t from = upper ? i + 1 : 0, count = upper ? n - 1 - i : i;
      r = r - matmul(row.narrow(-1, from, count), X.narrow(-2, from, count));
    }
    if (!unit) r = r / row.narrow(-1, i, 1);
    X.narrow(-2, i, 1).copy_(r);
  }
  return X;
}

// The lower Cholesky factor of A [*, n, n] (its lower triangle read), column by column, and the
// pivots d_j (what the square root is taken of) that say where it failed.
CholeskyResult cholesky_raw(const Tensor& A) {
  RawScope scope(A.device());
  const int64_t n = A.size(-1);
  Tensor L = zeros(A.sizes(), TensorOptions(A.dtype(), A.device()));
  Tensor d = empty(with(batch_of(A, 2), {n}), TensorOptions(A.dtype(), A.device()));
  for (int64_t j = 0; j < n; ++j) {
    Tensor v = A.narrow(-1, j, 1).narrow(-2, j, n - j);  // column j from the diagonal down
    if (j > 0) {
      const Tensor left = L.narrow(-1, 0, j);
      v = v - matmul(left.narrow(-2, j, n - j), mT(left.narrow(-2, j, 1)));
    }
    const Tensor pivot = v.narrow(-2, 0, 1);
    d.narrow(-1, j, 1).copy_(pivot.squeeze(-1));
    L.narrow(-1, j, 1).narrow(-2, j, n - j).copy_(v / sqrt(pivot));
  }
  return {L, first_failure(logical_not(gt(d, 0)))};  // NaN is a failure too
}

// The inverse of a permutation [*, n]: where each value sits (a sort, no host read).
Tensor inverse_permutation(const Tensor& perm) { return argsort(perm, -1); }

// The row order [*, n] that swaps rows k and p ([*, 1]) of `rows` (the identity order, [*, n]).
Tensor swap_order(const Tensor& rows, const Tensor& p, int64_t k) {
  Tensor order = scatter(rows, -1, p, k);
  order.narrow(-1, k, 1).copy_(p);
  return order;
}

struct RawLu {
  Tensor LU;      // [*, n, n]
  Tensor perm;    // int64 [*, n]: row i of P^T A is row perm[i] of A
  Tensor pivots;  // int32 [*, n], LAPACK's 1-based swaps
  Tensor info;    // int32 [*]
};

// Gaussian elimination with partial pivoting, one column per step: the largest |entry| on or
// below the diagonal is swapped up (whole rows, so the multipliers already stored move with it),
// the column below divided by it, and the rank-1 update applied to the rest.
RawLu lu_raw(const Tensor& A) {
  RawScope scope(A.device());
  const int64_t n = A.size(-1);
  const Shape batch = batch_of(A, 2);
  const TensorOptions index_options(DType::Int64, A.device());
  Tensor LU = A.clone(MemoryFormat::Contiguous);
  const Tensor rows = arange(0, n, 1, index_options).expand(with(batch, {n}));
  Tensor perm = rows.clone();
  Tensor pivots = empty(with(batch, {n}), index_options);
  for (int64_t k = 0; k < n; ++k) {
    const Tensor column = LU.narrow(-1, k, 1).narrow(-2, k, n - k).squeeze(-1);  // [*, n - k]
    const Tensor p = argmax(abs(column), -1, true) + k;                          // [*, 1]
    pivots.narrow(-1, k, 1).copy_(p);
    if (k + 1 == n) break;
    // Swap rows k and p: the row order as an index, gathered.
    const Tensor order = swap_order(rows, p, k);
    LU = gather(LU, -2, order.unsqueeze(-1).expand(with(batch, {n, n})));
    perm = gather(perm, -1, order);
    const Tensor pivot = LU.narrow(-2, k, 1).narrow(-1, k, 1);
    // A zero pivot means the whole column below is zero: leave it so (LAPACK's getrf does).
    const Tensor divisor = where(eq(pivot, 0), 1.0, pivot);
    Tensor below = LU.narrow(-2, k + 1, n - k - 1).narrow(-1, k, 1);
    below.div_(divisor);
    LU.narrow(-2, k + 1, n - k - 1)
        .narrow(-1, k + 1, n - k - 1)
        .sub_(matmul(below, LU.narrow(-2, k, 1).narrow(-1, k + 1, n - k - 1)));
  }
  const Tensor info = first_failure(eq(diagonal(LU, 0, -2, -1), 0));
  return {LU, perm, (pivots + 1).to(DType::Int32), info};
}

// The rows of x [*, n, k] reordered: row i of the result is row order[i] of x.
Tensor rows_in_order(const Tensor& x, const Tensor& order) {
  return gather(x, -2, order.unsqueeze(-1).expand(x.sizes()));
}

// X with A X = B (or A^T X = B) from A's raw factors; B has LU's batch dims.
Tensor lu_solve_raw(const RawLu& f, const Tensor& B, bool adjoint) {
  RawScope scope(B.device());
  if (!adjoint) {
    // A = P L U: X = U^-1 L^-1 P^T B.
    const Tensor y = triangular_raw(f.LU, rows_in_order(B, f.perm), false, true);
    return triangular_raw(f.LU, y, true, false);
  }
  // A^T = U^T L^T P^T: X = P L^-T U^-T B.
  const Tensor z = triangular_raw(mT(f.LU), B, false, false);
  const Tensor y = triangular_raw(mT(f.LU), z, true, true);
  return rows_in_order(y, inverse_permutation(f.perm));
}

// A^-T from A's raw factors (the gradient of log |det A|).
Tensor inverse_transpose_raw(const RawLu& f) {
  return lu_solve_raw(f, identity(f.LU.size(-1), f.LU).expand(f.LU.sizes()), true);
}

// The raw factors a backward kept: LU and perm saved, pivots and info not needed.
RawLu saved_factors(const FunctionNode::Context& ctx, size_t at) {
  return {ctx.saved_at(at), ctx.saved_at(at + 1), {}, {}};
}

// --- recorded ops ------------------------------------------------------------------------------

// solve_triangular on operands with one batch shape, left.
Tensor triangular_recorded(const Tensor& A, const Tensor& B, bool upper, bool unit) {
  Tensor X = triangular_raw(A, B, upper, unit);
  if (needs_grad({&A, &B})) {
    record_function("solve_triangular", {A, B}, {X}, {A, X}, [upper, unit](const FunctionNode::Context& ctx) {
      const Tensor a = ctx.saved_at(0), x = ctx.saved_at(1);
      // A^T is triangular the other way: gB = A^-T gX, gA = -gB X^T on A's triangle.
      const Tensor gB = triangular_raw(mT(a), ctx.grads[0], !upper, unit);
      Tensor gA;
      if (ctx.needs_input_grad[0]) {
        const Tensor full = -matmul(gB, mT(x));
        const int64_t diagonal_too = unit ? 1 : 0;
        gA = upper ? triu(full, diagonal_too) : tril(full, -diagonal_too);
      }
      return TensorList{gA, gB};
    });
  }
  return X;
}

Tensor solve_triangular_as(const char* op, const Tensor& A, const Tensor& B, bool upper, bool left, bool unit) {
  check_square(op, A, "A");
  check_rhs(op, A, "A", B, left);
  if (!left) return mT(solve_triangular_as(op, mT(A), mT(B), !upper, true, unit));
  auto [a, b] = broadcast_batch(op, A, B);
  return triangular_recorded(a, b, upper, unit);
}

// The lower factor of A, recorded, without the check.
CholeskyResult cholesky_lower(const Tensor& A) {
  CholeskyResult r = cholesky_raw(A);
  if (needs_grad({&A})) {
    record_function("cholesky", {A}, {r.L}, {r.L}, [](const FunctionNode::Context& ctx) {
      const Tensor L = ctx.saved_at(0);
      // gA = sym(L^-T phi(L^T gL) L^-1), phi: the lower triangle with its diagonal halved.
      const Tensor p = matmul(mT(L), tril(ctx.grads[0]));
      const Tensor phi = tril(p) - diag_embed(diagonal(p, 0, -2, -1)) * 0.5;
      const Tensor left = triangular_raw(mT(L), phi, true, false);        // L^-T phi
      const Tensor s = mT(triangular_raw(mT(L), mT(left), true, false));  // (L^-T phi) L^-1
      return TensorList{(s + mT(s)) * 0.5};
    });
  }
  return r;
}

CholeskyResult cholesky_as(const char* op, const Tensor& A, bool upper) {
  check_square(op, A, "A");
  // The upper factor of A is the transpose of the lower one of A^T (LAPACK's potrf with 'U').
  if (!upper) return cholesky_lower(A);
  CholeskyResult r = cholesky_lower(mT(A));
  return {mT(r.L), r.info};
}

// The LU factors of A, LU recorded.
RawLu lu_recorded(const char* op, const Tensor& A) {
  check_square(op, A, "A");
  RawLu f = lu_raw(A);
  if (needs_grad({&A})) {
    record_function("lu_factor", {A}, {f.LU}, {f.LU, f.perm}, [](const FunctionNode::Context& ctx) {
      const Tensor LU = ctx.saved_at(0), perm = ctx.saved_at(1);
      const Tensor g = ctx.grads[0];
      // A = P L U: gA = P L^-T (tril(L^T gL, -1) + triu(gU U^T)) U^-T.
      const Tensor L = tril(LU, -1), U = triu(LU);
      const Tensor phi =
          tril(matmul(mT(L) + identity(LU.size(-1), LU), tril(g, -1)), -1) + triu(matmul(triu(g), mT(U)));
      const Tensor left = triangular_raw(mT(LU), phi, true, true);     // L^-T phi
      const Tensor m = mT(triangular_raw(LU, mT(left), true, false));  // ... U^-T, as (U^-1 (.)^T)^T
      return TensorList{rows_in_order(m, inverse_permutation(perm))};
    });
  }
  return f;
}

// The raw factors expanded to a batch shape they broadcast to (views).
RawLu expanded(const RawLu& f, const Shape& batch) {
  const int64_t n = f.LU.size(-1);
  return {f.LU.expand(with(batch, {n, n})), f.perm.expand(with(batch, {n})), {}, {}};
}

// A X = B (left) or X A = B for matrices (no vector rule). A is factored at its own batch shape and
// the factors broadcast to B's, so one A against a batch of B is factored once.
Tensor solve_matrices(const char* op, const Tensor& A, const Tensor& B, bool left) {
  check_rhs(op, A, "A", B, left);
  if (!left) return mT(solve_matrices(op, mT(A), mT(B), true));
  const Shape batch = broadcast_shapes(batch_of(A, 2), batch_of(B, 2), op);
  const Tensor b = B.expand(with(batch, {B.size(-2), B.size(-1)}));
  const RawLu f = lu_raw(A);
  check_info(op, f.info, "the matrix is singular: U has a zero pivot at step ");
  Tensor X = lu_solve_raw(expanded(f, batch), b, false);
  if (needs_grad({&A, &b})) {
    record_function(op, {A, b}, {X}, {f.LU, f.perm, X}, [batch, a_shape = A.sizes()](const FunctionNode::Context& ctx) {
      const Tensor x = ctx.saved_at(2);
      const Tensor gB = lu_solve_raw(expanded(saved_factors(ctx, 0), batch), ctx.grads[0], true);
      return TensorList{ctx.needs_input_grad[0] ? sum_to(-matmul(gB, mT(x)), a_shape) : Tensor(), gB};
    });
  }
  return X;
}

Tensor solve_as(const char* op, const Tensor& A, const Tensor& B, bool left) {
  check_square(op, A, "A");
  ops::check_defined(op, B, "B");
  const int64_t n = A.size(-1);
  // PyTorch's vector rule: B [n], or [*, n] with A's batch dims exactly, is one right-hand side.
  const bool vector = B.dim() == 1 || (B.dim() == A.dim() - 1 && B.sizes() == batch_of(A, 1));
  if (vector) {
    if (B.size(-1) != n) {
      throw ShapeError(std::string(op) + ": the vector B " + shape_str(B.sizes()) + " does not fit A " +
                       shape_str(A.sizes()));
    }
    return solve_matrices(op, A, B.unsqueeze(left ? -1 : -2), left).squeeze(left ? -1 : -2);
  }
  return solve_matrices(op, A, B, left);
}

// The sign of the row permutation, +1 or -1 in A's dtype [*]: each pivot that is not its own step
// is one swap.
Tensor permutation_sign(const RawLu& f) {
  const int64_t n = f.LU.size(-1);
  const Tensor steps = arange(1, n + 1, 1, TensorOptions(DType::Int32, f.LU.device()));
  return prod(1 - ne(f.pivots, steps).to(f.LU.dtype()) * 2, -1);
}

// sign(det A) and log|det A| from the raw factors: U's diagonal and the permutation's sign.
SlogdetResult slogdet_raw(const RawLu& f) {
  RawScope scope(f.LU.device());
  const Tensor u = diagonal(f.LU, 0, -2, -1);
  return {prod(sign(u), -1) * permutation_sign(f), sum(log(abs(u)), {-1})};
}

// The cofactor matrix of A [*, n, n] from its SVD A = U S V^T: det(U) det(V) U diag(c) V^T with
// c_i the product of the singular values other than s_i (no division, so singular A is fine).
Tensor cofactor_by_svd(const Tensor& A) {
  RawScope scope(A.device());
  const int64_t n = A.size(-1);
  const SvdResult r = svd(A, false);
  const Tensor others = where(eye(n, TensorOptions(DType::Bool, A.device())), 1.0, r.S.unsqueeze(-2).expand(A.sizes()));
  const Tensor c = prod(others, -1);  // c_i = prod over j != i of s_j
  const Tensor signs = (det(r.U) * det(r.Vh)).unsqueeze(-1).unsqueeze(-1);
  return signs * matmul(r.U * c.unsqueeze(-2), r.Vh);
}

}  // namespace

Tensor solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool left, bool unitriangular) {
  return solve_triangular_as("solve_triangular", A, B, upper, left, unitriangular);
}

CholeskyResult cholesky_ex(const Tensor& A, bool upper) { return cholesky_as("cholesky_ex", A, upper); }

Tensor cholesky(const Tensor& A, bool upper) {
  const char* op = "cholesky";
  CholeskyResult r = cholesky_as(op, A, upper);
  check_info(op, r.info, "the input is not positive-definite: its leading minor of order ");
  return r.L;
}

Tensor cholesky_solve(const Tensor& B, const Tensor& L, bool upper) {
  const char* op = "cholesky_solve";
  check_square(op, L, "L");
  // A = L L^T: L^-T (L^-1 B); A = U^T U: U^-1 (U^-T B).
  const Tensor lower = upper ? mT(L) : L;
  const Tensor z = solve_triangular_as(op, lower, B, false, true, false);
  return solve_triangular_as(op, mT(lower), z, true, true, false);
}

Tensor cholesky_inverse(const Tensor& L, bool upper) {
  check_square("cholesky_inverse", L, "L");
  return cholesky_solve(identity(L.size(-1), L), L, upper);
}

LuFactors lu_factor(const Tensor& A) {
  RawLu f = lu_recorded("lu_factor", A);
  return {f.LU, f.pivots, f.info};
}

namespace {

// perm [*, n] (row i of P^T A is row perm[i] of A) from LAPACK's pivots, the swaps replayed one
// step at a time on the device. Pivot values are checked on the host first.
Tensor permutation_from_pivots(const char* op, const Tensor& pivots, const Tensor& LU) {
  ops::check_defined(op, pivots, "pivots");
  const int64_t n = LU.size(-1);
  if (pivots.dtype() != DType::Int32 && pivots.dtype() != DType::Int64) {
    throw DTypeError(std::string(op) + ": pivots must be int32 or int64, got " + ops::dtype_str(pivots.dtype()));
  }
  if (pivots.sizes() != batch_of(LU, 1)) {
    throw ShapeError(std::string(op) + ": pivots " + shape_str(pivots.sizes()) + " do not fit LU " +
                     shape_str(LU.sizes()) + " (pivots [*, n] with LU's batch dims)");
  }
  ops::common_device(op, {&LU, &pivots});
  RawScope scope(LU.device());
  if (pivots.numel() > 0) {
    // One host read for both bounds.
    const std::vector<int64_t> bounds = stack({min(pivots), max(pivots)}).to(DType::Int64).to_vector<int64_t>();
    const int64_t low = bounds[0], high = bounds[1];
    if (low < 1 || high > n) {
      throw IndexError(std::string(op) + ": pivots must be in [1, " + std::to_string(n) + "], got values from " +
                       std::to_string(low) + " to " + std::to_string(high));
    }
  }
  const Tensor swaps = pivots.to(DType::Int64) - 1;
  const Tensor rows = arange(0, n, 1, TensorOptions(DType::Int64, LU.device())).expand(pivots.sizes());
  Tensor perm = rows.clone();
  for (int64_t k = 0; k < n; ++k) perm = gather(perm, -1, swap_order(rows, swaps.narrow(-1, k, 1), k));
  return perm;
}

// P, L and U from a packed LU (differentiable) and perm.
LuResult unpack(const Tensor& LU, const Tensor& perm) {
  const int64_t n = LU.size(-1);
  const Tensor rows = arange(0, n, 1, TensorOptions(DType::Int64, LU.device())).unsqueeze(-1);  // [n, 1]
  // P[r, i] = 1 where r = perm[i]: A = P (P^T A).
  const Tensor P = eq(rows, perm.unsqueeze(-2)).to(LU.dtype());
  return {P, tril(LU, -1) + identity(n, LU), triu(LU)};
}

}  // namespace

LuResult lu(const Tensor& A) {
  const RawLu f = lu_recorded("lu", A);
  return unpack(f.LU, f.perm);
}

LuResult lu_unpack(const Tensor& LU, const Tensor& pivots) {
  const char* op = "lu_unpack";
  check_square(op, LU, "LU");
  return unpack(LU, permutation_from_pivots(op, pivots, LU));
}

Tensor lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& B, bool left, bool adjoint) {
  const char* op = "lu_solve";
  check_square(op, LU, "LU");
  check_rhs(op, LU, "LU", B, left);
  // X A = B is A^T X^T = B^T; X A^T = B is A X^T = B^T.
  if (!left) return mT(lu_solve(LU, pivots, mT(B), true, !adjoint));
  const Tensor perm = permutation_from_pivots(op, pivots, LU);
  auto [lu_b, b] = broadcast_batch(op, LU, B);
  const Tensor order = perm.expand(batch_of(lu_b, 1));
  if (!adjoint) {
    const Tensor y = triangular_recorded(lu_b, rows_in_order(b, order), false, true);
    return triangular_recorded(lu_b, y, true, false);
  }
  const Tensor z = triangular_recorded(mT(lu_b), b, false, false);
  const Tensor y = triangular_recorded(mT(lu_b), z, true, true);
  return rows_in_order(y, inverse_permutation(order));
}

Tensor solve(const Tensor& A, const Tensor& B, bool left) { return solve_as("solve", A, B, left); }

Tensor inv(const Tensor& A) {
  const char* op = "inv";
  check_square(op, A, "A");
  return solve_matrices(op, A, identity(A.size(-1), A), true);
}

InvResult inv_ex(const Tensor& A) {
  const char* op = "inv_ex";
  check_square(op, A, "A");
  const RawLu f = lu_raw(A);
  Tensor X = lu_solve_raw(f, identity(A.size(-1), A).expand(A.sizes()), false);
  if (needs_grad({&A})) {
    record_function(op, {A}, {X}, {X}, [](const FunctionNode::Context& ctx) {
      // d(A^-1) = -A^-1 dA A^-1: gA = -A^-T g A^-T.
      const Tensor xt = mT(ctx.saved_at(0));
      return TensorList{-matmul(matmul(xt, ctx.grads[0]), xt)};
    });
  }
  return {X, f.info};
}

SlogdetResult slogdet(const Tensor& A) {
  const char* op = "slogdet";
  check_square(op, A, "A");
  const RawLu f = lu_raw(A);
  SlogdetResult r = slogdet_raw(f);
  if (needs_grad({&A})) {
    record_function(op, {A}, {r.logabsdet}, {f.LU, f.perm}, [](const FunctionNode::Context& ctx) {
      // d log|det A| = tr(A^-1 dA): gA = g A^-T.
      return TensorList{ctx.grads[0].unsqueeze(-1).unsqueeze(-1) * inverse_transpose_raw(saved_factors(ctx, 0))};
    });
  }
  return r;
}

Tensor det(const Tensor& A) {
  const char* op = "det";
  check_square(op, A, "A");
  const RawLu f = lu_raw(A);
  Tensor d;
  {
    RawScope scope(A.device());
    d = prod(diagonal(f.LU, 0, -2, -1), -1) * permutation_sign(f);
  }
  if (needs_grad({&A})) {
    record_function(op, {A}, {d}, {f.LU, f.perm, d, A}, [](const FunctionNode::Context& ctx) {
      // d det A = tr(adj(A) dA): gA = g cof(A), the cofactor matrix adj(A)^T, which is det A^-T
      // where A is invertible. Where det A = 0 (a host read tells), cof(A) comes from the SVD
      // A = U S V^T: cof(A) = det(U) det(V) U diag(prod_{j != i} s_j) V^T, which is finite there.
      const Tensor d = ctx.saved_at(2), g = ctx.grads[0].unsqueeze(-1).unsqueeze(-1);
      const Tensor invertible = d.unsqueeze(-1).unsqueeze(-1) * inverse_transpose_raw(saved_factors(ctx, 0));
      const Tensor singular = eq(d, 0);
      if (!any(singular).item<bool>()) return TensorList{g * invertible};
      return TensorList{g * where(singular.unsqueeze(-1).unsqueeze(-1), cofactor_by_svd(ctx.saved_at(3)), invertible)};
    });
  }
  return d;
}

Tensor logdet(const Tensor& A) {
  check_square("logdet", A, "A");
  const SlogdetResult s = slogdet(A);
  return where(lt(s.sign, 0), std::numeric_limits<double>::quiet_NaN(), s.logabsdet);
}

namespace {

struct RawQr {
  Tensor Q, R;  // Q [*, m, k] (or [*, m, m] complete, undefined when not wanted); R [*, m, n] upper
  Tensor V, tau;  // the reflectors: V [*, m, k] (column j zero above row j, 1 on it), tau [*, 1, k]
};

// Householder QR: at step j the reflection H = I - tau v v^T that maps R's column j (from the
// diagonal down) onto a multiple of e1 is applied to the trailing block; Q is the product of the
// reflections applied to the identity's first columns, last reflection first.
RawQr qr_raw(const Tensor& A, bool complete, bool want_q) {
  RawScope scope(A.device());
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const Shape batch = batch_of(A, 2);
  const TensorOptions options(A.dtype(), A.device());
  Tensor R = A.clone(MemoryFormat::Contiguous);
  Tensor V = zeros(with(batch, {m, k}), options), tau = zeros(with(batch, {1, k}), options);
  for (int64_t j = 0; j < k; ++j) {
    const Tensor x = R.narrow(-1, j, 1).narrow(-2, j, m - j);  // [*, m - j, 1]
    const Tensor alpha = x.narrow(-2, 0, 1);
    // |x| from x scaled by its largest |entry|, so that squares neither overflow nor underflow.
    const Tensor largest = amax(abs(x), {-2}, true);
    const Tensor scale = where(eq(largest, 0), 1.0, largest);
    const Tensor below = sum(square(x.narrow(-2, 1, m - j - 1) / scale), {-2}, true);
    // beta = -sign(alpha) |x| (LAPACK's dlarfg); v = (x - beta e1) / (alpha - beta), so v[0] = 1,
    // and tau = (beta - alpha) / beta. A column exactly zero below the diagonal gets tau 0: no
    // reflection (a NaN there is not zero: it is reflected, and spreads).
    const Tensor beta = -copysign(scale * sqrt(square(alpha / scale) + below), alpha);
    const Tensor none = eq(below, 0);
    Tensor v = x / where(none, 1.0, alpha - beta);
    v.narrow(-2, 0, 1).fill_(1);
    const Tensor t = where(none, 0.0, (beta - alpha) / beta);
    Tensor block = R.narrow(-2, j, m - j).narrow(-1, j, n - j);
    block.sub_(matmul(v * t, matmul(mT(v), block)));
    V.narrow(-1, j, 1).narrow(-2, j, m - j).copy_(v);
    tau.narrow(-1, j, 1).copy_(t);
  }
  RawQr out{Tensor(), triu(R), V, tau};
  if (!want_q) return out;
  const int64_t columns = complete ? m : k;
  Tensor Q = eye(m, columns, options).expand(with(batch, {m, columns})).clone();
  for (int64_t j = k - 1; j >= 0; --j) {
    const Tensor v = V.narrow(-1, j, 1).narrow(-2, j, m - j);
    Tensor rows = Q.narrow(-2, j, m - j);
    rows.sub_(matmul(v * tau.narrow(-1, j, 1), matmul(mT(v), rows)));
  }
  out.Q = Q;
  return out;
}

// The gradient of A = Q R (m >= n, Q [*, m, n], R [*, n, n] invertible): with
// M = gR R^T - Q^T gQ and N = M with its upper triangle copied onto the lower one,
// gA = (gQ + Q N) R^-T.
Tensor qr_backward_tall(const Tensor& Q, const Tensor& R, const Tensor& gQ, const Tensor& gR) {
  const Tensor M = matmul(gR, mT(R)) - matmul(mT(Q), gQ);
  const Tensor N = triu(M) + mT(triu(M, 1));
  const Tensor B = gQ + matmul(Q, N);
  return mT(triangular_raw(R, mT(B), true, false));  // B R^-T = (R^-1 B^T)^T
}

}  // namespace

QrResult qr(const Tensor& A, QrMode mode) {
  const char* op = "qr";
  check_matrix(op, A, "A");
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  RawQr f = qr_raw(A, mode == QrMode::Complete, mode != QrMode::R);
  const Tensor R = mode == QrMode::Complete ? f.R : f.R.narrow(-2, 0, k);
  if (!needs_grad({&A})) return {f.Q, R};
  if (mode == QrMode::R || (mode == QrMode::Complete && m > n)) {
    const std::string why = mode == QrMode::R ? "mode R (Q, which the gradient needs, is not computed)"
                                              : "mode Complete with more rows than columns (Q is not determined by A)";
    record_function(op, {A}, mode == QrMode::R ? TensorList{R} : TensorList{f.Q, R}, {},
                    [why](const FunctionNode::Context&) -> TensorList {
                      throw AutogradError("qr: no gradient in " + why + "; use QrMode::Reduced");
                    });
    return {f.Q, R};
  }
  record_function(op, {A}, {f.Q, R}, {A, f.Q, R}, [m, n](const FunctionNode::Context& ctx) {
    const Tensor a = ctx.saved_at(0), Q = ctx.saved_at(1), R = ctx.saved_at(2);
    const Tensor gQ = ctx.grads[0], gR = ctx.grads[1];
    if (m >= n) return TensorList{qr_backward_tall(Q, R, gQ, gR)};
    // A = [X | Y] with X = Q U square and Y = Q V: V's gradient reaches Q through Y gV^T and Y
    // through Q gV.
    const Tensor Y = a.narrow(-1, m, n - m), gV = gR.narrow(-1, m, n - m);
    const Tensor gX = qr_backward_tall(Q, R.narrow(-1, 0, m), gQ + matmul(Y, mT(gV)), gR.narrow(-1, 0, m));
    return TensorList{cat({gX, matmul(Q, gV)}, -1)};
  });
  return {f.Q, R};
}

GeqrfResult geqrf(const Tensor& A) {
  const char* op = "geqrf";
  check_matrix(op, A, "A");
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const RawQr f = qr_raw(A, false, false);
  GeqrfResult out;
  {
    RawScope scope(A.device());
    // R on and above the diagonal, the reflectors' vectors below it (V's columns, n - k zero ones
    // appended when m < n, have nothing below the diagonal there).
    const Tensor V = k == n ? f.V : cat({f.V, zeros(with(batch_of(A, 2), {m, n - k}), {A.dtype(), A.device()})}, -1);
    out.a = f.R + tril(V, -1);
    out.tau = f.tau.squeeze(-2);
  }
  if (needs_grad({&A})) {
    record_function(op, {A}, {out.a, out.tau}, {}, [](const FunctionNode::Context&) -> TensorList {
      throw AutogradError("geqrf: has no gradient (as in PyTorch); differentiate qr or householder_product instead");
    });
  }
  return out;
}

Tensor householder_product(const Tensor& A, const Tensor& tau) {
  const char* op = "householder_product";
  check_matrix(op, A, "A");
  ops::check_defined(op, tau, "tau");
  const int64_t m = A.size(-2), n = A.size(-1);
  if (m < n) {
    throw ShapeError(std::string(op) + ": A " + shape_str(A.sizes()) +
                     " must have at least as many rows as columns ([*, m, n] with m >= n)");
  }
  if (tau.dim() != A.dim() - 1 || Shape(tau.sizes().begin(), tau.sizes().end() - 1) != batch_of(A, 2) ||
      tau.size(-1) > n) {
    throw ShapeError(std::string(op) + ": tau " + shape_str(tau.sizes()) + " does not fit A " + shape_str(A.sizes()) +
                     " (tau [*, k] with A's batch dims and k <= n)");
  }
  if (tau.dtype() != A.dtype()) {
    throw DTypeError(std::string(op) + ": A and tau must share a dtype, got " + ops::dtype_str(A.dtype()) + " and " +
                     ops::dtype_str(tau.dtype()));
  }
  ops::common_device(op, {&A, &tau});
  AutocastGuard no_autocast(A.device().type, false);  // the products stay in A's dtype
  const TensorOptions options(A.dtype(), A.device());
  const int64_t k = tau.size(-1);
  // Q = H_0 ... H_{k-1} applied to the identity's first n columns, the last reflection first; each
  // H_j = I - tau_j v_j v_j^T reads A's column j below the diagonal only (entries on and above it
  // are never read, NaN or not).
  const Tensor rows = arange(0, m, 1, TensorOptions(DType::Int64, A.device())).reshape({m, 1});
  Tensor Q = eye(m, n, options).expand(with(batch_of(A, 2), {m, n}));
  for (int64_t j = k - 1; j >= 0; --j) {
    // v_j [*, m, 1]: A's column j below the diagonal, 1 on it, 0 above.
    const Tensor v = where(gt(rows, j), A.narrow(-1, j, 1), eq(rows, j).to(A.dtype()));
    Q = Q - matmul(v * tau.narrow(-1, j, 1).unsqueeze(-1), matmul(mT(v), Q));
  }
  Q = Q.contiguous();
  if (k == 0 && needs_grad({&A, &tau})) {
    // No reflection: the identity, with zero gradients (as PyTorch), not a tensor without history.
    record_function(op, {A, tau}, {Q}, {}, [A, tau](const FunctionNode::Context&) {
      return TensorList{zeros_like(A), zeros_like(tau)};
    });
  }
  return Q;
}

LstsqResult lstsq(const Tensor& A, const Tensor& B) {
  const char* op = "lstsq";
  check_matrix(op, A, "A");
  check_operand(op, A, B, "B");
  const int64_t m = A.size(-2), n = A.size(-1);
  if (B.size(-2) != m) {
    throw ShapeError(std::string(op) + ": B " + shape_str(B.sizes()) + " does not fit A " + shape_str(A.sizes()) +
                     " (B [*, m, k] with A's m rows)");
  }
  broadcast_shapes(batch_of(A, 2), batch_of(B, 2), op);  // batches that do not broadcast: lstsq's error
  AutocastGuard no_autocast(A.device().type, false);     // Q^T B and A X stay in A's dtype
  if (m >= n) {
    // A = Q R: X = R^-1 Q^T B.
    const QrResult f = qr(A);
    const Tensor X = solve_triangular_as(op, f.R, matmul(mT(f.Q), B), true, true, false);
    const Tensor residuals = m > n ? sum(square(matmul(A, X) - B), {-2}) : Tensor();
    return {X, residuals};
  }
  // A^T = Q R, A = R^T Q^T: the least-norm X = Q R^-T B.
  const QrResult f = qr(mT(A));
  return {matmul(f.Q, solve_triangular_as(op, mT(f.R), B, false, true, false)), Tensor()};
}

namespace {

Tensor matrix_norm_as(const Tensor& A, const std::string& ord, double p, bool keepdim) {
  const char* op = "matrix_norm";
  ops::check_defined(op, A, "A");
  if (A.dim() < 2) throw ShapeError(std::string(op) + ": A must be matrices [*, m, n], got " + shape_str(A.sizes()));
  ops::check_floating(op, A, "A");
  const Shape both{-2, -1};
  if (ord == "fro") return vector_norm(A, 2.0, both, keepdim);
  if (ord == "nuc" || (ord.empty() && (p == 2 || p == -2))) {
    if (A.dtype() != DType::Float32 && A.dtype() != DType::Float64) {
      throw DTypeError(std::string(op) + ": ord " + (ord.empty() ? std::to_string(static_cast<int>(p)) : ord) +
                       " takes the singular values of float32 or float64 matrices, got " + ops::dtype_str(A.dtype()));
    }
    const Tensor s = svdvals(A);  // [*, k], descending
    const int64_t k = s.size(-1);
    if (k == 0 && ord.empty()) {
      throw ShapeError(std::string(op) + ": ord " + std::to_string(static_cast<int>(p)) +
                       " has no singular value to take from the empty matrices " + shape_str(A.sizes()));
    }
    const Tensor r = ord == "nuc" ? sum(s, {-1}) : s.select(-1, p > 0 ? 0 : k - 1);
    return keepdim ? r.unsqueeze(-1).unsqueeze(-1) : r;
  }
  const double inf = std::numeric_limits<double>::infinity();
  if (!ord.empty() || (p != 1 && p != -1 && p != inf && p != -inf)) {
    throw Error(std::string(op) + ": ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got " +
                (ord.empty() ? std::to_string(p) : "'" + ord + "'"));
  }
  // 1: the largest column sum of |a| (sums over rows, dim -2); inf: the largest row sum.
  const bool columns = p == 1 || p == -1;
  const Tensor sums = sum(abs(A), {columns ? int64_t{-2} : int64_t{-1}}, true);
  const Tensor r = p > 0 ? amax(sums, both, true) : amin(sums, both, true);
  return keepdim ? r : r.squeeze(-1).squeeze(-1);
}

}  // namespace

Tensor matrix_norm(const Tensor& A, const std::string& ord, bool keepdim) {
  return matrix_norm_as(A, ord, 0.0, keepdim);
}
Tensor matrix_norm(const Tensor& A, double ord, bool keepdim) { return matrix_norm_as(A, "", ord, keepdim); }

Tensor matrix_exp(const Tensor& A) {
  const char* op = "matrix_exp";
  check_square(op, A, "A");
  const int64_t n = A.size(-1);
  if (A.numel() == 0) return A.clone();
  // Matmuls stay in A's dtype under autocast; the tape stays on.
  AutocastGuard no_autocast(A.device().type, false);
  // The scaling: 2^-s A with a 1-norm of at most theta_13 for every matrix.
  constexpr double kTheta13 = 5.371920351148152;
  const double norm = max(matrix_norm(A.detach(), 1.0)).item<double>();
  int s = 0;
  if (std::isfinite(norm) && norm > kTheta13) s = static_cast<int>(std::ceil(std::log2(norm / kTheta13)));
  const Tensor a = s > 0 ? A * std::ldexp(1.0, -s) : A;
  // The [13/13] Pade approximant r = (V - U)^-1 (V + U): U holds the odd powers, V the even ones.
  static constexpr double b[] = {64764752532480000.0,
                                 32382376266240000.0,
                                 7771770303897600.0,
                                 1187353796428800.0,
                                 129060195264000.0,
                                 10559470521600.0,
                                 670442572800.0,
                                 33522128640.0,
                                 1323241920.0,
                                 40840800.0,
                                 960960.0,
                                 16380.0,
                                 182.0,
                                 1.0};
  const Tensor I = identity(n, A);
  const Tensor a2 = matmul(a, a), a4 = matmul(a2, a2), a6 = matmul(a4, a2);
  const Tensor u_inner = matmul(a6, a6 * b[13] + a4 * b[11] + a2 * b[9]) + a6 * b[7] + a4 * b[5] + a2 * b[3] + I * b[1];
  const Tensor U = matmul(a, u_inner);
  const Tensor V = matmul(a6, a6 * b[12] + a4 * b[10] + a2 * b[8]) + a6 * b[6] + a4 * b[4] + a2 * b[2] + I * b[0];
  Tensor r = solve_matrices(op, V - U, V + U, true);
  for (int k = 0; k < s; ++k) r = matmul(r, r);
  return r;
}

Tensor matrix_power(const Tensor& x, int64_t n) {
  const char* op = "matrix_power";
  ops::check_defined(op, x, "input");
  if (x.dim() < 2 || x.size(-1) != x.size(-2)) {
    throw ShapeError(std::string(op) + ": the input must be square matrices [*, m, m], got " + shape_str(x.sizes()));
  }
  if (n == 0) return eye(x.size(-1), TensorOptions(x.dtype(), x.device())).expand(x.sizes()).clone();
  AutocastGuard no_autocast(x.device().type, false);  // the products stay in x's dtype
  // Repeated squaring: the bits of |n| pick the squares of x (or of x^-1) that multiply in.
  Tensor result, square = n < 0 ? solve_matrices(op, x, identity(x.size(-1), x), true) : x;
  const uint64_t magnitude = n < 0 ? uint64_t{0} - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  for (uint64_t left = magnitude; left > 0; left >>= 1) {
    if (left & 1) result = result.defined() ? matmul(result, square) : square;
    if (left > 1) square = matmul(square, square);
  }
  return result.is_same(x) ? x.clone() : result;
}

}  // namespace kiln
