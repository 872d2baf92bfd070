// Optimizer base: groups, the device scalars, lazily created state and state_dict. Each parameter's
// step count advances in one launch per device after every update of a step has read them, gated
// by found_inf on the device, so the host never learns whether a step was skipped and never waits.
#include "nn/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/foreach.h"
#include "kernels/error.h"

namespace kiln::nn::optim {
namespace {

// `t` as a tensor on param's device with param's layout and dtype `dtype`: itself when it already
// is, else a copy (Module::to moved the parameter, or a checkpoint was read onto the CPU).
Tensor like_param(const Tensor& t, const Tensor& param, DType dtype) {
  if (t.device() == param.device() && t.dtype() == dtype && same_layout(t, param)) return t;
  Tensor out = empty_like(param, dtype);
  out.copy_(t);
  return out;
}

// `tensors` split by device, devices in order of first appearance: one multi-tensor launch each.
std::vector<std::pair<Device, TensorList>> split_by_device(const TensorList& tensors) {
  std::vector<std::pair<Device, TensorList>> out;
  for (const Tensor& t : tensors) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == t.device(); });
    if (it == out.end()) {
      out.push_back({t.device(), {t}});
    } else {
      it->second.push_back(t);
    }
  }
  return out;
}

// Every tensor of `fresh` to zero: one launch per device, not one fill per tensor.
void zero_by_device(const TensorList& fresh) {
  for (const auto& [dev, list] : split_by_device(fresh)) foreach_zero_(list);
}

// A step count or another scalar state: a 0-d tensor on `device`.
Tensor step_on(const Tensor& step, Device device) { return step.device() == device ? step : step.to(device); }

void check_lr(double lr, const char* where) {
  if (!(lr >= 0.0) || !std::isfinite(lr)) {
    throw Error(std::string(where) + ": learning rate must be a finite number >= 0, got " + num_str(lr));
  }
}

}  // namespace

bool Optimizer::parse_key(const std::string& key, const char* prefix, size_t& index, std::string& rest) {
  const std::string head = std::string(prefix) + ".";
  if (key.rfind(head, 0) != 0) return false;
  const size_t dot = key.find('.', head.size());
  if (dot == std::string::npos || dot + 1 == key.size()) return false;
  const std::string digits = key.substr(head.size(), dot - head.size());
  if (digits.empty() || digits.size() > 18 || (digits.size() > 1 && digits[0] == '0')) return false;
  index = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    index = index * 10 + static_cast<size_t>(c - '0');
  }
  rest = key.substr(dot + 1);
  return true;
}

std::vector<ParamGroup> Optimizer::one_group(const TensorList& params, double lr, double weight_decay) {
  ParamGroup g;
  g.params = params;
  g.lr = lr;
  g.weight_decay = weight_decay;
  return {g};
}

void Optimizer::check_params(const std::vector<ParamGroup>& groups, const char* who) {
  std::set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    const ParamGroup& grp = groups[g];
    for (size_t i = 0; i < grp.params.size(); ++i) {
      const Tensor& p = grp.params[i];
      const std::string where = "parameter " + std::to_string(i) + " of group " + std::to_string(g);
      if (!p.defined()) throw Error(std::string(who) + ": " + where + " is an undefined tensor");
      if (!p.is_floating_point()) {
        throw DTypeError(std::string(who) + ": " + where + " is " + dtype_name(p.dtype()) +
                         "; only floating tensors are optimized");
      }
      // A frozen tensor (requires_grad false) is taken, as torch.optim takes it: it gets no
      // gradient, so every step skips it, and once unfrozen it trains, its step count starting at
      // its first gradient. A non-leaf's gradient is never kept: a mistake in the list.
      if (!p.is_leaf()) {
        throw Error(std::string(who) + ": " + where + " (shape " + shape_str(p.sizes()) +
                    ") is not a leaf tensor (it was made by " + p.grad_fn()->name() +
                    "); optimize the tensor it was computed from");
      }
      if (!seen.insert(p.impl()).second) {
        throw Error(std::string(who) + ": " + where + " (shape " + shape_str(p.sizes()) +
                    ") appears more than once; each parameter may be in one group only");
      }
    }
  }
}

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  check_params(groups_, "optimizer");
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& grp = groups_[g];
    group_offsets_.push_back(num_params_);
    check_lr(grp.lr, "optimizer");
    if (!(grp.weight_decay >= 0.0) || !std::isfinite(grp.weight_decay)) {
      throw Error("optimizer: weight_decay must be a finite number >= 0, got " + num_str(grp.weight_decay) +
                  " in group " + std::to_string(g));
    }
    num_params_ += grp.params.size();
    const Device dev = grp.params.empty() ? Device::cpu() : grp.params.front().device();
    lr_tensors_.push_back(full({}, grp.lr, TensorOptions(DType::Float64, dev)));
    initial_lrs_.push_back(grp.lr);
  }
  if (num_params_ == 0) throw Error("optimizer: got an empty parameter list");
}

