// DTypes: kiln's own Half/BFloat16 conversions (round to nearest even) and PyTorch's promotion.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/kiln.h"
#include "kernels/cpu/convert.h"
#include "tests/hardware_half.h"

using namespace kiln;

namespace {
float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST_CASE("Half: every bit pattern survives a round trip through float", "[dtype]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    Half h = Half::from_bits(static_cast<uint16_t>(b));
    float f = h;
    Half back(f);
    if (std::isnan(f)) {
      CHECK(std::isnan(static_cast<float>(back)));
    } else {
      INFO("bits " << b);
      CHECK(back.bits == b);
    }
  }
}

TEST_CASE("Half: float to half rounds to the nearest value, ties to even", "[dtype]") {
  CHECK(Half(1.0f).bits == 0x3C00);
  CHECK(Half(65504.0f).bits == 0x7BFF);
  CHECK(Half(65520.0f).bits == 0x7C00);  // rounds up to infinity
  CHECK(Half(-65520.0f).bits == 0xFC00);
  CHECK(Half(std::ldexp(1.0f, -24)).bits == 0x0001);  // smallest subnormal
  CHECK(Half(std::ldexp(1.0f, -25)).bits == 0x0000);  // halfway to 0: ties to even
  CHECK(Half(std::ldexp(3.0f, -25)).bits == 0x0002);  // halfway between 1 and 2 ulps: even is 2
  CHECK(Half(1.0f + std::ldexp(1.0f, -11)).bits == 0x3C00);       // tie, 1.0 is even
  CHECK(Half(1.0f + std::ldexp(3.0f, -11)).bits == 0x3C02);       // tie, rounds up to even
  CHECK(Half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)).bits == 0x3C01);  // above the tie
  CHECK(std::isnan(static_cast<float>(Half(std::nanf("")))));
  CHECK(std::isinf(static_cast<float>(Half(INFINITY))));
  // Random floats across the half range: the result is the nearest half (checked by neighbours).
  uint32_t s = 12345;
  for (int i = 0; i < 200000; ++i) {
    s = s * 1664525u + 1013904223u;
    float f = bits_to_float((s & 0x807FFFFFu) | ((100u + (s >> 24) % 45u) << 23));  // |f| in [2^-27, 2^17)
    Half h(f);
    double hv = static_cast<float>(h);
    if (std::isinf(hv)) {
      CHECK(std::fabs(f) >= 65520.0f);
      continue;
    }
    double err = std::fabs(hv - f);
    for (int delta : {-1, 1}) {
      Half n = Half::from_bits(static_cast<uint16_t>(h.bits + delta));
      double nv = static_cast<float>(n);
      if (std::isnan(nv) || std::isinf(nv) || (h.bits & 0x7FFF) == 0) continue;
      INFO("f=" << f << " half=" << hv << " neighbour=" << nv);
      CHECK(err <= std::fabs(nv - f));
    }
  }
}

TEST_CASE("BFloat16: rounds to nearest even and keeps NaN", "[dtype]") {
  CHECK(BFloat16(1.0f).bits == 0x3F80);
  CHECK(BFloat16(bits_to_float(0x3F808000u)).bits == 0x3F80);  // tie, even
  CHECK(BFloat16(bits_to_float(0x3F818000u)).bits == 0x3F82);  // tie, rounds up to even
  CHECK(BFloat16(bits_to_float(0x3F808001u)).bits == 0x3F81);
  CHECK(std::isnan(static_cast<float>(BFloat16(std::nanf("")))));
  CHECK(static_cast<float>(BFloat16(-2.5f)) == -2.5f);
  CHECK(std::isinf(static_cast<float>(BFloat16(bits_to_float(0x7F7FFFFFu)))));  // max float rounds to inf
}

namespace {

// float -> float16 by float64 arithmetic and the current (nearest-even) rounding mode: the
// reference the straight-line bit conversion in kernels/half.h must match.
uint16_t reference_half(float f) {
  const uint32_t sign = std::signbit(f) ? 0x8000u : 0u;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7E00u);
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7C00u);  // infinity, and what rounds to it
  if (a < 0x1p-14) return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 0x1p24)));
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e with m in [0.5, 1)
  uint32_t q = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, 11 - e)));  // 11 significant bits
  if (q == 2048) {  // rounded up into the next binade
    q = 1024;
    ++e;
  }
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(e + 14) << 10 | (q - 1024));
}

// Floats of every sign and exponent whose mantissas sit on each side of every rounding point (bit
// p set, p's neighbours, p with a sticky bit below), plus random mantissas.
std::vector<float> conversion_samples() {
  std::vector<float> v;
  uint32_t s = 777;
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exp = 0; exp < 256; ++exp) {
      std::vector<uint32_t> mants{0u, 0x7FFFFFu};
      for (uint32_t p = 0; p < 23; ++p) {
        // below, at and above bit p; ties with the bit above odd (3 << p) and even (5 << p)
        for (uint32_t m : {1u << p, (1u << p) - 1u, (1u << p) + 1u, 3u << p, 5u << p, (2u << p) - 1u}) {
          mants.push_back(m & 0x7FFFFFu);
        }
      }
      for (int i = 0; i < 64; ++i) {
        s = s * 1664525u + 1013904223u;
        mants.push_back(s >> 9);
      }
      for (uint32_t m : mants) v.push_back(bits_to_float(sign << 31 | exp << 23 | m));
    }
  }
  return v;
}

}  // namespace

