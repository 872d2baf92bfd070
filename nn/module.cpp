// Module bookkeeping: registration, dotted-name traversal with tied-weight deduplication,
// in-place device/dtype/layout moves, state dicts and printing.
#include "nn/module.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <ostream>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/ops/factory.h"
#include "kernels/error.h"

namespace kiln::nn {
namespace {
void check_name(const std::string& name, const char* what) {
  if (name.empty() || name.find('.') != std::string::npos) {
    throw Error(std::string("Module: ") + what + " name \"" + name + "\" must be non-empty and contain no '.'");
  }
}
}  // namespace

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_name(name, "parameter");
  if (!t.defined()) throw Error("Module: parameter \"" + name + "\" is undefined");
  if (requires_grad && !is_floating(t.dtype())) {
    throw DTypeError("Module: parameter \"" + name + "\" of " + type_name() + " is " + dtype_name(t.dtype()) +
                     "; only floating point tensors can be trained (register it as a buffer, or with requires_grad "
                     "false)");
  }
  for (auto& [n, p] : params_)
    if (n == name) throw Error("Module: parameter \"" + name + "\" is registered twice in " + type_name());
  // A new leaf on the same memory where the tensor has history, or requires grad and the parameter
  // must not (as PyTorch's Parameter(t, requires_grad=False)): the caller's tensor keeps its flag.
  if (!t.is_leaf() || (!requires_grad && t.requires_grad())) t = t.detach();
  if (requires_grad) t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_name(name, "buffer");
  for (auto& [n, b] : buffers_)
    if (n == name) throw Error("Module: buffer \"" + name + "\" is registered twice in " + type_name());
  buffers_.emplace_back(name, t.defined() ? t.detach() : t);
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name(name, "module");
  if (!m) throw Error("Module: child \"" + name + "\" is null");
  for (auto& [n, c] : children_)
    if (n == name) throw Error("Module: child \"" + name + "\" is registered twice in " + type_name());
  children_.emplace_back(name, std::move(m));
}

void Module::set_parameter(const std::string& name, const Tensor& t) {
  for (auto& [n, p] : params_) {
    if (n == name) {
      p = t;
      return;
    }
  }
  throw Error("Module: " + type_name() + " has no parameter \"" + name + "\"");
}

namespace {
template <class T>
T take(std::vector<std::pair<std::string, T>>& list, const std::string& name, const char* what, const Module& m) {
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (it->first != name) continue;
    T out = std::move(it->second);
    list.erase(it);
    return out;
  }
  throw Error(std::string("Module: ") + m.type_name() + " has no " + what + " \"" + name + "\"");
}
}  // namespace

Tensor Module::remove_parameter(const std::string& name) { return take(params_, name, "parameter", *this); }
Tensor Module::remove_buffer(const std::string& name) { return take(buffers_, name, "buffer", *this); }
std::shared_ptr<Module> Module::remove_module(const std::string& name) {
  return take(children_, name, "child module", *this);
}

bool Module::has_parameter(const std::string& name) const {
  return std::any_of(params_.begin(), params_.end(), [&](const auto& p) { return p.first == name; });
}

bool Module::has_buffer(const std::string& name) const {
  return std::any_of(buffers_.begin(), buffers_.end(), [&](const auto& b) { return b.first == name; });
}

const Module& Module::owner_of(const std::string& target, std::string& leaf) const {
  const Module* owner = this;
  size_t start = 0;
  for (size_t dot = target.find('.'); dot != std::string::npos; dot = target.find('.', start)) {
    const std::string child = target.substr(start, dot - start);
    const auto it =
        std::find_if(owner->children_.begin(), owner->children_.end(), [&](const auto& c) { return c.first == child; });
    if (it == owner->children_.end()) {
      throw Error("Module: " + owner->type_name() + " has no child \"" + child + "\" (looking up \"" + target +
                  "\" in " + type_name() + ")");
    }
    owner = it->second.get();
    start = dot + 1;
  }
  leaf = target.substr(start);
  return *owner;
}

Tensor Module::tensor_at(const std::string& target, bool parameter) const {
  std::string leaf;
  const Module& owner = owner_of(target, leaf);
  for (const auto& [n, t] : parameter ? owner.params_ : owner.buffers_)
    if (n == leaf) return t;
  throw Error("Module: " + owner.type_name() + " has no " + (parameter ? "parameter" : "buffer") + " \"" + leaf + "\"" +
              (leaf != target ? " (looking up \"" + target + "\" in " + type_name() + ")" : std::string()));
}

