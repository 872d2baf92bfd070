// Hand tests of the pointwise family for what the op table's rows cannot see: allclose and equal
// (host answers), isclose on integers and bools, and its asymmetry in a and b.
#include <catch2/catch.hpp>

#include <limits>

#include "core/kiln.h"

using namespace kiln;

TEST_CASE("allclose and equal answer on the host", "[pointwise]") {
  const Tensor a = tensor<float>({1.0f, 2.0f, 3.0f});
  CHECK(allclose(a, a + 1e-6));
  CHECK_FALSE(allclose(a, a + 1e-3));
  CHECK(allclose(a, a + 1e-3, 1e-5, 1e-2));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor n = tensor<float>({1.0f, nan});
  CHECK_FALSE(allclose(n, n));
  CHECK(allclose(n, n, 1e-5, 1e-8, true));
  CHECK(equal(a, a.clone()));
  CHECK(equal(a, a.to(DType::Int64)));       // values compare after promotion
  CHECK_FALSE(equal(a, a.reshape({3, 1})));  // another shape
  CHECK_FALSE(equal(n, n));                  // NaN is never equal
  CHECK_THROWS_WITH(allclose(a, a.to(DType::Float64)), Catch::Contains("allclose") && Catch::Contains("float64"));
}

TEST_CASE("isclose compares integers in floating point, bools exactly, and scales by b", "[pointwise]") {
  const Tensor i = tensor<int64_t>({100, 100, 7}), j = tensor<int64_t>({101, 100, 9});
  CHECK(isclose(i, j, 0.01, 0.0).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 0});
  CHECK(isclose(i, j).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 0});
  const Tensor t = tensor<uint8_t>({1, 0}).to(DType::Bool);
  CHECK(isclose(t, t).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1});
  // |a - b| <= atol + rtol |b|: 10 and 11 are close relative to 11 at rtol 1/11, not relative
  // to 10.
  const Tensor ten = tensor<double>({10.0}), eleven = tensor<double>({11.0});
  CHECK(isclose(ten, eleven, 1.0 / 11.0 + 1e-12, 0.0).item<bool>());
  CHECK_FALSE(isclose(eleven, ten, 1.0 / 11.0 + 1e-12, 0.0).item<bool>());
}
