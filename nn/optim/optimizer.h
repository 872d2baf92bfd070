// Optimizer base: parameter groups, and the state a step reads on the device. Each group's
// learning rate and each parameter's step count live in 0-d tensors on the parameters' device and
// are read by the multi-tensor kernels through pointers, so changing the learning rate or stepping
// never syncs the host, and a whole step can be captured as a CUDA graph and replayed. Steps are
// counted per parameter, as torch.optim counts them: a parameter whose first gradient comes late
// (a branch unused at first, a layer unfrozen later) starts its momentum and its bias corrections
// from its own first step.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln::nn::optim {

struct ParamGroup {
  TensorList params;
  double lr = 1e-3;
  double weight_decay = 0.0;
  // Per-group option overrides by name (e.g. "momentum", "beta1"); unset names use the optimizer's.
  std::map<std::string, double> options;
};

// What a training checkpoint keeps of an optimizer (nn/training_checkpoint.h): its state as named
// tensors, and the way back. Optimizer is one; dist::ZeroRedundancyOptimizer, whose state lies in
// shards over the ranks, is another.
class Checkpointable {
 public:
  virtual ~Checkpointable() = default;
  virtual std::map<std::string, Tensor> state_dict() const = 0;
  virtual void load_state_dict(const std::map<std::string, Tensor>& state) = 0;
};

class Optimizer : public Checkpointable {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient. No host synchronization.
  virtual void step() = 0;
  void zero_grad(bool set_to_none = true);

  size_t num_groups() const { return groups_.size(); }
  // An IndexError naming the call for a group past the end.
  const ParamGroup& group(size_t i) const;
  // The learning rate of a group, as the host last set it; set_lr writes the device scalar too.
  double lr(size_t group = 0) const;
  void set_lr(double lr);                // every group
  void set_lr(size_t group, double lr);  // one group
  // The lr a group was given when the optimizer was made (PyTorch's initial_lr); set_lr and
  // load_state_dict leave it. A schedule scales it (nn/optim/lr_scheduler.h).
  double initial_lr(size_t group = 0) const;
  // Sets a group's option (a name option_names() lists: "momentum", "beta1", ...), as PyTorch's
  // schedulers write param_groups[g]["momentum"]; read by the next step(). A name the optimizer
  // does not know, or a value it refuses, is a kiln::Error that leaves the option as it was. A
  // step captured in a CUDA graph keeps the options it was captured with (kernel arguments).
  void set_option(size_t group, const std::string& name, double value);
  // The option names a group may override (ParamGroup::options); check_options rejects others.
  virtual std::vector<std::string> option_names() const = 0;
  // A group's option: its override, else the optimizer's default.
  double option(size_t group, const std::string& name, double fallback) const;
  // Completed step() calls (the host's count; the device's per-parameter counts do not advance on
  // steps skipped for inf/NaN gradients, nor for a parameter without a gradient).
  int64_t step_count() const { return step_count_; }
  // A CUDA graph replayed a captured step(): the replay advanced the device's step counts, and
  // this brings the host's count (saved in checkpoints) along (examples/graphed_step.h).
  void count_replayed_step() { ++step_count_; }

  // Loss scaling without a sync, the hook nn::amp::GradScaler drives: while `found_inf` is
  // defined, step() changes nothing (parameters, state, the device step counts) where
  // *found_inf != 0, and gradients are divided by *grad_scale inside the update when that is
  // defined. One-element float32 tensors on the parameters' device; undefined tensors turn it off.
  void set_grad_scaling(const Tensor& found_inf, const Tensor& grad_scale = Tensor());
  // The tensors set_grad_scaling last set (undefined when off), so a scaler can put them back.
  const Tensor& found_inf() const { return found_inf_; }
  const Tensor& grad_scale() const { return grad_scale_; }
  // The gradients (.grad, the tensors themselves, not copies) of every parameter that has one,
  // groups in order: what a gradient scaler unscales in place.
  TensorList grads() const;

  // Everything needed to resume bit for bit, as a snapshot (copies, made without a sync):
  // per-parameter state tensors under "state.<flat param index>.<name>", among them each stepped
  // parameter's step count "state.<i>.step" (0-d float32 on its device), group learning rates
  // "group.<g>.lr" (float64, CPU), each group's number of parameters "group.<g>.params" (int64,
  // CPU) and the host step count "step" (int64, CPU).
  std::map<std::string, Tensor> state_dict() const override;
  // Restores a state_dict of an optimizer built over the same parameters; a mismatch in keys,
  // shapes or dtypes, or a parameter with part of its state, is a kiln::Error naming the key or
  // parameter. A state of an older kiln, which counted steps per group ("group.<g>.step"), gives
  // each parameter with state its group's count.
  void load_state_dict(const std::map<std::string, Tensor>& state) override;
  // The names of the per-parameter state tensors this optimizer keeps ("exp_avg", "exp_avg_sq"),
  // which load_state_dict accepts, besides every stepped parameter's "step".
  virtual std::vector<std::string> state_names() const = 0;
  // Those a parameter of `group` keeps (SGD: a momentum buffer only where the group has momentum).
  virtual std::vector<std::string> group_state_names(size_t group) const { return state_names(); }
  // Those of state_names() that are one number per parameter rather than one per element (NAdam's
  // "mu_product", ASGD's "eta" and "mu"): 0-d tensors of the state's dtype on the parameter's
  // device. They depend on the parameter's step count and learning rate alone, so a sharded
  // optimizer keeps one per shard and gives it to each parameter of the group.
  virtual std::vector<std::string> scalar_state_names() const { return {}; }
  bool is_scalar_state(const std::string& name) const;
  // The dtype of a parameter's state tensors: float32, or float64 for float64 parameters.
  static DType state_dtype(const Tensor& param);

