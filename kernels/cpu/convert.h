// Bulk conversions between float32 and the 16-bit float types on the CPU, vectorized in the AVX2
// clone (KILN_CPU_CLONES). Half GEMMs widen their operands with them to run on OpenBLAS
// (kernels/cpu/matmul.cpp), the elementwise ops widen dense half operands a block at a time
// (kernels/cpu/elementwise_cpu.h), attention its half rows (kernels/cpu/attention.cpp) and im2col a
// convolution's dense half runs into float columns (kernels/cpu/im2col.cpp), max pooling its 16-bit
// planes, and batch norm and the GEMM epilogues their float16 runs in float blocks (below). The
// values are those of the types' own conversions: widening is exact, narrowing rounds to nearest
// even and keeps a NaN a NaN (kernels/half.h).
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

// Float blocks: a loop over float16 that reads its operands in place decodes every value in
// software, and where the CPU converts float16 in hardware it runs faster as the float32 loop over
// blocks widened in bulk, its results narrowed back (batch norm's planes, the GEMM epilogues' rows).
// in_float_blocks<T>() says whether a loop over T should; for_float_blocks(n, body) calls
// body(i, m) for the blocks [i, i + m) of a run of n; widen_block gives a block as floats.
constexpr int64_t kFloatBlock = 1024;  // float buffers of 4 KiB
template <typename T> bool in_float_blocks() {
  if constexpr (std::is_same_v<T, Half>) return hardware_half();
  return false;
}
template <typename F> void for_float_blocks(int64_t n, F&& body) {
  for (int64_t i = 0; i < n; i += kFloatBlock) body(i, n - i < kFloatBlock ? n - i : kFloatBlock);
}
// The block [i, i + m) of a run of T as floats, in buf; null (an absent operand) stays null.
template <typename T> const float* widen_block(const T* p, int64_t i, int64_t m, float* buf) {
  if (!p) return nullptr;
  widen_to_float(buf, p + i, dtype_of<T>(), m);
  return buf;
}

}  // namespace kiln::cpu
