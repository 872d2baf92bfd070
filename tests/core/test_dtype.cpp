// DTypes: kiln's own Half/BFloat16 conversions (round to nearest even) and PyTorch's promotion.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "core/kiln.h"

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
