// Pruning: the methods' masks, the hook that applies a mask at each call, and the bookkeeping of
// "name_orig" and "name_mask" (PyTorch's, so state dicts carry the same keys).
#include "nn/prune.h"

#include <cmath>
#include <limits>
#include <utility>

#include "core/autograd.h"
#include "core/ops/distance.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/index.h"
#include "core/ops/math.h"
#include "core/ops/random.h"
#include "core/ops/reduce.h"
#include "core/ops/scatter_into.h"
#include "core/ops/search.h"
#include "core/ops/shape.h"
#include "core/ops/topk.h"
#include "core/ops/view.h"
#include "kernels/error.h"
#include "nn/parametrize.h"

namespace kiln::nn::prune {

// --- Amount --------------------------------------------------------------------------------------

Amount::Amount(int count) : Amount(static_cast<int64_t>(count)) {}

Amount::Amount(int64_t count) : is_fraction_(false), count_(count) {
  if (count < 0) throw Error("prune: amount=" + std::to_string(count) + " must be a non-negative count");
}

Amount::Amount(double fraction) : is_fraction_(true), fraction_(fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    throw Error("prune: amount=" + num_str(fraction) + " must be a fraction in [0, 1] (or a count)");
  }
}

int64_t Amount::of(int64_t eligible, const char* op) const {
  // Python's round: to the nearest, ties to even (nearbyint in the default rounding mode).
  const int64_t n =
      is_fraction_ ? static_cast<int64_t>(std::nearbyint(fraction_ * static_cast<double>(eligible))) : count_;
  if (n > eligible) {
    throw Error(std::string(op) + ": amount=" + str() + " is more than the " + std::to_string(eligible) +
                " entries or channels that can still be pruned");
  }
  return n;
}

std::string Amount::str() const { return is_fraction_ ? num_str(fraction_) : std::to_string(count_); }

// --- the methods ---------------------------------------------------------------------------------

namespace {

// dim as an index into t's dims, for a structured method; t must have 2 dims or more.
int64_t channel_dim(const char* method, const Tensor& t, int64_t dim) {
  if (t.dim() < 2) {
    throw Error(std::string("prune ") + method + ": structured pruning needs a tensor of 2 dims or more, got " +
                shape_str(t.sizes()));
  }
  const int64_t d = dim < 0 ? dim + t.dim() : dim;
  if (d < 0 || d >= t.dim()) {
    throw IndexError(std::string("prune ") + method + ": dim " + std::to_string(dim) + " is out of range for " +
                     shape_str(t.sizes()));
  }
  return d;
}

Shape all_dims_but(int64_t n, int64_t d) {
  Shape dims;
  for (int64_t i = 0; i < n; ++i)
    if (i != d) dims.push_back(i);
  return dims;
}

// default_mask times a channel mask keep [C] (1 keeps channel c along dim d).
Tensor channel_mask(const Tensor& keep, const Tensor& default_mask, int64_t d) {
  Shape shape(static_cast<size_t>(default_mask.dim()), 1);
  shape[static_cast<size_t>(d)] = keep.size(0);
  return keep.to(default_mask.dtype()).reshape(shape) * default_mask;
}

// default_mask with zeros at the flat positions `at`.
Tensor zero_at(const Tensor& default_mask, const Tensor& at) {
  return scatter(default_mask.contiguous().reshape({-1}), 0, at, 0.0).reshape(default_mask.sizes());
}

}  // namespace

Tensor Identity::compute_mask(const Tensor&, const Tensor& default_mask) const { return default_mask.clone(); }

Tensor RandomUnstructured::compute_mask(const Tensor& t, const Tensor& default_mask) const {
  const int64_t k = amount.of(t.numel(), "prune RandomUnstructured");
  if (k == 0) return default_mask.clone();
  const Tensor draws = rand({t.numel()}, TensorOptions(DType::Float32, t.device()), generator);
  return zero_at(default_mask, topk(draws, k).second);
}

Tensor L1Unstructured::compute_mask(const Tensor& t, const Tensor& default_mask) const {
  const int64_t k = amount.of(t.numel(), "prune L1Unstructured");
  if (k == 0) return default_mask.clone();
  return zero_at(default_mask, topk(abs(t).reshape({-1}), k, -1, false).second);
}

