// Bulk conversions between float32 and the 16-bit float types on the CPU, vectorized in the AVX2
// clone (KILN_CPU_CLONES). Half GEMMs widen their operands with them to run on OpenBLAS
// (kernels/cpu/matmul.cpp), the elementwise ops widen dense half operands a block at a time
// (kernels/cpu/elementwise_cpu.h), attention its half rows (kernels/cpu/attention.cpp) and im2col
// a convolution's dense half runs into float columns (kernels/cpu/im2col.cpp). The values are those
// of the types' own conversions: widening is exact, narrowing rounds to nearest even and keeps a
// NaN a NaN (kernels/half.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/dtype.h"

namespace kiln::cpu {

// Whether T is one of the 16-bit float types, whose dense runs these functions widen and narrow.
template <typename T> constexpr bool is_16bit_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Whether every value of dtype t is a float32: float32, float16 and bfloat16.
inline bool widens_to_float(DType t) { return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16; }

// dst[j] = float(src[j]) for j < n, src of dtype t (widens_to_float(t)).
void widen_to_float(float* dst, const void* src, DType t, int64_t n);
// dst[j] = src[j] converted to dtype t (widens_to_float(t)) for j < n.
void narrow_from_float(void* dst, DType t, const float* src, int64_t n);

// Whether float16 converts with the CPU's F16C instructions (x86-64 CPUs with AVX2 and F16C), with
// the same results as the portable loops; set_hardware_half(false) makes it take those loops (as a
// CPU without F16C does), and true takes F16C where the CPU has it. Returns the previous setting.
bool hardware_half();
bool set_hardware_half(bool on);

}  // namespace kiln::cpu
