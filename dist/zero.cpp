// ZeroRedundancyOptimizer (see zero.h).
#include "dist/zero.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/foreach.h"
#include "dist/flat.h"
#include "kernels/error.h"
#include "nn/optim/clip.h"

namespace kiln::dist {

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<nn::optim::ParamGroup> groups, ProcessGroup& group,
                                                 Factory make)
    : group_(group), groups_(std::move(groups)) {
  if (!make) throw Error("ZeroRedundancyOptimizer: no optimizer factory given");
  NoGradGuard no_grad;
  const int n = group_.size();
  std::vector<nn::optim::ParamGroup> local_groups;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const TensorList& params = groups_[g].params;
    if (params.empty()) throw Error("ZeroRedundancyOptimizer: parameter group " + std::to_string(g) + " is empty");
    for (const Tensor& p : params) {
      if (p.dtype() != params.front().dtype() || p.device() != params.front().device()) {
        throw DTypeError("ZeroRedundancyOptimizer: group " + std::to_string(g) + " mixes " +
                         dtype_name(params.front().dtype()) + " on " + params.front().device().str() + " with " +
                         dtype_name(p.dtype()) + " on " + p.device().str() + "; one flat buffer needs one of each");
      }
    }
    const int64_t padded = (detail::total_numel(params) + n - 1) / n * n;
    shard_numel_.push_back(padded / n);
    // Rank 0's parameters everywhere, then this rank's shard of them as the local optimizer's leaf.
    Tensor flat = zeros({padded}, TensorOptions(params.front().dtype(), params.front().device()));
    detail::pack(params, flat, /*grads=*/false);
    group_.broadcast(flat, 0)->wait();
    detail::unpack(flat, params, /*grads=*/false);
    Tensor shard = flat.narrow(0, group_.rank() * (padded / n), padded / n).clone();
    shard.set_requires_grad(true);
    shards_.push_back(shard);
    flats_.push_back(flat);  // kept: the gradients and the gathered parameters pass through it every step
    nn::optim::ParamGroup lg = groups_[g];
    lg.params = {shard};
    local_groups.push_back(std::move(lg));
  }
  local_ = make(std::move(local_groups));
  if (!local_) throw Error("ZeroRedundancyOptimizer: the factory returned no optimizer");
}

void ZeroRedundancyOptimizer::step() { step_with(nullptr); }

void ZeroRedundancyOptimizer::step(nn::amp::GradScaler& scaler) {
  set_found_inf_reducer(scaler);
  step_with(&scaler);
}

void ZeroRedundancyOptimizer::set_found_inf_reducer(nn::amp::GradScaler& scaler) {
  ProcessGroup* group = &group_;
  scaler.set_found_inf_reducer([group](Tensor& flag) { group->all_reduce(flag, ReduceOp::Max)->wait(); });
}

void ZeroRedundancyOptimizer::reduce_gradients() {
  if (reduced_) return;
  // Every group's collective is issued before the first is waited for: they run back to back.
  std::vector<std::shared_ptr<Work>> works;
  for (size_t g = 0; g < groups_.size(); ++g) {
    // pack fills the parameters' slices only; the padding past them reduces into the padding alone.
    detail::pack(groups_[g].params, flats_[g], /*grads=*/true);
    Tensor shard_grad = empty({shard_numel_[g]}, TensorOptions(flats_[g].dtype(), flats_[g].device()));
    works.push_back(group_.reduce_scatter(shard_grad, flats_[g], ReduceOp::Avg));
    shards_[g].set_grad(shard_grad);
  }
  for (auto& w : works) w->wait();
  reduced_ = true;
}

Tensor ZeroRedundancyOptimizer::clip_grad_norm_(double max_norm, double norm_type, nn::amp::GradScaler* scaler) {
  nn::optim::check_clip_options("ZeroRedundancyOptimizer::clip_grad_norm_", max_norm, norm_type);
  NoGradGuard no_grad;
  reduce_gradients();
  if (scaler != nullptr) {
    set_found_inf_reducer(*scaler);
    scaler->unscale_(*local_);
  }
  TensorList grads;
  for (const Tensor& s : shards_) grads.push_back(s.grad());
  Tensor total = foreach_norm(grads, norm_type);  // this rank's shards; the padding holds zeros
  if (std::isinf(norm_type)) {
    group_.all_reduce(total, ReduceOp::Max)->wait();
  } else {
    total = pow(total, Scalar(norm_type));
    group_.all_reduce(total, ReduceOp::Sum)->wait();
    total = pow(total, Scalar(1.0 / norm_type));
  }
  nn::optim::clip_grads_with_norm_(shards_, max_norm, total);
  return total;
}

void ZeroRedundancyOptimizer::step_with(nn::amp::GradScaler* scaler) {
  NoGradGuard no_grad;
  reduce_gradients();
  reduced_ = false;
  if (scaler != nullptr) {
    scaler->step(*local_);
  } else {
    local_->step();
  }
  std::vector<std::shared_ptr<Work>> works;
  for (size_t g = 0; g < groups_.size(); ++g) works.push_back(group_.all_gather(flats_[g], shards_[g].detach()));
  for (size_t g = 0; g < groups_.size(); ++g) {
    works[g]->wait();
    detail::unpack(flats_[g], groups_[g].params, /*grads=*/false);
  }
}

void ZeroRedundancyOptimizer::zero_grad() {
  for (auto& g : groups_) {
    for (Tensor p : g.params) p.set_grad(Tensor());  // a handle: the parameter itself
  }
  for (Tensor& s : shards_) s.set_grad(Tensor());
  reduced_ = false;
}

}  // namespace kiln::dist