Tensor RandomStructured::compute_mask(const Tensor& t, const Tensor& default_mask) const {
  const int64_t d = channel_dim("RandomStructured", t, dim_), channels = t.size(d);
  const int64_t k = amount.of(channels, "prune RandomStructured");
  if (k == 0) return default_mask.clone();
  // The k channels of the smallest draws go: the draws above the k-th smallest stay.
  const Tensor draws = rand({channels}, TensorOptions(DType::Float32, t.device()), generator);
  return channel_mask(gt(draws, kthvalue(draws, k).first), default_mask, d);
}

Tensor LnStructured::compute_mask(const Tensor& t, const Tensor& default_mask) const {
  const int64_t d = channel_dim("LnStructured", t, dim_), channels = t.size(d);
  const int64_t k = amount.of(channels, "prune LnStructured");
  if (k == 0) return default_mask.clone();
  const Shape over = all_dims_but(t.dim(), d);
  const Tensor a = abs(t.to(t.dtype() == DType::Float64 ? DType::Float64 : DType::Float32));
  Tensor norms;
  if (n == std::numeric_limits<double>::infinity()) {
    norms = amax(a, over);
  } else if (n == -std::numeric_limits<double>::infinity()) {
    norms = amin(a, over);
  } else if (n == 0.0) {
    norms = sum(ne(a, 0.0).to(a.dtype()), over);
  } else if (n >= 1.0) {
    norms = vector_norm(a, n, over);
  } else {
    norms = pow(sum(pow(a, n), over), 1.0 / n);
  }
  // The channels - k of the largest norms stay.
  const Tensor kept = topk(norms, channels - k).second;
  return channel_mask(scatter(zeros({channels}, TensorOptions(DType::Float32, t.device())), 0, kept, 1.0), default_mask,
                      d);
}

Tensor CustomFromMask::compute_mask(const Tensor&, const Tensor& default_mask) const {
  if (!mask.defined() || mask.sizes() != default_mask.sizes()) {
    throw ShapeError("prune CustomFromMask: the mask is " +
                     (mask.defined() ? shape_str(mask.sizes()) : std::string("undefined")) + ", the tensor is " +
                     shape_str(default_mask.sizes()));
  }
  return ne(mask.to(default_mask.device()), 0.0).to(default_mask.dtype()) * default_mask;
}

// --- the hook and its state ----------------------------------------------------------------------

namespace {

struct State {
  std::string name;
  Tensor* field;
  std::vector<std::shared_ptr<PruningMethod>> methods;
  uint64_t hook = 0;
};

// The forward pre-hook: the member gets orig * mask at each call. A type of its own, so that
// prune finds its hooks among a module's (std::function::target).
struct Hook {
  std::shared_ptr<State> state;
  void operator()(Module& m) const {
    *state->field = m.get_parameter(state->name + "_orig") * m.get_buffer(state->name + "_mask");
  }
};

std::string named(const Module& module, const std::string& name) { return module.type_name() + "'s \"" + name + "\""; }

std::shared_ptr<State> state_of(const Module& module, const std::string& name) {
  for (const auto& [handle, hook] : module.forward_pre_hooks()) {
    const Hook* h = hook.target<Hook>();
    if (h && h->state->name == name) return h->state;
  }
  return nullptr;
}

// The new mask: the method's choice among what is still eligible, PyTorch's PruningContainer
// rules. default_mask holds the old mask (ones on a first pruning).
Tensor combine(const std::string& op, const PruningMethod& method, const Tensor& t, const Tensor& default_mask) {
  switch (method.type()) {
    case PruningType::Unstructured: {
      const Tensor left = eq(default_mask, 1.0);
      const Tensor partial = method.compute_mask(masked_select(t, left), masked_select(default_mask, left));
      return masked_scatter(default_mask, left, partial);
    }
    case PruningType::Structured: {
      const int64_t d = channel_dim(method.name().c_str(), t, method.dim());
      const Tensor left = nonzero(ne(sum(default_mask, all_dims_but(t.dim(), d)), 0.0)).reshape({-1});
      const Tensor partial = method.compute_mask(index_select(t, d, left), index_select(default_mask, d, left));
      return index_copy(default_mask, d, left, partial);
    }
    case PruningType::Global: return method.compute_mask(t, default_mask);
  }
  throw Error(op + ": unknown pruning type");
}

}  // namespace

