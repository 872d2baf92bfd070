// DistributedDataParallel: data-parallel training over a process group, as PyTorch's. Each rank runs
// the same model on its own share of the batch; DDP makes their gradients the average over ranks
// before the optimizer steps, so every rank takes the same step. Non-obvious decisions:
// - Gradients are grouped into buckets of about `bucket_bytes`, in reverse order of registration
//   (roughly the order backward produces them), and a bucket is all-reduced as soon as the last of
//   its gradients has been accumulated (a post-accumulate hook on each parameter), while backward
//   goes on producing the others: the all-reduce is asynchronous (the process group's Work), and a
//   callback at the end of backward reduces what is left, waits for every bucket and writes the
//   averaged gradients back.
// - Every rank must issue the all-reduces in one order, so a bucket that is complete waits for the
//   ones before it: in the first backward, the buckets' own order; from then on, the order in which
//   rank 0's first backward completed them (broadcast at its end), as PyTorch's DDP reorders its
//   buckets after the first iteration. A model that registers its parameters in another order than
//   backward reaches them is then overlapped as well as any.
// - A bucket is reduced through one flat buffer: the gradients are copied in, one all-reduce
//   (average) runs over it, and the results are copied back; one large message instead of one per
//   parameter. With gradient_as_bucket_view the gradients live in the buffer: no copies back.
// - A parameter that gets no gradient in a backward pass is an error naming it (its bucket would
//   never be reduced, and the ranks would disagree), unless find_unused_parameters is set, in which
//   case its gradient counts as zero on that rank; and a parameter that no rank has a gradient for
//   keeps none, as in one process over the whole batch, so that an optimizer skips it instead of
//   moving it by weight decay or momentum (one all-reduce of a flag per parameter each backward,
//   after the buckets; PyTorch's DDP leaves such a gradient alone too).
// - The constructor first checks that every rank holds the same model (the parameters' and
//   buffers' shapes, dtypes and requires_grad flags, in one order), as PyTorch's DDP does: the
//   tensors are paired across ranks by position, so another model on one rank would hang a
//   collective or mix one parameter's gradient into another's. A mismatch is an Error on every rank.
// - GradScaler needs nothing more: a non-finite gradient on any rank makes the averaged gradient
//   non-finite on every rank, so every rank's scaler skips the same steps.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/profiler.h"
#include "dist/no_sync.h"
#include "dist/process_group.h"
#include "nn/module.h"

namespace kiln::dist {

struct DDPOptions {
  int64_t bucket_bytes = int64_t{25} << 20;  // about 25 MB, PyTorch's default
  bool broadcast_parameters = true;          // copy rank 0's parameters and buffers to every rank first
  // Copy rank 0's buffers (batch norm's running statistics) to every rank at the end of each
  // backward that reduces, so the ranks' models stay one model (PyTorch's broadcast_buffers, on by
  // default there too; PyTorch copies them before each forward, which gives every forward the same
  // buffers as here). Off: each rank keeps the statistics of its own share of the data.
  bool broadcast_buffers = true;
  bool find_unused_parameters = false;       // a missing gradient counts as zero (none if missing on every rank)
  AllReduceAlgo algo = AllReduceAlgo::Native;
  // Whether a bucket's all-reduce runs while backward goes on (the default). false waits for each
  // bucket as it is issued: the same result, without the overlap (for measuring what it buys).
  bool overlap = true;
  // Each parameter's gradient becomes a view into its bucket's flat buffer (PyTorch's option of this
  // name), with the parameter's strides: the all-reduce then averages the gradients in place, so
  // nothing is copied back, and the gradients and the buckets are one buffer instead of two. A
  // gradient that backward created anew (after zero_grad() set it to none) is copied into its
  // bucket once, when its hook runs, and the parameter's gradient is then the view; with
  // zero_grad(set_to_none = false) the views stay, backward accumulates into the buckets, and
  // nothing is copied at all. A gradient set by hand is copied in at the next reduction.
  bool gradient_as_bucket_view = false;
  // The dtype the gradients travel in (none: their own). bfloat16 or float16 halves the bytes of
  // float32 gradients on the wire, at that dtype's precision (PyTorch's bf16/fp16 compression
  // hooks, DeepSpeed's communication_data_type); float32 for half-precision parameters sums their
  // gradients in float32 (Megatron's grad_reduce_in_fp32). A bucket travelling in float16 is divided
  // by the world size before its sum, not after, so the sum stays in float16's range. Needs a
  // floating dtype, and the parameters' own with gradient_as_bucket_view.
  std::optional<DType> comm_dtype;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& group, DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return *module_; }
  ProcessGroup& group() { return group_; }
  // The buckets: indices into module().parameters(), in reverse registration order.
  const std::vector<std::vector<size_t>>& buckets() const;

  // While the NoSync returned lives, backward passes accumulate gradients locally, without
  // communication (gradient accumulation); the first backward after it reduces the accumulated sum.
  NoSync no_sync();

  // All-reduces of the last backward pass (for tests and benchmarks).
  int64_t reductions() const;

  // A step profiler (null: none) on which DDP marks the communication backward waits for as the
  // `comm` phase: the buckets still in flight when backward ends (and, with overlap off, each
  // bucket's all-reduce), returning to `backward` after a wait inside it. Call backward inside the
  // profiler's backward phase; what overlaps backward stays backward's.
  void set_profiler(profile::StepProfiler* profiler);

  struct State;

 private:
  std::shared_ptr<nn::Module> module_;
  ProcessGroup& group_;
  DDPOptions options_;
  std::shared_ptr<State> state_;
};

}  // namespace kiln::dist