Tensor Module::get_parameter(const std::string& target) const { return tensor_at(target, true); }
Tensor Module::get_buffer(const std::string& target) const { return tensor_at(target, false); }

uint64_t Module::register_forward_pre_hook(ForwardPreHook hook) {
  if (!hook) throw Error("Module: register_forward_pre_hook of " + type_name() + " got an empty function");
  // Handles are unique across modules: one module's handle never removes another's hook.
  static std::atomic<uint64_t> next_handle{1};
  const uint64_t handle = next_handle.fetch_add(1);
  forward_pre_hooks_.emplace_back(handle, std::move(hook));
  return handle;
}

bool Module::remove_forward_pre_hook(uint64_t handle) {
  const auto it = std::find_if(forward_pre_hooks_.begin(), forward_pre_hooks_.end(),
                               [&](const auto& h) { return h.first == handle; });
  if (it == forward_pre_hooks_.end()) return false;
  forward_pre_hooks_.erase(it);
  return true;
}

void Module::run_forward_pre_hooks_slow() {
  // A copy: a hook may add or remove hooks (itself included) while the list runs. Those added run
  // from the next call on; those removed (by a hook before them) do not run.
  const auto hooks = forward_pre_hooks_;
  for (const auto& [handle, hook] : hooks) {
    const bool still = std::any_of(forward_pre_hooks_.begin(), forward_pre_hooks_.end(),
                                   [h = handle](const auto& entry) { return entry.first == h; });
    if (still) hook(*this);
  }
}

void Module::collect(const std::string& prefix, bool params, bool recurse, bool dedup,
                     std::vector<std::pair<std::string, Tensor>>& out, std::vector<const TensorImpl*>& seen) const {
  for (const auto& [n, t] : params ? params_ : buffers_) {
    if (!t.defined()) continue;
    if (dedup) {
      if (std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) continue;
      seen.push_back(t.impl());
    }
    out.emplace_back(prefix + n, t);
  }
  if (!recurse) return;
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", params, true, dedup, out, seen);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<const TensorImpl*> seen;
  collect("", true, recurse, true, out, seen);
  return out;
}

TensorList Module::parameters(bool recurse) const {
  TensorList out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<const TensorImpl*> seen;
  collect("", false, recurse, true, out, seen);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  // Depth first; a module registered in two places is listed once, under its first name (as
  // PyTorch's named_modules), so a walk over them visits each module once.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::set<const Module*> seen;
  std::function<void(const std::string&, const std::shared_ptr<Module>&)> visit;
  visit = [&](const std::string& name, const std::shared_ptr<Module>& m) {
    if (!seen.insert(m.get()).second) return;
    out.emplace_back(name, m);
    for (auto& [n, c] : m->children_) visit(name.empty() ? n : name + "." + n, c);
  };
  // A module not owned by a shared_ptr (on the stack, a member, inside its own constructor) is
  // listed through a pointer that does not own it, valid while the module lives.
  std::shared_ptr<Module> self = weak_from_this().lock();
  visit("", self ? self : std::shared_ptr<Module>(std::shared_ptr<Module>(), this));
  return out;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters())
    if (!trainable_only || t.requires_grad()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  auto move = [&](std::vector<std::pair<std::string, Tensor>> list) {
    for (auto& [n, t] : list)
      if (t.device() != device) t.set_data(t.detach().to(device));
  };
  move(named_parameters());
  move(named_buffers());
  zero_grad();
}

void Module::to(DType dtype) {
  if (!is_floating(dtype)) throw DTypeError(std::string("Module::to: needs a floating dtype, got ") + dtype_name(dtype));
  NoGradGuard no_grad;
  auto cast = [&](std::vector<std::pair<std::string, Tensor>> list) {
    for (auto& [n, t] : list)
      if (t.is_floating_point() && t.dtype() != dtype) t.set_data(t.detach().to(dtype));
  };
  cast(named_parameters());
  cast(named_buffers());
  zero_grad();
}

