// ZeroRedundancyOptimizer (see zero.h).
#include "dist/zero.h"

#include <string>
#include <utility>

#include "core/autograd.h"
#include "core/ops/factory.h"
#include "kernels/error.h"

namespace kiln::dist {
namespace {

// Group g's parameters (and padding) as one flat tensor of `padded` elements.
Tensor flatten(const TensorList& params, int64_t padded, bool grads) {
  const Tensor& first = params.front();
  Tensor flat = zeros({padded}, TensorOptions(first.dtype(), first.device()));
  int64_t offset = 0;
  for (const Tensor& p : params) {
    const Tensor& src = grads ? p.grad() : p;
    if (src.defined()) flat.narrow(0, offset, p.numel()).view(p.sizes()).copy_(src.detach());
    offset += p.numel();
  }
  return flat;
}

}  // namespace

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
    int64_t numel = 0;
    for (const Tensor& p : params) {
      if (p.dtype() != params.front().dtype() || p.device() != params.front().device()) {
        throw DTypeError("ZeroRedundancyOptimizer: group " + std::to_string(g) + " mixes " +
                         dtype_name(params.front().dtype()) + " on " + params.front().device().str() + " with " +
                         dtype_name(p.dtype()) + " on " + p.device().str() + "; one flat buffer needs one of each");
      }
      numel += p.numel();
    }
    const int64_t padded = (numel + n - 1) / n * n;
    padded_.push_back(padded);
    shard_numel_.push_back(padded / n);
    // Rank 0's parameters everywhere, then this rank's shard of them as the local optimizer's leaf.
    Tensor flat = flatten(params, padded, /*grads=*/false);
    group_.broadcast(flat, 0)->wait();
    int64_t offset = 0;
    for (const Tensor& p : params) {
      p.detach().copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
    Tensor shard = flat.narrow(0, group_.rank() * (padded / n), padded / n).clone();
    shard.set_requires_grad(true);
    shards_.push_back(shard);
    nn::optim::ParamGroup lg = groups_[g];
    lg.params = {shard};
    local_groups.push_back(std::move(lg));
  }
  local_ = make(std::move(local_groups));
  if (!local_) throw Error("ZeroRedundancyOptimizer: the factory returned no optimizer");
}

void ZeroRedundancyOptimizer::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    Tensor flat_grad = flatten(groups_[g].params, padded_[g], /*grads=*/true);
    Tensor shard_grad = empty({shard_numel_[g]}, TensorOptions(flat_grad.dtype(), flat_grad.device()));
    group_.reduce_scatter(shard_grad, flat_grad, ReduceOp::Avg)->wait();
    shards_[g].set_grad(shard_grad);
  }
  local_->step();
  for (size_t g = 0; g < groups_.size(); ++g) {
    Tensor flat = empty({padded_[g]}, TensorOptions(shards_[g].dtype(), shards_[g].device()));
    group_.all_gather(flat, shards_[g].detach())->wait();
    int64_t offset = 0;
    for (const Tensor& p : groups_[g].params) {
      p.detach().copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
}

void ZeroRedundancyOptimizer::zero_grad() {
  for (auto& g : groups_) {
    for (Tensor p : g.params) p.set_grad(Tensor());  // a handle: the parameter itself
  }
  for (Tensor& s : shards_) s.set_grad(Tensor());
}

}  // namespace kiln::dist
