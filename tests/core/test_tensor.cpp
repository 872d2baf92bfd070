// Tensor basics the op table cannot say: storage sharing of views, strides and layouts, version
// counters, conversions, printing, and the errors of bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

TEST_CASE("factories give shapes, dtypes and contiguous strides", "[tensor]") {
  Tensor t = zeros({2, 3, 4});
  CHECK(t.sizes() == Shape{2, 3, 4});
  CHECK(t.strides() == Shape{12, 4, 1});
  CHECK(t.dtype() == DType::Float32);
  CHECK(t.device() == Device::cpu());
  CHECK(t.numel() == 24);
  CHECK(t.is_contiguous());
  Tensor s = scalar_tensor(2.5);
  CHECK(s.dim() == 0);
  CHECK(s.item<double>() == 2.5);
  Tensor e = empty({0, 5});
  CHECK(e.numel() == 0);
  CHECK(arange(5).dtype() == DType::Int64);
  CHECK(arange(0.0, 1.0, 0.25).sizes() == Shape{4});
  // Integer linspace: each real point cut toward zero (not a step cut to 2 first: 0 2 4 6 10).
  CHECK(linspace(0, 10, 5, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{0, 2, 5, 7, 10});
  CHECK(linspace(0, -10, 5, DType::Int32).to_vector<int32_t>() == std::vector<int32_t>{0, -2, -5, -7, -10});
  CHECK(linspace(0, 1, 3).to_vector<float>() == std::vector<float>{0.0f, 0.5f, 1.0f});
  std::vector<float> host{1, 2, 3, 4, 5, 6};
  Tensor b = from_blob(host.data(), {2, 3}, DType::Float32);
  host[0] = 100;  // from_blob copies
  CHECK(b.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
}

// linspace computes by PyTorch's formula: the ends converted to the dtype first, the step and
// each point in the dtype's arithmetic, the first half counted up from start and the second half
// down from end. Points of the old kiln were start + i * step in double, rounded once: (-1, 1, 4)
// gave -0x1.555556p-2, not the -0x1.555554p-2 of -1 + float32(2/3), and the two halves of a
// symmetric range were not mirror images.
TEST_CASE("linspace: ends exact, halves mirrored, the dtype's own arithmetic", "[tensor]") {
  CHECK(linspace(-1, 1, 4).to_vector<float>() == std::vector<float>{-1.0f, -0x1.555554p-2f, 0x1.555554p-2f, 1.0f});
  CHECK(linspace(-1, 0.1, 3).to_vector<float>()[1] == -0x1.cccccep-2f);
  // The float32 formula, one rounding per operation, over many lengths: every point, both ends.
  for (int64_t n : {2, 3, 7, 10, 101, 1000}) {
    INFO(n);
    const float s = -1.0f, e = 0.3f;
    const std::vector<float> got = linspace(-1.0, 0.3, n).to_vector<float>();
    const float step = (e - s) / static_cast<float>(n - 1);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      volatile float prod = step * static_cast<float>(i < n / 2 ? i : n - 1 - i);  // no fused multiply-add
      const float want = i < n / 2 ? s + prod : e - prod;
      if (got[static_cast<size_t>(i)] != want) ++wrong;
    }
    CHECK(wrong == 0);
    CHECK(got.front() == s);
    CHECK(got.back() == e);  // float32's 0.3, the end as the dtype holds it
    const std::vector<float> sym = linspace(-2.7, 2.7, n).to_vector<float>();
    for (int64_t i = 0; i < n; ++i) CHECK(sym[static_cast<size_t>(i)] == -sym[static_cast<size_t>(n - 1 - i)]);
  }
  // float16 and bfloat16: each operation in float32 rounded to the 16-bit dtype, the index too
  // (2049 is not a float16), the ends their 16-bit values.
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(dt));
    const auto round16 = [dt](float f) {
      return dt == DType::Float16 ? static_cast<float>(Half(f)) : static_cast<float>(BFloat16(f));
    };
    const int64_t n = 5000;
    const float s = round16(0.1f), e = round16(1000.0f);
    const float step = round16(round16(e - s) / round16(static_cast<float>(n - 1)));
    const std::vector<double> got = linspace(0.1, 1000.0, n, dt).to(DType::Float64).to_vector<double>();
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float k = round16(static_cast<float>(i < n / 2 ? i : n - 1 - i));
      const float want = i < n / 2 ? round16(s + round16(step * k)) : round16(e - round16(step * k));
      if (got[static_cast<size_t>(i)] != want) ++wrong;
    }
    CHECK(wrong == 0);
    CHECK(got.back() == e);
  }
  // Integers: the ends converted first (uint8's -1 is 255), the points in float64 cut toward zero.
  CHECK(linspace(0, -1, 3, DType::UInt8).to_vector<uint8_t>() == std::vector<uint8_t>{0, 127, 255});
  CHECK(linspace(2.9, 9.9, 3, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{2, 5, 9});
  const int64_t big = (int64_t{1} << 62) + 1;  // not a double: the end is converted, then exact below
  CHECK(linspace(int64_t{0}, big, 2, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{0, int64_t{1} << 62});
  // One point is start, none is empty, and a float64 linspace keeps its doubles.
  CHECK(linspace(3.5, 9, 1).to_vector<float>() == std::vector<float>{3.5f});
  CHECK(linspace(3.5, 9, 0).numel() == 0);
  CHECK(linspace(0, 0.1, 2, DType::Float64).to_vector<double>() == std::vector<double>{0.0, 0.1});
  CHECK_THROWS_AS(linspace(0, 1, 3, DType::Bool), DTypeError);
  CHECK_THROWS_WITH(linspace(0, 256, 3, DType::UInt8),
                    Catch::Contains("linspace: value 256 cannot be converted to uint8"));
}

// A fill stores its value as PyTorch's checked conversion does: into an integer tensor a float is
// cut toward zero (fill_ refused it), a value past the dtype's range is an Error, not a wrapped or
// saturated one, and masked_fill stores what full stores (a float through float32 lost int64's 1e18).
TEST_CASE("fills convert their value checked, as full, fill_ and masked_fill alike", "[tensor]") {
  CHECK(zeros({2}, DType::Int64).fill_(2.7).to_vector<int64_t>() == std::vector<int64_t>{2, 2});
  CHECK(zeros({2}, DType::Int32).fill_(-2.7).to_vector<int32_t>() == std::vector<int32_t>{-2, -2});
  CHECK(zeros({1}, DType::UInt8).fill_(-1).to_vector<uint8_t>() == std::vector<uint8_t>{255});
  CHECK(full({1}, -255, TensorOptions(DType::UInt8)).to_vector<uint8_t>() == std::vector<uint8_t>{1});
  CHECK(full({1}, int64_t{INT32_MAX}, TensorOptions(DType::Int32)).to_vector<int32_t>()[0] == INT32_MAX);
  CHECK_THROWS_WITH(full({1}, int64_t{INT32_MAX} + 1, TensorOptions(DType::Int32)),
                    Catch::Contains("full: value 2147483648 cannot be converted to int32 without overflow"));
  CHECK(full({1}, 65504.0, TensorOptions(DType::Float16)).to(DType::Float64).item<double>() == 65504.0);
  CHECK_THROWS_WITH(full({1}, 65504.5, TensorOptions(DType::Float16)), Catch::Contains("65504.5"));
  CHECK(std::isinf(full({1}, INFINITY, TensorOptions(DType::Float16)).to(DType::Float64).item<double>()));
  CHECK(std::isnan(full({1}, NAN, TensorOptions(DType::BFloat16)).to(DType::Float64).item<double>()));
  CHECK(full({1}, 1e300, TensorOptions(DType::Float64)).item<double>() == 1e300);
  CHECK_THROWS_WITH(full({1}, 1e300), Catch::Contains("float32"));
  CHECK(full({1}, 12345.0, TensorOptions(DType::Bool)).item<bool>());  // bool takes any value
  // An empty tensor still checks its value, as PyTorch's.
  CHECK_THROWS_WITH(zeros({0}, DType::UInt8).fill_(300), Catch::Contains("fill_: value 300"));
  // masked_fill: floats into integers cut toward zero without a trip through float32.
  const Tensor mask = tensor(std::vector<bool>{true, false});
  const int64_t e18 = 1000000000000000000;
  CHECK(masked_fill(zeros({2}, DType::Int64), mask, 1e18).to_vector<int64_t>() == std::vector<int64_t>{e18, 0});
  CHECK(masked_fill(zeros({2}, DType::Int32), mask, -7.9).to_vector<int32_t>() == std::vector<int32_t>{-7, 0});
  CHECK(masked_fill(zeros({2}, DType::Int32), mask, -7.9).dtype() == DType::Int32);
  CHECK(masked_fill(zeros({2}, DType::Bool), mask, 0.5).to(DType::Int64).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 0});
  Tensor u = zeros({2}, DType::UInt8);
  u.masked_fill_(mask, -2);
  CHECK(u.to_vector<uint8_t>() == std::vector<uint8_t>{254, 0});
  CHECK_THROWS_WITH(u.masked_fill_(mask, 256), Catch::Contains("masked_fill: value 256 cannot be converted to uint8"));
  CHECK(u.to_vector<uint8_t>() == std::vector<uint8_t>{254, 0});
}

