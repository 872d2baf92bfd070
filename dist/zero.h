// ZeRO stage 1 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models"): the optimizer's state sharded across ranks. Each rank keeps the Adam moments (or any
// optimizer's state) of 1/N of the parameters only. A step reduce-scatters the gradients (each rank
// receives the average of its shard), updates its shard with an ordinary kiln optimizer, and
// all-gathers the updated shards into every rank's full parameters: the same bytes on the wire as
// DDP's all-reduce, and 1/N of the optimizer memory. Non-obvious decisions: each parameter group
// becomes one flat buffer, padded to a multiple of the world size and cut into equal shards, so a
// shard may hold pieces of several parameters, which is exact for elementwise optimizers (SGD,
// AdamW: every element's update depends on its own gradient and state only); a clip by the global
// norm, which reads every gradient, is a method of its own that combines the ranks' norms of their
// shards in one scalar all-reduce; and the model is NOT wrapped in DDP: the reduce-scatter is what
// averages the gradients.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "nn/amp/grad_scaler.h"
#include "nn/optim/optimizer.h"

namespace kiln::dist {

class ZeroRedundancyOptimizer : public nn::optim::Checkpointable {
 public:
  // Builds the local optimizer over this rank's shards (one group per group given, same lr,
  // weight decay and options).
  using Factory = std::function<std::unique_ptr<nn::optim::Optimizer>(std::vector<nn::optim::ParamGroup>)>;

  // `groups` as for any kiln optimizer; each group's parameters must share one dtype and device.
  // Every rank's parameters are set to rank 0's first.
  ZeroRedundancyOptimizer(std::vector<nn::optim::ParamGroup> groups, ProcessGroup& group, Factory make);

  // Reduce-scatter of the gradients (average; a parameter without a gradient counts as zero),
  // the local optimizer's step on this rank's shards, all-gather of the parameters. The shards are
  // first copied from the parameters, so weights set since the last step (a checkpoint loaded into
  // the model) are the ones updated.
  void step();
  // The same step through a GradScaler (float16 training): the local optimizer steps through
  // scaler.step(), which skips the step when the gradients held inf or NaN. Each rank checks only
  // its own shard, so the scaler is given a found-inf reducer over this group (a max all-reduce of
  // the flag): every rank skips the same steps. Call scaler.update() after, as usual.
  void step(nn::amp::GradScaler& scaler);
  void zero_grad();

  // nn::optim::clip_grad_norm_ over the whole model, for sharded gradients, called between backward
  // and step(): the reduce-scatter of the gradients happens here (step() then uses the reduced
  // shards as they are), each rank takes the norm of its own shards, one scalar all-reduce combines
  // them (the sum of norm^p, or the maximum for the infinity norm), and every shard's gradient is
  // multiplied by min(1, max_norm / (norm + 1e-6)). Returns the total norm of the averaged
  // gradients, a 0-d float32 tensor on the parameters' device, the same on every rank; no host
  // sync. With a GradScaler, pass it: the shards are unscaled first (scaler.unscale_ on local(),
  // with the found-inf reducer of step(scaler)), as PyTorch's recipe unscales before it clips; then
  // call step(scaler). Every group's shards must be on one device.
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0, nn::amp::GradScaler* scaler = nullptr);

  // The state as one unsharded optimizer of the same kind over the same groups saves it
  // (nn::optim::Optimizer::state_dict: "state.<flat param index>.<name>" whole, shaped as its
  // parameter; each group's lr and device step counter; the host step count), so a checkpoint does
  // not depend on the world size and a DDP run's optimizer state loads here and back. A collective:
  // every rank calls it (each state tensor is all-gathered) and gets the same map.
  std::map<std::string, Tensor> state_dict() const override;
  // The reverse: each rank keeps its shard of every state tensor. A parameter's state absent from
  // `state` while others of its group have theirs counts as zeros, as kiln's optimizers create it.
  // Keys, shapes and dtypes are checked before anything changes (a kiln::Error naming the key).
  // Not a collective: every rank reads its own shard of the same map.
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

  // The optimizer over this rank's shards: its state is this rank's share.
  nn::optim::Optimizer& local() { return *local_; }
  // Elements of one shard of each group (the padded flat size / world size).
  const std::vector<int64_t>& shard_numel() const { return shard_numel_; }

 private:
  void step_with(nn::amp::GradScaler* scaler);
  // The reduce-scatter of every group's gradients into its shard's .grad, once per step.
  void reduce_gradients();
  void set_found_inf_reducer(nn::amp::GradScaler& scaler);
  // This rank's slice of the parameters into its shards, before each step: the parameters are the
  // truth (a checkpoint or load_into may have set them since the last step's all-gather).
  void refresh_shards();

  ProcessGroup& group_;
  std::vector<nn::optim::ParamGroup> groups_;
  std::vector<int64_t> shard_numel_;  // per group: the padded flat size / world size
  std::vector<Tensor> flats_;         // per group: the padded flat buffer, kept from step to step
  std::vector<Tensor> shards_;        // per group: this rank's slice of the flat parameters (a leaf)
  std::unique_ptr<nn::optim::Optimizer> local_;
  bool reduced_ = false;  // this step's gradients are in the shards (clip_grad_norm_ reduced them)
};

}  // namespace kiln::dist