  // The two kinds of indexed keys of a state dict split into index and rest: "state.<index>.<name>"
  // and "group.<g>.<field>", the index as state_dict writes it (decimal, no leading zero: "00"
  // would be a second key for index 0 that nothing reads). False for any other form.
  static bool parse_key(const std::string& key, const char* prefix, size_t& index, std::string& rest);

  // The checks every optimizer makes of its parameters (`who` names it in the errors): each a
  // defined floating leaf tensor that requires grad, none in the list twice.
  // ZeroRedundancyOptimizer makes them of the parameters it shards, which its local optimizer never
  // sees.
  static void check_params(const std::vector<ParamGroup>& groups, const char* who);

 protected:
  explicit Optimizer(std::vector<ParamGroup> groups);
  // The groups of an optimizer built over one list of parameters (the subclasses' short
  // constructors).
  static std::vector<ParamGroup> one_group(const TensorList& params, double lr, double weight_decay);
  // Per-parameter state tensors by name (e.g. "exp_avg"), created lazily by subclasses.
  std::map<std::string, TensorList>& state() { return state_; }
  const std::map<std::string, TensorList>& state() const { return state_; }
  // Device scalars: group learning rates (float64), on the device of the group's parameters.
  const Tensor& lr_tensor(size_t group) const { return lr_tensors_.at(group); }
  void count_step() { ++step_count_; }

  // --- helpers for subclasses' step() ---------------------------------------------------------
  // Subclass constructors call this once their option_names() answer: an unknown override name
  // in some group's options is a kiln::Error naming it.
  void check_options(const char* optimizer) const;
  // Checks every group's option values (a kiln::Error naming the group): subclass constructors call
  // their own, and set_option calls it after each change.
  virtual void validate_options() {}
  // Parameters of group g that have a gradient, their gradients (in the parameter's memory
  // layout) and their flat indices. Moves the group's lr and step scalars, and the state of
  // these parameters, along when Module::to moved the parameters since the last step.
  struct Batch {
    TensorList params, grads;
    std::vector<size_t> index;
  };
  Batch collect(size_t group);
  // State `name` of each parameter of a batch, created as `initial` (float32, or float64 for
  // float64 parameters) on first use: the parameter's shape, or 0-d for a scalar_state_names() one.
  TensorList state_for(const std::string& name, const Batch& batch, double initial = 0.0);
  // The step count of each parameter of a batch: 0-d float32 on its device, created as zero on
  // first use, advanced on the device by finish_step (exact up to 2^24 steps).
  TensorList steps_for(const Batch& batch);
  // After every update of a step: advances the step counts the updates read (one launch per
  // device; skipped on the device where *found_inf != 0) and the host count.
  void finish_step(const TensorList& stepped);
  // For optimizers composed of tensor ops (RMSprop, Adagrad, ...): a parameter's gradient as the
  // update reads it, in the state's dtype: divided by grad_scale() when set, negated for maximize,
  // plus weight_decay * param (L2 decay).
  Tensor composed_grad(const Tensor& param, const Tensor& grad, double weight_decay, bool maximize) const;
  // dst takes `value` (cast to dst's dtype), except while found_inf() is set: then it keeps its
  // own. No host read.
  void commit(Tensor dst, const Tensor& value) const;
  // `group` as an index into groups_; an IndexError naming `op` when past the end.
  size_t checked_group(size_t group, const char* op) const;
  // Flat index of parameter i of group g (groups in order, parameters in order).
  size_t flat_index(size_t group, size_t i) const { return group_offsets_.at(group) + i; }
  size_t num_params() const { return num_params_; }

  std::vector<ParamGroup> groups_;
  TensorList lr_tensors_;
  std::vector<double> initial_lrs_;  // per group
  std::map<std::string, TensorList> state_;
  TensorList steps_;  // per flat parameter index; undefined until the parameter's first step
  int64_t step_count_ = 0;
  Tensor found_inf_, grad_scale_;
  std::vector<size_t> group_offsets_;
  size_t num_params_ = 0;
};

// Splits a model's parameters into two groups as is usual for AdamW: group 0 holds matrices
// (dim >= 2) with weight decay, group 1 biases and norm parameters (dim < 2) without. Tensors
// that do not require grad are left out.
std::vector<ParamGroup> decay_groups(const std::vector<std::pair<std::string, Tensor>>& named_params, double lr,
                                     double weight_decay);

}  // namespace kiln::nn::optim
