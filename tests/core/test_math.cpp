// Hand tests of core/ops/math.h beyond the op table's float64 loops: the cases where the exact
// rule matters (half to even, Python's signs for // and %, integer quotients past float64's 2^53
// and at INT64_MIN, IEEE zero divisors, signed zeros, atan2's quadrants, xlogy's zeros) and the
// gradients PyTorch defines by convention.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <utility>
#include <vector>

#include "core/kiln.h"
#include "tests/core/same_values.h"

using namespace kiln;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// Equal as values, NaN equal to NaN, and zeros of the same sign.
bool same(const std::vector<double>& a, const std::vector<double>& b) { return test::same_values(a, b, true); }

Tensor doubles(std::vector<double> v) { return tensor(v); }
Tensor longs(std::vector<int64_t> v) { return tensor(v); }
}  // namespace

TEST_CASE("round: half to even, in every float dtype, and at decimals", "[math]") {
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    INFO(dtype_name(dtype));
    const Tensor x = doubles({0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.75}).to(dtype);
    CHECK(same(round(x).to_vector_double(), {0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 4.0}));
    CHECK(same(floor(x).to_vector_double(), {0.0, 1.0, 2.0, -1.0, -2.0, -3.0, 3.0}));
    CHECK(same(ceil(x).to_vector_double(), {1.0, 2.0, 3.0, -0.0, -1.0, -2.0, 4.0}));
    CHECK(same(trunc(x).to_vector_double(), {0.0, 1.0, 2.0, -0.0, -1.0, -2.0, 3.0}));
    CHECK(same(frac(x).to_vector_double(), {0.5, 0.5, 0.5, -0.5, -0.5, -0.5, 0.75}));
    CHECK(round(x).dtype() == dtype);
  }
  // 0.125 * 100 is 12.5 exactly: half to even gives 0.12. 1250 at -2 decimals: 12.5 again, 1200.
  CHECK(round(doubles({0.125}), 2).to_vector_double()[0] == 0.12);
  CHECK(round(doubles({1250.0, 1350.0, -1249.0}), -2).to_vector_double() == std::vector<double>{1200, 1400, -1200});
  // float16's 5.39453125 scaled in float16 is 539.5, then 540; scaled in float32 it is 539.45.
  const Tensor h = doubles({5.39453125}).to(DType::Float16);
  CHECK(round(h, 2).dtype() == DType::Float16);
  CHECK(round(h, 2).to_vector_double() == doubles({5.39}).to(DType::Float16).to_vector_double());
  // Non-finite values pass through every rounding.
  CHECK(same(floor(doubles({kInf, -kInf, kNaN})).to_vector_double(), {kInf, -kInf, kNaN}));
}

TEST_CASE("rounding an integer tensor copies it, bool is refused, and the gradient is zero", "[math]") {
  const Tensor i = tensor<int64_t>({-3, 0, 7}).to(DType::Int32);
  for (Tensor r : {floor(i), ceil(i), trunc(i), round(i)}) {
    CHECK(r.dtype() == DType::Int32);
    CHECK(r.to_vector_double() == std::vector<double>{-3, 0, 7});
    CHECK(r.data_ptr() != i.data_ptr());
  }
  CHECK_THROWS_WITH(floor(tensor({true, false})), Catch::Contains("floor") && Catch::Contains("bool"));
  Tensor x = doubles({0.3, -1.7, 2.5});
  x.set_requires_grad(true);
  (floor(x) + ceil(x) * 2 + round(x) * 3 + trunc(x) * 4).sum().backward();
  CHECK(x.grad().to_vector_double() == std::vector<double>{0, 0, 0});
  Tensor y = doubles({0.3, -1.7});
  y.set_requires_grad(true);
  frac(y).sum().backward();
  CHECK(y.grad().to_vector_double() == std::vector<double>{1, 1});
}