TEST_CASE("Half: float to half matches a float64 reference at every exponent's rounding points", "[dtype]") {
  int64_t bad = 0;
  for (float f : conversion_samples()) {
    if (Half(f).bits != reference_half(f)) {
      if (bad++ < 5) {
        uint32_t u = 0;
        std::memcpy(&u, &f, 4);
        FAIL_CHECK("float bits " << std::hex << u << ": half " << Half(f).bits << ", reference " << reference_half(f));
      }
    }
  }
  CHECK(bad == 0);
}

// The bulk conversions (kernels/cpu/convert.h) give the scalar conversions' bits, both ways, for
// float16 and bfloat16: the portable loops (vectorized in the AVX2 clone) and, where the CPU has
// F16C, float16's hardware conversions, whose NaNs are put right to kiln's. Every 16-bit pattern is
// widened; the samples are narrowed whole and in short runs at every offset, for the hardware
// loop's tail of fewer than 8.
TEST_CASE("Half and BFloat16: the bulk conversions give the scalar conversions' bits", "[dtype]") {
  const std::vector<float> f = conversion_samples();
  const int64_t n = static_cast<int64_t>(f.size());
  const kiln::test::HardwareHalfGuard restore;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)  // clang's check has no "f16c"
  // On by default where it can be.
  CHECK(restore.saved == (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")));
#endif
  for (bool hardware : {true, false}) {
    cpu::set_hardware_half(hardware);
    if (hardware && !cpu::hardware_half()) {
      WARN("this CPU has no F16C: float16 converts with the portable loops only");
      CHECK_FALSE(cpu::hardware_half());
      continue;
    }
    CHECK(cpu::hardware_half() == hardware);
    for (DType t : {DType::Float16, DType::BFloat16}) {
      INFO(dtype_name(t) << (hardware ? ", hardware float16" : ", portable loops"));
      const auto scalar_narrow = [&](float v) { return t == DType::Float16 ? Half(v).bits : BFloat16(v).bits; };
      std::vector<uint16_t> narrow(f.size());
      cpu::narrow_from_float(narrow.data(), t, f.data(), n);
      int64_t bad = 0;
      for (size_t i = 0; i < f.size(); ++i) bad += narrow[i] != scalar_narrow(f[i]);
      CHECK(bad == 0);
      // Short runs at offsets 0 to 3 (the sample's NaNs, infinities and subnormals fall in them too).
      bad = 0;
      for (int64_t off = 0; off < 4; ++off) {
        for (int64_t len = 0; len <= 40; ++len) {
          for (int64_t start = off; start + len <= n; start += 4099) {
            std::vector<uint16_t> out(static_cast<size_t>(len) + 1, 0xABCD);
            cpu::narrow_from_float(out.data(), t, f.data() + start, len);
            for (int64_t j = 0; j < len; ++j) {
              bad += out[static_cast<size_t>(j)] != scalar_narrow(f[static_cast<size_t>(start + j)]);
            }
            bad += out[static_cast<size_t>(len)] != 0xABCD;  // nothing past the run
          }
        }
      }
      CHECK(bad == 0);
      std::vector<uint16_t> all(65536);
      for (uint32_t b = 0; b < 65536; ++b) all[b] = static_cast<uint16_t>(b);
      std::vector<float> wide(all.size() + 1, -7.0f);
      bad = 0;
      for (int64_t len : {int64_t{65536}, int64_t{65531}}) {  // a multiple of 8, and one with a tail of 3
        cpu::widen_to_float(wide.data(), all.data() + (65536 - len), t, len);
        for (int64_t j = 0; j < len; ++j) {
          const uint16_t b = all[static_cast<size_t>(65536 - len + j)];
          const float scalar = t == DType::Float16 ? static_cast<float>(Half::from_bits(b))
                                                   : static_cast<float>(BFloat16::from_bits(b));
          bad += std::memcmp(&wide[static_cast<size_t>(j)], &scalar, 4) != 0;
        }
        bad += wide[65536] != -7.0f;
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("type promotion between tensors follows PyTorch", "[dtype]") {
  CHECK(promote_types(DType::Int32, DType::Float16) == DType::Float16);
  CHECK(promote_types(DType::UInt8, DType::Int32) == DType::Int32);
  CHECK(promote_types(DType::Bool, DType::Int32) == DType::Int32);
  CHECK(promote_types(DType::Float16, DType::BFloat16) == DType::Float32);
  CHECK(promote_types(DType::Int64, DType::Float32) == DType::Float32);
  CHECK(promote_types(DType::Float32, DType::Float64) == DType::Float64);
  CHECK(promote_types(DType::Bool, DType::Bool) == DType::Bool);
  CHECK(promote_types(DType::BFloat16, DType::Int64) == DType::BFloat16);
}

// A 0-d tensor beside a tensor with dims raises only the category, as PyTorch's result_type has it,
// and is taken in the result's dtype: float16 [n] times a float32 0-d tensor was float32, and an
// equality with float32's 0.1 false for a float16 0.1.
TEST_CASE("a 0-d tensor beside one with dims promotes as PyTorch's result_type", "[dtype]") {
  const auto dt = [](DType d, bool zero_dim) {
    return zero_dim ? zeros({}, TensorOptions(d)) : zeros({3}, TensorOptions(d));
  };
  struct Case {
    DType dims, zero, want;
  };
  const Case cases[] = {
      {DType::Float16, DType::Float32, DType::Float16},   {DType::Float16, DType::Float64, DType::Float16},
      {DType::BFloat16, DType::Float16, DType::BFloat16}, {DType::Float32, DType::Float64, DType::Float32},
      {DType::Int32, DType::Int64, DType::Int32},         {DType::UInt8, DType::Int64, DType::UInt8},
      {DType::Int32, DType::Bool, DType::Int32},          {DType::Float16, DType::Int64, DType::Float16},
      {DType::Bool, DType::Int64, DType::Int64},          {DType::Bool, DType::Bool, DType::Bool},
      {DType::Int64, DType::Float64, DType::Float64},     {DType::Int32, DType::Float16, DType::Float16},
      {DType::UInt8, DType::BFloat16, DType::BFloat16},   {DType::Bool, DType::Float64, DType::Float64},
  };
  for (const Case& c : cases) {
    INFO(dtype_name(c.dims) << " [3] with a 0-d " << dtype_name(c.zero));
    CHECK(promote_with_zero_dim(c.dims, c.zero) == c.want);
    CHECK(result_type(dt(c.dims, false), dt(c.zero, true)) == c.want);
    CHECK(result_type(dt(c.zero, true), dt(c.dims, false)) == c.want);
    CHECK(add(dt(c.zero, true), dt(c.dims, false)).dtype() == c.want);
    CHECK(where(ones({3}, TensorOptions(DType::Bool)), dt(c.dims, false), dt(c.zero, true)).dtype() == c.want);
    if (c.want != DType::Bool) CHECK(mul(dt(c.dims, false), dt(c.zero, true)).dtype() == c.want);
    // Two 0-d tensors, or two with dims, promote as tensors do.
    CHECK(result_type(dt(c.dims, true), dt(c.zero, true)) == promote_types(c.dims, c.zero));
    CHECK(result_type(dt(c.dims, false), dt(c.zero, false)) == promote_types(c.dims, c.zero));
  }
  // A 1-d empty tensor has dims; a [1] tensor is not 0-d.
  CHECK(add(zeros({0}, TensorOptions(DType::Float16)), zeros({})).dtype() == DType::Float16);
  CHECK(add(zeros({1}, TensorOptions(DType::Float16)), zeros({1})).dtype() == DType::Float32);

  // The 0-d value is converted to the result's dtype first: float32's 0.1 is float16's 0.1 then, and
  // an int64 0-d 2^32 + 5 is int32's 5.
  const Tensor f16 = full({2}, 0.1, TensorOptions(DType::Float16));
  const Tensor tenth = scalar_tensor(0.1);  // float32
  CHECK(eq(f16, tenth).to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(eq(tenth, f16).to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(sub(f16, tenth).to(DType::Float32).to_vector<float>() == std::vector<float>{0, 0});
  CHECK(maximum(f16, tenth).dtype() == DType::Float16);
  CHECK(pow(f16, scalar_tensor(2.0, TensorOptions(DType::Float64))).dtype() == DType::Float16);
  const Tensor i32 = tensor(std::vector<int64_t>{1, 2}).to(DType::Int32);
  const Tensor wide = scalar_tensor((int64_t{1} << 32) + 5);
  CHECK(add(i32, wide).dtype() == DType::Int32);
  CHECK(add(i32, wide).to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{6, 7});
  CHECK(where(tensor(std::vector<bool>{true, false}), wide, i32).to(DType::Int64).to_vector<int64_t>() ==
        std::vector<int64_t>{5, 2});

  // In place: the result dtype is self's, and the 0-d operand is taken in it.
  Tensor y = f16.clone();
  y.sub_(tenth);
  CHECK(y.to(DType::Float32).to_vector<float>() == std::vector<float>{0, 0});
  y = f16.clone();
  y.mul_(scalar_tensor(10.0, TensorOptions(DType::Float64)));
  CHECK(y.dtype() == DType::Float16);
  y.div_(scalar_tensor(10.0));
  CHECK(y.dtype() == DType::Float16);

  // Gradients go back in each input's own dtype.
  Tensor a = full({2}, 3.0, TensorOptions(DType::Float16)).set_requires_grad(true);
  Tensor b = scalar_tensor(2.0).set_requires_grad(true);
  Tensor out = mul(a, b);
  CHECK(out.dtype() == DType::Float16);
  out.sum().backward();
  REQUIRE(a.grad().defined());
  REQUIRE(b.grad().defined());
  CHECK(a.grad().dtype() == DType::Float16);
  CHECK(b.grad().dtype() == DType::Float32);
  CHECK(a.grad().to(DType::Float32).to_vector<float>() == std::vector<float>{2, 2});
  CHECK(b.grad().item<float>() == 6.0f);
}

TEST_CASE("an integer tensor beside a 16-bit float one is rounded to it first, as PyTorch casts", "[dtype]") {
  // float16 holds integers exactly to 2048, bfloat16 to 256: 2049 is 2048 and 257 is 256 before
  // the op, so 2049 * 1.5 is 3072 (from 2049 itself, 3073.5 rounds to 3074).
  for (DType it : {DType::Int64, DType::Int32}) {
    INFO(dtype_name(it));
    const Tensor i = tensor(std::vector<int64_t>{2049, -2049, 257, 3}).to(it);
    for (DType ft : {DType::Float16, DType::BFloat16}) {
      INFO(dtype_name(ft));
      const Tensor f = tensor(std::vector<double>{1.5, 1.5, 1.5, 0.5}).to(ft);
      const Tensor i_f = i.to(ft);
      CHECK(i_f.to_vector<double>() != i.to_vector<double>());  // the rounding happens
      CHECK(mul(i, f).to_vector<double>() == mul(i_f, f).to_vector<double>());
      CHECK(mul(f, i).to_vector<double>() == mul(i_f, f).to_vector<double>());
      CHECK(add(i, f).to_vector<double>() == add(i_f, f).to_vector<double>());
      CHECK(div(i, f).to_vector<double>() == div(i_f, f).to_vector<double>());
      CHECK(eq(i, i_f).to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1, 1});
      Tensor in_place = f.clone();
      in_place.mul_(i);
      CHECK(in_place.to_vector<double>() == mul(i_f, f).to_vector<double>());
    }
  }
  CHECK(mul(tensor(std::vector<int64_t>{2049}), tensor(std::vector<double>{1.5}).to(DType::Float16)).item<double>() ==
        3072.0);
}

TEST_CASE("C++ scalars promote like Python numbers", "[dtype]") {
  Tensor bf = ones({2}, TensorOptions(DType::BFloat16));
  CHECK((bf * 0.5).dtype() == DType::BFloat16);
  Tensor i32 = ones({2}, TensorOptions(DType::Int32));
  CHECK((i32 * 0.5).dtype() == DType::Float32);
  CHECK((i32 + 2).dtype() == DType::Int32);
  CHECK((ones({2}, TensorOptions(DType::Bool)) + 1).dtype() == DType::Int64);
  CHECK((ones({2}, TensorOptions(DType::UInt8)) + 1).dtype() == DType::UInt8);
  CHECK((ones({2}, TensorOptions(DType::Float16)) + 3).dtype() == DType::Float16);
  CHECK((i32 / 2).dtype() == DType::Float32);  // true division
  CHECK(scalar_tensor(3).dtype() == DType::Int64);
  CHECK(scalar_tensor(3.0).dtype() == DType::Float32);
  CHECK(scalar_tensor(true).dtype() == DType::Bool);
}

// A float is true when it is not zero, NaN included, whatever its size: to(Bool) and logical_not
// once truncated it to an integer first, so 0.5 was false.
TEST_CASE("floats convert to bool by != 0, and integers by value", "[dtype]") {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(dt));
    const Tensor f = tensor(std::vector<double>{0.5, -0.25, 0.0, -0.0, 2.0, NAN, 1e-3}).to(dt);
    CHECK(f.to(DType::Bool).to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 0, 1, 1, 1});
    CHECK(logical_not(f).to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0});
  }
  // A float64 integer beyond float32's precision reaches int64 exactly, and conversions truncate.
  const Tensor d = tensor(std::vector<double>{9007199254740992.0 + 2.0, -2.7, 2.7});
  CHECK(d.to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{9007199254740994, -2, 2});
  // To a smaller integer type through int64: truncated, then wrapped (never a float stored straight
  // into uint8, undefined for -1).
  const Tensor w = tensor(std::vector<float>{-1.0f, 256.5f, 3.7f});
  CHECK(w.to(DType::UInt8).to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{255, 0, 3});
  const Tensor i = tensor(std::vector<int64_t>{0, 3, -1});
  CHECK(i.to(DType::Bool).to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1});
  CHECK(logical_not(i).to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0});
}

