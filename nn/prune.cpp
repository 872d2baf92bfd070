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
#include "nn/layers.h"
#include "nn/parametrize.h"

namespace kiln::nn::prune {

// --- Amount --------------------------------------------------------------------------------------

void Amount::check_count(bool negative) const {
  if (negative) throw Error("prune: amount=" + std::to_string(count_) + " must be a non-negative count");
  if (count_ < 0) throw Error("prune: the amount is a count past int64's range");
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

LnStructured::LnStructured(Amount amount, double n, int64_t dim) : amount(amount), n(n), dim_(dim) {
  if (std::isnan(n)) throw Error("prune LnStructured: the norm's order n is NaN");
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

using nn::detail::tensor_name;

struct State {
  std::string name;
  Tensor* field;
  std::vector<std::shared_ptr<PruningMethod>> methods;
  uint64_t hook = 0;
};

// The forward pre-hook: the member gets orig * mask at each call. A type of its own, so that
// prune finds its hooks among a module's (std::function::target). If the tensors were removed by
// hand, it says so once and removes itself.
struct Hook {
  std::shared_ptr<State> state;
  void operator()(Module& m) const {
    const std::string orig = state->name + "_orig", mask = state->name + "_mask";
    if (!m.has_parameter(orig) || !m.has_buffer(mask)) {
      m.remove_forward_pre_hook(state->hook);
      throw Error("prune: " + tensor_name(m, orig) + " or " + tensor_name(m, mask) +
                  " was removed by hand (prune::remove undoes pruning): its hook is removed now, and the member "
                  "keeps its last value");
    }
    *state->field = m.get_parameter(orig) * m.get_buffer(mask);
  }
};

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

// One tensor about to be pruned, checked, before anything changes.
struct Prepared {
  Module* module;
  std::string name;
  Tensor* field;
  std::shared_ptr<State> state;  // null on a first pruning
  Tensor orig;                   // the parameter ("name", or "name_orig" once pruned)
  Tensor default_mask;           // the mask so far (ones on a first pruning)
  Tensor scores;                 // what the method chooses on
};

Prepared prepare(const std::string& op, Module& module, const std::string& name, Tensor& field,
                 const Tensor& importance_scores) {
  if (dynamic_cast<const ParametrizationList*>(&module)) {
    throw Error(op + ": " + tensor_name(module, name) +
                " is an original of a parametrization, which reads it directly: a mask there would never apply");
  }
  Prepared p{&module, name, &field, state_of(module, name), Tensor(), Tensor(), Tensor()};
  if (p.state) {
    if (&field != p.state->field) {
      throw Error(op + ": " + tensor_name(module, name) + " is already pruned into another member than the one given");
    }
    p.orig = module.get_parameter(name + "_orig");
    p.default_mask = module.get_buffer(name + "_mask").detach();
  } else {
    if (!module.has_parameter(name)) {
      throw Error(
          op + ": " + module.type_name() + " has no parameter \"" + name + "\"" +
          (is_parametrized(module, name) ? " (it is parametrized, and a parametrized tensor cannot be pruned)" : ""));
    }
    p.orig = nn::detail::member_tensor(op, module, name, field);
    for (const std::string& taken : {name + "_orig", name + "_mask"}) {
      if (module.has_parameter(taken) || module.has_buffer(taken)) {
        throw Error(op + ": " + module.type_name() + " already has a tensor \"" + taken + "\"");
      }
    }
    if (!is_floating(p.orig.dtype())) {
      throw DTypeError(op + ": " + tensor_name(module, name) + " is " + dtype_name(p.orig.dtype()) +
                       "; only floating tensors prune");
    }
    NoGradGuard no_grad;
    p.default_mask = ones_like(p.orig.detach());
  }
  if (importance_scores.defined()) {
    if (importance_scores.sizes() != p.orig.sizes()) {
      throw ShapeError(op + ": the importance scores of " + tensor_name(module, name) + " are " +
                       shape_str(importance_scores.sizes()) + ", the tensor is " + shape_str(p.orig.sizes()));
    }
    if (importance_scores.device() != p.orig.device()) {
      throw DeviceError(op + ": the importance scores of " + tensor_name(module, name) + " are on " +
                        importance_scores.device().str() + ", the tensor on " + p.orig.device().str());
    }
    p.scores = importance_scores.detach();
  } else {
    // The tensor as the module uses it, as PyTorch reads it: pruned entries are zero.
    NoGradGuard no_grad;
    p.scores = p.state ? p.orig.detach() * p.default_mask : p.orig.detach();
  }
  return p;
}

// The method's new mask for p, in the parameter's dtype; changes nothing.
Tensor new_mask(const std::string& op, const PruningMethod& method, const Prepared& p) {
  NoGradGuard no_grad;
  Tensor mask = combine(op, method, p.scores, p.default_mask).to(p.orig.dtype()).contiguous();
  if (mask.sizes() != p.orig.sizes()) {
    throw ShapeError(op + ": the method's mask is " + shape_str(mask.sizes()) + " for " +
                     tensor_name(*p.module, p.name) + " " + shape_str(p.orig.sizes()));
  }
  return mask;
}

// Installs the mask (a new buffer: a forward's saved mask stays as it was) and sets the member.
void commit(Prepared& p, const Tensor& mask, std::shared_ptr<PruningMethod> method) {
  Module& module = *p.module;
  if (p.state) {
    module.remove_buffer(p.name + "_mask");
    module.register_buffer(p.name + "_mask", mask);
  } else {
    const bool trains = p.orig.requires_grad();
    module.remove_parameter(p.name);
    module.register_parameter(p.name + "_orig", p.orig, trains);
    module.register_buffer(p.name + "_mask", mask);
    p.state = std::make_shared<State>();
    p.state->name = p.name;
    p.state->field = p.field;
    p.state->hook = module.register_forward_pre_hook(Hook{p.state});
  }
  p.state->methods.push_back(std::move(method));
  Hook{p.state}(module);
}

}  // namespace

// --- applying and removing -----------------------------------------------------------------------

Module& apply(Module& module, const std::string& name, Tensor& field, std::shared_ptr<PruningMethod> method,
              const Tensor& importance_scores) {
  if (!method) throw Error("prune: the pruning method for " + tensor_name(module, name) + " is null");
  const std::string op = "prune " + method->name();
  Prepared p = prepare(op, module, name, field, importance_scores);
  const Tensor mask = new_mask(op, *method, p);
  commit(p, mask, std::move(method));
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
  const std::string op = "prune global_unstructured";
  if (!method) throw Error(op + ": the pruning method is null");
  if (method->type() != PruningType::Unstructured) {
    throw Error(op + ": only unstructured methods prune globally, got " + method->name());
  }
  // Every target is checked before any changes; its scores (by default the tensor as the module
  // uses it) and its mask are flattened and joined, the method chooses once over all of them, and
  // each target gets its part as a custom_from_mask.
  std::vector<Prepared> prepared;
  TensorList scores, masks;
  for (const Target& t : targets) {
    if (!t.module || !t.field) throw Error(op + ": the module or member of target \"" + t.name + "\" is null");
    for (const Prepared& q : prepared) {
      if (q.module == t.module && q.name == t.name) {
        throw Error(op + ": " + tensor_name(*t.module, t.name) + " is a target twice");
      }
    }
    prepared.push_back(prepare(op, *t.module, t.name, *t.field, t.importance_scores));
    const Prepared& p = prepared.back();
    if (p.orig.device() != prepared[0].orig.device()) {
      throw DeviceError(op + ": the targets are on several devices (" + prepared[0].orig.device().str() + " and " +
                        p.orig.device().str() + ")");
    }
    NoGradGuard no_grad;
    scores.push_back(p.scores.reshape({-1}).to(DType::Float64));
    masks.push_back(p.default_mask.reshape({-1}).to(DType::Float64));
  }
  if (prepared.empty()) return;
  Tensor all;
  {
    NoGradGuard no_grad;
    all = combine(op, *method, cat(scores, 0), cat(masks, 0));
  }
  std::vector<std::shared_ptr<PruningMethod>> parts;
  TensorList part_masks;
  int64_t at = 0;
  for (const Prepared& p : prepared) {
    const int64_t n = p.orig.numel();
    parts.push_back(std::make_shared<CustomFromMask>(all.narrow(0, at, n).reshape(p.orig.sizes())));
    part_masks.push_back(new_mask(op, *parts.back(), p));
    at += n;
  }
  for (size_t i = 0; i < prepared.size(); ++i) commit(prepared[i], part_masks[i], parts[i]);
}

Module& remove(Module& module, const std::string& name) {
  std::shared_ptr<State> state = state_of(module, name);
  if (!state) {
    throw Error("prune remove: " + tensor_name(module, name) + " is not pruned (prune it before removing its pruning)");
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
  if (!state) throw Error("prune methods: " + tensor_name(module, name) + " is not pruned");
  return state->methods;
}

Tensor pruned_value(Module& module, const std::string& name) {
  std::shared_ptr<State> state = state_of(module, name);
  if (!state) throw Error("prune pruned_value: " + tensor_name(module, name) + " is not pruned");
  Hook{state}(module);
  return *state->field;
}

}  // namespace kiln::nn::prune