TEST_CASE("floor_divide, remainder and fmod: Python's and C's signs, for integers and floats", "[math]") {
  const Tensor a = longs({-7, 7, -7, 7, 6, -6}), b = longs({2, -2, 3, -3, 3, 3});
  CHECK(floor_divide(a, b).to_vector<int64_t>() == std::vector<int64_t>{-4, -4, -3, -3, 2, -2});
  CHECK(div(a, b, RoundingMode::Trunc).to_vector<int64_t>() == std::vector<int64_t>{-3, -3, -2, -2, 2, -2});
  CHECK(remainder(a, b).to_vector<int64_t>() == std::vector<int64_t>{1, -1, 2, -2, 0, 0});
  CHECK(fmod(a, b).to_vector<int64_t>() == std::vector<int64_t>{-1, 1, -1, 1, 0, 0});
  CHECK(floor_divide(a, b).dtype() == DType::Int64);
  const Tensor af = a.to(DType::Float64), bf = b.to(DType::Float64);
  CHECK(same(floor_divide(af, bf).to_vector_double(), {-4, -4, -3, -3, 2, -2}));
  CHECK(same(remainder(af, bf).to_vector_double(), {1, -1, 2, -2, 0, -0.0}));
  CHECK(same(fmod(af, bf).to_vector_double(), {-1, 1, -1, 1, 0, -0.0}));
  // 0.1 is a little above 1/10: 1 // 0.1 is 9 and 1 % 0.1 just under 0.1, as in Python, where
  // floor(1 / 0.1) would say 10.
  CHECK(floor_divide(doubles({1.0}), 0.1).to_vector_double()[0] == 9.0);
  CHECK(remainder(doubles({1.0}), 0.1).to_vector_double()[0] == std::fmod(1.0, 0.1));
  CHECK(std::fmod(1.0, 0.1) > 0.09);
  // Scalars of either side; a float scalar makes an integer tensor's result float32.
  CHECK(remainder(-7, longs({3, -3})).to_vector<int64_t>() == std::vector<int64_t>{2, -1});
  const Tensor q = floor_divide(longs({7, -7}), 2.5);
  CHECK(q.dtype() == DType::Float32);
  CHECK(q.to_vector_double() == std::vector<double>{2, -3});
  CHECK(remainder(tensor<int64_t>({5}).to(DType::Int32), longs({3})).dtype() == DType::Int64);
}

TEST_CASE("integer quotients are exact past 2^53, wrap at INT64_MIN / -1, and refuse a zero divisor", "[math]") {
  const int64_t big = (int64_t{1} << 62) + 1;  // not a double: a float division would round it
  const Tensor a = longs({big, -big, kMin, kMin, kMin});
  const Tensor b = longs({3, 3, -1, 2, 7});
  CHECK(floor_divide(a, b).to_vector<int64_t>() ==
        std::vector<int64_t>{big / 3, -big / 3 - 1, kMin, kMin / 2, kMin / 7 - 1});
  CHECK(remainder(a, b).to_vector<int64_t>() == std::vector<int64_t>{big % 3, 3 - big % 3, 0, 0, 7 + kMin % 7});
  CHECK(fmod(a, b).to_vector<int64_t>() == std::vector<int64_t>{big % 3, -(big % 3), 0, 0, kMin % 7});
  CHECK(div(a, b, RoundingMode::Trunc).to_vector<int64_t>() ==
        std::vector<int64_t>{big / 3, -big / 3, kMin, kMin / 2, kMin / 7});
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  for (Fn op : std::vector<Fn>{floor_divide, remainder, fmod}) {
    CHECK_THROWS_WITH(op(longs({1, 2}), longs({1, 0})), Catch::Contains("division by zero"));
  }
  CHECK_THROWS_WITH(div(longs({1}), 0, RoundingMode::Floor),
                    Catch::Contains("div(rounding_mode='floor')") && Catch::Contains("division by zero"));
  // An empty divisor has no zero to find.
  CHECK(floor_divide(longs({}), longs({})).numel() == 0);
}

TEST_CASE("float division by zero follows IEEE, and a zero quotient keeps its sign", "[math]") {
  const Tensor a = doubles({1.0, -1.0, 0.0, 1.0}), z = doubles({0.0, 0.0, 0.0, -0.0});
  CHECK(same(floor_divide(a, z).to_vector_double(), {kInf, -kInf, kNaN, -kInf}));
  CHECK(same(remainder(a, z).to_vector_double(), {kNaN, kNaN, kNaN, kNaN}));
  CHECK(same(fmod(a, z).to_vector_double(), {kNaN, kNaN, kNaN, kNaN}));
  // 0.5 // 2 is +0, -0.5 // -2 is +0, -0.0 // 2 is -0 (the sign of the quotient -0.0 / 2).
  CHECK(same(floor_divide(doubles({0.5, -0.5, -0.0}), doubles({2.0, -2.0, 2.0})).to_vector_double(), {0.0, 0.0, -0.0}));
  // An infinite divisor: fmod keeps a; the remainder moves a negative a up by inf.
  CHECK(same(remainder(doubles({-1.0, 1.0}), kInf).to_vector_double(), {kInf, 1.0}));
}

