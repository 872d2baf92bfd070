// Fills of new tensors: a constant, or an arithmetic sequence. Both go through the elementwise
// cast-on-store path, so every dtype gets exactly the value a cast of the double would give.
#pragma once

#include "kernels/dtype.h"
#include "kernels/half.h"
#include "kernels/kernel.h"
#include "kernels/strided.h"

namespace kiln {

// The value a fill of `dtype` computes with (in float32 for the 16-bit dtypes): for float16 and
// bfloat16, the float that rounds to the scalar's correctly rounded value (kernels/half.h: rounded to
// odd, from `int_value` when that is the scalar and past 2^53); for float32, an integer past 2^53
// rounded once from `int_value` (through `value`, a double, it was rounded twice); otherwise `value`.
inline double fill_compute_value(DType dtype, double value, int64_t int_value) {
  const bool wide_integer = detail::is_wide_integer(value, int_value);
  if (dtype == DType::Float32 && wide_integer) return static_cast<double>(static_cast<float>(int_value));
  if (dtype != DType::Float16 && dtype != DType::BFloat16) return value;
  if (wide_integer) return detail::float_for_16bit(int_value);  // not a double exactly
  return detail::float_for_16bit(value);
}

// Fills `out` with a value (cast to its dtype): `value` for floating dtypes, `int_value` exactly for
// integer ones (the two are one scalar, as Operand carries it). The CUDA twin turns a fill of +0
// into a memset.
void fill_cpu(const StridedArg& out, double value, int64_t int_value, const KernelContext& ctx);
void fill_cuda(const StridedArg& out, double value, int64_t int_value, const KernelContext& ctx);
// out[i] = start + i * step over the logical order of `out`: int64 arithmetic for integer outputs,
// double rounded once per operation (no fused multiply-add) for float ones, on both devices.
void arange_cpu(const StridedArg& out, double start, double step, const KernelContext& ctx);
void arange_cuda(const StridedArg& out, double start, double step, const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(fill);
KILN_KERNEL(arange);
}  // namespace kernels

}  // namespace kiln