// A 0-d tensor in the indexing ops, as PyTorch takes it: index_select of a 0-d input picks its one
// element into a 0-d result (it gave [n] for n indices), and gather and scatter_add count a 0-d
// input, index or src as a 1-d one of one element (they refused a 0-d index of a 1-d input).
TEST_CASE("indexing ops with 0-d inputs, indices and sources", "[tensor]") {
  const auto i0 = [](int64_t v) { return tensor(std::vector<int64_t>{v}).reshape({}); };
  Tensor s = scalar_tensor(5.0).to(DType::Float64).set_requires_grad(true);
  Tensor y = index_select(s, 0, tensor(std::vector<int64_t>{0}));
  CHECK(y.sizes() == Shape{});
  CHECK(y.item<double>() == 5.0);
  CHECK(index_select(s, -1, i0(0)).sizes() == Shape{});
  (y * 3.0).backward();
  CHECK(s.grad().sizes() == Shape{});
  CHECK(s.grad().item<double>() == 3.0);
  CHECK_THROWS_AS(index_select(s, 0, tensor(std::vector<int64_t>{0, 0})), ShapeError);
  // A 1-d input and a 0-d index: index_select keeps the dim (PyTorch's [1]); gather gives index's shape.
  Tensor v = tensor(std::vector<double>{1, 2, 3}).set_requires_grad(true);
  CHECK(index_select(v, 0, i0(2)).sizes() == Shape{1});
  Tensor g = gather(v, 0, i0(2));
  CHECK(g.sizes() == Shape{});
  CHECK(g.item<double>() == 3.0);
  (g * 2.0).backward();
  CHECK(v.grad().to_vector<double>() == std::vector<double>{0, 0, 2});
  const Tensor g1 = gather(scalar_tensor(7.0).to(DType::Float64), 0, tensor(std::vector<int64_t>{0, 0}));
  CHECK(g1.to_vector<double>() == std::vector<double>{7, 7});
  // scatter_add: a 1-d input with a 0-d index and src, a 0-d input with 1-d index and src.
  Tensor src = scalar_tensor(10.0).to(DType::Float64).set_requires_grad(true);
  Tensor x = tensor(std::vector<double>{1, 2, 3}).set_requires_grad(true);
  Tensor r = scatter_add(x, 0, i0(1), src);
  CHECK(r.sizes() == Shape{3});
  CHECK(r.to_vector<double>() == std::vector<double>{1, 12, 3});
  (r * tensor(std::vector<double>{1, 4, 9})).sum().backward();
  CHECK(src.grad().sizes() == Shape{});
  CHECK(src.grad().item<double>() == 4.0);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 4, 9});
  const Tensor r0 = scatter_add(scalar_tensor(1.0).to(DType::Float64), 0, tensor(std::vector<int64_t>{0, 0}),
                                tensor(std::vector<double>{2, 3}));
  CHECK(r0.sizes() == Shape{});
  CHECK(r0.item<double>() == 6.0);
  // Beyond 1-d the dims must still agree.
  CHECK_THROWS_AS(gather(zeros({2, 2}), 0, i0(0)), ShapeError);
  CHECK_THROWS_AS(scatter_add(zeros({2, 2}), 0, i0(0), scalar_tensor(1.0)), ShapeError);
}

