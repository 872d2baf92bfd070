// ZeroRedundancyOptimizer (see zero.h).
#include "dist/zero.h"

#include <algorithm>
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

void ZeroRedundancyOptimizer::refresh_shards() {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t lo = group_.rank() * shard_numel_[g], hi = lo + shard_numel_[g];
    int64_t offset = 0;
    for (const Tensor& p : groups_[g].params) {
      const int64_t a = std::max(offset, lo), b = std::min(offset + p.numel(), hi);
      if (a < b) {
        Tensor from = p.detach().contiguous().view({-1}).narrow(0, a - offset, b - a);
        shards_[g].detach().narrow(0, a - lo, b - a).copy_(from);
      }
      offset += p.numel();
    }
  }
}

void ZeroRedundancyOptimizer::step_with(nn::amp::GradScaler* scaler) {
  NoGradGuard no_grad;
  reduce_gradients();
  reduced_ = false;
  refresh_shards();
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

namespace {

// "state.<index>.<name>" split; false for any other form.
bool parse_state_key(const std::string& key, size_t& index, std::string& name) {
  if (key.rfind("state.", 0) != 0) return false;
  const size_t dot = key.find('.', 6);
  if (dot == std::string::npos || dot == 6 || dot + 1 == key.size()) return false;
  const std::string digits = key.substr(6, dot - 6);
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  index = std::stoul(digits);
  name = key.substr(dot + 1);
  return true;
}

std::string state_key(size_t index, const std::string& name) { return "state." + std::to_string(index) + "." + name; }

}  // namespace

std::map<std::string, Tensor> ZeroRedundancyOptimizer::state_dict() const {
  NoGradGuard no_grad;
  std::map<std::string, Tensor> local = local_->state_dict();
  std::map<std::string, Tensor> out;
  size_t first = 0;  // the flat index of the group's first parameter in an unsharded optimizer
  for (size_t g = 0; g < groups_.size(); ++g) {
    const TensorList& params = groups_[g].params;
    // Local parameter g is group g's shard. Each rank's shards got their state at the same step,
    // so every rank gathers the same names in the same order.
    for (const std::string& name : local_->state_names()) {
      auto it = local.find(state_key(g, name));
      if (it == local.end()) continue;
      Tensor whole = empty({shard_numel_[g] * group_.size()}, TensorOptions(it->second.dtype(), it->second.device()));
      group_.all_gather(whole, it->second)->wait();
      int64_t offset = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        out[state_key(first + i, name)] = whole.narrow(0, offset, params[i].numel()).view(params[i].sizes()).clone();
        offset += params[i].numel();
      }
    }
    for (const char* field : {".lr", ".step"}) {
      const std::string key = "group." + std::to_string(g) + field;
      out[key] = local.at(key);
    }
    first += params.size();
  }
  out["step"] = local.at("step");
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  const char* op = "ZeroRedundancyOptimizer::load_state_dict";
  NoGradGuard no_grad;
  std::vector<std::pair<size_t, size_t>> where;  // flat index -> (group, index in the group)
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) where.emplace_back(g, i);
  const std::vector<std::string> names = local_->state_names();
  // The local optimizer's map: the group keys as given (its own load checks them), each state
  // tensor's shard cut from the group's flat buffer of that state.
  std::map<std::string, Tensor> local;
  std::map<std::pair<size_t, std::string>, TensorList> by_group;  // (group, name) -> per parameter
  for (const auto& [key, t] : state) {
    size_t index = 0;
    std::string name;
    if (!parse_state_key(key, index, name)) {
      local[key] = t;  // "step", "group.<g>.lr", "group.<g>.step"; anything else is refused below
      continue;
    }
    if (index >= where.size()) {
      throw Error(std::string(op) + ": key \"" + key + "\" names parameter " + std::to_string(index) +
                  ", but there are " + std::to_string(where.size()));
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      throw Error(std::string(op) + ": unexpected key \"" + key + "\": this optimizer keeps no state \"" + name + "\"");
    }
    const auto [g, i] = where[index];
    const Tensor& p = groups_[g].params[i];
    const DType dtype = nn::optim::Optimizer::state_dtype(p);
    if (!t.defined() || t.sizes() != p.sizes() || t.dtype() != dtype) {
      throw Error(std::string(op) + ": \"" + key + "\" is " +
                  (t.defined() ? shape_str(t.sizes()) + " " + dtype_name(t.dtype()) : std::string("undefined")) +
                  ", expected " + shape_str(p.sizes()) + " " + dtype_name(dtype) + " for its parameter");
    }
    TensorList& list = by_group[{g, name}];
    list.resize(groups_[g].params.size());
    list[i] = t;
  }
  for (const auto& [group_name, list] : by_group) {
    const auto& [g, name] = group_name;
    const Tensor& shard = shards_[g];
    Tensor flat = zeros({shard_numel_[g] * group_.size()},
                        TensorOptions(nn::optim::Optimizer::state_dtype(shard), shard.device()));
    int64_t offset = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      const int64_t n = groups_[g].params[i].numel();
      if (list[i].defined()) flat.narrow(0, offset, n).view(list[i].sizes()).copy_(list[i]);
      offset += n;
    }
    local[state_key(g, name)] = flat.narrow(0, group_.rank() * shard_numel_[g], shard_numel_[g]).clone();
  }
  local_->load_state_dict(local);  // checks the group keys and the step before it changes anything
}

void ZeroRedundancyOptimizer::zero_grad() {
  for (auto& g : groups_) {
    for (Tensor p : g.params) p.set_grad(Tensor());  // a handle: the parameter itself
  }
  for (Tensor& s : shards_) s.set_grad(Tensor());
  reduced_ = false;
}

}  // namespace kiln::dist
