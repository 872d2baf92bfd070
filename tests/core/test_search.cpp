// Hand tests of core/ops/search.h and of the writes composed of scatter_add in core/ops/index.h,
// beyond the op table's loops: NaNs in unique and searchsorted, searchsorted's exact comparison of
// a float64 scalar and its count of boundaries when they are not sorted, bincount's dtype rule, and
// the gradients that flow through masked_select, scatter, index_fill and index_add.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/kiln.h"
#include "tests/core/same_values.h"

using namespace kiln;
using kiln::test::same_values;

namespace {
const double kNaN = std::nan("");

std::vector<double> vals(const Tensor& t) { return t.to_vector_double(); }
}  // namespace

TEST_CASE("unique keeps every NaN distinct, at the end, and maps each element to its own", "[search]") {
  const UniqueResult u = unique(tensor<double>({2, kNaN, 1, 2, kNaN}));
  CHECK(same_values(vals(u.values), {1, 2, kNaN, kNaN}));
  CHECK(vals(u.counts) == std::vector<double>{1, 2, 1, 1});
  CHECK(vals(u.inverse) == std::vector<double>{1, 2, 0, 1, 3});  // NaNs in their input order
  const UniqueResult empty_input = unique(zeros({0, 3}));
  CHECK(empty_input.values.numel() == 0);
  CHECK(empty_input.inverse.sizes() == Shape{0, 3});
  // Runs, not values: [1, 1, 2, 1] has three.
  const UniqueResult runs = unique_consecutive(tensor<int64_t>({1, 1, 2, 1}, {2, 2}));
  CHECK(vals(runs.values) == std::vector<double>{1, 2, 1});
  CHECK(vals(runs.inverse) == std::vector<double>{0, 0, 1, 2});
  CHECK(runs.inverse.sizes() == Shape{2, 2});
  CHECK(vals(runs.counts) == std::vector<double>{2, 1, 1});
}

TEST_CASE("searchsorted: NaN values go last, a float64 scalar compares exactly, unsorted boundaries count",
          "[search]") {
  const Tensor b = tensor<double>({0.1, 0.2, 0.2, 0.3});
  CHECK(vals(searchsorted(b, tensor<double>({kNaN, 0.2, -1.0}))) == std::vector<double>{4, 1, 0});
  CHECK(vals(searchsorted(b, tensor<double>({kNaN, 0.2, -1.0}), true)) == std::vector<double>{4, 3, 0});
  // 0.1 as a float32 would be a little above float64's 0.1, and right would count it as not equal.
  CHECK(searchsorted(b, 0.1, true).item<int64_t>() == 1);
  CHECK(searchsorted(b, 0.1).item<int64_t>() == 0);
  CHECK(searchsorted(b, 0.1).dim() == 0);
  // Unsorted boundaries: the number of them below each value (no insertion point exists).
  CHECK(vals(searchsorted(tensor<double>({5, 1, 3}), tensor<double>({4, 0, 6}))) == std::vector<double>{2, 0, 3});
  CHECK(searchsorted(b, tensor<double>({0.25}), false, true).dtype() == DType::Int32);
  // Integer boundaries and float values compare in float: 2.5 falls between 2 and 3.
  CHECK(vals(bucketize(tensor<double>({2.5, 3.0}), tensor<int64_t>({1, 2, 3}))) == std::vector<double>{2, 2});
}

TEST_CASE("bincount: counts in int64, float32 weights stay float32, other weights give float64", "[search]") {
  const Tensor x = tensor<int64_t>({2, 0, 2});
  CHECK(bincount(x).dtype() == DType::Int64);
  CHECK(vals(bincount(x)) == std::vector<double>{1, 0, 2});
  CHECK(bincount(x, tensor<float>({0.5f, 1.0f, 2.0f})).dtype() == DType::Float32);
  const Tensor half_weights = tensor<float>({0.5f, 1.0f, 2.0f}).to(DType::Float16);
  CHECK(bincount(x, half_weights).dtype() == DType::Float64);
  CHECK(vals(bincount(x, half_weights)) == std::vector<double>{1.0, 0.0, 2.5});
  CHECK(vals(bincount(x, Tensor(), 5)) == std::vector<double>{1, 0, 2, 0, 0});
  CHECK(bincount(zeros({0}, DType::Int64), Tensor(), 3).sizes() == Shape{3});
  CHECK_THROWS_WITH(bincount(x, Tensor(), -1), Catch::Contains("bincount") && Catch::Contains("minlength"));
}

