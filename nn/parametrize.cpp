// Parametrizations: the "parametrizations" child that holds each parametrized tensor's originals
// and chain, the forward pre-hook that recomputes the tensors, and weight_norm and spectral_norm.
#include "nn/parametrize.h"

#include <algorithm>
#include <utility>

#include "core/ops/blas.h"
#include "core/ops/distance.h"
#include "core/ops/elementwise.h"
#include "core/ops/random.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln::nn {

namespace {
std::string where(const Module& module, const std::string& name) { return module.type_name() + "'s \"" + name + "\""; }

std::string describe(const Tensor& t) { return shape_str(t.sizes()) + " " + dtype_name(t.dtype()); }

void check_like(const char* what, const Module& module, const std::string& name, const Tensor& got, const Tensor& want,
                const char* hint) {
  if (got.defined() && got.sizes() == want.sizes() && got.dtype() == want.dtype()) return;
  throw Error(std::string("register_parametrization: ") + what + " of " + where(module, name) + " is " +
              (got.defined() ? describe(got) : std::string("undefined")) + ", the tensor is " + describe(want) + "; " +
              hint);
}
}  // namespace

// --- ParametrizationList ------------------------------------------------------------------------

Tensor ParametrizationList::value() {
  Tensor x = chain_.at(0)->forward(originals_);
  for (size_t i = 1; i < chain_.size(); ++i) x = chain_[i]->forward({x});
  return x;
}

TensorList ParametrizationList::originals() const { return originals_; }

const std::shared_ptr<Parametrization>& ParametrizationList::operator[](size_t i) const {
  if (i >= chain_.size()) {
    throw IndexError("ParametrizationList: index " + std::to_string(i) + " out of range for " +
                     std::to_string(chain_.size()) + " parametrizations");
  }
  return chain_[i];
}

// --- ParametrizationDict ------------------------------------------------------------------------

// The module's child "parametrizations" (a ModuleDict in PyTorch's printing): a list per
// parametrized name and the member each list's value goes to.
class ParametrizationDict : public Module {
 public:
  std::string type_name() const override { return "ModuleDict"; }

  struct Entry {
    std::string name;
    std::shared_ptr<ParametrizationList> list;
    Tensor* field;
  };

  Entry* find(const std::string& name) {
    for (Entry& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  void add(const std::string& name, std::shared_ptr<ParametrizationList> list, Tensor* field) {
    register_module(name, list);
    entries_.push_back(Entry{name, std::move(list), field});
  }
  void erase(const std::string& name) {
    remove_module(name);
    entries_.erase(std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == name; }));
  }
  bool empty() const { return entries_.empty(); }
  void refresh() {
    for (Entry& e : entries_) *e.field = e.list->value();
  }

  uint64_t hook = 0;  // the owner's forward pre-hook that calls refresh()

 private:
  std::vector<Entry> entries_;
};

namespace {
constexpr const char* kChild = "parametrizations";

std::shared_ptr<ParametrizationDict> dict_of(const Module& module) {
  for (const auto& [n, c] : module.named_children()) {
    if (n != kChild) continue;
    auto dict = std::dynamic_pointer_cast<ParametrizationDict>(c);
    if (!dict) {
      throw Error("parametrize: " + module.type_name() + " has a child \"parametrizations\" (a " + c->type_name() +
                  ") that is not its parametrizations");
    }
    return dict;
  }
  return nullptr;
}

ParametrizationDict::Entry& entry_of(const Module& module, const std::string& name) {
  auto dict = dict_of(module);
  ParametrizationDict::Entry* e = dict ? dict->find(name) : nullptr;
  if (!e) throw Error("parametrize: " + where(module, name) + " is not parametrized");
  return *e;
}

// A value for an original must have its shape and dtype.
void check_original(const char* op, const Module& module, const std::string& name, const Tensor& original,
                    const Tensor& value) {
  if (value.defined() && value.sizes() == original.sizes() && value.dtype() == original.dtype()) return;
  throw Error(std::string(op) + ": the value for an original of " + where(module, name) + " is " +
              (value.defined() ? describe(value) : std::string("undefined")) + ", the original is " +
              describe(original));
}
}  // namespace