// split of an empty dim gives one empty piece for any split_size, 0 included, as PyTorch's (0 was
// refused); split_size 0 of a dim with elements is still an Error.
TEST_CASE("split of an empty dim, split_size 0 included", "[tensor]") {
  const Tensor x = zeros({2, 0, 3});
  for (int64_t size : {0, 1, 5}) {
    INFO(size);
    const TensorList pieces = split(x, size, 1);
    REQUIRE(pieces.size() == 1);
    CHECK(pieces[0].sizes() == Shape{2, 0, 3});
  }
  CHECK(split(zeros({0}), 0).size() == 1);
  CHECK_THROWS_WITH(split(zeros({2, 0, 3}), 0, 2), Catch::Contains("dim 2 of size 3"));
}

TEST_CASE("views share storage and the version counter", "[tensor]") {
  Tensor x = arange(0.0, 12.0, 1.0).reshape({3, 4});
  Tensor v = x.transpose(0, 1);
  CHECK(v.sizes() == Shape{4, 3});
  CHECK(v.strides() == Shape{1, 4});
  CHECK(!v.is_contiguous());
  CHECK(v.storage() == x.storage());
  Tensor row = x.select(0, 1);
  row.fill_(-1.0);
  CHECK(x.to_vector<float>()[4] == -1.0f);
  CHECK(x.version() == row.version());
  CHECK(x.version() == 1);
  Tensor n = x.narrow(1, 1, 2);
  CHECK(n.storage_offset() == 1);
  CHECK(n.sizes() == Shape{3, 2});
  Tensor s = x.slice(1, 0, 4, 2);
  CHECK(s.strides() == Shape{4, 2});
  Tensor c = v.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.storage() != x.storage());
  CHECK(x.expand({2, 3, 4}).strides() == Shape{0, 4, 1});
  CHECK(x.unsqueeze(1).sizes() == Shape{3, 1, 4});
  CHECK(x.unsqueeze(1).squeeze().sizes() == Shape{3, 4});
  CHECK(x.flatten().sizes() == Shape{12});
  CHECK(x.view({2, -1}).sizes() == Shape{2, 6});
  CHECK_THROWS_AS(v.view({12}), ShapeError);  // transposed memory needs reshape
  CHECK(v.reshape({12}).to_vector<float>()[2] == 8.0f);
}

