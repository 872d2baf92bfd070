// Hand tests for einsum beyond the op table's brute-force reference: values worked out by hand,
// the ellipsis in implicit outputs, spaces, and the equations it refuses.
#include <catch2/catch.hpp>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

TEST_CASE("einsum: a dot product, a trace, an outer product, traces and diagonals under an ellipsis", "[einsum]") {
  const Tensor u = tensor(std::vector<double>{1, 2, 3}), v = tensor(std::vector<double>{4, -5, 6});
  CHECK(einsum("i,i->", {u, v}).item<double>() == 12.0);  // 4 - 10 + 18
  CHECK(einsum("i,i->", {u, v}).dim() == 0);
  CHECK(einsum(" i , j -> i j ", {u, v}).to_vector_double() == std::vector<double>{4, -5, 6, 8, -10, 12, 12, -15, 18});
  const Tensor m = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2});
  CHECK(einsum("ii", {m}).item<double>() == 5.0);
  CHECK(einsum("ij->", {m}).item<double>() == 10.0);
  // An implicit output keeps the ellipsis dims and drops the repeated label: "...ii" is the batch
  // of traces, "...ii->...i" of diagonals.
  const Tensor batch = arange(0, 18, 1, TensorOptions(DType::Float64)).reshape({2, 3, 3});
  CHECK(einsum("...ii", {batch}).to_vector_double() == std::vector<double>{12, 39});
  CHECK(einsum("...ii->...i", {batch}).to_vector_double() == std::vector<double>{0, 4, 8, 9, 13, 17});
  // "...ij->...ji" on a 2-d operand: the ellipsis covers no dim.
  CHECK(einsum("...ij->...ji", {m}).to_vector_double() == std::vector<double>{1, 3, 2, 4});
}

TEST_CASE("einsum refuses equations it cannot read, naming the equation", "[einsum]") {
  const Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH(einsum("i.j->ij", {x}),
                    Catch::Contains("einsum") && Catch::Contains("stray '.'") && Catch::Contains("\"i.j->ij\""));
  CHECK_THROWS_WITH(einsum("ij->...ij", {x}), Catch::Contains("einsum") && Catch::Contains("ellipsis"));
  CHECK_THROWS_WITH(einsum("...j->j", {x}), Catch::Contains("einsum") && Catch::Contains("\"...\""));
  CHECK_THROWS_WITH(einsum("ij->i,j", {x}), Catch::Contains("einsum") && Catch::Contains("one term"));
  CHECK_THROWS_WITH(einsum("ij", {}), Catch::Contains("einsum") && Catch::Contains("at least one operand"));
  CHECK_THROWS_WITH(einsum("ijk->i", {x}), Catch::Contains("einsum") && Catch::Contains("3 dims"));
}
