// The element types kiln knows, shared by kernels (which cast on load) and core (which promotes).
// float64 exists for the CPU only: it backs gradcheck and the float64 references of the tests.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/half.h"

namespace kiln {

enum class DType : uint8_t { Float32, Float16, BFloat16, Float64, Int32, Int64, UInt8, Bool };

inline constexpr int kNumDTypes = 8;

constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::Float64: return 8;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
    case DType::UInt8: return 1;
    case DType::Bool: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 || t == DType::Float64;
}
constexpr bool is_integral(DType t, bool include_bool) {
  return t == DType::Int32 || t == DType::Int64 || t == DType::UInt8 || (include_bool && t == DType::Bool);
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float64: return "float64";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt8: return "uint8";
    case DType::Bool: return "bool";
  }
  return "?";
}

// C++ type of each dtype, for kernels that switch once and then run typed loops.
template <DType T> struct DTypeTraits;
template <> struct DTypeTraits<DType::Float32> { using type = float; };
template <> struct DTypeTraits<DType::Float16> { using type = Half; };
template <> struct DTypeTraits<DType::BFloat16> { using type = BFloat16; };
template <> struct DTypeTraits<DType::Float64> { using type = double; };
template <> struct DTypeTraits<DType::Int32> { using type = int32_t; };
template <> struct DTypeTraits<DType::Int64> { using type = int64_t; };
template <> struct DTypeTraits<DType::UInt8> { using type = uint8_t; };
template <> struct DTypeTraits<DType::Bool> { using type = bool; };

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<Half>() { return DType::Float16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BFloat16; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::UInt8; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

// Calls f.template operator()<T>() with T the C++ type of `t`.
template <typename F> decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f.template operator()<float>();
    case DType::Float16: return f.template operator()<Half>();
    case DType::BFloat16: return f.template operator()<BFloat16>();
    case DType::Float64: return f.template operator()<double>();
    case DType::Int32: return f.template operator()<int32_t>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::UInt8: return f.template operator()<uint8_t>();
    case DType::Bool: break;
  }
  return f.template operator()<bool>();
}

// The dtype of saved statistics (mean, rstd) for an activation dtype: float64 stays float64,
// everything else is float32.
constexpr DType norm_stat_dtype(DType activation) {
  return activation == DType::Float64 ? DType::Float64 : DType::Float32;
}

}  // namespace kiln
