// What the CPU elementwise kernels (elementwise_unary.cpp, elementwise_binary.cpp,
// elementwise_where.cpp) share: the test for the typed contiguous loop, and an operand's value in
// the compute type. Each op runs one of three loops: a typed loop when every
// operand is 1-D, unit-stride and already of the compute type (the compiler vectorizes it, in a
// baseline and an AVX2 clone: KILN_CPU_CLONES); a typed strided loop, run by run of the innermost
// dim, when no operand needs a conversion (broadcasts and views); and a strided loop that casts on
// load and store for everything else.
#pragma once

#include <cstdint>

#include "kernels/cpu/loops.h"
#include "kernels/elementwise.h"

namespace kiln::cpu {

// Whether `a` is 1-D, unit-stride and of dtype t: the typed contiguous loop's operand.
inline bool dense_as(const StridedArg& a, DType t) { return a.dtype == t && a.ndim == 1 && a.strides[0] == 1; }

// An operand's element at `off` (or its scalar) in the compute type C.
template <typename C> C operand_value(const Operand& o, int64_t off) {
  return o.is_scalar ? static_cast<C>(o.scalar) : load_as<C>(o.arg.data, o.arg.dtype, off);
}

}  // namespace kiln::cpu
