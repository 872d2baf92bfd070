// parameters_to_vector and vector_to_parameters: the order and the round trip over a layer's
// parameters (a transposed one included), the gradient through the flat vector, and the errors.
#include <catch2/catch.hpp>

#include <vector>

#include "core/kiln.h"
#include "nn/convert_parameters.h"
#include "nn/layers.h"

using namespace kiln;

TEST_CASE("parameters_to_vector: parameters flattened in order, and back in place", "[convert_parameters]") {
  nn::Linear layer(3, 2);
  const TensorList params = layer.parameters();  // weight [2, 3], bias [2]
  const Tensor vec = nn::parameters_to_vector(params);
  REQUIRE(vec.sizes() == Shape{8});
  std::vector<double> expected = params[0].to_vector<double>();
  for (double b : params[1].to_vector<double>()) expected.push_back(b);
  CHECK(vec.to_vector<double>() == expected);

  const Tensor weight = params[0];
  const Tensor updated = arange(0, 8, 1, TensorOptions(DType::Float32));
  nn::vector_to_parameters(updated, params);
  CHECK(layer.weight.to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4, 5});
  CHECK(layer.bias.to_vector<double>() == std::vector<double>{6, 7});
  CHECK(layer.weight.data_ptr() == weight.data_ptr());  // the same tensor, written in place
  CHECK(layer.weight.requires_grad());

  // A non-contiguous parameter takes its slice in row-major order of its own shape.
  Tensor base = zeros({3, 2});
  Tensor transposed = base.t();
  transposed.set_requires_grad(true);
  nn::vector_to_parameters(arange(0, 6, 1, TensorOptions(DType::Float32)), {transposed});
  CHECK(transposed.to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("parameters_to_vector: the gradient reaches every parameter", "[convert_parameters]") {
  Tensor a = tensor(std::vector<double>{1, 2, 3, 4}).reshape({2, 2}), b = tensor(std::vector<double>{5});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  const Tensor w = tensor(std::vector<double>{1, -1, 2, -2, 3});
  sum(mul(nn::parameters_to_vector({a, b}), w)).backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1, -1, 2, -2});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{3});
}

TEST_CASE("parameters_to_vector: mixed dtypes and sizes that do not add up are errors", "[convert_parameters]") {
  const Tensor a = zeros({2}), b = zeros({3}, DType::Float64);
  CHECK_THROWS_WITH(nn::parameters_to_vector({a, b}), Catch::Contains("parameter 1") && Catch::Contains("float64"));
  CHECK_THROWS_WITH(nn::vector_to_parameters(zeros({4}), {a}), Catch::Contains("4") && Catch::Contains("2"));
  CHECK_THROWS_WITH(nn::vector_to_parameters(zeros({2, 1}), {a}), Catch::Contains("1-d"));
  CHECK(nn::parameters_to_vector({}).numel() == 0);
}
