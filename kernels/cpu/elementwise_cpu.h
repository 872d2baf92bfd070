// What the CPU elementwise kernels (elementwise_unary.cpp, elementwise_binary.cpp,
// elementwise_where.cpp) share: the test for the typed contiguous loop, the widened blocks, and an
// operand's value in the compute type. Each op runs one of four loops: a typed loop when every
// operand is 1-D, unit-stride and already of the compute type (the compiler vectorizes it, in a
// baseline and an AVX2 clone: KILN_CPU_CLONES); for unary and binary ops computing in float, the
// same loop over blocks widened to float when every operand is 1-D and unit-stride but some are
// float16 or bfloat16 (a bfloat16 model's ops, autocast's casts); a typed strided loop, run by run of
// the innermost dim, when no operand needs a conversion (broadcasts and views); and a strided loop
// that casts on load and store for everything else.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"
#include "kernels/elementwise.h"

namespace kiln::cpu {

// Whether `a` is 1-D, unit-stride and of dtype t: the typed contiguous loop's operand.
inline bool dense_as(const StridedArg& a, DType t) { return a.dtype == t && a.ndim == 1 && a.strides[0] == 1; }

// Whether `a` is 1-D, unit-stride and of float32, float16 or bfloat16: the widened loop's operand.
inline bool dense_widens(const StridedArg& a) { return a.ndim == 1 && a.strides[0] == 1 && widens_to_float(a.dtype); }

// The widened loop's blocks: each op reads and writes a block through float buffers of this size
// (on the stack), so that it runs its typed float loop on them.
constexpr int64_t kWideBlock = 256;

// Float elements [i, i + n) of a dense_widens operand: its own when it is float32, else widened
// into buf (n <= kWideBlock).
inline const float* widened(const StridedArg& a, int64_t i, int64_t n, float* buf) {
  if (a.dtype == DType::Float32) return static_cast<const float*>(a.data) + i;
  widen_to_float(buf, static_cast<const char*>(a.data) + i * static_cast<int64_t>(element_size(a.dtype)), a.dtype, n);
  return buf;
}

// Calls block(o, i, n) for the blocks of out's elements [b0, e0), where the op writes the n floats
// of elements [i, i + n) to o: out's own memory when it is float32, else a buffer that is then
// rounded into out. Each block reads its inputs before any of its outputs is stored, so an op may
// write over its input (out == x), as the other loops allow.
template <typename F> void widened_blocks(const StridedArg& out, int64_t b0, int64_t e0, F&& block) {
  float buf[kWideBlock];
  const int64_t es = static_cast<int64_t>(element_size(out.dtype));
  for (int64_t i = b0; i < e0; i += kWideBlock) {
    const int64_t n = std::min(kWideBlock, e0 - i);
    float* o = out.dtype == DType::Float32 ? static_cast<float*>(out.data) + i : buf;
    block(o, i, n);
    if (o == buf) narrow_from_float(static_cast<char*>(out.data) + i * es, out.dtype, buf, n);
  }
}

// A run of `count` unit-stride elements of out from element `out_at`, the op reading x's run from
// element `x_at`, through float blocks: block(o, x, n) writes n floats to o from the n floats at x
// (x widened into a buffer unless it is float32; o a buffer rounded into out unless out is float32).
// The strided loops' runs take it when every operand converts to float.
template <typename F>
void widened_run(const StridedArg& out, int64_t out_at, const StridedArg& x, int64_t x_at, int64_t count, F&& block) {
  const auto shifted = [](const StridedArg& a, int64_t at) {
    StridedArg r = a;
    r.data = static_cast<char*>(a.data) + at * static_cast<int64_t>(element_size(a.dtype));
    return r;
  };
  const StridedArg o = shifted(out, out_at), xs = shifted(x, x_at);
  float xbuf[kWideBlock];
  widened_blocks(o, 0, count, [&](float* ob, int64_t i, int64_t m) { block(ob, widened(xs, i, m, xbuf), m); });
}

// An operand's element at `off` (or its scalar) in the compute type C.
template <typename C> C operand_value(const Operand& o, int64_t off) {
  return o.is_scalar ? scalar_as<C>(o) : load_as<C>(o.arg.data, o.arg.dtype, off);
}

}  // namespace kiln::cpu