TEST_CASE("floats past an integer type's range, inf and NaN convert by one defined rule", "[dtype]") {
  // NaN is 0; the rest truncated and held to int64's range, then wrapped to the type. A plain C++
  // cast is undefined there (x86 gave INT64_MIN for all of them, a GPU saturates).
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> values{nan, inf, -inf, 1e19, -1e19, 0x1p63, -0x1p63, 1e10, 300.7, -1.5};
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  const std::vector<int64_t> as_int64{0, kMax, kMin, kMax, kMin, kMax, kMin, 10000000000, 300, -1};
  for (DType from : {DType::Float64, DType::Float32}) {
    INFO(dtype_name(from));
    const Tensor x = tensor(values).to(from);
    CHECK(x.to(DType::Int64).to_vector<int64_t>() == as_int64);
    // Strided, through the element-at-a-time path.
    const Tensor strided = stack({x, x}, 1).select(1, 1);
    CHECK(strided.to(DType::Int64).to_vector<int64_t>() == as_int64);
    std::vector<int64_t> as_int32, as_uint8;
    for (int64_t v : as_int64) {
      as_int32.push_back(static_cast<int32_t>(v));  // wrapped, as C++20 defines it
      as_uint8.push_back(static_cast<uint8_t>(v));
    }
    CHECK(x.to(DType::Int32).to(DType::Int64).to_vector<int64_t>() == as_int32);
    CHECK(x.to(DType::UInt8).to(DType::Int64).to_vector<int64_t>() == as_uint8);
  }
  // A Scalar converts by the same rule.
  for (size_t i = 0; i < values.size(); ++i) CHECK(Scalar(values[i]).to_int() == as_int64[i]);
}