TEST_CASE("remainder's and fmod's gradients: g for a, -g times the rounded quotient for b", "[math]") {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  // The gradients of sum(op(a, b)) for a = [-7.5, 7.5, 2], b = [2, -2, 0.75].
  const auto grads = [](Fn op) {
    Tensor a = doubles({-7.5, 7.5, 2.0}), b = doubles({2.0, -2.0, 0.75});
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    op(a, b).sum().backward();
    return std::pair{a.grad().to_vector_double(), b.grad().to_vector_double()};
  };
  const auto [ra, rb] = grads(remainder);
  CHECK(ra == std::vector<double>{1, 1, 1});
  CHECK(rb == std::vector<double>{4, 4, -2});  // -floor(a / b): a / b = -3.75, -3.75, 2.67
  const auto [fa, fb] = grads(fmod);
  CHECK(fa == std::vector<double>{1, 1, 1});
  CHECK(fb == std::vector<double>{3, 3, -2});  // -trunc(a / b)
  for (Fn op :
       std::vector<Fn>{floor_divide, [](const Tensor&a, const Tensor&b) { return div(a, b, RoundingMode::Trunc); }}) {
    const auto [qa, qb] = grads(op);
    CHECK(qa == std::vector<double>{0, 0, 0});
    CHECK(qb == std::vector<double>{0, 0, 0});
  }
}

TEST_CASE("atan2 knows the quadrant and the sign of zero", "[math]") {
  const double pi = std::numbers::pi;
  const Tensor y = doubles({1.0, 1.0, -1.0, -1.0, 0.0, -0.0, 0.0}),
               x = doubles({1.0, -1.0, -1.0, 1.0, -1.0, -1.0, 0.0});
  CHECK(same(atan2(y, x).to_vector_double(), {pi / 4, 3 * pi / 4, -3 * pi / 4, -pi / 4, pi, -pi, 0.0}));
  CHECK(atan2(longs({1}), longs({1})).dtype() == DType::Float32);
}

TEST_CASE("xlogy: zero where x is zero, unless y is NaN, and PyTorch's zero gradient at x = 0", "[math]") {
  const Tensor x = doubles({0.0, 0.0, 0.0, 0.0, 2.0, 2.0}), y = doubles({0.0, kInf, kNaN, 3.0, 0.0, kNaN});
  CHECK(same(xlogy(x, y).to_vector_double(), {0.0, 0.0, kNaN, 0.0, -kInf, kNaN}));
  Tensor xs = doubles({0.0, 2.0}), ys = doubles({0.0, 4.0});
  xs.set_requires_grad(true);
  ys.set_requires_grad(true);
  xlogy(xs, ys).sum().backward();
  // d/dx: 0 at x = 0 (PyTorch's xlogy(x != 0, y); no 0 * log(0) = NaN), log y elsewhere.
  CHECK(same(xs.grad().to_vector_double(), {0.0, std::log(4.0)}));
  // d/dy = x / y: 0 / 0 is NaN at the first element, as in PyTorch.
  CHECK(same(ys.grad().to_vector_double(), {kNaN, 0.5}));
}

TEST_CASE("inverse and hyperbolic functions at their domain's ends", "[math]") {
  CHECK(same(asin(doubles({1.0, -1.0, 1.5})).to_vector_double(), {std::numbers::pi / 2, -std::numbers::pi / 2, kNaN}));
  CHECK(same(atanh(doubles({1.0, -1.0})).to_vector_double(), {kInf, -kInf}));
  CHECK(same(acosh(doubles({1.0, 0.5})).to_vector_double(), {0.0, kNaN}));
  CHECK(same(erfc(doubles({10.0, -kInf})).to_vector_double(), {std::erfc(10.0), 2.0}));
  CHECK(erfc(doubles({10.0})).to_vector_double()[0] > 0);  // 1 - erf(10) would be 0
  CHECK(same(log2(doubles({1024.0, 0.0})).to_vector_double(), {10.0, -kInf}));
  CHECK(same(exp2(doubles({10.0, -kInf})).to_vector_double(), {1024.0, 0.0}));
  CHECK(same(log10(doubles({1000.0})).to_vector_double(), {3.0}));
  CHECK(reciprocal(longs({4})).to_vector_double() == std::vector<double>{0.25});
  CHECK(square(longs({-3})).to_vector<int64_t>() == std::vector<int64_t>{9});
}

