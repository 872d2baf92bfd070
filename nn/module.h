// Module: the PyTorch-shaped container of parameters, buffers and child modules. Names are dotted
// as PyTorch forms them ("blocks.0.attn.qkv.weight"); parameters() lists each tensor once even
// when it is registered under several names (tied weights). to(device/dtype) converts tensors in
// place, keeping their identity, so optimizers built before the move stay valid; to(MemoryFormat)
// does the same for the layout of 4-d tensors (channels-last models).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/profiler.h"
#include "core/tensor.h"

namespace kiln::nn {

class Module : public std::enable_shared_from_this<Module> {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The class name shown when printing ("Linear").
  virtual std::string type_name() const = 0;
  // The text in parentheses when printing ("in_features=784, out_features=10, bias=true").
  virtual std::string extra_repr() const { return ""; }

  // --- registration --------------------------------------------------------------------------
  // Registers a parameter (a leaf; requires_grad is set unless told otherwise) and returns it. With
  // requires_grad false the parameter is frozen even if t requires grad (a leaf on t's memory).
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  // Buffers are state that is saved but not trained (BatchNorm's running statistics).
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M> std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  // Replaces a registered parameter by another tensor (weight tying: head.weight = wte.weight).
  void set_parameter(const std::string& name, const Tensor& t);
  // Unregister a parameter, buffer or child and return it (Python's `del module.name`): what a
  // parametrization (nn/parametrize.h) does to the tensor it takes over. Absent: a kiln::Error.
  // The C++ member that held it keeps its value; the module no longer lists, saves or moves it.
  Tensor remove_parameter(const std::string& name);
  Tensor remove_buffer(const std::string& name);
  std::shared_ptr<Module> remove_module(const std::string& name);
  bool has_parameter(const std::string& name) const;
  bool has_buffer(const std::string& name) const;
  // The parameter or buffer at `target`, a name on this module or a dotted path through its
  // children ("encoder.0.weight"), as PyTorch's get_parameter and get_buffer; absent: an Error
  // naming the part of the path that is missing.
  Tensor get_parameter(const std::string& target) const;
  Tensor get_buffer(const std::string& target) const;

  // --- forward pre-hooks ------------------------------------------------------------------------
  // Functions run in registration order each time the module is called (its operator()), before
  // forward: where parametrizations recompute the tensors they own. Containers call their children
  // the same way, so the hooks of a nested module run too; calling forward() directly skips them,
  // as in PyTorch. A hook may add or remove hooks (itself too): one removed by a hook before it in
  // the same call does not run. Returns the handle that removes it, unique across modules.
  using ForwardPreHook = std::function<void(Module&)>;
  uint64_t register_forward_pre_hook(ForwardPreHook hook);
  // Whether the handle named a hook of this module (removing twice is harmless).
  bool remove_forward_pre_hook(uint64_t handle);
  // The hooks with their handles, in the order they run (PyTorch's _forward_pre_hooks): how
  // nn/prune.h finds its own among them.
  const std::vector<std::pair<uint64_t, ForwardPreHook>>& forward_pre_hooks() const { return forward_pre_hooks_; }
  // What operator() runs before forward (nothing when no hook is registered); a parent that uses a
  // child's tensors without calling the child (a fused kernel) runs the child's hooks itself.
  void run_forward_pre_hooks() {
    if (!forward_pre_hooks_.empty()) run_forward_pre_hooks_slow();
  }

  // --- traversal -----------------------------------------------------------------------------
  // Dotted names, depth first in registration order; a tensor registered twice appears once,
  // under its first name.
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  TensorList parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  // This module ("") and every descendant, with dotted names, depth first; a module registered in
  // two places once, under its first name. A module that no shared_ptr owns (on the stack, a
  // member, inside its constructor) is listed ("") through a pointer that does not own it.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  int64_t num_parameters(bool trainable_only = false) const;

  // --- mode, device, dtype ----------------------------------------------------------------------
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // In place: every parameter and buffer keeps its Tensor identity; gradients are dropped.
  void to(Device device);
  void to(DType dtype);  // floating parameters and buffers only
  // In place: every 4-d parameter and buffer (conv weights) takes the layout `format` names,
  // Contiguous (NCHW) or ChannelsLast, with exactly that layout's strides; others are untouched.
  // Identities and values stay; a gradient already there is converted with its parameter, and
  // the gradients later backward passes produce come in the parameter's layout. An optimizer's
  // state follows the new layout at its next step (one copy). Preserve names no layout: an Error.
  void to(MemoryFormat format);
  // Gradients to none (the default, as in PyTorch 2) or to zeros.
  void zero_grad(bool set_to_none = true);

  // --- state ------------------------------------------------------------------------------------
  // Parameters and buffers by dotted name (tied tensors under each of their names).
  std::map<std::string, Tensor> state_dict() const;
  // Copies values in place, into the module's own dtypes: shapes must be equal, and a floating
  // value converts to a floating tensor of another dtype (a bfloat16 checkpoint loads into a
  // float32 model, as PyTorch's copy_ converts), but integer or bool values match their tensor's
  // dtype exactly. strict: every key must match. Otherwise a kiln::Error names the missing,
  // unexpected or mismatched keys, and nothing is copied.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  // The module tree, PyTorch-style.
  std::string str() const;

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  // The hooks, then forward with the same arguments: the body of the operator() of a module whose
  // forward takes several arguments (`return call(*this, x, mask);`).
  template <class M, class... A>
  static decltype(auto) call(M& m, A&&... args) {
    m.run_forward_pre_hooks();
    return m.forward(std::forward<A>(args)...);
  }
  // Whether str() prints a run of consecutive children that print alike once, as "(0-11): 12 x
  // Block(...)" (PyTorch's ModuleList does; other containers print each child).
  virtual bool str_groups_repeats() const { return false; }
  bool training_ = true;

 private:
  void collect(const std::string& prefix, bool params, bool recurse, bool dedup,
               std::vector<std::pair<std::string, Tensor>>& out, std::vector<const TensorImpl*>& seen) const;
  std::string str_indented(int indent) const;
  // The module that owns the last part of a dotted target, which goes to leaf.
  const Module& owner_of(const std::string& target, std::string& leaf) const;
  Tensor tensor_at(const std::string& target, bool parameter) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  void run_forward_pre_hooks_slow();
  std::vector<std::pair<uint64_t, ForwardPreHook>> forward_pre_hooks_;
};

// A module with one tensor in and one out: what Sequential chains.
class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) {
    run_forward_pre_hooks();
    if (!profile::nvtx_enabled()) return forward(x);
    const profile::NvtxRange range(type_name().c_str());  // core/profiler.h
    return forward(x);
  }
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace kiln::nn