namespace {

// The correctly rounded 16-bit pattern of a double (ties to even), from a table of every finite
// non-negative value of the format; the pattern after the largest (inf's) stands for the next power
// of two, as the rounding sees it.
struct Format16 {
  bool bf16;
  std::vector<double> values;  // by pattern, 0 .. inf's
  explicit Format16(bool b) : bf16(b) {
    const uint16_t inf = bf16 ? 0x7F80 : 0x7C00;
    for (uint32_t p = 0; p < inf; ++p) {
      values.push_back(bf16 ? static_cast<double>(detail::bf16_bits_to_float(static_cast<uint16_t>(p)))
                            : static_cast<double>(detail::half_bits_to_float(static_cast<uint16_t>(p))));
    }
    values.push_back(bf16 ? std::ldexp(1.0, 128) : 65536.0);
  }
  uint16_t round(double d) const {
    const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
    const double a = std::fabs(d);
    const size_t top = values.size() - 1;
    if (a >= values[top]) return sign | static_cast<uint16_t>(top);
    const size_t hi = static_cast<size_t>(std::lower_bound(values.begin(), values.end(), a) - values.begin());
    if (values[hi] == a || hi == 0) return sign | static_cast<uint16_t>(hi);
    const double up = values[hi] - a, down = a - values[hi - 1];
    const size_t k = up < down ? hi : down < up ? hi - 1 : (hi % 2 == 0 ? hi : hi - 1);
    return sign | static_cast<uint16_t>(k);
  }
  uint16_t bits(const Tensor& t, int64_t i) const {
    return bf16 ? t.data_ptr<BFloat16>()[i].bits : t.data_ptr<Half>()[i].bits;
  }
};

}  // namespace

