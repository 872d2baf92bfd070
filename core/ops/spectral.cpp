// The Jacobi eigendecomposition and SVD of core/ops/spectral.h, and the ops made of them. As in
// core/ops/linalg.cpp, the *_raw functions compute without autograd and the public ops record one
// node per decomposition with its analytic gradient.
#include "core/ops/spectral.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/distance.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/index.h"
#include "core/ops/linalg.h"
#include "core/ops/linalg_common.h"
#include "core/ops/math.h"
#include "core/ops/matmul.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "core/ops/topk.h"
#include "core/ops/triangle.h"

namespace kiln {

using namespace linalg_detail;

namespace {

// --- the round-robin ordering ------------------------------------------------------------------

// The steps of one Jacobi sweep over N (even) indices: at each step the indices sit in N slots,
// and the pairs rotated are slots (0, 1), (2, 3), ... After step r the slots are reordered by
// moves[r] (slot s takes what slot moves[r][s] held; undefined when nothing moves), so that every
// pair of indices meets once per sweep and the last move puts each index back in its own slot.
struct Sweep {
  std::vector<Tensor> moves;
};

// The circle method: index N - 1 stays put while the others turn one place per step; in step r,
// N - 1 meets r, and r + k meets r - k (mod N - 1). Only the moves between steps matter: the pairs
// are always neighbouring slots, so whichever indices step 0 pairs is the matrix's own order.
Sweep round_robin(int64_t N, Device device) {
  const int64_t turn = N - 1;
  auto order_of = [&](int64_t r) {
    std::vector<int64_t> order{N - 1, r};
    for (int64_t k = 1; k < N / 2; ++k) {
      order.push_back((r + k) % turn);
      order.push_back((r - k + turn) % turn);
    }
    return order;
  };
  // All moves in one host-to-device copy, [N - 1, N]; step r's is row r.
  std::vector<int64_t> all;
  std::vector<bool> still_at;
  std::vector<int64_t> now = order_of(0);
  for (int64_t r = 0; r < turn; ++r) {
    const std::vector<int64_t> next = order_of((r + 1) % turn);
    // Slot s of the next step holds index next[s], which sits in slot at[next[s]] now.
    std::vector<int64_t> at(static_cast<size_t>(N));
    for (int64_t s = 0; s < N; ++s) at[static_cast<size_t>(now[static_cast<size_t>(s)])] = s;
    bool still = true;
    for (int64_t s = 0; s < N; ++s) {
      all.push_back(at[static_cast<size_t>(next[static_cast<size_t>(s)])]);
      still = still && all.back() == s;
    }
    still_at.push_back(still);
    now = next;
  }
  const Tensor moves = tensor(all, {turn, N}, TensorOptions(DType::Int64, device));
  Sweep sweep;
  for (int64_t r = 0; r < turn; ++r)
    sweep.moves.push_back(still_at[static_cast<size_t>(r)] ? Tensor() : moves.select(0, r));
  return sweep;
}

// --- rotations ---------------------------------------------------------------------------------

// cos and sin [*, N/2] of the rotations J = [[c, s], [-s, c]] that make J^T [[a, g], [g, b]] J
// diagonal (the symmetric Schur step of Golub and Van Loan): t = tan of the angle, the smaller
// root of t^2 + 2 zeta t - 1 = 0 with zeta = (b - a) / 2g, so |angle| <= pi/4. g = 0 is no
// rotation; a zeta so large that its square overflows gives t = 0, below the dtype's precision.
std::pair<Tensor, Tensor> jacobi_rotation(const Tensor& a, const Tensor& b, const Tensor& g) {
  const Tensor none = eq(g, 0);
  const Tensor zeta = (b - a) / (where(none, 1.0, g) * 2);
  const Tensor t = where(none, 0.0, copysign(1 / (abs(zeta) + sqrt(square(zeta) + 1)), zeta));
  const Tensor c = rsqrt(square(t) + 1);
  return {c, t * c};
}

// x [*, M, N] with its columns 2i and 2i + 1 (p and q) replaced by c p - s q and s p + c q: x J.
Tensor rotate_columns(const Tensor& x, const Tensor& c, const Tensor& s) {
  const int64_t M = x.size(-2), N = x.size(-1);
  const Tensor pairs = x.reshape(with(batch_of(x, 2), {M, N / 2, 2}));
  const Tensor p = pairs.narrow(-1, 0, 1), q = pairs.narrow(-1, 1, 1);
  // c and s as [*, 1, N/2, 1].
  const Tensor cc = c.unsqueeze(-2).unsqueeze(-1), ss = s.unsqueeze(-2).unsqueeze(-1);
  return cat({cc * p - ss * q, ss * p + cc * q}, -1).reshape(x.sizes());
}

// x [*, N, M] with its rows 2i and 2i + 1 rotated as rotate_columns does columns: J^T x.
Tensor rotate_rows(const Tensor& x, const Tensor& c, const Tensor& s) {
  const int64_t N = x.size(-2), M = x.size(-1);
  const Tensor pairs = x.reshape(with(batch_of(x, 2), {N / 2, 2, M}));
  const Tensor p = pairs.narrow(-2, 0, 1), q = pairs.narrow(-2, 1, 1);
  // c and s as [*, N/2, 1, 1].
  const Tensor cc = c.unsqueeze(-1).unsqueeze(-1), ss = s.unsqueeze(-1).unsqueeze(-1);
  return cat({cc * p - ss * q, ss * p + cc * q}, -2).reshape(x.sizes());
}

double epsilon_of(DType t) {
  return t == DType::Float64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
}

// A cap far above the handful of sweeps that converging input needs (Jacobi converges
// quadratically near the end), for input whose convergence test never passes.
constexpr int kMaxSweeps = 60;

// A power of two [*, 1, 1] near the largest |entry| of each matrix of x (1 for a zero matrix), by
// which x is divided exactly, so that no sum of squares over- or underflows.
Tensor power_of_two_scale(const Tensor& x) {
  const Tensor largest = amax(abs(x), {-2, -1}, true);
  return where(gt(largest, 0), exp2(floor(log2(largest))), 1.0);
}

// Which matrices of the input [*, r, c] are finite, [*]: the others get all-NaN results. The sweeps
// stop on a NaN, and what they leave is meaningless (as LAPACK, which fails there, kiln gives no
// number).
Tensor finite_matrices(const Tensor& input) { return all(isfinite(input), {-2, -1}); }

// x [*, ...] (`dims` trailing dims) made NaN where `finite` [*] is false.
Tensor nan_unless(const Tensor& finite, const Tensor& x, int64_t dims) {
  Tensor f = finite;
  for (int64_t d = 0; d < dims; ++d) f = f.unsqueeze(-1);
  return where(f, x, std::numeric_limits<double>::quiet_NaN());
}

// --- eigh --------------------------------------------------------------------------------------

struct RawEigh {
  Tensor w, V;  // w [*, n] ascending, V [*, n, n]
};

// The eigendecomposition of the symmetric S [*, n, n] (both triangles read) by two-sided Jacobi:
// each step rotates N/2 pairs of rows and columns so that their 2 x 2 blocks become diagonal, and
// V collects the rotations. An odd n gets a zero row and column: its pairs never rotate.
RawEigh eigh_raw(const Tensor& S) {
  RawScope scope(S.device());
  const int64_t n = S.size(-1);
  const Shape batch = batch_of(S, 2);
  const TensorOptions options(S.dtype(), S.device());
  if (n == 0) return {zeros(with(batch, {0}), options), zeros(S.sizes(), options)};
  const int64_t N = n + n % 2;
  const Tensor scale = power_of_two_scale(S), scaled = S / scale;
  Tensor A = pad(scaled, {0, N - n, 0, N - n}).contiguous();
  Tensor V = eye(N, options).expand(with(batch, {N, N})).contiguous();
  const Sweep sweep = round_robin(N, S.device());
  const Tensor off_diagonal = 1 - eye(N, options);
  // Done when the off-diagonal part is at most sqrt(n) eps |S| (Frobenius norms), or stopped
  // shrinking (the rounding floor). A NaN counts as done.
  const double eps = epsilon_of(S.dtype());
  const Tensor limit = sum(square(scaled), {-2, -1}) * (eps * eps * static_cast<double>(n));
  Tensor previous = full(batch, std::numeric_limits<double>::infinity(), options);
  for (int s = 0; s < kMaxSweeps; ++s) {
    const Tensor off = sum(square(A * off_diagonal), {-2, -1});
    if (all(logical_or(logical_not(gt(off, limit)), ge(off, previous))).item<bool>()) break;
    previous = off;
    for (const Tensor& move : sweep.moves) {
      // The 2 x 2 blocks on the diagonal, [*, 2, 2, N/2]: [[a, g], [g, b]] per pair.
      const Tensor blocks = diagonal(A.reshape(with(batch, {N / 2, 2, N / 2, 2})), 0, -4, -2);
      const Tensor top = blocks.select(-3, 0), bottom = blocks.select(-3, 1);
      const auto [c, sn] = jacobi_rotation(top.select(-2, 0), bottom.select(-2, 1), top.select(-2, 1));
      A = rotate_rows(rotate_columns(A, c, sn), c, sn);
      V = rotate_columns(V, c, sn);
      if (move.defined()) {
        A = index_select(index_select(A, -2, move), -1, move);
        V = index_select(V, -1, move);
      }
    }
  }
  const Tensor w = diagonal(A, 0, -2, -1).narrow(-1, 0, n) * scale.squeeze(-1);
  const Tensor order = argsort(w, -1);
  const Tensor vectors = V.narrow(-2, 0, n).narrow(-1, 0, n);
  const Tensor finite = finite_matrices(S);
  return {nan_unless(finite, gather(w, -1, order), 1),
          nan_unless(finite, gather(vectors, -1, order.unsqueeze(-2).expand(vectors.sizes())), 2)};
}

// The full symmetric matrix of which A's lower (upper) triangle is one half.
Tensor symmetric_from(const Tensor& A, bool upper) {
  return upper ? triu(A) + mT(triu(A, 1)) : tril(A) + mT(tril(A, -1));
}

// --- svd ---------------------------------------------------------------------------------------

struct RawSvd {
  Tensor U, S, V;  // U [*, m, k] (or [*, m, m]), S [*, k] descending, V [*, n, k] (or [*, n, n])
};

// The SVD of A [*, m, n] with m >= n by one-sided Jacobi: each step rotates N/2 pairs of columns
// (p, q) of X, starting from A, by the rotation that diagonalizes their Gram block
// [[p.p, p.q], [p.q, q.q]], so that they come out orthogonal; V collects the rotations. At the end
// X = A V = U diag(S) with S its column norms; U comes from the QR of X (its columns sorted), whose
// Q is X / S made orthonormal to the last bit, and completed where S is 0 or full_matrices asks.
// An odd n gets a zero column: its pairs never rotate.
RawSvd svd_tall(const Tensor& A, bool full_matrices) {
  RawScope scope(A.device());
  const int64_t m = A.size(-2), n = A.size(-1);
  const Shape batch = batch_of(A, 2);
  const TensorOptions options(A.dtype(), A.device());
  const int64_t N = n + n % 2;
  const Tensor scale = power_of_two_scale(A);
  Tensor X = pad(A / scale, {0, N - n}).contiguous();
  Tensor V = eye(N, options).expand(with(batch, {N, N})).contiguous();
  const Sweep sweep = round_robin(N, A.device());
  // Done when no pair's cosine |p.q| / (|p| |q|) exceeded tol (sqrt(m) eps, the rounding of a dot
  // product of m terms) in a whole sweep. A NaN counts as done.
  const double tol = epsilon_of(A.dtype()) * std::sqrt(static_cast<double>(m));
  for (int s = 0; s < kMaxSweeps; ++s) {
    Tensor worst = zeros(batch, options);
    for (const Tensor& move : sweep.moves) {
      const Tensor pairs = X.reshape(with(batch, {m, N / 2, 2}));
      const Tensor p = pairs.select(-1, 0), q = pairs.select(-1, 1);  // [*, m, N/2]
      const Tensor a = sum(square(p), {-2}), b = sum(square(q), {-2}), g = sum(p * q, {-2});
      const Tensor lengths = sqrt(a) * sqrt(b);
      worst = maximum(worst, amax(abs(g) / where(eq(lengths, 0), 1.0, lengths), {-1}));
      const auto [c, sn] = jacobi_rotation(a, b, g);
      X = rotate_columns(X, c, sn);
      V = rotate_columns(V, c, sn);
      if (move.defined()) {
        X = index_select(X, -1, move);
        V = index_select(V, -1, move);
      }
    }
    if (all(logical_not(gt(worst, tol))).item<bool>()) break;
  }
  X = X.narrow(-1, 0, n);
  V = V.narrow(-2, 0, n).narrow(-1, 0, n);
  const Tensor norms = vector_norm(X, 2.0, {-2});  // S, unsorted
  const Tensor order = argsort(norms, -1, true);
  X = gather(X, -1, order.unsqueeze(-2).expand(X.sizes()));
  V = gather(V, -1, order.unsqueeze(-2).expand(V.sizes()));
  const QrResult f = qr(X, full_matrices ? QrMode::Complete : QrMode::Reduced);
  // R is diag(+-S) to rounding: U = Q with its first n columns signed as R's diagonal.
  Tensor signs = 1 - lt(diagonal(f.R, 0, -2, -1), 0).to(A.dtype()) * 2;
  if (full_matrices && m > n) signs = cat({signs, ones(with(batch, {m - n}), options)}, -1);
  const Tensor finite = finite_matrices(A);
  return {nan_unless(finite, f.Q * signs.unsqueeze(-2), 2),
          nan_unless(finite, gather(norms, -1, order) * scale.squeeze(-1), 1), nan_unless(finite, V, 2)};
}

// Any A [*, m, n]: the tall case of A or of A^T.
RawSvd svd_raw(const Tensor& A, bool full_matrices) {
  const int64_t m = A.size(-2), n = A.size(-1);
  if (std::min(m, n) == 0) {
    // No singular value: the vectors are the identity's columns (full) or none.
    const TensorOptions options(A.dtype(), A.device());
    const Shape batch = batch_of(A, 2);
    auto basis = [&](int64_t size) {
      return full_matrices ? eye(size, options).expand(with(batch, {size, size})).contiguous()
                           : zeros(with(batch, {size, 0}), options);
    };
    return {basis(m), zeros(with(batch, {0}), options), basis(n)};
  }
  if (m >= n) return svd_tall(A, full_matrices);
  // A^T = U' S V'^T: A = V' S U'^T.
  const RawSvd t = svd_tall(mT(A), full_matrices);
  return {t.V, t.S, t.U};
}

// Where x / y would be 0 / 0 (a zero gradient divided by a zero gap or value): 0.
Tensor divide_or_zero(const Tensor& x, const Tensor& y) { return where(eq(x, 0), 0.0, x / y); }

// The gradient of the reduced A = U diag(S) V^T (U [*, m, k], V [*, n, k]) from gU, gS, gV: with
// E_ij = S_j^2 - S_i^2 and skew(X) = X - X^T,
// gA = U [skew(U^T gU) / E diag(S) + diag(S) skew(V^T gV) / E + diag(gS)] V^T
//      + (I - U U^T) gU diag(1/S) V^T + U diag(1/S) gV^T (I - V V^T).
// The second line is zero for square matrices; it needs S > 0.
Tensor svd_backward(const Tensor& U, const Tensor& S, const Tensor& V, const Tensor& gU, const Tensor& gS,
                    const Tensor& gV) {
  const int64_t m = U.size(-2), n = V.size(-2), k = S.size(-1);
  const Tensor s2 = square(S);
  const Tensor E = s2.unsqueeze(-2) - s2.unsqueeze(-1);  // [*, k, k]: E_ij = S_j^2 - S_i^2
  const Tensor UtgU = matmul(mT(U), gU), VtgV = matmul(mT(V), gV);
  const Tensor inner = divide_or_zero(UtgU - mT(UtgU), E) * S.unsqueeze(-2) +
                       S.unsqueeze(-1) * divide_or_zero(VtgV - mT(VtgV), E) + diag_embed(gS);
  Tensor gA = matmul(matmul(U, inner), mT(V));
  if (m > k) gA = gA + matmul(divide_or_zero(gU - matmul(U, UtgU), S.unsqueeze(-2)), mT(V));
  if (n > k) gA = gA + matmul(U, divide_or_zero(mT(gV) - matmul(mT(VtgV), mT(V)), S.unsqueeze(-1)));
  return gA;
}

}  // namespace

// --- the public ops ----------------------------------------------------------------------------

EighResult eigh(const Tensor& A, bool upper) {
  const char* op = "eigh";
  check_square(op, A, "A");
  const RawEigh r = eigh_raw(symmetric_from(A.detach(), upper));
  if (needs_grad({&A})) {
    record_function(op, {A}, {r.w, r.V}, {r.w, r.V}, [](const FunctionNode::Context& ctx) {
      // gA = V [diag(gw) + (V^T gV - gV^T V) / 2 / E] V^T, E_ij = w_j - w_i: symmetric, as the
      // skew part over the antisymmetric E.
      const Tensor w = ctx.saved_at(0), V = ctx.saved_at(1);
      const Tensor VtgV = matmul(mT(V), ctx.grads[1]);
      const Tensor E = w.unsqueeze(-2) - w.unsqueeze(-1);
      const Tensor inner = divide_or_zero((VtgV - mT(VtgV)) * 0.5, E) + diag_embed(ctx.grads[0]);
      return TensorList{matmul(matmul(V, inner), mT(V))};
    });
  }
  return {r.w, r.V};
}

Tensor eigvalsh(const Tensor& A, bool upper) {
  const char* op = "eigvalsh";
  check_square(op, A, "A");
  const RawEigh r = eigh_raw(symmetric_from(A.detach(), upper));
  if (needs_grad({&A})) {
    record_function(op, {A}, {r.w}, {r.V}, [](const FunctionNode::Context& ctx) {
      const Tensor V = ctx.saved_at(0);
      return TensorList{matmul(V * ctx.grads[0].unsqueeze(-2), mT(V))};  // V diag(g) V^T
    });
  }
  return r.w;
}

SvdResult svd(const Tensor& A, bool full_matrices) {
  const char* op = "svd";
  check_matrix(op, A, "A");
  const RawSvd r = svd_raw(A.detach(), full_matrices);
  const Tensor Vh = mT(r.V);
  if (needs_grad({&A})) {
    const int64_t k = r.S.size(-1);
    record_function(op, {A}, {r.U, r.S, Vh}, {r.U, r.S, r.V}, [k](const FunctionNode::Context& ctx) {
      // The columns beyond k of full U and V are any completion: their gradient is ignored.
      const Tensor U = ctx.saved_at(0).narrow(-1, 0, k), S = ctx.saved_at(1), V = ctx.saved_at(2).narrow(-1, 0, k);
      const Tensor gU = ctx.grads[0].narrow(-1, 0, k), gV = mT(ctx.grads[2]).narrow(-1, 0, k);
      return TensorList{svd_backward(U, S, V, gU, ctx.grads[1], gV)};
    });
  }
  return {r.U, r.S, Vh};
}

Tensor svdvals(const Tensor& A) {
  const char* op = "svdvals";
  check_matrix(op, A, "A");
  const RawSvd r = svd_raw(A.detach(), false);
  if (needs_grad({&A})) {
    record_function(op, {A}, {r.S}, {r.U, r.V}, [](const FunctionNode::Context& ctx) {
      const Tensor U = ctx.saved_at(0), V = ctx.saved_at(1);
      return TensorList{matmul(U * ctx.grads[0].unsqueeze(-2), mT(V))};  // U diag(g) V^T
    });
  }
  return r.S;
}

namespace {

// The cutoff [*, 1] below which pinv and matrix_rank drop a value, from the largest value [*, 1]
// and torch.linalg's defaults for atol and rtol.
Tensor cutoff_of(const char* op, const Tensor& largest, int64_t m, int64_t n, std::optional<double> atol,
                 std::optional<double> rtol) {
  for (const auto& [name, v] : {std::pair{"atol", atol}, std::pair{"rtol", rtol}}) {
    if (v && !(*v >= 0)) throw Error(std::string(op) + ": " + name + " must be >= 0, got " + std::to_string(*v));
  }
  const double r =
      rtol ? *rtol : (atol && *atol > 0 ? 0.0 : epsilon_of(largest.dtype()) * static_cast<double>(std::max(m, n)));
  return maximum(largest * r, full_like(largest, atol.value_or(0.0)));
}

// The values that pinv and matrix_rank weigh: S [*, k] (descending) or, with `hermitian`, |w|, and
// the decomposition they come from. Computed without the tape.
struct Spectrum {
  Tensor values;   // [*, k], >= 0
  Tensor largest;  // [*, 1]
  SvdResult svd;
  EighResult eigh;
};
Spectrum spectrum(const char* op, const Tensor& A, bool hermitian, bool vectors) {
  if (hermitian) {
    check_square(op, A, "A");
  } else {
    check_matrix(op, A, "A");
  }
  RawScope scope(A.device());
  Spectrum r;
  if (hermitian) {
    if (vectors) r.eigh = eigh(A);
    r.values = abs(vectors ? r.eigh.eigenvalues : eigvalsh(A));
  } else {
    if (vectors) r.svd = svd(A, false);
    r.values = vectors ? r.svd.S : svdvals(A);
  }
  r.largest = r.values.size(-1) == 0 ? zeros(with(batch_of(A, 2), {1}), TensorOptions(A.dtype(), A.device()))
                                     : amax(r.values, {-1}, true);
  return r;
}

}  // namespace

Tensor pinv(const Tensor& A, std::optional<double> atol, std::optional<double> rtol, bool hermitian) {
  const char* op = "pinv";
  const Spectrum s = spectrum(op, A, hermitian, true);
  Tensor P;
  {
    RawScope scope(A.device());
    const Tensor keep = gt(s.values, cutoff_of(op, s.largest, A.size(-2), A.size(-1), atol, rtol));
    if (hermitian) {
      const Tensor V = s.eigh.eigenvectors;  // V diag(1/w) V^T over the kept eigenvalues
      P = matmul(V * where(keep, 1 / s.eigh.eigenvalues, 0.0).unsqueeze(-2), mT(V));
    } else {
      // V diag(1/S) U^T over the kept singular values.
      P = matmul(mT(s.svd.Vh) * where(keep, 1 / s.svd.S, 0.0).unsqueeze(-2), mT(s.svd.U));
    }
  }
  if (needs_grad({&A})) {
    // The pseudo-inverse's own derivative (Golub and Pereyra 1973), not the decomposition's: it
    // holds where the rank does not change, equal values included.
    const Tensor a = hermitian ? symmetric_from(A.detach(), false) : A.detach();
    record_function(op, {A}, {P}, {a, P}, [](const FunctionNode::Context& ctx) {
      // dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P, so
      // gA = -P^T g P^T + (I - A P) g^T P P^T + P^T P g^T (I - P A).
      const Tensor a = ctx.saved_at(0), p = ctx.saved_at(1), g = ctx.grads[0];
      const Tensor pt = mT(p), gt = mT(g);
      return TensorList{-matmul(matmul(pt, g), pt) + matmul(gt - matmul(a, matmul(p, gt)), matmul(p, pt)) +
                        matmul(matmul(pt, p), gt - matmul(matmul(gt, p), a))};
    });
  }
  return P;
}

Tensor matrix_rank(const Tensor& A, std::optional<double> atol, std::optional<double> rtol, bool hermitian) {
  const char* op = "matrix_rank";
  NoGradGuard no_grad;
  const Spectrum s = spectrum(op, A, hermitian, false);
  return sum(gt(s.values, cutoff_of(op, s.largest, A.size(-2), A.size(-1), atol, rtol)).to(DType::Int64), {-1});
}

namespace {

Tensor cond_as(const Tensor& A, const std::string& name, double p) {
  const char* op = "cond";
  const double inf = std::numeric_limits<double>::infinity();
  const bool two = name.empty() && (p == 2 || p == -2);
  const bool known =
      two || (name.empty() ? (p == 1 || p == -1 || p == inf || p == -inf) : (name == "fro" || name == "nuc"));
  if (!known) {
    throw Error(std::string(op) + ": p must be 2, -2, 1, -1, inf, -inf, 'fro' or 'nuc', got " +
                (name.empty() ? std::to_string(p) : "'" + name + "'"));
  }
  if (two) {
    check_matrix(op, A, "A");
  } else {
    check_square(op, A, "A");
  }
  // Empty matrices: 0, as NumPy's and PyTorch's.
  if (A.numel() == 0) return zeros(batch_of(A, 2), TensorOptions(A.dtype(), A.device()));
  if (two || name == "nuc") {
    // A^-1's singular values are 1/S: no inverse needed.
    const Tensor S = svdvals(A);
    const int64_t k = S.size(-1);
    const Tensor largest = S.select(-1, 0), smallest = S.select(-1, k - 1);
    if (two) return p > 0 ? largest / smallest : smallest / largest;
    return where(eq(smallest, 0), inf, sum(S, {-1}) * sum(1 / S, {-1}));
  }
  // |A| |A^-1|, inf where A has no inverse.
  const InvResult i = inv_ex(A);
  const Tensor norms = name.empty() ? matrix_norm(A, p) * matrix_norm(i.inverse, p)
                                    : matrix_norm(A, name) * matrix_norm(i.inverse, name);
  return where(gt(i.info, 0), inf, norms);
}

}  // namespace

Tensor cond(const Tensor& A, double p) { return cond_as(A, "", p); }
Tensor cond(const Tensor& A, const std::string& p) { return cond_as(A, p, 0.0); }

}  // namespace kiln
