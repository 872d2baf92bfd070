// Indexing kernels: index_select, gather and scatter_add. Indices are int64 StridedArgs; an index
// out of range is an IndexError naming the op, the index and the size (CPU: at once).
#pragma once

#include <cstdint>

#include "kernels/stream.h"
#include "kernels/strided.h"

namespace kiln {

// out = in with dim `dim` replaced by in.index_select(dim, index); index is 1-D.
void index_select_cpu(const StridedArg& out, const StridedArg& in, int dim, const StridedArg& index);
// out[..., i_dim, ...] = in[..., index[..., i_dim, ...], ...]; out and index share sizes.
void gather_cpu(const StridedArg& out, const StridedArg& in, int dim, const StridedArg& index);
// out[..., index[..., i, ...], ...] += src[..., i, ...] over index's sizes (src may be larger).
// Deterministic: positions differing only along `dim` are accumulated by one thread, in order.
void scatter_add_cpu(const StridedArg& out, int dim, const StridedArg& index, const StridedArg& src);

}  // namespace kiln
