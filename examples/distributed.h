// --ddp in the training examples: joining the process group of mpiexec, checking that the global
// batch splits evenly, and giving ranks other than 0 their own output folder and a silent stdout;
// --zero, ZeRO's sharded optimizer (stage 1, or 2 with --zero-stage) in place of DDP.
// Every rank runs the whole program on its share of each batch (dist/ddp.h averages the gradients),
// so ranks other than 0 write the same files rank 0 does, under OUT/rank-R.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/ops/factory.h"
#include "dist/ddp.h"
#include "dist/process_group.h"
#include "dist/zero.h"
#include "examples/common.h"
#include "nn/optim/optimizer.h"

namespace kiln::examples {

inline void add_ddp_flag(Flags& app, bool& ddp) {
  app.add_flag("--ddp", ddp,
               "data-parallel training over the ranks of mpiexec (MPI for CPU tensors, NCCL on GPUs: rank R uses GPU "
               "(local rank) % (GPUs)) or of an env:// launcher (NCCL only): each rank trains on 1/N of every batch "
               "and the gradients are averaged; rank 0 prints and writes --out, rank R writes OUT/rank-R");
}

// The world group for `device` when `ddp` (MPI on the CPU, NCCL on GPUs), else nullptr; on GPUs,
// `device` becomes this rank's. Bad input (no MPI or NCCL, a batch that does not split evenly) ends
// the program with the reason.
inline dist::ProcessGroup* start_ddp(bool ddp, Device& device, int64_t batch_size, std::string& out,
                                     int64_t grad_accum = 1) {
  if (!ddp) return nullptr;
  dist::ProcessGroup* group = nullptr;
  try {
    group = &dist::world_for(device);
    device = group->device();
  } catch (const Error& e) {
    input_error(std::string("--ddp: ") + e.what());
  }
  if (batch_size % group->size() != 0) {
    input_error("--ddp: --batch-size " + std::to_string(batch_size) + " must be a multiple of the " +
                std::to_string(group->size()) + " ranks");
  }
  // Each rank cuts its share into the micro-batches: with fewer rows than --grad-accum it would take
  // fewer micro-batches than asked, silently (check_grad_accum saw the whole batch only).
  const int64_t share = batch_size / group->size();
  if (grad_accum > share) {
    input_error("--grad-accum " + std::to_string(grad_accum) + " is larger than each rank's share of --batch-size " +
                std::to_string(batch_size) + " (" + std::to_string(share) + " rows on each of " +
                std::to_string(group->size()) + " ranks): every micro-batch needs at least one row");
  }
  if (group->rank() > 0) {
    out = (std::filesystem::path(out) / ("rank-" + std::to_string(group->rank()))).string();
    if (std::freopen("/dev/null", "w", stdout) == nullptr) input_error("--ddp: cannot silence rank output");
  }
  return group;
}

inline void add_zero_flag(Flags& app, bool& zero) {
  app.add_flag("--zero", zero,
               "with --ddp: ZeRO-1, each rank keeps the optimizer's state for 1/N of the parameters; the gradients "
               "are reduce-scattered while backward goes on and the updated weights all-gathered instead of DDP's "
               "all-reduce, and checkpoints hold the whole optimizer state, as without --zero");
}

// --zero-stage: 1 shards the optimizer's state (ZeRO-1), 2 the gradients too (ZeRO-2). Returns the
// option, whose count() says whether it was given.
inline Option* add_zero_stage_flag(Flags& app, int& stage) {
  return app
      .add_option("--zero-stage", stage,
                  "with --zero: 1 shards the optimizer's state; 2 also gives each gradient up once its bucket is "
                  "reduce-scattered, so after backward a rank holds only its shard of the gradient (ZeRO-2)")
      ->transform(whole(1, 2));
}

// --bucket-mb: the size of the gradient buckets whose all-reduces (DDP) or reduce-scatters (--zero)
// start while backward goes on. Returns the option, whose count() says whether it was given.
inline Option* add_bucket_flag(Flags& app, double& bucket_mb) {
  return app
      .add_option("--bucket-mb", bucket_mb,
                  "with --ddp: the gradient bucket size in MB (2^20 bytes): each bucket's all-reduce (--zero: "
                  "reduce-scatter) starts once backward has produced its gradients; smaller buckets start sooner and "
                  "cost more messages")
      ->transform(real(0, 1 << 16, Ends::open_low));
}

// --bucket-mb needs --ddp's ranks; its size in bytes (at least 1).
inline int64_t bucket_bytes(double bucket_mb, bool given, bool ddp) {
  if (given && !ddp) input_error("--bucket-mb sizes the gradient buckets of --ddp; add --ddp");
  return std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * (1 << 20)));
}

// Whether `mine` is true on any rank of `group` (a maximum all-reduce of one flag; `mine` itself
// without a group): how ranks agree on a decision each makes from its own clock, such as
// --max-minutes's stop, so that none leaves the training loop while the others wait in its next
// step's collectives. One scalar collective per call, read on the host.
inline bool any_rank(dist::ProcessGroup* group, bool mine) {
  if (group == nullptr) return mine;
  Tensor flag = full({1}, mine ? 1.0 : 0.0, TensorOptions(DType::Float32, group->device()));
  group->all_reduce(flag, dist::ReduceOp::Max)->wait();
  return flag.item<float>() > 0.0f;
}

