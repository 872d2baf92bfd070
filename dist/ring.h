// kiln's ring all-reduce: the bandwidth-optimal algorithm NCCL and Horovod made standard, written
// over nothing but the process group's point-to-point exchange, so that it runs on any backend and
// shows how an all-reduce works (docs/distributed.md). The tensor is cut into one segment per rank
// (uneven when the element count is not a multiple of the world size); in n - 1 reduce-scatter steps
// each rank sends one segment to its right neighbour and adds the one arriving from its left, after
// which rank r holds the full reduction of segment r + 1; n - 1 all-gather steps pass the reduced
// segments around. Every rank sends and receives 2 (n - 1) / n of the data, whatever n is.
// Non-obvious decision: each segment moves in pieces of at most `piece_bytes`, posted as
// non-blocking exchanges two pieces ahead, so the reduction of one piece overlaps the transfer of
// the next, and no buffer larger than two pieces is needed.
#pragma once

#include <cstdint>

#include "dist/process_group.h"

namespace kiln::dist {

// tensor = op over the group's tensors (Avg: the sum divided by the group size), in place. The
// caller (ProcessGroup::all_reduce) has checked the tensor.
void ring_all_reduce(ProcessGroup& group, Tensor& tensor, ReduceOp op, int64_t piece_bytes = int64_t{1} << 20);

// The segment of rank-slot k (of n) in a tensor of `numel` elements: [begin, end). The first
// numel % n segments have one element more.
struct Segment {
  int64_t begin, end;
};
Segment ring_segment(int64_t numel, int n, int k);

}  // namespace kiln::dist