// --- applying and removing -----------------------------------------------------------------------

Module& apply(Module& module, const std::string& name, Tensor& field, std::shared_ptr<PruningMethod> method,
              const Tensor& importance_scores) {
  if (!method) throw Error("prune: the pruning method for " + named(module, name) + " is null");
  const std::string op = "prune " + method->name();
  std::shared_ptr<State> state = state_of(module, name);
  Tensor orig, default_mask;
  if (state) {
    if (&field != state->field) {
      throw Error(op + ": " + named(module, name) + " is already pruned into another member than the one given");
    }
    orig = module.get_parameter(name + "_orig");
    default_mask = module.get_buffer(name + "_mask");
  } else {
    if (!module.has_parameter(name)) {
      throw Error(op + ": " + module.type_name() + " has no parameter \"" + name + "\"" +
                  (is_parametrized(module, name) ? " (it is parametrized: prune a parametrization's original)" : ""));
    }
    orig = module.get_parameter(name);
    if (!orig.defined()) throw Error(op + ": " + named(module, name) + " is undefined");
    if (!field.defined() || field.impl() != orig.impl()) {
      throw Error(op + ": the member given for " + named(module, name) +
                  " is not the tensor registered under that name");
    }
    for (const std::string& taken : {name + "_orig", name + "_mask"}) {
      if (module.has_parameter(taken) || module.has_buffer(taken)) {
        throw Error(op + ": " + module.type_name() + " already has a tensor \"" + taken + "\"");
      }
    }
    if (!is_floating(orig.dtype())) {
      throw Error(op + ": " + named(module, name) + " is " + dtype_name(orig.dtype()) +
                  "; only floating tensors prune");
    }
  }
  const Tensor scores = importance_scores.defined() ? importance_scores : orig;
  if (scores.sizes() != orig.sizes() || scores.device() != orig.device()) {
    throw ShapeError(op + ": the importance scores of " + named(module, name) + " are " + shape_str(scores.sizes()) +
                     " on " + scores.device().str() + ", the tensor is " + shape_str(orig.sizes()) + " on " +
                     orig.device().str());
  }
  Tensor mask;
  {
    NoGradGuard no_grad;
    const Tensor start = default_mask.defined() ? default_mask.detach() : ones_like(orig.detach());
    mask = combine(op, *method, scores.detach(), start).to(orig.dtype()).contiguous();
    if (mask.sizes() != orig.sizes()) {
      throw ShapeError(op + ": the method's mask is " + shape_str(mask.sizes()) + " for " + named(module, name) + " " +
                       shape_str(orig.sizes()));
    }
  }

  // Every check passed: the module changes from here on.
  if (state) {
    NoGradGuard no_grad;
    default_mask.copy_(mask);
  } else {
    const bool trains = orig.requires_grad();
    module.remove_parameter(name);
    module.register_parameter(name + "_orig", orig, trains);
    module.register_buffer(name + "_mask", mask);
    state = std::make_shared<State>();
    state->name = name;
    state->field = &field;
    state->hook = module.register_forward_pre_hook(Hook{state});
  }
  state->methods.push_back(std::move(method));
  Hook{state}(module);
  return module;
}

Module& identity(Module& module, const std::string& name, Tensor& field) {
  return apply(module, name, field, std::make_shared<Identity>());
}

Module& random_unstructured(Module& module, const std::string& name, Tensor& field, Amount amount,
                            std::optional<Generator> generator) {
  return apply(module, name, field, std::make_shared<RandomUnstructured>(amount, std::move(generator)));
}

Module& l1_unstructured(Module& module, const std::string& name, Tensor& field, Amount amount,
                        const Tensor& importance_scores) {
  return apply(module, name, field, std::make_shared<L1Unstructured>(amount), importance_scores);
}

Module& random_structured(Module& module, const std::string& name, Tensor& field, Amount amount, int64_t dim,
                          std::optional<Generator> generator) {
  return apply(module, name, field, std::make_shared<RandomStructured>(amount, dim, std::move(generator)));
}