void Module::to(MemoryFormat format) {
  if (format != MemoryFormat::Contiguous && format != MemoryFormat::ChannelsLast) {
    throw Error("Module::to: MemoryFormat::Preserve names no layout; convert " + type_name() +
                " to MemoryFormat::Contiguous or MemoryFormat::ChannelsLast");
  }
  NoGradGuard no_grad;
  // Exactly the layout's strides, even where a size-1 dim makes both layouts hold the same bytes
  // (a 1-channel stem weight): conv2d reads those strides to tell a converted model from an NCHW one.
  auto strides_of = [&](const Tensor& t) {
    return format == MemoryFormat::ChannelsLast ? channels_last_strides(t.sizes()) : contiguous_strides(t.sizes());
  };
  auto in_format = [&](const Tensor& t) {
    Tensor out = empty_strided(t.sizes(), strides_of(t), TensorOptions(t.dtype(), t.device()));
    out.copy_(t.detach());
    return out;
  };
  auto convert = [&](std::vector<std::pair<std::string, Tensor>> list) {
    for (auto& [n, t] : list) {
      if (t.dim() != 4 || t.strides() == strides_of(t)) continue;
      Tensor grad = t.grad();
      if (grad.defined() && grad.strides() != strides_of(grad)) grad = in_format(grad);
      // set_data keeps the handle that optimizers and tied modules hold, and drops the gradient,
      // which goes back converted.
      t.set_data(in_format(t));
      if (grad.defined()) t.set_grad(grad);
    }
  };
  convert(named_parameters());
  convert(named_buffers());
}

void Module::zero_grad(bool set_to_none) {
  for (auto& [n, p] : named_parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard g;
      p.mutable_grad().zero_();
    }
  }
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  std::vector<const TensorImpl*> seen;
  std::vector<std::pair<std::string, Tensor>> all;
  collect("", true, true, false, all, seen);
  collect("", false, true, false, all, seen);
  for (auto& [n, t] : all) out[n] = t;
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  std::map<std::string, Tensor> own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (auto& [n, t] : own) {
    auto it = state.find(n);
    if (it == state.end()) {
      missing.push_back(n);
    } else if (!it->second.defined()) {
      mismatched.push_back(n + " (expected " + shape_str(t.sizes()) + " " + dtype_name(t.dtype()) +
                           ", got an undefined tensor)");
    } else if (it->second.sizes() != t.sizes() ||
               (it->second.dtype() != t.dtype() && !(it->second.is_floating_point() && t.is_floating_point()))) {
      // Floating dtypes convert in the copy below (PyTorch's copy_); other dtype changes are refused.
      mismatched.push_back(n + " (expected " + shape_str(t.sizes()) + " " + dtype_name(t.dtype()) + ", got " +
                           shape_str(it->second.sizes()) + " " + dtype_name(it->second.dtype()) + ")");
    }
  }
  for (auto& [n, t] : state)
    if (!own.count(n)) unexpected.push_back(n);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s;
  };
  if (!mismatched.empty()) throw Error("load_state_dict: shape or dtype mismatch for " + join(mismatched));
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::string msg = "load_state_dict: keys do not match " + type_name() + ":";
    if (!missing.empty()) msg += " missing " + join(missing) + ";";
    if (!unexpected.empty()) msg += " unexpected " + join(unexpected) + ";";
    throw Error(msg);
  }
  NoGradGuard no_grad;
  for (auto& [n, t] : own) {
    auto it = state.find(n);
    if (it != state.end()) t.copy_(it->second.to(t.device()));
  }
}

std::string Module::str_indented(int indent) const {
  std::ostringstream os;
  const std::string extra = extra_repr();
  os << type_name() << '(';
  // As PyTorch: a one-line extra_repr stays inline only when there are no children; otherwise
  // each of its lines goes on its own indented line above the children.
  if (children_.empty() && extra.find('\n') == std::string::npos) {
    os << extra;
  } else {
    os << '\n';
    std::istringstream lines(extra);
    for (std::string line; std::getline(lines, line);)
      os << std::string(static_cast<size_t>(indent + 2), ' ') << line << '\n';
    const std::string pad(static_cast<size_t>(indent + 2), ' ');
    for (size_t i = 0; i < children_.size();) {
      const std::string text = children_[i].second->str_indented(indent + 2);
      size_t end = i + 1;  // past the run of children printing as this one
      while (str_groups_repeats() && end < children_.size() &&
             children_[end].second->str_indented(indent + 2) == text) {
        ++end;
      }
      if (end - i == 1) {
        os << pad << '(' << children_[i].first << "): " << text << '\n';
      } else {
        os << pad << '(' << children_[i].first << '-' << children_[end - 1].first << "): " << end - i << " x " << text
           << '\n';
      }
      i = end;
    }
    os << std::string(static_cast<size_t>(indent), ' ');
  }
  os << ')';
  return os.str();
}

std::string Module::str() const { return str_indented(0); }

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

}  // namespace kiln::nn