void Optimizer::zero_grad(bool set_to_none) {
  // Zeroing keeps the gradient tensors (they may be views into flat buffers): one launch per device.
  TensorList dense;
  for (ParamGroup& grp : groups_) {
    for (Tensor& p : grp.params) {
      if (!p.grad().defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else if (p.grad().is_non_overlapping_and_dense()) {
        dense.push_back(p.grad());
      } else {  // a strided view: not a flat block
        NoGradGuard no_grad;
        p.mutable_grad().zero_();
      }
    }
  }
  zero_by_device(dense);
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_lr(g, lr);
}

size_t Optimizer::checked_group(size_t group, const char* op) const {
  if (group >= groups_.size()) {
    throw IndexError(std::string(op) + ": group " + std::to_string(group) + " is out of range (the optimizer has " +
                     std::to_string(groups_.size()) + (groups_.size() == 1 ? " group)" : " groups)"));
  }
  return group;
}

const ParamGroup& Optimizer::group(size_t i) const { return groups_[checked_group(i, "Optimizer::group")]; }

double Optimizer::lr(size_t group) const { return groups_[checked_group(group, "Optimizer::lr")].lr; }

double Optimizer::initial_lr(size_t group) const {
  return initial_lrs_[checked_group(group, "Optimizer::initial_lr")];
}

void Optimizer::set_lr(size_t group, double lr) {
  checked_group(group, "set_lr");
  check_lr(lr, "set_lr");
  groups_.at(group).lr = lr;
  // A fill kernel on the current stream: later steps read the new value, nothing waits.
  NoGradGuard no_grad;
  lr_tensors_.at(group).fill_(lr);
}

void Optimizer::set_grad_scaling(const Tensor& found_inf, const Tensor& grad_scale) {
  for (const Tensor* t : {&found_inf, &grad_scale}) {
    if (t->defined() && (t->numel() != 1 || t->dtype() != DType::Float32)) {
      throw DTypeError("set_grad_scaling: found_inf and grad_scale must be one-element float32 tensors, got " +
                       std::string(dtype_name(t->dtype())) + " of shape " + shape_str(t->sizes()));
    }
  }
  found_inf_ = found_inf;
  grad_scale_ = grad_scale;
}

TensorList Optimizer::grads() const {
  TensorList out;
  for (const ParamGroup& grp : groups_)
    for (const Tensor& p : grp.params)
      if (p.grad().defined()) out.push_back(p.grad());
  return out;
}

void Optimizer::check_options(const char* optimizer) const {
  const std::vector<std::string> known = option_names();
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& [name, value] : groups_[g].options) {
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string list;
        for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
        throw Error(std::string(optimizer) + ": group " + std::to_string(g) + " overrides unknown option \"" + name +
                    "\" (known: " + list + "; lr and weight_decay are ParamGroup fields)");
      }
    }
  }
}

void Optimizer::set_option(size_t group, const std::string& name, double value) {
  const size_t g = checked_group(group, "Optimizer::set_option");
  const std::vector<std::string> known = option_names();
  if (std::find(known.begin(), known.end(), name) == known.end()) {
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    throw Error("Optimizer::set_option: this optimizer has no option \"" + name + "\" (known: " + list +
                "; lr and weight_decay are ParamGroup fields)");
  }
  auto& options = groups_[g].options;
  const auto old = options.find(name);
  const std::optional<double> before = old == options.end() ? std::nullopt : std::optional<double>(old->second);
  options[name] = value;
  try {
    validate_options();
  } catch (...) {
    if (before) {
      options[name] = *before;
    } else {
      options.erase(name);
    }
    throw;
  }
}