Module& ln_structured(Module& module, const std::string& name, Tensor& field, Amount amount, double n, int64_t dim,
                      const Tensor& importance_scores) {
  return apply(module, name, field, std::make_shared<LnStructured>(amount, n, dim), importance_scores);
}

Module& custom_from_mask(Module& module, const std::string& name, Tensor& field, const Tensor& mask) {
  return apply(module, name, field, std::make_shared<CustomFromMask>(mask));
}

void global_unstructured(const std::vector<Target>& targets, const std::shared_ptr<PruningMethod>& method) {
  const char* op = "prune global_unstructured";
  if (!method) throw Error(std::string(op) + ": the pruning method is null");
  if (method->type() != PruningType::Unstructured) {
    throw Error(std::string(op) + ": only unstructured methods prune globally, got " + method->name());
  }
  if (targets.empty()) return;
  // Every target's scores and current mask, flattened and joined (the current value orig * mask
  // stands for the tensor, as PyTorch reads the module's attribute).
  TensorList scores, masks;
  for (const Target& t : targets) {
    if (!t.module || !t.field) throw Error(std::string(op) + ": a target's module or member is null");
    Module& m = *t.module;
    std::shared_ptr<State> state = state_of(m, t.name);
    Tensor value, mask;
    if (state) {
      mask = m.get_buffer(t.name + "_mask");
      value = m.get_parameter(t.name + "_orig") * mask;
    } else {
      if (!m.has_parameter(t.name))
        throw Error(std::string(op) + ": " + m.type_name() + " has no parameter \"" + t.name + "\"");
      value = m.get_parameter(t.name);
      mask = ones_like(value);
    }
    const Tensor s = t.importance_scores.defined() ? t.importance_scores : value;
    if (s.sizes() != value.sizes()) {
      throw ShapeError(std::string(op) + ": the importance scores of " + named(m, t.name) + " are " +
                       shape_str(s.sizes()) + ", the tensor is " + shape_str(value.sizes()));
    }
    if (!scores.empty() && s.device() != scores[0].device()) {
      throw Error(std::string(op) + ": the targets are on several devices (" + scores[0].device().str() + " and " +
                  s.device().str() + ")");
    }
    NoGradGuard no_grad;
    scores.push_back(s.detach().reshape({-1}).to(DType::Float64));
    masks.push_back(mask.detach().reshape({-1}).to(DType::Float64));
  }
  Tensor all;
  {
    NoGradGuard no_grad;
    const Tensor joined = cat(scores, 0), joined_mask = cat(masks, 0);
    all = combine(op, *method, joined, joined_mask);
  }
  int64_t at = 0;
  for (const Target& t : targets) {
    const int64_t n = t.field->numel();
    const Tensor part = all.narrow(0, at, n).reshape(t.field->sizes());
    at += n;
    custom_from_mask(*t.module, t.name, *t.field, part);
  }
}

Module& remove(Module& module, const std::string& name) {
  std::shared_ptr<State> state = state_of(module, name);
  if (!state) {
    throw Error("prune remove: " + named(module, name) + " is not pruned (prune it before removing its pruning)");
  }
  Tensor orig = module.get_parameter(name + "_orig");
  const Tensor mask = module.get_buffer(name + "_mask");
  {
    NoGradGuard no_grad;
    orig.mul_(mask);
  }
  const bool trains = orig.requires_grad();
  module.remove_parameter(name + "_orig");
  module.remove_buffer(name + "_mask");
  module.remove_forward_pre_hook(state->hook);
  *state->field = module.register_parameter(name, orig, trains);
  return module;
}

bool is_pruned(Module& module) {
  for (const auto& [path, m] : module.named_modules()) {
    for (const auto& [handle, hook] : m->forward_pre_hooks())
      if (hook.target<Hook>()) return true;
  }
  return false;
}

std::vector<std::shared_ptr<PruningMethod>> methods(const Module& module, const std::string& name) {
  std::shared_ptr<State> state = state_of(module, name);
  if (!state) throw Error("prune methods: " + named(module, name) + " is not pruned");
  return state->methods;
}

Tensor pruned_value(Module& module, const std::string& name) {
  std::shared_ptr<State> state = state_of(module, name);
  if (!state) throw Error("prune pruned_value: " + named(module, name) + " is not pruned");
  Hook{state}(module);
  return *state->field;
}

}  // namespace kiln::nn::prune
