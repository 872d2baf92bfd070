// Indexing kernels: index_select, gather and scatter_add. Indices are int64 StridedArgs; an index
// out of range is an IndexError naming the op, the index and the size (CPU: at once; CUDA: through
// the device error record, at the next synchronizing call).
#pragma once

#include <cstdint>

#include "kernels/kernel.h"
#include "kernels/strided.h"

namespace kiln {

// Device-side index checks (docs/architecture.md section 7): a CUDA kernel that meets an index out of
// range skips the read, and the first such event is recorded here; the host turns it into an
// IndexError at its next synchronizing call (cuda::raise_device_errors).
// Multinomial is not an index check but shares the record: an invalid row of weights (see
// multinomial_cuda in kernels/random.h: index = the row, size = a MultinomialRowError code).
enum class IndexCheckOp : int32_t { None = 0, IndexSelect, Gather, ScatterAdd, Embedding, CrossEntropy, Multinomial };
struct DeviceErrorRecord {
  int32_t op;      // IndexCheckOp; 0 while nothing went wrong
  int32_t pad;
  int64_t index;   // the offending value
  int64_t size;    // the size it had to be below
};
const char* index_check_op_name(IndexCheckOp op);

// A 0-d operand seen as [1], so that `dim` = 0 always names a real dimension (both twins).
inline StridedArg at_least_1d(const StridedArg& a) {
  if (a.ndim > 0) return a;
  StridedArg b = a;
  b.ndim = 1;
  b.sizes[0] = 1;
  b.strides[0] = 0;
  return b;
}

// index_select and gather move an element's bits unchanged when out and in share a dtype (a NaN's
// payload too); across dtypes they convert through double for a float output, through int64
// otherwise.
// out = in with dim `dim` replaced by in.index_select(dim, index); index is 1-D.
void index_select_cpu(const StridedArg& out, const StridedArg& in, int dim, const StridedArg& index,
                      const KernelContext& ctx);
void index_select_cuda(const StridedArg& out, const StridedArg& in, int dim, const StridedArg& index,
                       const KernelContext& ctx);
// out[..., i_dim, ...] = in[..., index[..., i_dim, ...], ...]; out and index share sizes.
void gather_cpu(const StridedArg& out, const StridedArg& in, int dim, const StridedArg& index,
                const KernelContext& ctx);
void gather_cuda(const StridedArg& out, const StridedArg& in, int dim, const StridedArg& index,
                 const KernelContext& ctx);
// out[..., index[..., i, ...], ...] += src[..., i, ...] over index's sizes (src may be larger).
// Deterministic: positions differing only along `dim` are accumulated by one thread, in order.
void scatter_add_cpu(const StridedArg& out, int dim, const StridedArg& index, const StridedArg& src,
                     const KernelContext& ctx);
void scatter_add_cuda(const StridedArg& out, int dim, const StridedArg& index, const StridedArg& src,
                      const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(index_select);
KILN_KERNEL(gather);
KILN_KERNEL(scatter_add);
}  // namespace kernels

}  // namespace kiln