// Through float32 first, a double or an integer was rounded twice, and a first rounding onto a tie
// of the 16-bit format could end on the wrong side: 1 + 2^-11 + 2^-40 became float16's 1,
// 65519.99999 its inf, 2^25 + 2^17 + 1 bfloat16's 2^25.
TEST_CASE("Half and BFloat16: doubles and integers are rounded once, correctly", "[dtype]") {
  for (bool bf16 : {false, true}) {
    const Format16 format(bf16);
    const DType dt = bf16 ? DType::BFloat16 : DType::Float16;
    INFO(dtype_name(dt));
    // Every midpoint between neighbours, and just off it either way, at both signs.
    std::vector<double> ds;
    for (size_t k = 0; k + 1 < format.values.size(); ++k) {
      const double m = (format.values[k] + format.values[k + 1]) / 2;
      for (double d : {m, m + m * 0x1p-40, m - m * 0x1p-40, std::nextafter(m, 0.0), std::nextafter(m, 1e300)}) {
        ds.push_back(d);
        ds.push_back(-d);
      }
    }
    ds.push_back(std::ldexp(1.0, -25) + std::ldexp(1.0, -60));
    ds.push_back(65519.99999);
    ds.push_back(1e300);
    ds.push_back(-1e300);
    const Tensor t = tensor(ds).to(dt);
    int64_t bad = 0;
    for (size_t i = 0; i < ds.size(); ++i) {
      const uint16_t want = format.round(ds[i]);
      if (format.bits(t, static_cast<int64_t>(i)) != want && bad++ < 5) {
        FAIL_CHECK(std::hexfloat << ds[i] << ": got " << std::hex << format.bits(t, static_cast<int64_t>(i))
                                 << ", correctly rounded " << want);
      }
    }
    CHECK(bad == 0);
    // Integers: midpoints between neighbouring integer values of the format and one off them, up to
    // int64's range (past 2^53, where an int64 is not a double either).
    std::vector<int64_t> ns;
    for (size_t k = 0; k + 1 < format.values.size(); ++k) {
      const double lo = format.values[k], hi = format.values[k + 1];
      if (lo < 1 || hi > 0x1p62 || hi - lo < 2) continue;
      const int64_t m = static_cast<int64_t>(lo) + static_cast<int64_t>((hi - lo) / 2);
      for (int64_t n : {m, m + 1, m - 1}) {
        ns.push_back(n);
        ns.push_back(-n);
      }
    }
    ns.push_back(INT64_MAX);
    ns.push_back(INT64_MIN);
    for (DType src : {DType::Int64, DType::Int32}) {
      std::vector<int64_t> use;
      for (int64_t n : ns) {
        if (src == DType::Int64 || (n >= INT32_MIN && n <= INT32_MAX)) use.push_back(n);
      }
      const Tensor u = tensor(use).to(src).to(dt);
      int64_t wrong = 0;
      for (size_t i = 0; i < use.size(); ++i) {
        // The reference in double: exact below 2^53; above, the midpoint test needs the exact value,
        // which long double (64-bit significand on x86-64) holds.
        const long double exact = static_cast<long double>(use[i]);
        uint16_t want = format.round(static_cast<double>(exact));
        if (static_cast<long double>(static_cast<double>(exact)) != exact) {
          // The double rounding of `exact` may have landed on a midpoint: decide by the exact value.
          const uint16_t a = format.round(std::nextafter(static_cast<double>(exact), 0.0));
          const uint16_t b = format.round(std::nextafter(static_cast<double>(exact), 1e300 * (use[i] < 0 ? -1 : 1)));
          want = static_cast<double>(exact) > 0 ? (exact > static_cast<double>(exact) ? b : a)
                                                : (exact < static_cast<double>(exact) ? b : a);
        }
        if (format.bits(u, static_cast<int64_t>(i)) != want && wrong++ < 5) {
          FAIL_CHECK(dtype_name(src) << " " << use[i] << ": got " << std::hex << format.bits(u, static_cast<int64_t>(i))
                                     << ", correctly rounded " << want);
        }
      }
      CHECK(wrong == 0);
    }
    // Fills take the same path: full() with a double and with an int64. float16's integers are
    // exact in float32, so only bfloat16 has a double rounding to get wrong; float16's past 65504
    // overflow it and are refused as a fill (a conversion above rounds them to inf).
    const double x = bf16 ? 1.0 + 0x1p-8 + 0x1p-40 : 1.0 + 0x1p-11 + 0x1p-40;
    CHECK(format.bits(full({1}, x, TensorOptions(dt)), 0) == format.round(x));
    const int64_t n = bf16 ? (int64_t{1} << 25) + (int64_t{1} << 17) + 1 : 32768 + 16 + 1;
    CHECK(format.bits(full({1}, n, TensorOptions(dt)), 0) == format.round(static_cast<double>(n)));
    if (!bf16) CHECK_THROWS_WITH(full({1}, int64_t{65536}, TensorOptions(dt)), Catch::Contains("without overflow"));
  }
}

