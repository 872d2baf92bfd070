// ZeRO stages 1 and 2 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models"): the optimizer's state sharded across ranks, and in stage 2 the gradients.
// Each rank keeps the Adam moments (or any optimizer's state) of 1/N of the parameters only. Each
// step reduce-scatters the gradients (each rank receives the average of its shard), updates its
// shard with an ordinary kiln optimizer, and all-gathers the updated shards into every rank's full
// parameters: the same bytes on the wire as DDP's all-reduce, and 1/N of the optimizer memory.
// Non-obvious decisions:
// - Each parameter group is cut into buckets of about `bucket_bytes` (whole parameters, from the
//   group's last one back, as DDP's buckets), each padded to a multiple of the world size and cut
//   into equal slices: rank r owns slice r of every bucket, and its shard of the group is those
//   slices end to end, one flat tensor for the local optimizer. A shard may hold pieces of several
//   parameters, which is exact for elementwise optimizers (SGD, Adam, AdamW: every element's update
//   depends on its own gradient and state only). An optimizer's scalar states (NAdam's
//   mu_product, ASGD's eta and mu) depend on the step count and the lr alone, the same for every
//   parameter of a group: the shard keeps one, and the gathered state gives it to each parameter.
//   With one bucket per group this is the plain layout: rank r owns the r-th Nth of the group.
// - A bucket's reduce-scatter starts as soon as backward has accumulated its last gradient (a
//   post-accumulate hook per parameter, as DDP's all-reduce), so the communication overlaps the
//   rest of backward; a callback at the end of backward issues what is left and waits. Every rank
//   must issue the same collectives in the same order, so buckets go strictly in one order: in the
//   first backward, each group's buckets from its last, group by group; from then on, the order in
//   which rank 0's first backward completed them (broadcast once), which interleaves the groups as
//   the model does. The step then uses the reduced shards. A parameter without a gradient counts
//   as zero, and is stepped as such: where an unsharded kiln optimizer skips it (and DDP with
//   find_unused_parameters leaves it without a gradient when no rank has one), weight decay and
//   momentum still move it here (a shard mixes parameters, and every rank must step its shard
//   alike). Frozen parameters (requires_grad false at construction) are kept out of the shards,
//   so they are never stepped, as an unsharded optimizer skips them; freezing or unfreezing one
//   after construction is refused at the next step (rebuild the optimizer). A group may be empty,
//   or frozen throughout: its shard has no elements. Gradients changed after backward are not
//   seen (as with DDP): clip through clip_grad_norm_ below, which works on the shards.
// - A clip by the global norm, which reads every gradient, combines the ranks' norms of their
//   shards in one scalar all-reduce.
// - The model is NOT wrapped in DDP: the reduce-scatter is what averages the gradients.
// - Stage 2 (ZeroOptions::stage) shards the gradients too: once a bucket's gradients are packed for
//   its reduce-scatter, the parameters' gradients are released (set to none), and each bucket's
//   flat buffer exists only while its collective runs (the step's all-gathers keep two at a time),
//   so after backward no rank holds anything of the gradient's size, only its reduced shard (stage
//   1 keeps every parameter's gradient, as DDP does, and a flat buffer per group from step to
//   step). In gradient accumulation without no_sync, each backward reduces what it added and the
//   shards sum the reductions (stage 1 reduces the whole sum again, wasting the earlier
//   reductions); with no_sync, the gradients of the quiet backward passes are held until the one
//   that reduces, as in stage 1. Anything reading the parameters' gradients after backward (a clip
//   over the model's parameters, a hook registered after this optimizer's on the same parameter)
//   finds none: clip through clip_grad_norm_ below.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/profiler.h"
#include "dist/no_sync.h"
#include "dist/process_group.h"
#include "nn/amp/grad_scaler.h"
#include "nn/optim/optimizer.h"

namespace kiln::dist {

struct ZeroOptions {
  int64_t bucket_bytes = int64_t{25} << 20;  // about 25 MB, as DDP's buckets
  // Whether a bucket's reduce-scatter starts during backward (the default). false reduces every
  // bucket when clip_grad_norm_ or step() needs the gradients: the same result, without the
  // overlap (for measuring what it buys, or for gradients set by hand rather than by backward).
  bool overlap = true;
  // 1: the optimizer's state sharded (ZeRO-1); 2: the gradients too, released once reduced (ZeRO-2).
  int stage = 1;
  // The dtype the gradients' reduce-scatters travel in (none: the parameters' own), as DDP's
  // comm_dtype: bfloat16 or float16 halves float32's bytes at their precision, float32 sums
  // half-precision gradients in float32; the reduced shard is converted back into the parameters'
  // dtype. The all-gathers of the parameters stay in the parameters' dtype.
  std::optional<DType> comm_dtype;
};

class ZeroRedundancyOptimizer : public nn::optim::Checkpointable {
 public:
  // Builds the local optimizer over this rank's shards (one group per group given, same lr,
  // weight decay and options).
  using Factory = std::function<std::unique_ptr<nn::optim::Optimizer>(std::vector<nn::optim::ParamGroup>)>;