TEST_CASE("channels-last is a stride permutation and elementwise ops keep it", "[tensor]") {
  Tensor x = randn({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast);
  CHECK(x.sizes() == Shape{2, 3, 4, 5});
  CHECK(x.strides() == Shape{60, 1, 15, 3});
  CHECK(x.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(!x.is_contiguous());
  Tensor y = relu(x) + 1.0;
  CHECK(y.strides() == x.strides());
  CHECK(y.contiguous().to_vector<float>() == (relu(x.contiguous()) + 1.0).to_vector<float>());
  Tensor z = x.clone();
  CHECK(z.is_contiguous(MemoryFormat::ChannelsLast));
}

TEST_CASE("a slice keeps its dims' order: clone, empty_like and elementwise outputs of it are dense in that order",
          "[tensor]") {
  // A crop of a channels-last batch is not dense; what is made from it is channels-last again.
  const Tensor x = randn({2, 3, 6, 7}).contiguous(MemoryFormat::ChannelsLast);
  const Tensor crop = x.narrow(2, 1, 4).narrow(3, 2, 5);
  REQUIRE(!crop.is_non_overlapping_and_dense());
  for (const Tensor& made : {crop.clone(), empty_like(crop), crop * 2.0, exp(crop)}) {
    CHECK(made.strides() == Shape{60, 1, 15, 3});
  }
  CHECK(crop.clone().contiguous().to_vector<float>() == crop.contiguous().to_vector<float>());
  // A slice of a transpose stays transposed; a broadcast dim keeps its contiguous place.
  const Tensor t = randn({5, 6}).t().narrow(0, 1, 4);
  CHECK(t.clone().strides() == Shape{1, 4});
  CHECK(ones({3, 1}).expand({3, 4}).clone().strides() == Shape{4, 1});
  CHECK(ones({1, 4}).expand({3, 4}).t().clone().strides() == Shape{3, 1});
}

TEST_CASE("dtype conversions round as the target type does", "[tensor]") {
  Tensor x = tensor({1.0f, 2.7f, -3.5f, 65519.0f});
  CHECK(x.to(DType::Int32).to_vector<int32_t>() == std::vector<int32_t>{1, 2, -3, 65519});
  std::vector<float> h = x.to(DType::Float16).to(DType::Float32).to_vector<float>();
  CHECK(h[1] == static_cast<float>(Half(2.7f)));
  CHECK(h[3] == 65504.0f);
  CHECK(x.to(DType::Float32).is_same(x));  // no copy when already that dtype
  CHECK((x > 0.0).dtype() == DType::Bool);
  CHECK((x > 0.0).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 0, 1});
}

TEST_CASE("in-place ops check dtypes and shapes and bump versions", "[tensor]") {
  Tensor a = zeros({2, 3});
  a.add_(ones({3}));
  a.mul_(2.0);
  a.sub_(ones({2, 1}), 0.5);
  CHECK(a.to_vector<float>() == std::vector<float>(6, 1.5f));
  CHECK(a.version() == 3);
  Tensor i = zeros({2}, DType::Int64);
  CHECK_THROWS_AS(i.add_(ones({2})), DTypeError);
  CHECK_THROWS_WITH(a.add_(ones({4})), Catch::Contains("add_") && Catch::Contains("[4]"));
  CHECK_THROWS_AS(a.copy_(ones({3, 3})), ShapeError);
  a.zero_();
  CHECK(sum(a).item<double>() == 0.0);
  Tensor c = empty({3});
  c.copy_(tensor({1.0, 2.0, 3.0}, {3}, TensorOptions(DType::Float64)));
  CHECK(c.to_vector<float>() == std::vector<float>{1, 2, 3});
  c.clamp_(1.5, 2.5);
  CHECK(c.to_vector<float>() == std::vector<float>{1.5f, 2, 2.5f});
  c.masked_fill_(c > 2.0, -1.0);
  CHECK(c.to_vector<float>() == std::vector<float>{1.5f, 2, -1});
}

TEST_CASE("clamp: a NaN bound makes every element NaN and passes no gradient, as in PyTorch", "[tensor]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::pair<std::optional<Scalar>, std::optional<Scalar>>> bounds = {
      {nan, std::nullopt}, {std::nullopt, nan}, {0.0, nan}, {nan, 1.0}};
  for (const auto& [lo, hi] : bounds) {
    Tensor x = tensor({-1.0f, 0.5f, 2.0f}, {3}).set_requires_grad(true);
    Tensor y = clamp(x, lo, hi);
    for (float v : y.to_vector<float>()) CHECK(std::isnan(v));
    sum(y * 1.0).backward();
    CHECK(x.grad().to_vector<float>() == std::vector<float>(3, 0.0f));
    Tensor z = tensor({-1.0f, 0.5f}, {2});
    z.clamp_(lo, hi);
    for (float v : z.to_vector<float>()) CHECK(std::isnan(v));
  }
  // An integer tensor with a NaN bound gives float NaNs (a float scalar promotes it).
  Tensor n = clamp(tensor(std::vector<int64_t>{1, 5}), nan, std::nullopt);
  CHECK(n.dtype() == DType::Float32);
  for (float v : n.to_vector<float>()) CHECK(std::isnan(v));
  // An absent bound is no bound; a NaN element stays NaN.
  Tensor w = clamp(tensor({-3.0f, static_cast<float>(nan), 3.0f}, {3}), std::nullopt, 1.0);
  CHECK(w.to_vector<float>()[0] == -3.0f);
  CHECK(std::isnan(w.to_vector<float>()[1]));
  CHECK(w.to_vector<float>()[2] == 1.0f);
}

