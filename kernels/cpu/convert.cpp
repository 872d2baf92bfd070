// Bulk conversions between float32 and the 16-bit float types (kernels/cpu/convert.h).
#include "kernels/cpu/convert.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/cpu/loops.h"
#include "kernels/error.h"

namespace kiln::cpu {
namespace {

// The loops read and write the 16-bit patterns (uint16_t), not the Half and BFloat16 structs: GCC
// does not vectorize a loop of struct stores (the float16 loops stayed scalar).
template <typename T>
KILN_CPU_CLONES void widen_run(float* __restrict dst, const uint16_t* __restrict src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    if constexpr (std::is_same_v<T, Half>) {
      dst[j] = detail::half_bits_to_float(src[j]);
    } else {
      dst[j] = detail::bf16_bits_to_float(src[j]);
    }
  }
}
template <typename T>
KILN_CPU_CLONES void narrow_run(uint16_t* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    if constexpr (std::is_same_v<T, Half>) {
      dst[j] = detail::float_to_half_bits(src[j]);
    } else {
      dst[j] = detail::float_to_bf16_bits(src[j]);
    }
  }
}

[[noreturn]] void not_widening(const char* what, DType t) {
  throw DTypeError(std::string(what) + ": dtype " + dtype_name(t) + " is not float32, float16 or bfloat16");
}

}  // namespace

void widen_to_float(float* dst, const void* src, DType t, int64_t n) {
  switch (t) {
    case DType::Float32: std::copy_n(static_cast<const float*>(src), n, dst); return;
    case DType::Float16: return widen_run<Half>(dst, static_cast<const uint16_t*>(src), n);
    case DType::BFloat16: return widen_run<BFloat16>(dst, static_cast<const uint16_t*>(src), n);
    default: not_widening("widen_to_float", t);
  }
}

void narrow_from_float(void* dst, DType t, const float* src, int64_t n) {
  switch (t) {
    case DType::Float32: std::copy_n(src, n, static_cast<float*>(dst)); return;
    case DType::Float16: return narrow_run<Half>(static_cast<uint16_t*>(dst), src, n);
    case DType::BFloat16: return narrow_run<BFloat16>(static_cast<uint16_t*>(dst), src, n);
    default: not_widening("narrow_from_float", t);
  }
}

}  // namespace kiln::cpu
