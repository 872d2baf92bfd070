// Hand tests of the other family beyond the op table's rows: tril_indices and triu_indices against
// the nonzero positions of tril and triu of a matrix of ones (every offset, wide and tall), rot90
// on a written-out matrix, and the edge cases PyTorch defines: cov of one variable is 0-d,
// corrcoef of one variable is 1, block_diag of nothing is [1, 0], pdist of one row is empty.
#include <catch2/catch.hpp>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

TEST_CASE("tril_indices and triu_indices are the nonzero positions of tril and triu", "[other]") {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{4, 6}, {5, 3}, {3, 3}, {0, 2}}) {
    for (int64_t offset = -4; offset <= 4; ++offset) {
      INFO(rows << "x" << cols << " offset " << offset);
      const Tensor m = ones({rows, cols});
      CHECK(tril_indices(rows, cols, offset).to_vector<int64_t>() ==
            nonzero(tril(m, offset)).t().contiguous().to_vector<int64_t>());
      CHECK(triu_indices(rows, cols, offset).to_vector<int64_t>() ==
            nonzero(triu(m, offset)).t().contiguous().to_vector<int64_t>());
    }
  }
  CHECK(tril_indices(3, 3).sizes() == Shape{2, 6});
  CHECK(tril_indices(3, 3).dtype() == DType::Int64);
  CHECK_THROWS_WITH(triu_indices(-1, 3), Catch::Contains("triu_indices") && Catch::Contains("-1"));
}

TEST_CASE("rot90 turns from the first dim toward the second", "[other]") {
  const Tensor x = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}).reshape({2, 3});  // [[1 2 3] [4 5 6]]
  CHECK(rot90(x).to_vector<double>() == std::vector<double>{3, 6, 2, 5, 1, 4});
  CHECK(rot90(x).sizes() == Shape{3, 2});
  CHECK(rot90(x, 2).to_vector<double>() == std::vector<double>{6, 5, 4, 3, 2, 1});
  CHECK(rot90(x, -1).to_vector<double>() == rot90(x, 3).to_vector<double>());
  CHECK(rot90(x, 1, {1, 0}).to_vector<double>() == rot90(x, 3).to_vector<double>());
  CHECK(rot90(x, 4).to_vector<double>() == x.to_vector<double>());
}

TEST_CASE("cov, corrcoef, block_diag, pdist: PyTorch's edge cases", "[other]") {
  const Tensor v = tensor(std::vector<double>{1, 2, 4, 7});
  const Tensor c = cov(v);
  CHECK(c.dim() == 0);
  CHECK(c.item<double>() == Approx(7.0));  // mean 3.5, squares 6.25 + 2.25 + 0.25 + 12.25 over 3
  CHECK(corrcoef(v).item<double>() == 1.0);
  CHECK(corrcoef(tensor(std::vector<double>{1, -1, 2}).reshape({1, 3})).item<double>() == 1.0);
  // Perfectly anti-correlated rows: -1 exactly (clamped, whatever the rounding).
  const Tensor anti = tensor(std::vector<double>{1, 2, 3, 4, -2, -4, -6, -8}).reshape({2, 4});
  CHECK(corrcoef(anti).to_vector<double>() == std::vector<double>{1, -1, -1, 1});
  CHECK(block_diag({}).sizes() == Shape{1, 0});
  CHECK(block_diag({ones({2, 0}), ones({1, 2})}).to_vector<float>() == std::vector<float>{0, 0, 0, 0, 1, 1});
  CHECK(pdist(ones({1, 3})).sizes() == Shape{0});
  CHECK(kron(full({}, 2.0), full({}, 3.0)).item<float>() == 6.0f);
  CHECK(cartesian_prod({arange(0, 3)}).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
}