// pow with the exponents PyTorch special-cases computes as those ops do: 0.5 is sqrt (NaN at -inf,
// -0 at -0, where C's pow gives +inf and +0), -0.5 is 1 / sqrt, 2, 3 and -2 are products and -1 a
// division; the backward takes x^(a - 1) the same way. Other exponents stay pow.
TEST_CASE("pow by a scalar: the special-cased exponents are sqrt, rsqrt, products and division", "[tensor]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(dt));
    const Tensor x = tensor(std::vector<double>{-inf, -0.0, 0.0, 4.0, -4.0, 0.7, 1e-3, 3.3}).to(dt);
    const auto bits = [](const Tensor& t) {
      std::vector<uint64_t> r;
      for (double v : t.to_vector_double()) {
        uint64_t u = 0;
        std::memcpy(&u, &v, sizeof u);
        r.push_back(std::isnan(v) ? 0x7ff8000000000000u : u);  // any NaN is NaN
      }
      return r;
    };
    CHECK(bits(pow(x, 0.5)) == bits(sqrt(x)));
    CHECK(bits(pow(x, -0.5)) == bits(rsqrt(x)));
    CHECK(bits(pow(x, 2)) == bits(x * x));
    CHECK(bits(pow(x, 2.0)) == bits(x * x));
    CHECK(bits(pow(x, -1)) == bits(div(1.0, x)));
    if (dt == DType::Float32 || dt == DType::Float64) {  // products in the compute type, rounded once each
      CHECK(bits(pow(x, 3)) == bits(x * x * x));
      CHECK(bits(pow(x, -2)) == bits(div(1.0, x * x)));
    }
    const std::vector<double> half = pow(x, 0.5).to_vector_double();
    CHECK(std::isnan(half[0]));
    CHECK((half[1] == 0.0 && std::signbit(half[1])));
    CHECK(std::isnan(pow(x, -0.5).to_vector_double()[0]));
    CHECK(pow(x, -0.5).to_vector_double()[1] == -inf);
    CHECK(pow(x, 1.5).to_vector_double()[0] == inf);  // pow's own: (-inf)^1.5 is +inf
  }
  // The gradient of x^1.5 is 1.5 x^0.5, through sqrt: NaN at -inf as PyTorch's.
  Tensor y = tensor(std::vector<double>{-inf, 4.0}).set_requires_grad(true);
  pow(y, 1.5).sum().backward();
  const std::vector<double> g = y.grad().to_vector_double();
  CHECK(std::isnan(g[0]));
  CHECK(g[1] == 3.0);
}

