// Bulk conversions between float32 and the 16-bit float types (kernels/cpu/convert.h).
#include "kernels/cpu/convert.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <type_traits>

#include "kernels/cpu/loops.h"
#include "kernels/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define KILN_HAVE_F16C_PATH 1
#endif

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

#if defined(KILN_HAVE_F16C_PATH)
// float16 through the CPU's F16C instructions: 8 values an instruction, where the AVX2 clone of the
// widening loop above spends 59 instructions on 16. Rounding is to nearest even, named in the
// instruction; neither direction changed with MXCSR's flush-to-zero and denormals-are-zero bits set
// (checked on an Intel Xeon).
// Two results differ from kernels/half.h's and are put right: widening makes a signalling NaN quiet
// (kiln keeps its bits), and narrowing keeps a NaN's payload (kiln gives the quiet NaN 0x7E00 with
// the sign). The last n % 8 values take the scalar conversions.
__attribute__((target("avx2,f16c"))) void widen_half_f16c(float* __restrict dst, const uint16_t* __restrict src,
                                                           int64_t n) {
  const __m256i magnitude = _mm256_set1_epi32(0x7FFF), infinity = _mm256_set1_epi32(0x7C00);
  const __m256i sign = _mm256_set1_epi32(0x8000), nan_exponent = _mm256_set1_epi32(0x70000000);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j));
    const __m256i h32 = _mm256_cvtepu16_epi32(h);
    const __m256i mag = _mm256_and_si256(h32, magnitude);
    const __m256i is_nan = _mm256_cmpgt_epi32(mag, infinity);
    // kiln's NaN: the sign, an all-ones exponent and the payload as it is (mag << 13 puts 0x1F at
    // bits 23-27; the exponent's three high bits are or-ed in).
    const __m256i nan = _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(h32, sign), 16),
                                                        _mm256_slli_epi32(mag, 13)),
                                        nan_exponent);
    const __m256 f = _mm256_blendv_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(nan), _mm256_castsi256_ps(is_nan));
    _mm256_storeu_ps(dst + j, f);
  }
  for (; j < n; ++j) dst[j] = detail::half_bits_to_float(src[j]);
}
__attribute__((target("avx2,f16c"))) void narrow_half_f16c(uint16_t* __restrict dst, const float* __restrict src,
                                                           int64_t n) {
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF), infinity = _mm256_set1_epi32(0x7F800000);
  const __m256i sign = _mm256_set1_epi32(0x8000), quiet_nan = _mm256_set1_epi32(0x7E00);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_loadu_ps(src + j);
    const __m256i xi = _mm256_castps_si256(x);
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(xi, magnitude), infinity);
    const __m256i nan = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(xi, 16), sign), quiet_nan);
    // To 16-bit lanes: the masks (0 or -1) pack with signed saturation, the NaNs (below 2^16) unsigned.
    const __m128i is_nan16 = _mm_packs_epi32(_mm256_castsi256_si128(is_nan), _mm256_extracti128_si256(is_nan, 1));
    const __m128i nan16 = _mm_packus_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), _mm_blendv_epi8(h, nan16, is_nan16));
  }
  for (; j < n; ++j) dst[j] = detail::float_to_half_bits(src[j]);
}

// AVX2 through the compiler's CPU check (which also asks whether the OS saves the ymm registers),
// F16C through CPUID leaf 1 (clang's check does not know the name "f16c").
bool cpu_has_f16c() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#else
bool cpu_has_f16c() { return false; }
#endif

std::atomic<bool>& f16c_on() {
  static std::atomic<bool> on{cpu_has_f16c()};
  return on;
}

void widen_half(float* dst, const uint16_t* src, int64_t n) {
#if defined(KILN_HAVE_F16C_PATH)
  if (f16c_on().load(std::memory_order_relaxed)) return widen_half_f16c(dst, src, n);
#endif
  widen_run<Half>(dst, src, n);
}
void narrow_half(uint16_t* dst, const float* src, int64_t n) {
#if defined(KILN_HAVE_F16C_PATH)
  if (f16c_on().load(std::memory_order_relaxed)) return narrow_half_f16c(dst, src, n);
#endif
  narrow_run<Half>(dst, src, n);
}

[[noreturn]] void not_widening(const char* what, DType t) {
  throw DTypeError(std::string(what) + ": dtype " + dtype_name(t) + " is not float32, float16 or bfloat16");
}

}  // namespace

void widen_to_float(float* dst, const void* src, DType t, int64_t n) {
  switch (t) {
    case DType::Float32: std::copy_n(static_cast<const float*>(src), n, dst); return;
    case DType::Float16: return widen_half(dst, static_cast<const uint16_t*>(src), n);
    case DType::BFloat16: return widen_run<BFloat16>(dst, static_cast<const uint16_t*>(src), n);
    default: not_widening("widen_to_float", t);
  }
}

void narrow_from_float(void* dst, DType t, const float* src, int64_t n) {
  switch (t) {
    case DType::Float32: std::copy_n(src, n, static_cast<float*>(dst)); return;
    case DType::Float16: return narrow_half(static_cast<uint16_t*>(dst), src, n);
    case DType::BFloat16: return narrow_run<BFloat16>(static_cast<uint16_t*>(dst), src, n);
    default: not_widening("narrow_from_float", t);
  }
}

bool hardware_half() { return f16c_on().load(std::memory_order_relaxed); }

bool set_hardware_half(bool on) { return f16c_on().exchange(on && cpu_has_f16c()); }

}  // namespace kiln::cpu
