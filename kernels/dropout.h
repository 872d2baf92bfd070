// Dropout. Element i (its logical row-major index) is kept iff the top 24 bits of Philox word
// (i & 1) * 2 of block i >> 1 at (seed, offset), read as a uniform u in [0, 1), satisfy u >= p:
// the same word random_cpu's uniform draws use. The test is an integer comparison against
// ceil(p * 2^24), so every backend agrees bit for bit. The mask is a pure function of the
// PhiloxState, so the backward regenerates it rather than storing one byte per element.
#pragma once

#include <cstdint>

#include "kernels/philox.h"
#include "kernels/kernel.h"
#include "kernels/strided.h"

namespace kiln {

// The 24-bit threshold: element kept iff (word >> 8) >= dropout_threshold(p). p in [0, 1].
uint32_t dropout_threshold(double p);

// out = in * mask / (1 - p) elementwise over out's (= in's) logical shape (any strides, same
// sizes, dtypes may differ; computed in double when out is float64, else float). Dropped elements
// are written as 0 (and p == 1 writes zeros). The same call with in = dout is the backward: for a
// fixed mask the op is linear in its input.
// The CUDA twin is bit for bit the same: the same logical element indices, Philox words and
// integer keep test, and the same float (double for a float64 output) multiply and rounding.
void dropout_cpu(const StridedArg& out, const StridedArg& in, double p, PhiloxState philox, const KernelContext& ctx);
void dropout_cuda(const StridedArg& out, const StridedArg& in, double p, PhiloxState philox,
                  const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(dropout);
}  // namespace kernels

}  // namespace kiln