TEST_CASE("item and printing", "[tensor]") {
  CHECK(tensor({3.5f}).item<double>() == 3.5);
  CHECK(scalar_tensor(7).item<int64_t>() == 7);
  CHECK_THROWS_WITH(zeros({2}).item(), Catch::Contains("item") && Catch::Contains("[2]"));
  CHECK(tensor({1.0f, 2.0f}).str() == "tensor([1., 2.])");
  CHECK(tensor({0.5f, -1.25f}).str() == "tensor([ 0.5000, -1.2500])");
  CHECK(arange(4).reshape({2, 2}).str() == "tensor([[0, 1],\n        [2, 3]])");
  CHECK(ones({2}, DType::Int32).str() == "tensor([1, 1], dtype=int32)");
  Tensor g = ones({2}).set_requires_grad(true);
  CHECK(g.str() == "tensor([1., 1.], requires_grad=True)");
  CHECK((g * 2.0).str() == "tensor([2., 2.], grad_fn=<mul>)");
  CHECK(tensor({true, false}, {2}, TensorOptions(DType::Bool)).str() == "tensor([ True, False])");
  std::string big = arange(0.0, 5000.0, 1.0).str();
  CHECK(big.find("...") != std::string::npos);
  CHECK(big.size() < 200);
  // int64 values print exactly, past 2^53 and at the ends of the range (not through a double).
  const std::vector<int64_t> extremes = {INT64_MAX, (int64_t{1} << 53) + 1, INT64_MIN};
  CHECK(tensor(extremes).str() == "tensor([ 9223372036854775807,     9007199254740993, -9223372036854775808])");
  CHECK(tensor(extremes).narrow(0, 0, 1).reshape({}).str() == "tensor(9223372036854775807)");
  std::string big_ints = arange(int64_t{0}, int64_t{5000}).str();
  CHECK(big_ints.find("4999]") != std::string::npos);
  CHECK(big_ints.find("...") != std::string::npos);
  // A summarized matrix's format and width come from every element shown, the inner rows' too: a
  // wider number in row 1 threw std::length_error, a fraction there printed as a whole number.
  Tensor ids = zeros({32, 128}, DType::Int64);
  ids.select(0, 1).select(0, 0).fill_(int64_t{123456789});
  std::string printed;
  REQUIRE_NOTHROW(printed = ids.str());
  CHECK(printed.find("123456789") != std::string::npos);
  Tensor w = zeros({128, 784});
  w.select(0, 1).select(0, 0).fill_(1.5);
  REQUIRE_NOTHROW(printed = w.str());
  CHECK(printed.find("1.5000") != std::string::npos);
}

