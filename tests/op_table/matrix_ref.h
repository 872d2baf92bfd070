// Plain float64 matrix loops shared by the linear-algebra rows (linalg_rows.cpp,
// spectral_rows.cpp): matrices taken out of tensors and put back, products, substitution, LU and
// solves, and the row maker those families share.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tests/op_table/op_table.h"

namespace kiln::test {

// One n x m matrix of doubles, row-major.
struct Mat {
  int64_t n = 0, m = 0;
  Values v;
  Mat(int64_t rows, int64_t cols) : n(rows), m(cols), v(at(rows * cols), 0.0) {}
  double& operator()(int64_t i, int64_t j) { return v[at(i * m + j)]; }
  double operator()(int64_t i, int64_t j) const { return v[at(i * m + j)]; }
};

// The matrices of x [*, r, c], in row-major batch order.
std::vector<Mat> matrices(const Tensor& x);
Tensor from_matrices(const std::vector<Mat>& ms, const Shape& shape);
// x's sizes without its last `drop` dims.
Shape batch_shape(const Tensor& x, size_t drop);
Mat transposed(const Mat& a);
Mat product(const Mat& a, const Mat& b);
Mat identity(int64_t n);
// X with A X = B, A triangular (only its triangle read; unit: its diagonal taken as ones).
Mat substitute(const Mat& a, const Mat& b, bool upper, bool unit);
// Doolittle with partial pivoting: the packed LU, the 1-based swaps, and the permutation (row i of
// P^T A is row perm[i] of A).
struct LuRef {
  Mat lu;
  std::vector<int64_t> pivots, perm;
};
LuRef lu_ref(const Mat& a);
// X with A X = B (or A^T X = B) by LU.
Mat solve_ref(const Mat& a, const Mat& b, bool adjoint = false);

// fn over the matrices of a and b expanded to one batch shape; the result has that batch shape and
// fn's matrix shape.
Tensor per_pair(const Tensor& a, const Tensor& b, const std::function<Mat(const Mat&, const Mat&)>& fn);
Tensor per_matrix(const Tensor& a, const std::function<Mat(const Mat&)>& fn);
// One value per matrix, [*].
Tensor per_matrix_value(const Tensor& a, const std::function<double(const Mat&)>& fn);

// One input: rnd(a) times `scale`.
Sample single(const std::string& name, Shape a, uint64_t seed, double scale = 1.0);
// float32 and float64 (a function, not a namespace-scope vector: see numeric_and_bool in
// op_table.h).
std::vector<DType> linalg_types();
// A row over linalg_types() with same_dtype outputs, float32 held to 1e-4, and the CUDA floor for
// sums in another order.
OpRow linalg_row(const std::string& name, std::vector<Sample> samples, ListFn op, ListFn reference,
                 std::vector<size_t> differentiable, std::vector<ErrorCase> errors = {});

}  // namespace kiln::test