void register_parametrization(Module& module, const std::string& name, Tensor& field,
                              std::shared_ptr<Parametrization> parametrization, bool unsafe) {
  if (!parametrization)
    throw Error("register_parametrization: the parametrization of " + where(module, name) + " is null");
  auto dict = dict_of(module);
  if (ParametrizationDict::Entry* e = dict ? dict->find(name) : nullptr) {
    if (&field != e->field) {
      throw Error("register_parametrization: " + where(module, name) +
                  " is already parametrized into another member than the one given");
    }
    const Tensor before = e->list->value();
    const std::string index = std::to_string(e->list->chain_.size());
    e->list->register_module(index, parametrization);
    e->list->chain_.push_back(parametrization);
    try {
      const Tensor after = e->list->value();
      if (!unsafe) check_like("the output of the chain", module, name, after, before, "pass unsafe to allow it");
      field = after;
    } catch (...) {
      e->list->chain_.pop_back();
      e->list->remove_module(index);
      throw;
    }
    return;
  }

  const bool is_param = module.has_parameter(name);
  if (!is_param && !module.has_buffer(name)) {
    throw Error("register_parametrization: " + module.type_name() + " has no parameter or buffer \"" + name + "\"");
  }
  Tensor tensor;
  for (const auto& [n, t] : is_param ? module.named_parameters(false) : module.named_buffers(false))
    if (n == name) tensor = t;
  if (!tensor.defined()) throw Error("register_parametrization: " + where(module, name) + " is undefined");
  if (!field.defined() || field.impl() != tensor.impl()) {
    throw Error("register_parametrization: the member given for " + where(module, name) +
                " is not the tensor registered under that name");
  }

  auto list = std::make_shared<ParametrizationList>();
  list->buffers_ = !is_param;
  list->register_module("0", parametrization);
  list->chain_.push_back(parametrization);
  TensorList originals;
  {
    NoGradGuard no_grad;
    originals = parametrization->right_inverse(tensor.detach());
  }
  if (originals.empty()) {
    throw Error("register_parametrization: the right_inverse of " + parametrization->type_name() + " for " +
                where(module, name) + " returned no tensor");
  }
  for (size_t i = 0; i < originals.size(); ++i) {
    if (!originals[i].defined()) {
      throw Error("register_parametrization: tensor " + std::to_string(i) + " of the right_inverse for " +
                  where(module, name) + " is undefined");
    }
  }
  // One original is the tensor itself (an optimizer that holds it keeps training it), given
  // right_inverse's value unless that is the tensor's own memory; several are new tensors.
  const bool one = originals.size() == 1;
  const bool in_place = one && originals[0].data_ptr() == tensor.data_ptr() && originals[0].sizes() == tensor.sizes() &&
                        originals[0].strides() == tensor.strides() && originals[0].dtype() == tensor.dtype();
  if (one && !unsafe) check_like("the right_inverse", module, name, originals[0], tensor, "pass unsafe to allow it");
  for (size_t i = 0; i < originals.size(); ++i) {
    const Tensor o = in_place ? tensor : originals[i].detach().clone();
    const std::string key = one ? "original" : "original" + std::to_string(i);
    list->originals_.push_back(is_param ? list->register_parameter(key, o, tensor.requires_grad())
                                        : list->register_buffer(key, o));
  }
  Tensor value;
  if (in_place || !one) {
    value = list->value();
    if (!unsafe) check_like("the parametrized value", module, name, value, tensor, "pass unsafe to allow it");
  } else {
    {
      NoGradGuard no_grad;
      value = list->value();  // computed on a copy: only checked, the module is not changed yet
    }
    if (!unsafe) check_like("the parametrized value", module, name, value, tensor, "pass unsafe to allow it");
    if (is_param) {
      const Tensor o = list->originals_[0];
      {
        NoGradGuard no_grad;
        if (o.sizes() == tensor.sizes() && o.dtype() == tensor.dtype())
          tensor.copy_(o);
        else
          tensor.set_data(o.detach());
      }
      list->set_parameter("original", tensor);
      list->originals_[0] = tensor;
    }
    value = list->value();
  }

  // Every check passed: the module changes from here on.
  if (is_param)
    module.remove_parameter(name);
  else
    module.remove_buffer(name);
  if (!dict) {
    dict = std::make_shared<ParametrizationDict>();
    module.register_module(kChild, dict);
    ParametrizationDict* raw = dict.get();
    dict->hook = module.register_forward_pre_hook([raw](Module&) { raw->refresh(); });
  }
  dict->add(name, list, &field);
  field = value;
}

