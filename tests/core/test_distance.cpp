// Hand tests for the distance family beyond the op table's float64 loops: norms and distances of
// vectors worked out by hand, the gradient of a zero vector's norm (0, not NaN) through normalize
// and cdist, and cdist's two routes agreeing.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

TEST_CASE("vector_norm, normalize and the distances of hand-picked vectors", "[distance]") {
  const Tensor v = tensor({3.0, -4.0, 0.0, 12.0}, {2, 2});  // rows (3, -4) and (0, 12)
  CHECK(vector_norm(v, 2.0, {1}).to_vector_double() == std::vector<double>{5.0, 12.0});
  CHECK(vector_norm(v, 1.0, {1}).to_vector_double() == std::vector<double>{7.0, 12.0});
  CHECK(vector_norm(v, std::numeric_limits<double>::infinity()).item<double>() == 12.0);
  CHECK(vector_norm(v).item<double>() == 13.0);  // all elements: sqrt(9 + 16 + 144)
  CHECK(normalize(v).to_vector_double() == std::vector<double>{0.6, -0.8, 0.0, 1.0});
  // (3, -4) and (0, 12): cos = -48 / 60.
  CHECK(cosine_similarity(v.narrow(0, 0, 1), v.narrow(0, 1, 1)).item<double>() == Approx(-0.8).epsilon(1e-15));
  CHECK(pairwise_distance(v.narrow(0, 0, 1), v.narrow(0, 1, 1), 2.0, 0.0).item<double>() ==
        Approx(std::sqrt(9.0 + 256.0)).epsilon(1e-15));
  CHECK(cdist(v, v).to_vector_double() == std::vector<double>{0.0, std::sqrt(265.0), std::sqrt(265.0), 0.0});
}

TEST_CASE("a zero vector's norm, its normalization and its distance to itself have finite gradients", "[distance]") {
  Tensor x = zeros({2, 3}, TensorOptions(DType::Float64)).set_requires_grad(true);
  const Tensor n = vector_norm(x, 2.0, {1});
  CHECK(n.to_vector_double() == std::vector<double>{0.0, 0.0});
  (sum(n) + sum(normalize(x) * 2.0) + sum(vector_norm(x, 3.0, {1}))).backward();
  for (double g : x.grad().to_vector_double()) CHECK(std::isfinite(g));
  // normalize keeps the zero vector zero, and its gradient there is 1 / eps per unit of output.
  CHECK(normalize(x.detach()).to_vector_double() == std::vector<double>(6, 0.0));

  // cdist of a set with itself: zero distances on the diagonal, both routes, finite gradients.
  manual_seed(3);
  for (int64_t rows : {5, 30}) {  // 30 > 25: the matrix-product route
    Tensor a = randn({rows, 4}, TensorOptions(DType::Float64)).set_requires_grad(true);
    const Tensor d = cdist(a, a);
    sum(d).backward();
    for (double g : a.grad().to_vector_double()) CHECK(std::isfinite(g));
    for (int64_t i = 0; i < rows; ++i) CHECK(d.select(0, i).select(0, i).item<double>() < 1e-6);
  }
}

TEST_CASE("cdist's matrix-product route agrees with the direct one", "[distance]") {
  manual_seed(4);
  const Tensor a = randn({2, 40, 8}, TensorOptions(DType::Float64)),
               b = randn({2, 7, 8}, TensorOptions(DType::Float64));
  const Tensor by_product = cdist(a, b);  // 40 rows: the product route
  const Tensor direct = vector_norm(a.unsqueeze(-2) - b.unsqueeze(-3), 2.0, {-1});
  REQUIRE(by_product.sizes() == Shape{2, 40, 7});
  CHECK(max(abs(by_product - direct)).item<double>() < 1e-12);
}
