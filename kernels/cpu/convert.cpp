// Bulk conversions between float32 and the 16-bit float types (kernels/cpu/convert.h).
#include "kernels/cpu/convert.h"

#include <algorithm>
#include <string>

#include "kernels/cpu/loops.h"
#include "kernels/error.h"

namespace kiln::cpu {
namespace {

template <typename T> KILN_CPU_CLONES void widen_run(float* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>(src[j]);
}
template <typename T> KILN_CPU_CLONES void narrow_run(T* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = T(src[j]);
}

[[noreturn]] void not_widening(const char* what, DType t) {
  throw DTypeError(std::string(what) + ": dtype " + dtype_name(t) + " is not float32, float16 or bfloat16");
}

}  // namespace

void widen_to_float(float* dst, const void* src, DType t, int64_t n) {
  switch (t) {
    case DType::Float32: std::copy_n(static_cast<const float*>(src), n, dst); return;
    case DType::Float16: return widen_run(dst, static_cast<const Half*>(src), n);
    case DType::BFloat16: return widen_run(dst, static_cast<const BFloat16*>(src), n);
    default: not_widening("widen_to_float", t);
  }
}

void narrow_from_float(void* dst, DType t, const float* src, int64_t n) {
  switch (t) {
    case DType::Float32: std::copy_n(src, n, static_cast<float*>(dst)); return;
    case DType::Float16: return narrow_run(static_cast<Half*>(dst), src, n);
    case DType::BFloat16: return narrow_run(static_cast<BFloat16*>(dst), src, n);
    default: not_widening("narrow_from_float", t);
  }
}

}  // namespace kiln::cpu
