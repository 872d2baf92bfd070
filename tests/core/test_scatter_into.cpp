// Hand tests of the scatter_into family for what the op table's rows cannot see: round trips with
// the views the ops invert, empty slices, and gradients through masked_scatter's unused source
// elements.
#include <catch2/catch.hpp>

#include "core/kiln.h"
#include "tests/core/small_tensors.h"

using namespace kiln;

using kiln::test::ints;
using kiln::test::iota;
using kiln::test::leaf;

TEST_CASE("the scatter ops invert the views they name", "[scatter_into]") {
  const Tensor x = iota({3, 4, 5});
  // The diagonal of dims 0 and 2 of [3, 4, 5] at offset 1: 3 cells for each of dim 1's 4.
  const Tensor src = iota({4, 3}) + 100.0;
  const Tensor y = diagonal_scatter(x, src, 1, 0, 2);
  CHECK(ints(diagonal(y, 1, 0, 2)) == ints(src));
  CHECK(sum(ne(y, x)).item<int64_t>() == 12);  // nothing off that diagonal changed
  // 1::3 of 5 along dim 2 is positions 1 and 4.
  const Tensor part = iota({3, 4, 2}) - 1.0;
  const Tensor s = slice_scatter(x, part, 2, 1, std::nullopt, 3);
  CHECK(ints(s.narrow(2, 1, 1)) == ints(part.narrow(2, 0, 1)));
  CHECK(ints(s.narrow(2, 4, 1)) == ints(part.narrow(2, 1, 1)));
  CHECK(sum(ne(s, x)).item<int64_t>() == 24);
  CHECK(ints(select_scatter(x, zeros({3, 5}), 1, 3).select(1, 3)) == std::vector<int64_t>(15, 0));
  // An empty slice leaves a copy of the input.
  const Tensor e = slice_scatter(x, zeros({3, 4, 0}), 2, 4, 2);
  CHECK(ints(e) == ints(x));
  CHECK(e.storage() != x.storage());
}

TEST_CASE("masked_scatter sends gradients to the source elements it used and no others", "[scatter_into]") {
  const Tensor input = leaf(zeros({2, 3}));
  const Tensor mask = tensor<uint8_t>({1, 0, 1, 0, 0, 1}, {2, 3}).to(DType::Bool);
  const Tensor source = leaf(iota({5}) + 1.0);
  const Tensor out = masked_scatter(input, mask, source);
  CHECK(ints(out) == std::vector<int64_t>{1, 0, 2, 0, 0, 3});
  mul(out, iota({2, 3}) + 1.0).sum().backward();
  CHECK(ints(source.grad()) == std::vector<int64_t>{1, 3, 6, 0, 0});
  CHECK(ints(input.grad()) == std::vector<int64_t>{0, 2, 0, 4, 5, 0});
  // No true position: a copy, even with an empty source.
  const Tensor none = masked_scatter(iota({2}), zeros({2}, DType::Bool), zeros({0}));
  CHECK(ints(none) == std::vector<int64_t>{0, 1});
  CHECK_THROWS_WITH(masked_scatter(iota({2}), ones({2}, DType::Bool), zeros({1})),
                    Catch::Contains("masked_scatter") && Catch::Contains("2 positions") && Catch::Contains("[1]"));
}
