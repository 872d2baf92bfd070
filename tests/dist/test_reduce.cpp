// The reductions the collectives apply to raw buffers (dist/reduce.h), checked without ranks: the
// 16-bit float types go through float blocks converted in bulk, and must give, bit for bit, what
// converting each element to float32, reducing and rounding once gives. Every float16 and bfloat16
// bit pattern is an operand (NaNs, infinities, subnormals, both zeros), against accumulators that
// cover the same kinds, over a length that ends mid-block and mid-vector; with the CPU's float16
// instructions and without them.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dist/reduce.h"
#include "kernels/cpu/convert.h"
#include "kernels/half.h"

using namespace kiln;

namespace {

// Element i of the operands: `in` walks every bit pattern, then ordinary numbers near 1 (float16) or
// 1/128 (bfloat16) to the end, which ends 13 elements into a block; `acc` a scrambled walk of the
// patterns, so each meets many others, and numbers of the same size in the tail (sums that change
// every element there).
constexpr int64_t kAll = 65536;
constexpr int64_t kCount = kAll + 1024 + 13;
uint16_t in_bits(int64_t i) { return static_cast<uint16_t>(i < kAll ? i : 0x3C00 + i % 256); }
uint16_t acc_bits(int64_t i) {
  return static_cast<uint16_t>(i < kAll ? static_cast<uint32_t>(i) * 40503u + 7u : 0x3C00 + i * 7 % 256);
}

template <typename T> uint16_t bits_of(float f) {
  T t(f);
  uint16_t b;
  std::memcpy(&b, &t, 2);
  return b;
}
template <typename T> float value_of(uint16_t b) { return static_cast<float>(T::from_bits(b)); }

// The element-by-element reference: float32 arithmetic, one rounding.
template <typename T> uint16_t reference(uint16_t acc, uint16_t in, dist::ReduceOp op) {
  const float a = value_of<T>(acc), b = value_of<T>(in);
  if (op == dist::ReduceOp::Max) return bits_of<T>(b > a || b != b ? b : a);
  if (op == dist::ReduceOp::Min) return bits_of<T>(b < a || b != b ? b : a);
  if (op == dist::ReduceOp::Product) return bits_of<T>(a * b);
  return bits_of<T>(a + b);
}

template <typename T> void check_reduce(dist::ReduceOp op) {
  std::vector<uint16_t> acc(kCount), in(kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    acc[i] = acc_bits(i);
    in[i] = in_bits(i);
  }
  dist::detail::reduce_into(acc.data(), in.data(), kCount, dtype_of<T>(), op);
  int64_t wrong = 0, first = -1;
  for (int64_t i = 0; i < kCount; ++i) {
    if (acc[i] != reference<T>(acc_bits(i), in_bits(i), op)) {
      if (first < 0) first = i;
      ++wrong;
    }
  }
  INFO("first wrong element " << first << ": acc bits " << acc_bits(first) << ", in bits " << in_bits(first));
  REQUIRE(wrong == 0);
}

template <typename T> void check_divide(double divisor) {
  std::vector<uint16_t> t(kCount);
  for (int64_t i = 0; i < kCount; ++i) t[i] = in_bits(i);
  dist::detail::divide(t.data(), kCount, dtype_of<T>(), divisor);
  int64_t wrong = 0;
  for (int64_t i = 0; i < kCount; ++i) {
    const double q = static_cast<double>(value_of<T>(in_bits(i))) / divisor;
    if (t[i] != bits_of<T>(static_cast<float>(q))) ++wrong;
  }
  REQUIRE(wrong == 0);
}

// Runs the checks with the CPU's float16 instructions (where it has them) and without.
template <typename F> void both_paths(F&& check) {
  for (const bool hardware : {true, false}) {
    const bool before = cpu::set_hardware_half(hardware);
    INFO("hardware float16 conversions requested: " << hardware);
    check();
    cpu::set_hardware_half(before);
  }
}

}  // namespace