TEST_CASE("hypot, copysign, signbit, fmax and fmin at their edges", "[math]") {
  // No overflow or underflow of the squares; inf beats NaN; (0, 0) is 0.
  const std::vector<double> h =
      hypot(doubles({1e300, 1e-300, 3.0, 0.0, kInf, kNaN}), doubles({1e300, 1e-300, 4.0, 0.0, kNaN, 1.0}))
          .to_vector_double();
  CHECK(h[0] == Approx(std::sqrt(2.0) * 1e300).epsilon(1e-15));
  CHECK(h[1] == Approx(std::sqrt(2.0) * 1e-300).epsilon(1e-15));
  CHECK(same({h[2], h[3], h[4], h[5]}, {5.0, 0.0, kInf, kNaN}));
  CHECK(same(hypot(doubles({1e30}).to(DType::Float32), doubles({1e30}).to(DType::Float32)).to_vector_double(),
             {static_cast<double>(std::hypot(1e30F, 1e30F))}));
  // The sign of b's zeros counts; NaN b is positive; integers give float32.
  const std::vector<double> c = copysign(doubles({1.0, 1.0, -2.0}), doubles({-0.0, 0.0, kNaN})).to_vector_double();
  CHECK(same(c, {-1.0, 1.0, 2.0}));
  CHECK(copysign(longs({3}), longs({-1})).dtype() == DType::Float32);
  CHECK(same(copysign(doubles({2.0, -2.0}), -0.0).to_vector_double(), {-2.0, -2.0}));
  CHECK(signbit(doubles({-0.0, 0.0, -1e-300, kNaN, -kInf})).to_vector_double() ==
        std::vector<double>{1.0, 0.0, 1.0, 0.0, 1.0});
  CHECK(signbit(longs({-1, 0, 1})).dtype() == DType::Bool);
  // fmax/fmin ignore a NaN beside a number; NaN only where both are.
  CHECK(same(fmax(doubles({kNaN, 1.0, kNaN, 2.0}), doubles({1.0, kNaN, kNaN, 3.0})).to_vector_double(),
             {1.0, 1.0, kNaN, 3.0}));
  CHECK(same(fmin(doubles({kNaN, 1.0, kNaN, 2.0}), doubles({1.0, kNaN, kNaN, 3.0})).to_vector_double(),
             {1.0, 1.0, kNaN, 2.0}));
  // Gradients: ties and a NaN b go to a; a NaN a sends it to b.
  Tensor a = doubles({2.0, 1.0, kNaN, 0.0}), b = doubles({2.0, kNaN, 1.0, 5.0});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  fmax(a, b).sum().backward();
  CHECK(same(a.grad().to_vector_double(), {1.0, 1.0, 0.0, 0.0}));
  CHECK(same(b.grad().to_vector_double(), {0.0, 0.0, 1.0, 1.0}));
  // Operands of two dtypes: each gradient in its operand's dtype.
  Tensor f = doubles({1.0, -1.0}).to(DType::Float32);
  f.set_requires_grad(true);
  fmin(f, doubles({0.0, 0.0})).sum().backward();
  CHECK(f.grad().dtype() == DType::Float32);
  CHECK(same(f.grad().to_vector_double(), {0.0, 1.0}));
  // copysign's gradient: the sign flip for a, 0 at a = 0; 0 for b.
  Tensor x = doubles({2.0, -3.0, 0.0}), y = doubles({-1.0, -1.0, -1.0});
  x.set_requires_grad(true);
  y.set_requires_grad(true);
  copysign(x, y).sum().backward();
  CHECK(same(x.grad().to_vector_double(), {-1.0, 1.0, 0.0}));
  CHECK(same(y.grad().to_vector_double(), {0.0, 0.0, 0.0}));
}

TEST_CASE("heaviside, ldexp, logaddexp2 and float_power", "[math]") {
  CHECK(same(heaviside(doubles({-1.0, 0.0, 2.0, -0.0}), doubles({0.5})).to_vector_double(), {0.0, 0.5, 1.0, 0.5}));
  Tensor x = doubles({-1.0, 0.0, 2.0}), v = doubles({0.5, 0.25, 0.75});
  x.set_requires_grad(true);
  v.set_requires_grad(true);
  heaviside(x, v).sum().backward();
  CHECK(same(x.grad().to_vector_double(), {0.0, 0.0, 0.0}));
  CHECK(same(v.grad().to_vector_double(), {0.0, 1.0, 0.0}));
  CHECK(same(ldexp(doubles({3.0, -1.5}), longs({4, -1})).to_vector_double(), {48.0, -0.75}));
  CHECK(ldexp(longs({1}), longs({3})).dtype() == DType::Float32);
  // log2(2^1000 + 2^1000) is 1001, no overflow on the way; -inf beside -inf stays -inf.
  CHECK(same(logaddexp2(doubles({1000.0, -kInf}), doubles({1000.0, -kInf})).to_vector_double(), {1001.0, -kInf}));
  const Tensor p = float_power(longs({2, 3}), doubles({0.5}).to(DType::Float32));
  CHECK(p.dtype() == DType::Float64);
  CHECK(same(p.to_vector_double(), {std::sqrt(2.0), std::sqrt(3.0)}));
  CHECK(float_power(doubles({2.0}).to(DType::Float16), 3).dtype() == DType::Float64);
  CHECK(same(float_power(2, longs({-1, 10})).to_vector_double(), {0.5, 1024.0}));
}