TEST_CASE("nonzero and masked_select: bool and 0-d inputs, and masked_select's gradient", "[search]") {
  CHECK(nonzero(tensor({false, false})).sizes() == Shape{0, 1});
  CHECK(nonzero(zeros({})).sizes() == Shape{0, 0});
  CHECK(vals(argwhere(tensor({false, true, true}, {3}))) == std::vector<double>{1, 2});
  // x [1, 3] beside a mask [2, 3]: x's elements are picked once per row they broadcast to.
  Tensor x = tensor<double>({1, 2, 3}, {1, 3});
  x.set_requires_grad(true);
  const Tensor mask = tensor({true, false, true, true, true, false}, {2, 3});
  const Tensor picked = masked_select(x, mask);
  CHECK(vals(picked) == std::vector<double>{1, 3, 1, 2});
  (picked * tensor<double>({10, 20, 30, 40})).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{40, 40, 20});
}

TEST_CASE("scatter, index_fill and index_add: gradients where values were kept, placed or added", "[search]") {
  Tensor x = tensor<double>({1, 2, 3, 4}, {2, 2});
  Tensor src = tensor<double>({5, 6}, {1, 2});
  x.set_requires_grad(true);
  src.set_requires_grad(true);
  // out = [[1, 6], [5, 4]]: src[0][0] to (1, 0), src[0][1] to (0, 1).
  const Tensor out = scatter(x, 0, tensor<int64_t>({1, 0}, {1, 2}), src);
  CHECK(vals(out) == std::vector<double>{1, 6, 5, 4});
  (out * tensor<double>({1, 2, 3, 4}, {2, 2})).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{1, 0, 0, 4});
  CHECK(vals(src.grad()) == std::vector<double>{3, 2});
  // A value scattered twice to one place is fine; src scattered twice is not.
  CHECK(vals(scatter(zeros({3}), 0, tensor<int64_t>({1, 1}), 2.0)) == std::vector<double>{0, 2, 0});
  CHECK_THROWS_WITH(scatter(zeros({3}), 0, tensor<int64_t>({1, 1}), ones({2})),
                    Catch::Contains("scatter") && Catch::Contains("more than once"));

  Tensor y = tensor<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  y.set_requires_grad(true);
  index_fill(y, 0, tensor<int64_t>({2, 0, 2}), -1.0).sum().backward();
  CHECK(vals(y.grad()) == std::vector<double>{0, 0, 1, 1, 0, 0});

  Tensor z = zeros({3}, DType::Float64);
  Tensor added = tensor<double>({1, 2, 4});
  z.set_requires_grad(true);
  added.set_requires_grad(true);
  const Tensor sums = index_add(z, 0, tensor<int64_t>({2, 0, 2}), added, 3.0);
  CHECK(vals(sums) == std::vector<double>{6, 0, 15});  // index 2 named twice: both added
  (sums * tensor<double>({1, 10, 100})).sum().backward();
  CHECK(vals(z.grad()) == std::vector<double>{1, 10, 100});
  CHECK(vals(added.grad()) == std::vector<double>{300, 3, 300});
}

TEST_CASE("take_along_dim without a dim reads both as 1-d, and take keeps the index's shape", "[search]") {
  const Tensor x = tensor<double>({10, 20, 30, 40}, {2, 2});
  CHECK(vals(take_along_dim(x, tensor<int64_t>({3, 0}, {1, 2}))) == std::vector<double>{40, 10});
  CHECK(take_along_dim(x, tensor<int64_t>({3, 0}, {1, 2})).sizes() == Shape{2});
  CHECK(take(x, tensor<int64_t>({2, 1, 0, 3}, {2, 2})).sizes() == Shape{2, 2});
  CHECK_THROWS_WITH(take(x, tensor<int64_t>({4})), Catch::Contains("take") && Catch::Contains("index 4"));
}