// Integer arithmetic wraps modulo 2^64, as PyTorch's; in C++ a signed overflow is undefined (the
// sanitized build stops at it), so the kernels compute through uint64_t. Both devices share the math
// (kernels/elementwise_math.h).
TEST_CASE("int64 add, sub, mul, neg, abs and pow wrap modulo 2^64", "[dtype]") {
  const int64_t max = INT64_MAX, min = INT64_MIN;
  const auto vals = [](const Tensor& t) { return t.to_vector<int64_t>(); };
  const Tensor a = tensor(std::vector<int64_t>{max, min, 3});
  const Tensor one = tensor(std::vector<int64_t>{1, 1, 1});
  CHECK(vals(add(a, one)) == std::vector<int64_t>{min, min + 1, 4});
  CHECK(vals(sub(tensor(std::vector<int64_t>{0, 0, 0}), a)) == std::vector<int64_t>{min + 1, min, -3});
  CHECK(vals(mul(a, tensor(std::vector<int64_t>{2, -1, 2}))) == std::vector<int64_t>{-2, min, 6});
  CHECK(vals(neg(a)) == std::vector<int64_t>{min + 1, min, -3});
  CHECK(vals(abs(a)) == std::vector<int64_t>{max, min, 3});
  // pow by squaring: 65536^2 fits, the square after it would not (it overflowed before the loop
  // ended); 3^41 wraps as repeated multiplication does.
  CHECK(vals(pow(tensor(std::vector<int64_t>{65536, -65536}), 2)) ==
        std::vector<int64_t>{int64_t{1} << 32, int64_t{1} << 32});
  int64_t p3 = 1;
  for (int i = 0; i < 41; ++i) p3 = static_cast<int64_t>(static_cast<uint64_t>(p3) * 3u);
  CHECK(vals(pow(tensor(std::vector<int64_t>{3}), 41)) == std::vector<int64_t>{p3});
  // An alpha of INT64_MIN negated for sub wraps to itself: x - INT64_MIN * y.
  CHECK(vals(sub(tensor(std::vector<int64_t>{5}), tensor(std::vector<int64_t>{1}), Scalar(min))) ==
        std::vector<int64_t>{static_cast<int64_t>(5u + (uint64_t{1} << 63))});
  CHECK(vals(sub(tensor(std::vector<int64_t>{0}), Scalar(min))) == std::vector<int64_t>{min});
  // int32 wraps modulo 2^32.
  const Tensor i32 = tensor(std::vector<int64_t>{INT32_MAX}).to(DType::Int32);
  CHECK(add(i32, i32.clone()).to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{-2});
}

// neg flips a float's sign bit and abs clears it, as IEEE 754 (and PyTorch) define them: neg(0) is
// -0 and abs(-0) is +0, which 0 - x and a x < 0 test get wrong. Both devices share the math
// (kernels/elementwise_math.h); this runs the CPU's.
TEST_CASE("neg and abs of signed zeros, in every float dtype", "[dtype]") {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(dt));
    const Tensor z = tensor(std::vector<double>{0.0, -0.0}).to(dt);
    const std::vector<double> n = neg(z).to_vector_double(), a = abs(z).to_vector_double();
    CHECK(std::signbit(n[0]));
    CHECK_FALSE(std::signbit(n[1]));
    CHECK_FALSE(std::signbit(a[0]));
    CHECK_FALSE(std::signbit(a[1]));
    CHECK(a == std::vector<double>{0.0, 0.0});
    // NaN stays NaN; infinities flip and fold.
    const double inf = std::numeric_limits<double>::infinity();
    const Tensor special = tensor(std::vector<double>{inf, -inf, std::nan("")}).to(dt);
    const std::vector<double> ns = neg(special).to_vector_double(), as = abs(special).to_vector_double();
    CHECK(ns[0] == -inf);
    CHECK(ns[1] == inf);
    CHECK(std::isnan(ns[2]));
    CHECK(as[0] == inf);
    CHECK(as[1] == inf);
    CHECK(std::isnan(as[2]));
  }
}

// An integer alpha past 2^53 is exact: the kernels take alpha as a double, so such an alpha scales
// the operand first (2^53 + 1 was 2^53; INT64_MAX was 2^63, an undefined cast back to int64).
TEST_CASE("add and sub with an int64 alpha past 2^53 are exact", "[dtype]") {
  const int64_t big = (int64_t{1} << 53) + 1;
  const Tensor zero = tensor(std::vector<int64_t>{0}), one = tensor(std::vector<int64_t>{1});
  CHECK(add(zero, one, Scalar(big)).to_vector<int64_t>() == std::vector<int64_t>{big});
  CHECK(add(zero, one, Scalar(int64_t{INT64_MAX})).to_vector<int64_t>() == std::vector<int64_t>{INT64_MAX});
  CHECK(sub(zero, one, Scalar(big)).to_vector<int64_t>() == std::vector<int64_t>{-big});
  Tensor acc = tensor(std::vector<int64_t>{5});
  acc.add_(one, Scalar((int64_t{1} << 60) + 1));
  CHECK(acc.to_vector<int64_t>() == std::vector<int64_t>{(int64_t{1} << 60) + 6});
  acc.sub_(one, Scalar((int64_t{1} << 60) + 1));
  CHECK(acc.to_vector<int64_t>() == std::vector<int64_t>{5});
  // A broadcast operand, and a bool one (scaled in the result's dtype, int32 here).
  const Tensor row = tensor(std::vector<int64_t>{1, 2});
  CHECK(add(tensor(std::vector<int64_t>{0, 0, 0, 0}, {2, 2}), row, Scalar(big)).to_vector<int64_t>() ==
        std::vector<int64_t>{big, 2 * big, big, 2 * big});
  const Tensor flags = tensor(std::vector<bool>{true, false});
  const Tensor r = add(tensor(std::vector<int64_t>{1, 1}).to(DType::Int32), flags, Scalar(int64_t{1} << 54));
  CHECK(r.dtype() == DType::Int32);
  CHECK(r.to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{1, 1});  // 2^54 wraps to 0 in int32
}

