// tril and triu: keep the lower or upper triangle of the last two dims, zero the rest. Input and
// output share one dtype, so elements are copied as raw bits of their size.
#pragma once

#include <cstdint>

#include "kernels/kernel.h"
#include "kernels/strided.h"

namespace kiln {

// Over the last two dims (rows i, cols j): keeps j - i <= k (tril, upper = false) or j - i >= k
// (triu); out and in have the same sizes and dtype, any strides.
void triangle_cpu(const StridedArg& out, const StridedArg& in, int64_t k, bool upper, const KernelContext& ctx);
void triangle_cuda(const StridedArg& out, const StridedArg& in, int64_t k, bool upper, const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(triangle);
}  // namespace kernels

}  // namespace kiln
