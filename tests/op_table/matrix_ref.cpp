// The float64 matrix helpers of tests/op_table/matrix_ref.h.
#include "tests/op_table/matrix_ref.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kiln::test {

std::vector<Mat> matrices(const Tensor& x) {
  const int64_t r = x.size(-2), c = x.size(-1);
  int64_t count = 1;
  for (int64_t d = 0; d + 2 < x.dim(); ++d) count *= x.size(d);
  const Values all = values(x);
  std::vector<Mat> out;
  for (int64_t b = 0; b < count; ++b) {
    Mat a(r, c);
    std::copy(all.begin() + b * r * c, all.begin() + (b + 1) * r * c, a.v.begin());
    out.push_back(a);
  }
  return out;
}

Tensor from_matrices(const std::vector<Mat>& ms, const Shape& shape) {
  Values all;
  for (const Mat& a : ms) all.insert(all.end(), a.v.begin(), a.v.end());
  return from_values(all, shape);
}

Shape batch_shape(const Tensor& x, size_t drop) {
  Shape b = x.sizes();
  b.resize(b.size() - drop);
  return b;
}

Mat transposed(const Mat& a) {
  Mat t(a.m, a.n);
  for (int64_t i = 0; i < a.n; ++i)
    for (int64_t j = 0; j < a.m; ++j) t(j, i) = a(i, j);
  return t;
}

Mat product(const Mat& a, const Mat& b) {
  Mat c(a.n, b.m);
  for (int64_t i = 0; i < a.n; ++i)
    for (int64_t j = 0; j < b.m; ++j)
      for (int64_t p = 0; p < a.m; ++p) c(i, j) += a(i, p) * b(p, j);
  return c;
}

Mat substitute(const Mat& a, const Mat& b, bool upper, bool unit) {
  Mat x(b.n, b.m);
  for (int64_t s = 0; s < a.n; ++s) {
    const int64_t i = upper ? a.n - 1 - s : s;
    for (int64_t j = 0; j < b.m; ++j) {
      double r = b(i, j);
      for (int64_t p = upper ? i + 1 : 0; p < (upper ? a.n : i); ++p) r -= a(i, p) * x(p, j);
      x(i, j) = unit ? r : r / a(i, i);
    }
  }
  return x;
}

LuRef lu_ref(const Mat& a) {
  LuRef f{a, {}, {}};
  for (int64_t i = 0; i < a.n; ++i) f.perm.push_back(i);
  for (int64_t k = 0; k < a.n; ++k) {
    int64_t p = k;
    for (int64_t i = k + 1; i < a.n; ++i)
      if (std::fabs(f.lu(i, k)) > std::fabs(f.lu(p, k))) p = i;
    f.pivots.push_back(p + 1);
    for (int64_t j = 0; j < a.n; ++j) std::swap(f.lu(k, j), f.lu(p, j));
    std::swap(f.perm[at(k)], f.perm[at(p)]);
    for (int64_t i = k + 1; i < a.n; ++i) {
      if (f.lu(k, k) != 0) f.lu(i, k) /= f.lu(k, k);
      for (int64_t j = k + 1; j < a.n; ++j) f.lu(i, j) -= f.lu(i, k) * f.lu(k, j);
    }
  }
  return f;
}

Mat solve_ref(const Mat& a, const Mat& b, bool adjoint) {
  if (adjoint) return solve_ref(transposed(a), b);
  const LuRef f = lu_ref(a);
  Mat pb(b.n, b.m);
  for (int64_t i = 0; i < b.n; ++i)
    for (int64_t j = 0; j < b.m; ++j) pb(i, j) = b(f.perm[at(i)], j);
  return substitute(f.lu, substitute(f.lu, pb, false, true), true, false);
}

Mat identity(int64_t n) {
  Mat e(n, n);
  for (int64_t i = 0; i < n; ++i) e(i, i) = 1;
  return e;
}

Tensor per_pair(const Tensor& a, const Tensor& b, const std::function<Mat(const Mat&, const Mat&)>& fn) {
  const Shape batch = broadcast_shapes(batch_shape(a, 2), batch_shape(b, 2), "reference");
  auto expanded = [&](const Tensor& t) {
    Shape s = batch;
    s.push_back(t.size(-2));
    s.push_back(t.size(-1));
    return matrices(t.expand(s).contiguous());
  };
  const std::vector<Mat> as = expanded(a), bs = expanded(b);
  std::vector<Mat> out;
  for (size_t i = 0; i < as.size(); ++i) out.push_back(fn(as[i], bs[i]));
  Shape shape = batch;
  shape.push_back(out.empty() ? 0 : out[0].n);
  shape.push_back(out.empty() ? 0 : out[0].m);
  return from_matrices(out, shape);
}

Tensor per_matrix(const Tensor& a, const std::function<Mat(const Mat&)>& fn) {
  return per_pair(a, a, [&](const Mat& x, const Mat&) { return fn(x); });
}

Tensor per_matrix_value(const Tensor& a, const std::function<double(const Mat&)>& fn) {
  Values out;
  for (const Mat& m : matrices(a)) out.push_back(fn(m));
  return from_values(out, batch_shape(a, 2));
}

Sample single(const std::string& name, Shape a, uint64_t seed, double scale) {
  return {name, [=](DType t, Device d) { return TensorList{rnd(a, t, d, seed, scale)}; }};
}

std::vector<DType> linalg_types() { return {DType::Float32, DType::Float64}; }

OpRow linalg_row(const std::string& name, std::vector<Sample> samples, ListFn op, ListFn reference,
                 std::vector<size_t> differentiable, std::vector<ErrorCase> errors) {
  OpRow r = make_row(name, linalg_types(), std::move(samples), std::move(op), std::move(reference),
                     std::move(differentiable), same_dtype);
  // A solve's float32 rounding grows with the matrix's condition number: these random matrices are
  // well conditioned, but not orthogonal.
  r.tolerance[DType::Float32] = {1e-4, 1e-4};
  r.errors = std::move(errors);
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  return r;
}

}  // namespace kiln::test