bool is_parametrized(const Module& module, const std::string& name) {
  auto dict = dict_of(module);
  if (!dict) return false;
  return name.empty() ? !dict->empty() : dict->find(name) != nullptr;
}

std::shared_ptr<ParametrizationList> parametrization_list(const Module& module, const std::string& name) {
  return entry_of(module, name).list;
}

void refresh_parametrizations(Module& module) {
  if (auto dict = dict_of(module)) dict->refresh();
}

Tensor parametrized_value(Module& module, const std::string& name) {
  ParametrizationDict::Entry& e = entry_of(module, name);
  *e.field = e.list->value();
  return *e.field;
}

void assign_parametrized(Module& module, const std::string& name, const Tensor& value) {
  ParametrizationDict::Entry& e = entry_of(module, name);
  ParametrizationList& list = *e.list;
  TensorList x;
  {
    NoGradGuard no_grad;
    Tensor v = value.detach();
    for (size_t i = list.chain_.size(); i-- > 1;) {
      TensorList r = list.chain_[i]->right_inverse(v);
      if (r.size() != 1) {
        throw Error("assign_parametrized: the right_inverse of parametrization " + std::to_string(i) + " of " +
                    where(module, name) + " returned " + std::to_string(r.size()) +
                    " tensors; only the first of a chain may return several");
      }
      v = r[0];
    }
    x = list.chain_[0]->right_inverse(v);
  }
  if (x.size() != list.originals_.size()) {
    throw Error("assign_parametrized: the right_inverse for " + where(module, name) + " returned " +
                std::to_string(x.size()) + " tensors for " + std::to_string(list.originals_.size()) + " originals");
  }
  for (size_t i = 0; i < x.size(); ++i) check_original("assign_parametrized", module, name, list.originals_[i], x[i]);
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < x.size(); ++i) list.originals_[i].copy_(x[i]);
  }
  *e.field = list.value();
}

void remove_parametrizations(Module& module, const std::string& name, bool leave_parametrized) {
  auto dict = dict_of(module);
  ParametrizationDict::Entry& e = entry_of(module, name);
  ParametrizationList& list = *e.list;
  Tensor* field = e.field;
  Tensor result;
  const bool one = list.originals_.size() == 1;
  if (leave_parametrized) {
    Tensor value;
    {
      NoGradGuard no_grad;
      value = list.value().detach();
    }
    if (one && value.sizes() == list.originals_[0].sizes() && value.dtype() == list.originals_[0].dtype()) {
      result = list.originals_[0];
      NoGradGuard no_grad;
      result.copy_(value);
    } else {
      result = value.clone();
      if (!list.buffers_ && list.originals_[0].requires_grad()) result.set_requires_grad(true);
    }
  } else {
    if (!one) {
      throw Error("remove_parametrizations: " + where(module, name) + " is parametrized by " +
                  std::to_string(list.originals_.size()) +
                  " originals, so it cannot be left unparametrized (leave_parametrized false needs one)");
    }
    result = list.originals_[0];
  }
  const bool buffers = list.buffers_;
  const bool requires_grad = result.requires_grad();
  dict->erase(name);
  if (dict->empty()) {
    module.remove_forward_pre_hook(dict->hook);
    module.remove_module(kChild);
  }
  *field = buffers ? module.register_buffer(name, result) : module.register_parameter(name, result, requires_grad);
}

// --- WeightNorm ---------------------------------------------------------------------------------

std::string WeightNorm::extra_repr() const { return dim_ ? "dim=" + std::to_string(*dim_) : "dim=None"; }

Tensor WeightNorm::norm_except_dim(const Tensor& v) const {
  if (!dim_) return vector_norm(v);
  if (*dim_ == -1) {
    throw Error(
        "weight_norm: dim -1 is ambiguous (PyTorch reads it as the whole tensor): pass nullopt for one norm "
        "over the whole tensor, or " +
        std::to_string(v.dim() - 1) + " for the last dim of a " + shape_str(v.sizes()) + " tensor");
  }
  const int64_t d = wrap_dim(*dim_, v.dim(), "weight_norm");
  Shape others;
  for (int64_t i = 0; i < v.dim(); ++i)
    if (i != d) others.push_back(i);
  if (others.empty()) return v.abs();  // 1-d along its only dim: each element is a slice
  return vector_norm(v, 2.0, others, /*keepdim=*/true);
}