TEST_CASE("devices: parsing, and CUDA without the runtime is a clear error", "[tensor]") {
  CHECK(Device("cuda:1") == Device::cuda(1));
  CHECK(Device("cpu").is_cpu());
  CHECK_THROWS_AS(Device("tpu"), DeviceError);
  CHECK_THROWS_AS(Device("cuda:x"), DeviceError);
  if (!kBuiltWithCuda) {
    CHECK_THROWS_WITH(zeros({2}, Device::cuda()), Catch::Contains("cuda:0"));
    CHECK_THROWS_AS(zeros({2}).to(Device::cuda()), DeviceError);
  }
}

TEST_CASE("bad shapes and dims name the op and the shapes", "[tensor]") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH(x.permute({0}), Catch::Contains("permute") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(x.select(2, 0), Catch::Contains("select"));
  CHECK_THROWS_WITH(x.select(1, 3), Catch::Contains("select") && Catch::Contains("size 3"));
  CHECK_THROWS_WITH(x.view({4, 2}), Catch::Contains("view") && Catch::Contains("[4, 2]"));
  CHECK_THROWS_WITH(x.expand({3, 3}), Catch::Contains("expand"));
  CHECK_THROWS_AS(x.size(5), IndexError);
  CHECK_THROWS_WITH(x.as_strided({10}, {1}, 0), Catch::Contains("as_strided"));
  Tensor undefined;
  CHECK_THROWS_AS(undefined.sizes(), Error);
  CHECK_THROWS_AS(add(undefined, x), Error);
}

TEST_CASE("int64 scalars reach integer tensors exactly, past 2^53 and at the ends of the range", "[tensor]") {
  // A scalar used to travel as a double: INT64_MAX rounded to 2^63 and wrapped to INT64_MIN, and
  // 2^53 + 1 became 2^53.
  const int64_t big = (int64_t{1} << 53) + 1;
  CHECK(full({2}, INT64_MAX, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>(2, INT64_MAX));
  CHECK(full({1}, INT64_MIN, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{INT64_MIN});
  Tensor t = zeros({3}, DType::Int64);
  t.fill_(big);
  CHECK(t.to_vector<int64_t>() == std::vector<int64_t>(3, big));
  CHECK((zeros({2}, DType::Int64) + (INT64_MAX - 5)).to_vector<int64_t>() == std::vector<int64_t>(2, INT64_MAX - 5));
  CHECK((t - big).to_vector<int64_t>() == std::vector<int64_t>(3, 0));
  CHECK(eq(t, big).to_vector<uint8_t>() == std::vector<uint8_t>(3, 1));
  CHECK(eq(t, big - 1).to_vector<uint8_t>() == std::vector<uint8_t>(3, 0));
  Tensor m = zeros({2}, DType::Int64);
  m.masked_fill_(tensor(std::vector<bool>{true, false}), INT64_MAX);
  CHECK(m.to_vector<int64_t>() == std::vector<int64_t>{INT64_MAX, 0});
  // Float scalars convert to int64 whatever their size (a cast past int64's range is undefined).
  CHECK(Scalar(1e300).to_int() == INT64_MAX);
  CHECK(Scalar(-1e300).to_int() == INT64_MIN);
  CHECK(Scalar(std::nan("")).to_int() == 0);
  CHECK(Scalar(-2.7).to_int() == -2);
  // An unsigned integer past int64's range is refused (it wrapped to a negative number); up to
  // INT64_MAX it is exact.
  CHECK_THROWS_WITH(full({1}, uint64_t{10000000000000000000u}, DType::Float32),
                    Catch::Contains("Scalar") && Catch::Contains("10000000000000000000"));
  CHECK(full({1}, uint64_t{INT64_MAX}, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{INT64_MAX});
  CHECK(Scalar(uint32_t{4000000000u}).to_int() == 4000000000);
  // sub_'s integer alpha is negated modulo 2^64 (-INT64_MIN overflowed: undefined behaviour).
  Tensor s = full({2}, 7, DType::Int64);
  s.sub_(tensor(std::vector<int64_t>{0, 1}), INT64_MIN);
  CHECK(s.to_vector<int64_t>() == std::vector<int64_t>{7, INT64_MIN + 7});  // 7 + 2^63, modulo 2^64
}