double Optimizer::option(size_t group, const std::string& name, double fallback) const {
  const auto& opts = groups_.at(group).options;
  auto it = opts.find(name);
  return it == opts.end() ? fallback : it->second;
}

bool Optimizer::is_scalar_state(const std::string& name) const {
  const std::vector<std::string> names = scalar_state_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

DType Optimizer::state_dtype(const Tensor& param) {
  return param.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
}

Optimizer::Batch Optimizer::collect(size_t group) {
  ParamGroup& grp = groups_.at(group);
  Batch b;
  if (grp.params.empty()) return b;
  const Device dev = grp.params.front().device();
  if (lr_tensors_[group].device() != dev) lr_tensors_[group] = lr_tensors_[group].to(dev);
  NoGradGuard no_grad;
  for (size_t i = 0; i < grp.params.size(); ++i) {
    const Tensor& p = grp.params[i];
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    b.params.push_back(p);
    b.grads.push_back(like_param(g, p, p.dtype()));
    b.index.push_back(flat_index(group, i));
  }
  return b;
}

TensorList Optimizer::state_for(const std::string& name, const Batch& batch, double initial) {
  TensorList& all = state_[name];
  if (all.size() != num_params_) all.resize(num_params_);
  TensorList out, fresh;
  NoGradGuard no_grad;
  const bool scalar = is_scalar_state(name);
  for (size_t k = 0; k < batch.params.size(); ++k) {
    const Tensor& p = batch.params[k];
    Tensor& s = all[batch.index[k]];
    if (!s.defined()) {
      s = scalar ? empty({}, TensorOptions(state_dtype(p), p.device())) : empty_like(p, state_dtype(p));
      fresh.push_back(s);
    } else if (scalar) {
      // Moved and cast with its parameter, as the parameter-shaped state is (like_param).
      s = step_on(s, p.device());
      if (s.dtype() != state_dtype(p)) s = s.to(state_dtype(p));
    } else {
      s = like_param(s, p, state_dtype(p));
    }
    out.push_back(s);
  }
  if (initial == 0.0) {
    zero_by_device(fresh);  // new state starts at zero
  } else {
    for (Tensor s : fresh) s.fill_(initial);
  }
  return out;
}

Tensor Optimizer::composed_grad(const Tensor& param, const Tensor& grad, double weight_decay, bool maximize) const {
  const DType dtype = state_dtype(param);
  Tensor g = grad.to(dtype);
  if (grad_scale_.defined()) g = g / grad_scale_.reshape({}).to(dtype);
  if (maximize) g = neg(g);
  if (weight_decay != 0.0) g = g + param.to(dtype) * weight_decay;
  return g;
}

void Optimizer::commit(Tensor dst, const Tensor& value) const {
  if (!found_inf_.defined()) {
    dst.copy_(value);
    return;
  }
  dst.copy_(where(ne(found_inf_.reshape({}), 0.0), dst, value.to(dst.dtype())));
}

TensorList Optimizer::steps_for(const Batch& batch) {
  if (steps_.size() != num_params_) steps_.resize(num_params_);
  TensorList out, fresh;
  NoGradGuard no_grad;
  for (size_t k = 0; k < batch.params.size(); ++k) {
    Tensor& s = steps_[batch.index[k]];
    if (!s.defined()) {
      s = empty({}, TensorOptions(DType::Float32, batch.params[k].device()));
      fresh.push_back(s);
    } else {
      s = step_on(s, batch.params[k].device());
    }
    out.push_back(s);
  }
  zero_by_device(fresh);
  return out;
}

void Optimizer::finish_step(const TensorList& stepped) {
  for (const auto& [dev, steps] : split_by_device(stepped)) {
    const bool gate = found_inf_.defined() && found_inf_.device() == dev;
    foreach_add_scalar_(steps, 1.0, gate ? found_inf_ : Tensor());
  }
  count_step();
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  NoGradGuard no_grad;
  for (const auto& [name, list] : state_) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].defined()) out["state." + std::to_string(i) + "." + name] = list[i].clone();
    }
  }
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (steps_[i].defined()) out["state." + std::to_string(i) + ".step"] = steps_[i].clone();
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    out["group." + std::to_string(g) + ".lr"] = full({}, groups_[g].lr, TensorOptions(DType::Float64));
    out["group." + std::to_string(g) + ".params"] =
        full({}, static_cast<double>(groups_[g].params.size()), TensorOptions(DType::Int64));
  }
  out["step"] = full({}, step_count_, TensorOptions(DType::Int64));
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  const char* op = "Optimizer::load_state_dict";
  // Everything is checked before anything changes, so a refused state leaves the optimizer as it was.
  std::vector<const Tensor*> params(num_params_);
  std::vector<size_t> group_of(num_params_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      params[flat_index(g, i)] = &groups_[g].params[i];
      group_of[flat_index(g, i)] = g;
    }
  }
  const std::vector<std::string> names = state_names();

  auto scalar = [&](const std::string& key, const Tensor& t, DType dtype) -> const Tensor& {
    if (!t.defined()) throw Error(std::string(op) + ": \"" + key + "\" is an undefined tensor");
    if (t.numel() != 1 || t.dtype() != dtype) {
      throw DTypeError(std::string(op) + ": \"" + key + "\" must be a one-element " + dtype_name(dtype) +
                       " tensor, got " + dtype_name(t.dtype()) + " of shape " + shape_str(t.sizes()));
    }
    return t;
  };
  auto required = [&](const std::string& key, DType dtype) -> const Tensor& {
    auto it = state.find(key);
    if (it == state.end()) throw Error(std::string(op) + ": missing key \"" + key + "\"");
    return scalar(key, it->second, dtype);
  };
  // A step count is a finite whole number >= 0: AdamW's bias corrections divide by 1 - beta^(step + 1),
  // which is 0 at a step of -1, and no other count means anything. Host reads: a load may wait.
  auto step_count = [&](const std::string& key, const Tensor& t) -> const Tensor& {
    const double v = scalar(key, t, DType::Float32).to(Device::cpu()).item<double>();
    if (!(v >= 0.0) || !std::isfinite(v) || v != std::floor(v)) {
      throw Error(std::string(op) + ": \"" + key + "\" must be a whole number >= 0, got " + num_str(v));
    }
    return t;
  };
  const int64_t step = required("step", DType::Int64).to(Device::cpu()).item<int64_t>();
  if (step < 0) throw Error(std::string(op) + ": \"step\" must be >= 0, got " + std::to_string(step));
  std::vector<double> lrs;
  // States of older kiln versions count steps per group ("group.<g>.step"): each parameter with
  // state takes its group's count.
  TensorList group_steps(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string group = "group." + std::to_string(g);
    // Host tensors: reading them waits on no device.
    lrs.push_back(required(group + ".lr", DType::Float64).to(Device::cpu()).item<double>());
    check_lr(lrs.back(), op);
    if (auto it = state.find(group + ".step"); it != state.end()) group_steps[g] = step_count(it->first, it->second);
    // The groups' sizes, where the state says (states of older kiln versions do not): another split
    // of the parameters would give each its neighbour's state.
    if (state.count(group + ".params")) {
      const int64_t n = required(group + ".params", DType::Int64).to(Device::cpu()).item<int64_t>();
      if (n != static_cast<int64_t>(groups_[g].params.size())) {
        throw Error(std::string(op) + ": group " + std::to_string(g) + " of the state has " + std::to_string(n) +
                    " parameters, this optimizer's " + std::to_string(groups_[g].params.size()));
      }
    }
  }

  std::map<std::string, std::vector<std::pair<size_t, Tensor>>> loaded;
  std::vector<size_t> have(num_params_, 0);  // state tensors loaded per parameter, steps aside
  TensorList steps(num_params_);
  for (const auto& [key, t] : state) {
    if (key == "step") continue;
    if (key.rfind("group.", 0) == 0) {
      size_t g = 0;
      std::string field;
      if (!parse_key(key, "group", g, field) || g >= groups_.size() ||
          (field != "lr" && field != "step" && field != "params")) {
        throw Error(std::string(op) + ": unexpected key \"" + key + "\" (this optimizer has " +
                    std::to_string(groups_.size()) + " groups)");
      }
      continue;
    }
    size_t i = 0;
    std::string name;
    if (!parse_key(key, "state", i, name)) throw Error(std::string(op) + ": unexpected key \"" + key + "\"");
    if (i >= num_params_) {
      throw Error(std::string(op) + ": key \"" + key + "\" names parameter " + std::to_string(i) + ", but there are " +
                  std::to_string(num_params_));
    }
    if (name == "step") {
      steps[i] = step_count(key, t);
      continue;
    }
    const std::vector<std::string> kept = group_state_names(group_of[i]);
    if (std::find(kept.begin(), kept.end(), name) == kept.end()) {
      throw Error(std::string(op) + ": unexpected key \"" + key + "\": this optimizer keeps no state \"" + name + "\"" +
                  (std::find(names.begin(), names.end(), name) != names.end()
                       ? " for the parameters of group " + std::to_string(group_of[i])
                       : std::string()));
    }
    const Tensor& p = *params[i];
    const Shape want = is_scalar_state(name) ? Shape{} : p.sizes();
    if (!t.defined() || t.sizes() != want || t.dtype() != state_dtype(p)) {
      throw Error(std::string(op) + ": \"" + key + "\" is " +
                  (t.defined() ? shape_str(t.sizes()) + " " + dtype_name(t.dtype()) : std::string("undefined")) +
                  ", expected " + shape_str(want) + " " + dtype_name(state_dtype(p)) + " for its parameter");
    }
    loaded[name].push_back({i, t});
    ++have[i];
  }
  // A parameter has either all of its state, step count included, or none (it never had a gradient).
  for (size_t i = 0; i < num_params_; ++i) {
    const size_t wanted = group_state_names(group_of[i]).size();
    if (have[i] != 0 && !steps[i].defined()) steps[i] = group_steps[group_of[i]];
    const std::string which = "parameter " + std::to_string(i);
    if (have[i] != 0 && have[i] != wanted) {
      throw Error(std::string(op) + ": " + which + " has only part of its state (" + std::to_string(have[i]) +
                  " of " + std::to_string(wanted) + " tensors)");
    }
    if (have[i] != 0 && !steps[i].defined()) {
      throw Error(std::string(op) + ": " + which + " has state but no step count (\"state." + std::to_string(i) +
                  ".step\")");
    }
    if (have[i] == 0 && wanted != 0 && steps[i].defined()) {
      throw Error(std::string(op) + ": " + which + " has a step count but none of its state (" +
                  std::to_string(wanted) + " tensors)");
    }
  }

  NoGradGuard no_grad;
  // Into the state tensors already held, where there are some (as GradScaler::load_state_dict): a
  // CUDA graph captured earlier reads and writes them by address, and a new tensor would leave it
  // updating freed memory.
  std::map<std::string, TensorList> held = std::move(state_);
  state_.clear();
  for (const std::string& n : names) {
    TensorList list(num_params_);
    const auto old = held.find(n);
    for (const auto& [i, t] : loaded[n]) {
      const Tensor& p = *params[i];
      Tensor s;
      if (old != held.end() && i < old->second.size() && old->second[i].defined()) {
        s = old->second[i];
      } else if (is_scalar_state(n)) {
        s = empty({}, TensorOptions(state_dtype(p), p.device()));
      } else {
        s = empty_like(p, state_dtype(p));  // a copy on the parameter's device, in its layout
      }
      s.copy_(t);
      list[i] = s;
    }
    state_[n] = std::move(list);
  }
  TensorList held_steps = std::move(steps_);
  steps_.assign(num_params_, Tensor());
  for (size_t i = 0; i < num_params_; ++i) {
    if (!steps[i].defined()) continue;
    const bool keep = i < held_steps.size() && held_steps[i].defined();
    steps_[i] = keep ? held_steps[i] : empty({}, TensorOptions(DType::Float32, params[i]->device()));
    steps_[i].copy_(steps[i].reshape({}));
  }
  for (size_t g = 0; g < groups_.size(); ++g) set_lr(g, lrs[g]);
  step_count_ = step;
}

std::vector<ParamGroup> decay_groups(const std::vector<std::pair<std::string, Tensor>>& named_params, double lr,
                                     double weight_decay) {
  ParamGroup decay, no_decay;
  decay.lr = no_decay.lr = lr;
  decay.weight_decay = weight_decay;
  no_decay.weight_decay = 0.0;
  for (const auto& [name, p] : named_params) {
    if (!p.defined() || !p.requires_grad()) continue;  // frozen tensors are not optimized
    (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  }
  return {decay, no_decay};
}

}  // namespace kiln::nn::optim