Tensor WeightNorm::forward(const TensorList& originals) {
  if (originals.size() != 2) {
    throw Error("weight_norm: expects two originals (g, v), got " + std::to_string(originals.size()));
  }
  const Tensor& g = originals[0];
  const Tensor& v = originals[1];
  return v * (g / norm_except_dim(v));
}

TensorList WeightNorm::right_inverse(const Tensor& value) { return {norm_except_dim(value), value}; }

// --- SpectralNorm -------------------------------------------------------------------------------

SpectralNorm::SpectralNorm(const Tensor& weight, int64_t n_power_iterations, int64_t dim, double eps)
    : n_power_iterations(n_power_iterations), dim(0), eps(eps) {
  if (!weight.defined() || !is_floating(weight.dtype()) || weight.dim() == 0) {
    throw Error("spectral_norm: the weight must be a floating tensor of at least one dim, got " +
                (weight.defined() ? describe(weight) : std::string("undefined")));
  }
  if (n_power_iterations <= 0) {
    throw Error("spectral_norm: n_power_iterations must be positive, got " + std::to_string(n_power_iterations));
  }
  if (!(eps > 0)) throw Error("spectral_norm: eps must be positive, got " + std::to_string(eps));
  this->dim = wrap_dim(dim, weight.dim(), "spectral_norm");
  if (weight.dim() == 1) return;
  NoGradGuard no_grad;
  const Tensor m = as_matrix(weight.detach());
  const TensorOptions options(weight.dtype(), weight.device());
  u = register_buffer("_u", normalize(randn({m.size(0)}, options), 2.0, 0, eps));
  v = register_buffer("_v", normalize(randn({m.size(1)}, options), 2.0, 0, eps));
  power_method(m, 15);
}

Tensor SpectralNorm::as_matrix(const Tensor& weight) const {
  const Tensor w = dim == 0 ? weight : movedim(weight, dim, 0);
  return w.reshape({w.size(0), -1});
}

void SpectralNorm::power_method(const Tensor& matrix, int64_t iterations) {
  // u <- W v / ||W v||, v <- W^T u / ||W^T u||: the pair converges to the top singular vectors.
  NoGradGuard no_grad;
  for (int64_t i = 0; i < iterations; ++i) {
    u.copy_(normalize(mv(matrix, v), 2.0, 0, eps));
    v.copy_(normalize(mv(matrix.transpose(0, 1), u), 2.0, 0, eps));
  }
}

Tensor SpectralNorm::forward(const TensorList& originals) {
  if (originals.size() != 1) {
    throw Error("spectral_norm: expects one original, got " + std::to_string(originals.size()));
  }
  const Tensor& weight = originals[0];
  if (weight.dim() == 1) return normalize(weight, 2.0, 0, eps);
  const Tensor m = as_matrix(weight);
  if (is_training()) power_method(m.detach(), n_power_iterations);
  // Copies: a later call updates the buffers in place, and this call's backward must see these.
  const Tensor sigma = dot(u.clone(), mv(m, v.clone()));
  return weight / sigma;
}

// --- registration helpers -----------------------------------------------------------------------

Module& weight_norm(Module& module, const std::string& name, Tensor& field, std::optional<int64_t> dim) {
  register_parametrization(module, name, field, std::make_shared<WeightNorm>(dim));
  return module;
}

Module& spectral_norm(Module& module, const std::string& name, Tensor& field, int64_t n_power_iterations, double eps,
                      std::optional<int64_t> dim) {
  if (!field.defined()) throw Error("spectral_norm: " + where(module, name) + " is undefined");
  const int64_t d = dim ? *dim : (module.type_name().rfind("ConvTranspose", 0) == 0 ? 1 : 0);
  register_parametrization(module, name, field, std::make_shared<SpectralNorm>(field, n_power_iterations, d, eps));
  return module;
}

}  // namespace kiln::nn
