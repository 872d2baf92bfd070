// Hand tests of the join family for what the op table's rows cannot see: which results are views
// of the input, the h, v and d splits, the index form of repeat_interleave and its gradient, and
// empty pieces.
#include <catch2/catch.hpp>

#include "core/kiln.h"
#include "tests/core/small_tensors.h"

using namespace kiln;

using kiln::test::ints;
using kiln::test::iota;
using kiln::test::leaf;

TEST_CASE("atleast_Nd and tensor_split give views of the input, tiled and flips copies", "[join]") {
  const Tensor x = iota({2, 3});
  CHECK(atleast_1d(x).is_same(x));
  CHECK(atleast_2d(x).is_same(x));
  const Tensor v = atleast_3d(x);
  CHECK(v.sizes() == Shape{2, 3, 1});
  CHECK(v.storage() == x.storage());
  CHECK(atleast_2d(iota({4})).sizes() == Shape{1, 4});
  CHECK(atleast_3d(iota({4})).sizes() == Shape{1, 4, 1});
  CHECK(atleast_1d(scalar_tensor(2.0)).sizes() == Shape{1});
  const TensorList pieces = tensor_split(x, 2, 1);
  REQUIRE(pieces.size() == 2);
  CHECK(pieces[0].storage() == x.storage());
  CHECK(pieces[1].sizes() == Shape{2, 1});
  CHECK(tiled(x, {1}).storage() != x.storage());
  CHECK(fliplr(x).storage() != x.storage());
}

TEST_CASE("hsplit, vsplit and dsplit cut the dims NumPy names and need equal sections", "[join]") {
  const Tensor x = iota({4, 6, 2});
  const TensorList h = hsplit(x, 3);
  REQUIRE(h.size() == 3);
  CHECK(h[2].sizes() == Shape{4, 2, 2});
  CHECK(ints(h[2]) == ints(x.narrow(1, 4, 2)));
  CHECK(hsplit(iota({6}), 2)[1].sizes() == Shape{3});  // 1-d: dim 0
  CHECK(vsplit(x, 2)[1].sizes() == Shape{2, 6, 2});
  CHECK(dsplit(x, 2)[0].sizes() == Shape{4, 6, 1});
  const TensorList at = hsplit_at(x, {1, 4});
  REQUIRE(at.size() == 3);
  CHECK(at[1].sizes() == Shape{4, 3, 2});
  CHECK(vsplit_at(x, {3})[1].sizes() == Shape{1, 6, 2});
  CHECK(dsplit_at(x, {1})[1].sizes() == Shape{4, 6, 1});
  CHECK_THROWS_WITH(hsplit(x, 4), Catch::Contains("hsplit") && Catch::Contains("6") && Catch::Contains("4 equal"));
  CHECK_THROWS_WITH(vsplit(iota({4}), 2), Catch::Contains("vsplit") && Catch::Contains("2 dims"));
  CHECK_THROWS_WITH(dsplit(iota({4, 2}), 2), Catch::Contains("dsplit") && Catch::Contains("3 dims"));
  CHECK_THROWS_WITH(hsplit(Tensor(), 2), Catch::Contains("hsplit") && Catch::Contains("undefined"));
  CHECK_THROWS_WITH(hsplit(scalar_tensor(1.0), 1), Catch::Contains("hsplit") && Catch::Contains("1 dim"));
}

TEST_CASE("repeat_interleave of counts alone is the index it selects with", "[join]") {
  CHECK(ints(repeat_interleave(tensor<int64_t>({2, 0, 1, 3}))) == std::vector<int64_t>{0, 0, 2, 3, 3, 3});
  CHECK(repeat_interleave(tensor<int64_t>({0, 0})).numel() == 0);
  // One count for all slices, and counts of zero everywhere (an empty result keeping other dims).
  CHECK(ints(repeat_interleave(iota({2, 2}), tensor<int64_t>({2}), 0)) == std::vector<int64_t>{0, 1, 0, 1, 2, 3, 2, 3});
  CHECK(repeat_interleave(iota({2, 3}), 0, 1).sizes() == Shape{2, 0});
  // The gradient of a repeated slice adds up its copies.
  const Tensor x = leaf(iota({3}));
  repeat_interleave(x, tensor<int64_t>({1, 3, 0}), 0).sum().backward();
  CHECK(ints(x.grad()) == std::vector<int64_t>{1, 3, 0});
}

TEST_CASE("tensor_split_at gives empty pieces where bounds cross or pass the end", "[join]") {
  const TensorList p = tensor_split_at(iota({5}), {4, 2, 7});
  REQUIRE(p.size() == 4);
  CHECK(p[0].numel() == 4);
  CHECK(p[1].numel() == 0);  // 4:2
  CHECK(ints(p[2]) == std::vector<int64_t>{2, 3, 4});
  CHECK(p[3].numel() == 0);  // 7: past the end
  CHECK(tensor_split_at(iota({5}), {}).size() == 1);
}