  // `groups` as for any kiln optimizer; each group's trainable parameters must share one dtype and
  // device. Every rank's parameters, the frozen ones too, are set to rank 0's first.
  ZeroRedundancyOptimizer(std::vector<nn::optim::ParamGroup> groups, ProcessGroup& group, Factory make,
                          ZeroOptions options = {});
  ~ZeroRedundancyOptimizer() override;
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  // The gradients' reduce-scatter (average), unless backward did it already, the local optimizer's
  // step on this rank's shards, all-gather of the parameters. The shards are first copied from the
  // parameters, so weights set since the last step (a checkpoint loaded into the model) are the
  // ones updated.
  void step();
  // The same step through a GradScaler (float16 training): the local optimizer steps through
  // scaler.step(), which skips the step when the gradients held inf or NaN. Each rank checks only
  // its own shard, so the scaler is given a found-inf reducer over this group (a max all-reduce of
  // the flag): every rank skips the same steps. Call scaler.update() after, as usual.
  void step(nn::amp::GradScaler& scaler);
  void zero_grad();

  // nn::optim::clip_grad_norm_ over the whole model, for sharded gradients, called between backward
  // and step(): each rank takes the norm of its own reduced shards, one scalar all-reduce combines
  // them (the sum of norm^p, or the maximum for the infinity norm), and every shard's gradient is
  // multiplied by min(1, max_norm / (norm + 1e-6)). Returns the total norm of the averaged
  // gradients, a 0-d tensor on the parameters' device (float64 when a group is float64, float32
  // otherwise, as clip_grad_norm_'s), the same on every rank; no host
  // sync. With a GradScaler, pass it: the shards are unscaled first (scaler.unscale_ on local(),
  // with the found-inf reducer of step(scaler)), as PyTorch's recipe unscales before it clips; then
  // call step(scaler). Every group's shards must be on one device.
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0, nn::amp::GradScaler* scaler = nullptr);

  // The state as one unsharded optimizer of the same kind over the same groups saves it
  // (nn::optim::Optimizer::state_dict: "state.<flat param index>.<name>" whole, shaped as its
  // parameter, and its step count, which is its group's: a shard steps all its pieces together;
  // each group's lr; the host step count), so a checkpoint does not depend on the world size or the
  // buckets, and a DDP run's optimizer state loads here and back (unless its parameters of one group
  // have different step counts: an Error). A collective: every rank calls it (each state tensor is
  // all-gathered) and gets the same map.
  std::map<std::string, Tensor> state_dict() const override;
  // The reverse: each rank keeps its shard of every state tensor. A parameter's state absent from
  // `state` while others of its group have theirs counts as zeros, as kiln's optimizers create it.
  // Keys, shapes and dtypes are checked before anything changes (a kiln::Error naming the key).
  // Not a collective: every rank reads its own shard of the same map.
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

  // While the NoSync returned lives, backward passes only accumulate gradients (gradient
  // accumulation); the first backward after it reduces the accumulated sum. Without it every
  // backward reduces: in stage 1 the last one's reduction (of the whole sum) is the one the step
  // uses, so the earlier ones are wasted; in stage 2 each reduces what it added, and the step uses
  // the sum of the reductions.
  NoSync no_sync();

  // The optimizer over this rank's shards: its state is this rank's share.
  nn::optim::Optimizer& local();
  // Elements of this rank's shard of each group (its buckets' padded sizes / world size, summed).
  const std::vector<int64_t>& shard_numel() const;
  // Buckets over all groups.
  size_t num_buckets() const;
  // Reduce-scatters issued so far for the gradients of the next step (0 after a step or zero_grad;
  // in stage 1, also after a backward under no_sync, which makes the step reduce again; for tests
  // and benchmarks).
  int64_t reductions() const;
  // A step profiler (null: none) on which the end of backward marks the reduce-scatters it waits for
  // as the `comm` phase, as DDP does. Call backward inside the profiler's backward phase.
  void set_profiler(profile::StepProfiler* profiler);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kiln::dist
