// Norms and distances composed of reductions and elementwise ops. The norm's root is taken through
// a guard: where the sum of powers is 0 the root reads 1 and the result is replaced by 0, so the
// backward never evaluates the root's infinite slope at 0 (0 times infinity would be NaN).
#include "core/ops/distance.h"

#include <cmath>
#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/ops/copy.h"
#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/matmul.h"
#include "core/ops/other.h"
#include "core/ops/reduce.h"
#include "core/scalar.h"
#include "kernels/error.h"

namespace kiln {
namespace {

// float16/bfloat16 operands are computed on in float32 (widen), and the result is rounded once to
// the operands' dtype (to_dtype, a no-op for the other dtypes).
Tensor widen(const Tensor& x) { return to_dtype(x, ops::widened_dtype(x.dtype())); }

void check_ord(const char* op, double ord, const Tensor& x) {
  if ((std::isinf(ord) && ord > 0) || (std::isfinite(ord) && ord >= 1.0)) return;
  throw Error(std::string(op) + ": the norm's order must be >= 1 or +inf, got " + num_str(ord) + " (input " +
              shape_str(x.sizes()) + ")");
}

// (s)^(1 / ord) for a sum of powers s >= 0, with gradient 0 where s is 0 (see the file comment).
Tensor guarded_root(const Tensor& s, double ord) {
  const Tensor positive = gt(s, 0.0);
  const Tensor safe = where(positive, s, 1.0);
  return where(positive, ord == 2.0 ? sqrt(safe) : pow(safe, 1.0 / ord), 0.0);
}

// Two operands of a binary distance op: defined, floating, one device, shapes that broadcast.
void check_pair(const char* op, const Tensor& x1, const Tensor& x2) {
  ops::check_defined(op, x1, "x1");
  ops::check_defined(op, x2, "x2");
  ops::check_floating(op, x1, "x1");
  ops::check_floating(op, x2, "x2");
  ops::common_device(op, {&x1, &x2});
}

}  // namespace

Tensor vector_norm(const Tensor& x, double ord, const Shape& dims, bool keepdim) {
  const char* op = "vector_norm";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x})) return vector_norm((*c)[0], ord, dims, keepdim);
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  check_ord(op, ord, x);
  const Tensor xf = widen(x);
  Tensor n;
  if (std::isinf(ord)) {
    int64_t count = 1;
    if (dims.empty()) {
      count = x.numel();
    } else {
      for (int64_t d : dims) count *= x.size(wrap_dim(d, x.dim(), op));
    }
    if (count == 0) {
      throw ShapeError(std::string(op) + ": the inf-norm of an empty reduction (input " + shape_str(x.sizes()) +
                       ") is undefined: a max of nothing");
    }
    n = amax(abs(xf), dims, keepdim);
  } else if (ord == 1.0) {
    n = sum(abs(xf), dims, keepdim);
  } else {
    n = guarded_root(sum(ord == 2.0 ? xf * xf : pow(abs(xf), ord), dims, keepdim), ord);
  }
  return to_dtype(n, x.dtype());
}

Tensor normalize(const Tensor& x, double p, int64_t dim, double eps) {
  const char* op = "normalize";
  ops::check_defined(op, x, "input");
  if (!(eps >= 0.0)) throw Error(std::string(op) + ": eps must be >= 0, got " + num_str(eps));
  const int64_t d = wrap_dim(dim, x.dim(), op);
  const Tensor xf = widen(x);
  return to_dtype(xf / clamp(vector_norm(xf, p, {d}, /*keepdim=*/true), eps, std::nullopt), x.dtype());
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  const char* op = "cosine_similarity";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x1, &x2})) {
    return cosine_similarity((*c)[0], (*c)[1], dim, eps);
  }
  check_pair(op, x1, x2);
  if (!(eps >= 0.0)) throw Error(std::string(op) + ": eps must be >= 0, got " + num_str(eps));
  const Shape shape = broadcast_shapes(x1.sizes(), x2.sizes(), op);
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(shape.size()), op);
  const Tensor a = widen(x1).expand(shape), b = widen(x2).expand(shape);
  const Tensor na = clamp(vector_norm(a, 2.0, {d}, true), eps, std::nullopt);
  const Tensor nb = clamp(vector_norm(b, 2.0, {d}, true), eps, std::nullopt);
  return to_dtype(sum((a / na) * (b / nb), {d}), promote_types(x1.dtype(), x2.dtype()));
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  const char* op = "pairwise_distance";
  check_pair(op, x1, x2);
  check_ord(op, p, x1);
  const Shape shape = broadcast_shapes(x1.sizes(), x2.sizes(), op);
  if (shape.empty()) {
    throw ShapeError(std::string(op) + ": x1 " + shape_str(x1.sizes()) + " and x2 " + shape_str(x2.sizes()) +
                     " have no dim of vector entries");
  }
  return to_dtype(vector_norm(widen(x1) - widen(x2) + eps, p, {-1}, keepdim), promote_types(x1.dtype(), x2.dtype()));
}

Tensor cdist(const Tensor& x1, const Tensor& x2, double p) {
  const char* op = "cdist";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x1, &x2})) return cdist((*c)[0], (*c)[1], p);
  check_pair(op, x1, x2);
  check_ord(op, p, x1);
  const std::string shapes = "x1 " + shape_str(x1.sizes()) + ", x2 " + shape_str(x2.sizes());
  if (x1.dim() < 2 || x2.dim() < 2)
    throw ShapeError(std::string(op) + ": x1 and x2 must be [*, P, M] and [*, R, M], got " + shapes);
  if (x1.size(-1) != x2.size(-1)) {
    throw ShapeError(std::string(op) + ": x1 and x2 must have rows of one length M, got " + shapes);
  }
  const int64_t rows1 = x1.size(-2), rows2 = x2.size(-2);
  const Tensor a = widen(x1), b = widen(x2);
  const DType out = promote_types(x1.dtype(), x2.dtype());
  if (p == 2.0 && (rows1 > 25 || rows2 > 25)) {
    // ||a - b||^2 = ||a||^2 + ||b||^2 - 2 a.b, one matrix product for all the cross terms, in the
    // operands' dtype: autocast would run it in low precision, where the cancellation of the large
    // terms loses every digit of a short distance.
    AutocastGuard full_precision(a.device().type, /*enabled=*/false);
    const Tensor sq1 = sum(a * a, {-1}, true);                    // [*, P, 1]
    const Tensor sq2 = sum(b * b, {-1}, true).transpose(-1, -2);  // [*, 1, R]
    const Tensor d2 = clamp(sq1 + sq2 - 2.0 * matmul(a, b.transpose(-1, -2)), 0.0, std::nullopt);
    return to_dtype(guarded_root(d2, 2.0), out);
  }
  return to_dtype(vector_norm(a.unsqueeze(-2) - b.unsqueeze(-3), p, {-1}), out);
}

Tensor pdist(const Tensor& x, double p) {
  const char* op = "pdist";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x})) return pdist((*c)[0], p);
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  check_ord(op, p, x);
  if (x.dim() != 2) throw ShapeError(std::string(op) + ": input must be [N, M], got " + shape_str(x.sizes()));
  const Tensor pairs = triu_indices(x.size(0), x.size(0), 1, x.device());
  const Tensor a = widen(x);
  const Tensor diff = index_select(a, 0, pairs.select(0, 0)) - index_select(a, 0, pairs.select(0, 1));
  return to_dtype(vector_norm(diff, p, {-1}), x.dtype());
}

}  // namespace kiln
