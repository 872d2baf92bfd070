// Hidden layout copies: a per-thread count of the times an op copied one of its tensor inputs into
// another memory layout (NCHW <-> channels-last, or a strided tensor into a dense one) before its
// kernels could read it. Such a copy gives the right answer at the price of a full read and write of
// the tensor, which is why it hides: a channels-last model with one NCHW weight still trains, only
// slower. Tests and benchmarks read the count around a step to prove that a path copies nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"

namespace kiln {

// Hidden layout copies made by ops on this thread since the last reset (the thread that ran the
// op: the forward's caller, or the thread that ran backward()).
int64_t layout_copy_count();
// The same copies by who made them ("conv2d (weight)": 3), to say in a failed check which op copied.
std::map<std::string, int64_t> layout_copy_counts();
// Back to zero, on this thread only.
void reset_layout_copy_count();

namespace ops {

// Counts one hidden layout copy made by `what` (the op and the input it copied).
void note_layout_copy(const char* what);
// t without history in `format` (Contiguous or ChannelsLast; Preserve means Contiguous, as in
// Tensor::contiguous): t itself when it already is, else a copy, counted under `what`.
Tensor to_layout(const Tensor& t, MemoryFormat format, const char* what);

}  // namespace ops
}  // namespace kiln