// A bool filled with a float is whether the float is not 0, as a float cast to bool (0.5 was
// truncated to the integer 0 first: false); a float32 filled with an int64 past 2^53 is rounded once.
TEST_CASE("full of bool with a float, and of float32 with a wide int64", "[dtype]") {
  const auto bools = [](const Tensor& t) { return t.to(DType::Int64).to_vector<int64_t>(); };
  const TensorOptions b(DType::Bool);
  CHECK(bools(full({2}, 0.5, b)) == std::vector<int64_t>{1, 1});
  CHECK(bools(full({1}, -0.25, b)) == std::vector<int64_t>{1});
  CHECK(bools(full({1}, NAN, b)) == std::vector<int64_t>{1});
  CHECK(bools(full({1}, 0.0, b)) == std::vector<int64_t>{0});
  CHECK(bools(full({1}, -0.0, b)) == std::vector<int64_t>{0});
  CHECK(bools(full_like(zeros({1}, b), 0.5)) == std::vector<int64_t>{1});
  CHECK(bools(scalar_tensor(0.5, b)) == std::vector<int64_t>{1});
  CHECK(bools(full({1}, 2, b)) == std::vector<int64_t>{1});
  // 2^60 + 2^36 + 1: through a double it is 2^60 + 2^36, a float32 tie, rounded to even (2^60); the
  // value itself is above the tie, and rounds up, as the int64 tensor's conversion does.
  const int64_t n = (int64_t{1} << 60) + (int64_t{1} << 36) + 1;
  const float want = tensor(std::vector<int64_t>{n}).to(DType::Float32).item<float>();
  CHECK(static_cast<double>(want) == 0x1p60 + 0x1p37);
  CHECK(full({1}, n, TensorOptions(DType::Float32)).item<float>() == want);
  CHECK(zeros({1}).fill_(n).item<float>() == want);
  // The same for a scalar operand (rounded once in the kernels' scalar_as), and a double scalar
  // that is an integer past 2^53 rounds as it always did.
  CHECK(add(zeros({1}), Scalar(n)).item<float>() == want);
  CHECK(masked_fill(zeros({1}), ones({1}, DType::Bool), Scalar(n)).item<float>() == want);
  CHECK(mul(ones({1}), Scalar(0x1p60 + 0x1p36)).item<float>() == 0x1p60f);
}

// A scalar compared with a float16 or bfloat16 tensor is that dtype's value of it, as PyTorch takes
// it (0.1 was float32's 0.1, which no float16 equals, so x.fill_(0.1) == 0.1 was false), and where
// and masked_fill store what a fill stores: 1 + 2^-11 + 2^-40 through float32 was float16's tie 1 +
// 2^-11, rounded to even (1); the value is above the tie, and rounds up to 1 + 2^-10. A value past
// the dtype's largest finite one is, as in PyTorch, refused by the fills (full, fill_, masked_fill)
// and inf to where and the comparisons, which convert it as an operand.
TEST_CASE("a scalar compared with or stored into a 16-bit tensor is that dtype's value of it", "[dtype]") {
  const auto bits = [](const Tensor& t) {
    std::vector<int64_t> r;
    for (int64_t i = 0; i < t.numel(); ++i) {
      r.push_back(t.dtype() == DType::BFloat16 ? t.data_ptr<BFloat16>()[i].bits : t.data_ptr<Half>()[i].bits);
    }
    return r;
  };
  const auto flags = [](const Tensor& t) { return t.to(DType::Int64).to_vector<int64_t>(); };
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(dt));
    const double tie_above = dt == DType::Float16 ? 1 + 0x1p-11 + 0x1p-40 : 1 + 0x1p-8 + 0x1p-40;
    const double rounded = dt == DType::Float16 ? 1 + 0x1p-10 : 1 + 0x1p-7;
    const double big = dt == DType::Float16 ? 65520.0 : 1e300;  // 65520 rounds to float16's inf
    for (double v : {0.1, -1e-3, tie_above, big, -big}) {
      INFO(v);
      const bool overflows = std::fabs(v) == big;
      const Tensor x = full({2}, overflows ? std::copysign(INFINITY, v) : v, TensorOptions(dt));
      CHECK(flags(eq(x, v)) == std::vector<int64_t>{1, 1});
      CHECK(flags(ne(x, v)) == std::vector<int64_t>{0, 0});
      CHECK(flags(lt(x, v)) == std::vector<int64_t>{0, 0});
      CHECK(flags(le(x, v)) == std::vector<int64_t>{1, 1});
      CHECK(flags(gt(x, v)) == std::vector<int64_t>{0, 0});
      CHECK(flags(ge(x, v)) == std::vector<int64_t>{1, 1});
      const Tensor mask = tensor(std::vector<bool>{true, false});
      const Tensor z = zeros({2}, TensorOptions(dt));
      CHECK(bits(where(mask, Scalar(v), z)) == std::vector<int64_t>{bits(x)[0], 0});
      CHECK(bits(where(logical_not(mask), z, Scalar(v))) == std::vector<int64_t>{bits(x)[0], 0});
      Tensor y = z.clone();
      if (overflows) {
        CHECK_THROWS_WITH(full({2}, v, TensorOptions(dt)), Catch::Contains("full: value"));
        CHECK_THROWS_WITH(masked_fill(z, mask, v), Catch::Contains("masked_fill: value"));
        CHECK_THROWS_WITH(y.masked_fill_(mask, v), Catch::Contains("cannot be converted to"));
        CHECK_THROWS_WITH(y.fill_(v), Catch::Contains("fill_: value"));
        CHECK(bits(y) == std::vector<int64_t>{0, 0});  // untouched
        continue;
      }
      CHECK(bits(masked_fill(z, mask, v)) == std::vector<int64_t>{bits(x)[0], 0});
      y.masked_fill_(mask, v);
      CHECK(bits(y) == std::vector<int64_t>{bits(x)[0], 0});
    }
    CHECK(full({1}, tie_above, TensorOptions(dt)).to(DType::Float64).item<double>() == rounded);
    // A float a step off the 16-bit value is not equal to it.
    const Tensor one = ones({1}, TensorOptions(dt));
    CHECK(flags(eq(one, 1 + 0x1p-12)) == std::vector<int64_t>{1});  // rounds to 1 in both
    CHECK(flags(eq(one, rounded)) == std::vector<int64_t>{0});
    CHECK(flags(lt(one, rounded)) == std::vector<int64_t>{1});
  }
  // Other dtypes as before: float32 takes float32's value, an integer tensor against a float
  // compares in float32, and float64 takes the double.
  CHECK(flags(eq(full({1}, 0.1), 0.1)) == std::vector<int64_t>{1});
  CHECK(flags(eq(zeros({1}, DType::Int64), 0.1)) == std::vector<int64_t>{0});
  CHECK(flags(eq(full({1}, 0.1, TensorOptions(DType::Float64)), 0.1)) == std::vector<int64_t>{1});
  CHECK(flags(eq(full({1}, 0.1, TensorOptions(DType::Float64)), static_cast<double>(0.1f))) == std::vector<int64_t>{0});
}