TEST_CASE("16-bit float reductions equal float32 arithmetic rounded once, for every bit pattern", "[reduce]") {
  both_paths([] {
    for (const dist::ReduceOp op :
         {dist::ReduceOp::Sum, dist::ReduceOp::Max, dist::ReduceOp::Min, dist::ReduceOp::Product}) {
      INFO("op " << dist::reduce_op_name(op));
      check_reduce<Half>(op);
      check_reduce<BFloat16>(op);
    }
  });
}

TEST_CASE("16-bit float division equals the double quotient rounded to float32, then to the type",
          "[reduce]") {
  both_paths([] {
    for (const double divisor : {3.0, 4.0, 1e-30}) {
      INFO("divisor " << divisor);
      check_divide<Half>(divisor);
      check_divide<BFloat16>(divisor);
    }
  });
}

// Integer sums and products wrap modulo 2^bits, as PyTorch's (computed unsigned: a signed overflow
// is undefined in C++, which the sanitized build stops at); a maximum and minimum of integers, and
// bool's any (Max) and all (Min), on bytes of 0 and 1.
TEST_CASE("integer and bool reductions: sums and products wrap, bool is any and all", "[reduce]") {
  using dist::ReduceOp;
  std::vector<int32_t> a{INT32_MAX, INT32_MIN, 3, -4}, b{1, -1, INT32_MAX, 5};
  std::vector<int32_t> sum = a;
  dist::detail::reduce_into(sum.data(), b.data(), 4, DType::Int32, ReduceOp::Sum);
  CHECK(sum == std::vector<int32_t>{INT32_MIN, INT32_MAX, INT32_MIN + 2, 1});
  std::vector<int32_t> prod = a;
  dist::detail::reduce_into(prod.data(), b.data(), 4, DType::Int32, ReduceOp::Product);
  CHECK(prod == std::vector<int32_t>{INT32_MAX, INT32_MIN, 2147483645, -20});
  std::vector<int64_t> l{INT64_MAX, 6}, m{2, -7};
  dist::detail::reduce_into(l.data(), m.data(), 2, DType::Int64, ReduceOp::Product);
  CHECK(l == std::vector<int64_t>{-2, -42});
  std::vector<uint8_t> u{200, 16, 7}, v{100, 16, 9};
  std::vector<uint8_t> us = u, up = u, umin = u;
  dist::detail::reduce_into(us.data(), v.data(), 3, DType::UInt8, ReduceOp::Sum);
  dist::detail::reduce_into(up.data(), v.data(), 3, DType::UInt8, ReduceOp::Product);
  dist::detail::reduce_into(umin.data(), v.data(), 3, DType::UInt8, ReduceOp::Min);
  CHECK(us == std::vector<uint8_t>{44, 32, 16});
  CHECK(up == std::vector<uint8_t>{32, 0, 63});
  CHECK(umin == std::vector<uint8_t>{100, 16, 7});
  // bool: Sum and Product arrive as Max and Min (effective_op); Avg is refused.
  CHECK(dist::detail::effective_op(DType::Bool, ReduceOp::Sum) == ReduceOp::Max);
  CHECK(dist::detail::effective_op(DType::Bool, ReduceOp::Product) == ReduceOp::Min);
  CHECK(dist::detail::effective_op(DType::UInt8, ReduceOp::Sum) == ReduceOp::Sum);
  std::vector<uint8_t> p{0, 0, 1, 1}, q{0, 1, 0, 1};
  std::vector<uint8_t> any = p, all = p;
  dist::detail::reduce_into(any.data(), q.data(), 4, DType::Bool, ReduceOp::Max);
  dist::detail::reduce_into(all.data(), q.data(), 4, DType::Bool, ReduceOp::Min);
  CHECK(any == std::vector<uint8_t>{0, 1, 1, 1});
  CHECK(all == std::vector<uint8_t>{0, 0, 0, 1});
  CHECK(dist::detail::supports(DType::Bool, ReduceOp::Sum));
  CHECK_FALSE(dist::detail::supports(DType::Bool, ReduceOp::Avg));
  CHECK_THROWS_WITH(dist::detail::check_supported("all_reduce", DType::Bool, ReduceOp::Avg),
                    Catch::Contains("all_reduce: avg of bool tensors is not supported"));
}
