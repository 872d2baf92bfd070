// Hand tests of the blas family for what the op table's rows cannot see: the order multi_dot
// multiplies in (the values are the same in any order, but for rounding and overflow), and empty
// contractions.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/kiln.h"

using namespace kiln;

TEST_CASE("multi_dot multiplies in the cheapest order", "[blas]") {
  // [2, 1] [1, 2] [2, 1]: left first costs 8 multiply-adds and forms a [2, 2] outer product of
  // 1e30s, which overflows float32; right first costs 4 and forms 1e30 - 1e30 = 0.
  const Tensor a = full({2, 1}, 1e30), b = full({1, 2}, 1e30), c = tensor<float>({1.0f, -1.0f}, {2, 1});
  const std::vector<float> right_first = multi_dot({a, b, c}).to_vector<float>();
  CHECK(right_first == std::vector<float>{0.0f, 0.0f});
  CHECK(std::isnan(matmul(matmul(a, b), c).to_vector<float>()[0]));  // what left to right gives
}

TEST_CASE("products over an empty inner dim are zeros, and matrix_power 0 is the identity", "[blas]") {
  CHECK(mm(zeros({3, 0}), zeros({0, 2})).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(dot(zeros({0}), zeros({0})).item<double>() == 0.0);
  CHECK(addmm(ones({2}), zeros({2, 0}), zeros({0, 2}), 3.0).to_vector<float>() == std::vector<float>(4, 3.0f));
  const Tensor eye = matrix_power(full({2, 2, 2}, 7.0), 0);
  CHECK(eye.to_vector<float>() == std::vector<float>{1, 0, 0, 1, 1, 0, 0, 1});
  CHECK(tensordot(full({2}, 2.0), full({3}, 3.0), 0).sizes() == Shape{2, 3});  // no contraction: outer
}