// int64 arange and clamp with values past 2^53, which a double (the kernels' start, step and
// bounds) does not hold: exact, as PyTorch's integer arange and clamp. arange from 2^60 to 2^60 + 10
// counted 0 elements (the ends were one double); clamp to 2^60 + 1 clamped to 2^60.
TEST_CASE("int64 arange and clamp past 2^53 are exact", "[dtype]") {
  const int64_t b = int64_t{1} << 60;
  const auto vals = [](const Tensor& t) { return t.to_vector<int64_t>(); };
  CHECK(vals(arange(b, b + 5, 1)) == std::vector<int64_t>{b, b + 1, b + 2, b + 3, b + 4});
  CHECK(vals(arange(b + 10, b, -3)) == std::vector<int64_t>{b + 10, b + 7, b + 4, b + 1});
  CHECK(vals(arange(-b, -b + 5, 2)) == std::vector<int64_t>{-b, -b + 2, -b + 4});
  CHECK(vals(arange(INT64_MAX - 2, INT64_MAX, 1)) == std::vector<int64_t>{INT64_MAX - 2, INT64_MAX - 1});
  CHECK(vals(arange(0, 3 * b, b)) == std::vector<int64_t>{0, b, 2 * b});
  CHECK(arange(b, b, 1).numel() == 0);
  CHECK(arange(b, b + 5, 1, TensorOptions(DType::Int32)).dtype() == DType::Int32);
  CHECK_THROWS_WITH(arange(b, b - 1, 1), Catch::Contains("arange") && Catch::Contains("points away"));
  CHECK_THROWS_AS(arange(INT64_MIN, INT64_MAX, 1), ShapeError);
  CHECK_THROWS_WITH(arange(INT64_MIN, INT64_MAX, 1), Catch::Contains("more elements than int64 can count"));
  // More than 2^53 elements: refused by the allocation (its indices came from arange again, which
  // recursed until the stack overflowed).
  CHECK_THROWS_WITH(arange(0, (int64_t{1} << 53) + 2, 1), Catch::Contains("arange"));

  const Tensor x = tensor(std::vector<int64_t>{b, b + 1, b + 2, b + 3, -b});
  CHECK(vals(clamp(x, Scalar(b + 1), Scalar(b + 2))) == std::vector<int64_t>{b + 1, b + 1, b + 2, b + 2, b + 1});
  CHECK(vals(clamp(x, std::nullopt, Scalar(b + 2))) == std::vector<int64_t>{b, b + 1, b + 2, b + 2, -b});
  CHECK(vals(clamp(x, Scalar(-b + 1), std::nullopt)) == std::vector<int64_t>{b, b + 1, b + 2, b + 3, -b + 1});
  Tensor y = x.clone();
  y.clamp_(Scalar(b + 1), Scalar(b + 2));
  CHECK(vals(y) == std::vector<int64_t>{b + 1, b + 1, b + 2, b + 2, b + 1});
  // Such a bound is past a narrower integer dtype's range: an Error, as PyTorch's checked bound
  // (2^60 was wrapped into the int32 result); a bound in range clamps as before.
  const Tensor i32 = tensor(std::vector<int64_t>{-5, 7}).to(DType::Int32);
  CHECK_THROWS_WITH(clamp(i32, Scalar(b), std::nullopt),
                    Catch::Contains("clamp: value 1152921504606846976 cannot be converted to int32"));
  CHECK_THROWS_WITH(clamp(i32, Scalar(-1), Scalar(-b)), Catch::Contains("int32 without overflow"));
  CHECK_THROWS_WITH(clamp(i32.to(DType::UInt8), Scalar(0), Scalar(256)), Catch::Contains("uint8"));
  CHECK(clamp(i32, Scalar(int64_t{INT32_MIN}), Scalar(0)).to_vector<int32_t>() == std::vector<int32_t>{-5, 0});
}
