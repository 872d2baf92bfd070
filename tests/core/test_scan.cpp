// Hand tests for the scan family beyond the op table's float64 loops: cummax's and cummin's NaN
// rule (a NaN holds, at the latest NaN's index) and the gradient they route, and logcumsumexp and
// logaddexp at infinities and past exp's float32 range.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kiln.h"
#include "tests/core/same_values.h"

using namespace kiln;
using kiln::test::same_values;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");
}  // namespace

TEST_CASE("cummax and cummin: a NaN holds at the latest NaN's index, ties take the latest index", "[scan]") {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float64}) {
    INFO(dtype_name(dtype));
    const Tensor x = tensor(std::vector<double>{1.0, kNaN, 3.0, kNaN, 0.0}).to(dtype);
    const auto [max_values, max_index] = cummax(x, 0);
    CHECK(same_values(max_values.to_vector_double(), {1.0, kNaN, kNaN, kNaN, kNaN}));
    CHECK(max_index.to_vector_double() == std::vector<double>{0, 1, 1, 3, 3});
    const auto [min_values, min_index] = cummin(x, 0);
    CHECK(same_values(min_values.to_vector_double(), {1.0, kNaN, kNaN, kNaN, kNaN}));
    CHECK(min_index.to_vector_double() == std::vector<double>{0, 1, 1, 3, 3});
  }
  // Rows of a 2-d input, along dim 1: ties go to the later index.
  const Tensor t = tensor({2.0, 2.0, 1.0, 5.0, -1.0, -1.0, 4.0, -1.0}, {2, 4});
  CHECK(cummax(t, 1).second.to_vector_double() == std::vector<double>{0, 1, 1, 3, 0, 1, 2, 2});
  CHECK(cummin(t, 1).second.to_vector_double() == std::vector<double>{0, 1, 2, 2, 0, 1, 1, 3});
  CHECK(cummin(t, 1).first.to_vector_double() == std::vector<double>{2, 2, 1, 1, -1, -1, -1, -1});
  // A 0-d input is its own running maximum, at index 0.
  const auto [v0, i0] = cummax(tensor(std::vector<double>{7.0}).reshape({}), 0);
  CHECK(v0.item<double>() == 7.0);
  CHECK(i0.dim() == 0);
  CHECK(i0.item<int64_t>() == 0);
}

TEST_CASE("cummax's gradient goes to the element each running maximum was taken from", "[scan]") {
  Tensor x = tensor(std::vector<double>{1.0, 3.0, 2.0, 3.0, 0.5}).set_requires_grad(true);
  const auto [values, index] = cummax(x, 0);
  CHECK(index.to_vector_double() == std::vector<double>{0, 1, 1, 3, 3});
  (values * tensor(std::vector<double>{1.0, 10.0, 100.0, 1000.0, 10000.0})).sum().backward();
  CHECK(x.grad().to_vector_double() == std::vector<double>{1.0, 110.0, 0.0, 11000.0, 0.0});
}

TEST_CASE("logcumsumexp and logaddexp at infinities and past exp's range", "[scan]") {
  const Tensor a = tensor(std::vector<double>{kInf, -kInf, -kInf, kInf, kNaN, 2.0});
  const Tensor b = tensor(std::vector<double>{kInf, -kInf, 2.0, -kInf, 1.0, 2.0});
  CHECK(same_values(logaddexp(a, b).to_vector_double(), {kInf, -kInf, 2.0, kInf, kNaN, 2.0 + std::log(2.0)}));
  // Equal finite operands split the gradient; a far smaller one gets its tiny share, not 0.
  Tensor p = tensor(std::vector<double>{1.5, 0.0}).set_requires_grad(true);
  Tensor q = tensor(std::vector<double>{1.5, -40.0}).set_requires_grad(true);
  logaddexp(p, q).sum().backward();
  CHECK(p.grad().to_vector_double()[0] == 0.5);
  CHECK(q.grad().to_vector_double()[0] == 0.5);
  CHECK(q.grad().to_vector_double()[1] == Approx(std::exp(-40.0)).epsilon(1e-12));
  // The smaller term survives where 1 + e^-40 would round it away.
  CHECK(logaddexp(tensor(std::vector<double>{0.0}), tensor(std::vector<double>{-40.0})).item<double>() ==
        Approx(std::exp(-40.0)).epsilon(1e-12));

  // float32 values past exp's range (88.7) stay finite along the scan; -inf leads in as exp(-inf) =
  // 0.
  const Tensor big = tensor(std::vector<double>{-kInf, 100.0, 100.0, -kInf, 90.0}).to(DType::Float32);
  const std::vector<double> got = logcumsumexp(big, 0).to_vector_double();
  CHECK(got[0] == -kInf);
  CHECK(got[1] == 100.0);
  CHECK(got[2] == Approx(100.0 + std::log(2.0)).epsilon(1e-7));
  CHECK(got[3] == got[2]);
  CHECK(got[4] == Approx(100.0 + std::log(2.0 + std::exp(-10.0))).epsilon(1e-7));
  // float16 keeps float16, computed in float32.
  CHECK(logcumsumexp(big.to(DType::Float16), 0).dtype() == DType::Float16);
}