// --comm-dtype: the dtype the gradients travel in between the ranks (dist::DDPOptions::comm_dtype,
// dist::ZeroOptions::comm_dtype); left empty when not given.
inline void add_comm_dtype_flag(Flags& app, std::string& name) {
  app.add_option("--comm-dtype", name,
                 "with --ddp: the dtype the gradients are all-reduced (--zero: reduce-scattered) in: bf16 or fp16 "
                 "halve float32's bytes on the wire at their precision; fp32 sums half-precision gradients in float32")
      ->one_of({"bf16", "fp16", "fp32"})
      ->default_str("the parameters' own");
}

// --comm-dtype needs --ddp's ranks; its dtype, or none (the parameters' own) when not given.
inline std::optional<DType> comm_dtype(const std::string& name, bool ddp) {
  if (name.empty()) return std::nullopt;
  if (!ddp) input_error("--comm-dtype sets the dtype of --ddp's gradient reductions; add --ddp");
  if (name == "bf16") return DType::BFloat16;
  return name == "fp16" ? DType::Float16 : DType::Float32;
}

// --bucket-view: DDP keeps each gradient in its bucket's flat buffer (dist::DDPOptions::
// gradient_as_bucket_view): the all-reduce averages the gradients in place, and the gradients and the
// buckets are one buffer instead of two.
inline void add_bucket_view_flag(Flags& app, bool& bucket_view) {
  app.add_flag("--bucket-view", bucket_view,
               "with --ddp: each gradient lives in its bucket's buffer (PyTorch's gradient_as_bucket_view), so the "
               "all-reduce averages it in place: no copies into and out of the buckets, and the gradient memory once "
               "instead of twice");
}

// --bucket-view needs DDP (--ddp without --zero), and the gradients' own dtype on the wire: the
// examples' parameters, and so their gradients, are float32.
inline void check_bucket_view(bool bucket_view, bool ddp, bool zero, const std::string& comm_dtype_name) {
  if (!bucket_view) return;
  if (!ddp) input_error("--bucket-view keeps the gradients of --ddp in its buckets; add --ddp");
  if (zero) input_error("--bucket-view is DDP's: --zero reduce-scatters the gradients into shards instead");
  if (!comm_dtype_name.empty() && comm_dtype_name != "fp32") {
    input_error("--bucket-view keeps the float32 gradients in the buckets, which then travel in float32; " +
                ("--comm-dtype " + comm_dtype_name) + " needs buckets of its own");
  }
}

// DDP over the model with --bucket-mb's buckets, its gradients sent in --comm-dtype, kept in the
// buckets with --bucket-view.
inline dist::DDPOptions ddp_options(int64_t bucket_bytes, std::optional<DType> comm_dtype, bool bucket_view) {
  dist::DDPOptions options;
  options.bucket_bytes = bucket_bytes;
  options.comm_dtype = comm_dtype;
  options.gradient_as_bucket_view = bucket_view;
  return options;
}

// --zero's refusals: it needs --ddp's ranks, and its step (which waits for its collectives on the
// host) has not been captured in a CUDA graph; --zero-stage needs --zero.
inline void check_zero(bool zero, bool ddp, bool cuda_graph, bool stage_given) {
  if (zero && !ddp) input_error("--zero shards the optimizer over the ranks of --ddp; add --ddp");
  if (zero && cuda_graph) input_error("--zero does not run with --cuda-graph yet");
  if (stage_given && !zero) input_error("--zero-stage sets the stage of --zero; add --ddp --zero");
}

// ZeRO over --bucket-mb's buckets at --zero-stage's stage, its gradients sent in --comm-dtype.
inline dist::ZeroOptions zero_options(int64_t bucket_bytes, int stage, std::optional<DType> comm_dtype) {
  dist::ZeroOptions options;
  options.bucket_bytes = bucket_bytes;
  options.stage = stage;
  options.comm_dtype = comm_dtype;
  return options;
}

// The examples' optimizer: one over the whole model, or with --zero (a group given) ZeRO over the
// ranks, which starts every rank from rank 0's weights and keeps 1/N of the state on each.
// `make` builds the optimizer of the kind wanted over parameter groups; `zero` is ZeRO's options.
class ExampleOptimizer {
 public:
  ExampleOptimizer(std::vector<nn::optim::ParamGroup> groups, const dist::ZeroRedundancyOptimizer::Factory& make,
                   dist::ProcessGroup* zero_group, const dist::ZeroOptions& zero) {
    if (zero_group) {
      zero_.emplace(std::move(groups), *zero_group, make, zero);
    } else {
      whole_ = make(std::move(groups));
    }
  }
  // What steps and what a schedule sets: with --zero, the optimizer of this rank's shards.
  nn::optim::Optimizer& stepping() { return zero_ ? zero_->local() : *whole_; }
  // What a checkpoint saves and loads: with --zero, the whole state gathered from the ranks.
  nn::optim::Checkpointable& state() {
    return zero_ ? static_cast<nn::optim::Checkpointable&>(*zero_) : *whole_;
  }
  // ZeRO's optimizer (examples::TrainStep::set_zero), or nullptr.
  dist::ZeroRedundancyOptimizer* zero() { return zero_ ? &*zero_ : nullptr; }

 private:
  std::optional<dist::ZeroRedundancyOptimizer> zero_;
  std::unique_ptr<nn::optim::Optimizer> whole_;
};

}  // namespace kiln::examples
