// Parametrizations: the "parametrizations" child that holds each parametrized tensor's originals
// and chain, the forward pre-hook that recomputes the tensors, and weight_norm and spectral_norm.
#include "nn/parametrize.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/ops/blas.h"
#include "core/ops/distance.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/linalg.h"
#include "core/ops/matmul.h"
#include "core/ops/pointwise.h"
#include "core/ops/shape.h"
#include "core/ops/triangle.h"
#include "core/ops/random.h"
#include "core/ops/view.h"
#include "kernels/error.h"
#include "nn/layers.h"

namespace kiln::nn {

namespace {
using detail::tensor_name;

std::string describe(const Tensor& t) {
  return t.defined() ? shape_str(t.sizes()) + " " + dtype_name(t.dtype()) : std::string("undefined");
}

// got must have want's shape and dtype; otherwise an Error: "op: what of M's "name" is got,
// want_what is want" and the hint.
void check_like(const char* op, const char* what, const Module& module, const std::string& name, const Tensor& got,
                const char* want_what, const Tensor& want, const char* hint = "") {
  if (got.defined() && got.sizes() == want.sizes() && got.dtype() == want.dtype()) return;
  throw Error(std::string(op) + ": " + what + " of " + tensor_name(module, name) + " is " + describe(got) + ", " +
              want_what + " is " + describe(want) + hint);
}
}  // namespace

// --- ParametrizationList ------------------------------------------------------------------------

Tensor ParametrizationList::value() {
  if (chain_.empty()) throw Error("ParametrizationList: there is no parametrization to compute the tensor with");
  Tensor x = chain_[0]->forward(originals_);
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
constexpr const char* kRegister = "register_parametrization";
constexpr const char* kUnsafeHint = "; pass unsafe to allow it";

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

ParametrizationDict::Entry& entry_of(const char* op, const Module& module, const std::string& name) {
  auto dict = dict_of(module);
  ParametrizationDict::Entry* e = dict ? dict->find(name) : nullptr;
  if (!e) throw Error(std::string(op) + ": " + tensor_name(module, name) + " is not parametrized");
  return *e;
}

}  // namespace

void register_parametrization(Module& module, const std::string& name, Tensor& field,
                              std::shared_ptr<Parametrization> parametrization, bool unsafe) {
  if (!parametrization)
    throw Error("register_parametrization: the parametrization of " + tensor_name(module, name) + " is null");
  auto dict = dict_of(module);
  if (ParametrizationDict::Entry* e = dict ? dict->find(name) : nullptr) {
    if (&field != e->field) {
      throw Error("register_parametrization: " + tensor_name(module, name) +
                  " is already parametrized into another member than the one given");
    }
    // The chain's last output (the member) is what the new link must keep the shape and dtype of.
    // Computing the chain may change state (spectral norm's vectors in training mode): a failure
    // puts every buffer of the list back.
    const Tensor before = field;
    std::vector<std::pair<Tensor, Tensor>> saved;
    for (const auto& [n, b] : e->list->named_buffers())
      if (b.defined()) saved.emplace_back(b, b.detach().clone());
    const std::string index = std::to_string(e->list->chain_.size());
    e->list->register_module(index, parametrization);
    e->list->chain_.push_back(parametrization);
    try {
      const Tensor after = e->list->value();
      if (!unsafe)
        check_like(kRegister, "the output of the chain", module, name, after, "the tensor", before, kUnsafeHint);
      field = after;
    } catch (...) {
      e->list->chain_.pop_back();
      e->list->remove_module(index);
      NoGradGuard no_grad;
      for (auto& [b, copy] : saved) b.copy_(copy);
      throw;
    }
    return;
  }

  const bool is_param = module.has_parameter(name);
  if (!is_param && !module.has_buffer(name)) {
    throw Error("register_parametrization: " + module.type_name() + " has no parameter or buffer \"" + name + "\"");
  }
  Tensor tensor = detail::member_tensor(kRegister, module, name, field, is_param);

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
                tensor_name(module, name) + " returned no tensor");
  }
  for (size_t i = 0; i < originals.size(); ++i) {
    if (!originals[i].defined()) {
      throw Error("register_parametrization: tensor " + std::to_string(i) + " of the right_inverse for " +
                  tensor_name(module, name) + " is undefined");
    }
  }
  // One original is the tensor itself (an optimizer that holds it keeps training it), given
  // right_inverse's value unless that is the tensor's own memory; several are new tensors.
  const bool one = originals.size() == 1;
  const bool in_place = one && originals[0].data_ptr() == tensor.data_ptr() && originals[0].sizes() == tensor.sizes() &&
                        originals[0].strides() == tensor.strides() && originals[0].dtype() == tensor.dtype();
  if (one && !unsafe)
    check_like(kRegister, "the right_inverse", module, name, originals[0], "the tensor", tensor, kUnsafeHint);
  for (size_t i = 0; i < originals.size(); ++i) {
    const Tensor o = in_place ? tensor : originals[i].detach().clone();
    const std::string key = one ? "original" : "original" + std::to_string(i);
    list->originals_.push_back(is_param ? list->register_parameter(key, o, tensor.requires_grad())
                                        : list->register_buffer(key, o));
  }
  Tensor value;
  if (in_place || !one) {
    value = list->value();
    if (!unsafe)
      check_like(kRegister, "the parametrized value", module, name, value, "the tensor", tensor, kUnsafeHint);
  } else {
    {
      NoGradGuard no_grad;
      value = list->value();  // computed on a copy: only checked, the module is not changed yet
    }
    if (!unsafe)
      check_like(kRegister, "the parametrized value", module, name, value, "the tensor", tensor, kUnsafeHint);
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
    // A weak pointer: the hook must not keep the child alive, nor run on one that is gone. If the
    // child was removed by hand, the hook says so once and removes itself.
    auto handle = std::make_shared<uint64_t>(0);
    dict->hook = module.register_forward_pre_hook([weak = std::weak_ptr<ParametrizationDict>(dict), handle](Module& m) {
      const auto d = weak.lock();
      if (!d) {
        m.remove_forward_pre_hook(*handle);
        throw Error("parametrize: " + m.type_name() +
                    "'s child \"parametrizations\" was removed by hand (remove_parametrizations unregisters "
                    "it): its hook is removed now, and the members keep their last values");
      }
      d->refresh();
    });
    *handle = dict->hook;
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
  return entry_of("parametrization_list", module, name).list;
}

void refresh_parametrizations(Module& module) {
  if (auto dict = dict_of(module)) dict->refresh();
}

Tensor parametrized_value(Module& module, const std::string& name) {
  ParametrizationDict::Entry& e = entry_of("parametrized_value", module, name);
  *e.field = e.list->value();
  return *e.field;
}

void assign_parametrized(Module& module, const std::string& name, const Tensor& value) {
  ParametrizationDict::Entry& e = entry_of("assign_parametrized", module, name);
  ParametrizationList& list = *e.list;
  TensorList x;
  {
    NoGradGuard no_grad;
    Tensor v = value.detach();
    for (size_t i = list.chain_.size(); i-- > 1;) {
      TensorList r = list.chain_[i]->right_inverse(v);
      if (r.size() != 1) {
        throw Error("assign_parametrized: the right_inverse of parametrization " + std::to_string(i) + " of " +
                    tensor_name(module, name) + " returned " + std::to_string(r.size()) +
                    " tensors; only the first of a chain may return several");
      }
      v = r[0];
    }
    x = list.chain_[0]->right_inverse(v);
  }
  if (x.size() != list.originals_.size()) {
    throw Error("assign_parametrized: the right_inverse for " + tensor_name(module, name) + " returned " +
                std::to_string(x.size()) + " tensors for " + std::to_string(list.originals_.size()) + " originals");
  }
  for (size_t i = 0; i < x.size(); ++i)
    check_like("assign_parametrized", "the value for an original", module, name, x[i], "the original",
               list.originals_[i]);
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < x.size(); ++i) list.originals_[i].copy_(x[i]);
  }
  *e.field = list.value();
}

void remove_parametrizations(Module& module, const std::string& name, bool leave_parametrized) {
  auto dict = dict_of(module);
  ParametrizationDict::Entry& e = entry_of("remove_parametrizations", module, name);
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
      throw Error("remove_parametrizations: " + tensor_name(module, name) + " is parametrized by " +
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
    throw Error("spectral_norm: the weight must be a floating tensor of at least one dim, got " + describe(weight));
  }
  if (n_power_iterations <= 0) {
    throw Error("spectral_norm: n_power_iterations must be positive, got " + std::to_string(n_power_iterations));
  }
  if (!(eps > 0)) throw Error("spectral_norm: eps must be positive, got " + detail::py_float(eps));
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

// --- Orthogonal ---------------------------------------------------------------------------------

namespace {
Tensor mT(const Tensor& x) { return x.transpose(-2, -1); }

Shape batch_with(const Tensor& x, int64_t rows, int64_t cols) {
  Shape s(x.sizes().begin(), x.sizes().end() - 2);
  s.push_back(rows);
  s.push_back(cols);
  return s;
}

// The Q of A's QR with R's diagonal made positive: the orthogonal matrix nearest in direction.
Tensor make_orthogonal(const Tensor& A) {
  const QrResult f = qr(A);
  return f.Q * sign(diagonal(f.R, 0, -2, -1)).unsqueeze(-2);
}

bool is_orthogonal(const Tensor& Q) {
  const int64_t n = Q.size(-2), k = Q.size(-1);
  const double eps =
      Q.dtype() == DType::Float64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
  return allclose(matmul(mT(Q), Q), eye(k, TensorOptions(Q.dtype(), Q.device())), 1e-5, 10.0 * n * eps);
}

const char* map_name(OrthogonalMap map) {
  switch (map) {
    case OrthogonalMap::MatrixExp: return "matrix_exp";
    case OrthogonalMap::Cayley: return "cayley";
    case OrthogonalMap::Householder: return "householder";
  }
  return "?";
}
}  // namespace

Orthogonal::Orthogonal(const Tensor& weight, OrthogonalMap map, bool use_trivialization)
    : map(map), use_trivialization(use_trivialization) {
  if (!weight.defined() || weight.dim() < 2 || (weight.dtype() != DType::Float32 && weight.dtype() != DType::Float64)) {
    throw Error("orthogonal: the weight must be float32 or float64 matrices [*, n, k], got " + describe(weight));
  }
  shape_ = weight.sizes();
  if (use_trivialization) base = register_buffer("base", Tensor());
}

Tensor Orthogonal::forward(const TensorList& originals) {
  if (originals.size() != 1) throw Error("orthogonal: expects one original, got " + std::to_string(originals.size()));
  Tensor X = originals[0];
  if (X.dim() < 2) throw Error("orthogonal: the original must be matrices, got " + describe(X));
  int64_t n = X.size(-2), k = X.size(-1);
  const bool transposed = n < k;
  if (transposed) {
    X = mT(X);
    std::swap(n, k);
  }
  // Now n >= k: Q [*, n, k] with orthonormal columns.
  Tensor Q;
  if (map == OrthogonalMap::MatrixExp || map == OrthogonalMap::Cayley) {
    // n k - k (k - 1) / 2 free entries: X's lower triangle, embedded in a square skew-symmetric A.
    Tensor L = tril(X);
    if (n != k) L = cat({L, zeros(batch_with(X, n, n - k), TensorOptions(X.dtype(), X.device()))}, -1);
    const Tensor A = L - mT(L);
    if (map == OrthogonalMap::MatrixExp) {
      Q = matrix_exp(A);
    } else {
      const Tensor I = eye(n, TensorOptions(X.dtype(), X.device()));
      Q = solve(I - A * 0.5, I + A * 0.5);
    }
    if (n != k) Q = Q.narrow(-1, 0, k);
  } else {
    // Reflections I - tau v v^T with tau = 2 / |v|^2 (v's 1 on the diagonal counted): orthogonal.
    const Tensor V = tril(X, -1);
    const Tensor tau = 2.0 / ((V * V).sum({-2}) + 1.0);
    Q = householder_product(V, tau) * sign(diagonal(X, 0, -2, -1).detach()).unsqueeze(-2);
  }
  if (use_trivialization) {
    if (!base.defined()) {
      throw Error(
          "orthogonal: the trivialization's base is not set (right_inverse sets it): register orthogonal "
          "first on a tensor, not after another parametrization, or without use_trivialization");
    }
    Q = matmul(base, Q);
  }
  return transposed ? mT(Q) : Q;
}

TensorList Orthogonal::right_inverse(const Tensor& value) {
  if (!value.defined() || value.sizes() != shape_ ||
      (value.dtype() != DType::Float32 && value.dtype() != DType::Float64)) {
    throw Error("orthogonal: the value assigned must be float32 or float64 " + shape_str(shape_) + ", got " +
                describe(value));
  }
  if (base.defined() && (value.dtype() != base.dtype() || value.device() != base.device())) {
    // Checked before base changes: a value the originals refuse must leave the module as it was.
    throw Error("orthogonal: the value assigned is " + describe(value) + " on " + value.device().str() +
                ", the weight is " + dtype_name(base.dtype()) + " on " + base.device().str());
  }
  NoGradGuard no_grad;
  Tensor Q = value.detach();
  int64_t n = Q.size(-2), k = Q.size(-1);
  const bool transposed = n < k;
  if (transposed) {
    Q = mT(Q);
    std::swap(n, k);
  }
  if (!use_trivialization) {
    if (map != OrthogonalMap::Householder) {
      throw Error(std::string("orthogonal: the ") + map_name(map) +
                  " map cannot be assigned to without use_trivialization (only householder has an inverse)");
    }
    // geqrf's reflections, with the diagonal holding the signs that make R's diagonal positive (a
    // reflection geqrf skipped, tau 0, is one forward makes: its sign flips back).
    GeqrfResult f = geqrf(Q);
    const Tensor d = sign(diagonal(f.a, 0, -2, -1)) * (1.0 - 2.0 * eq(f.tau, 0.0).to(f.a.dtype()));
    Tensor a = f.a.clone();
    diagonal(a, 0, -2, -1).copy_(d);
    return {transposed ? mT(a).contiguous() : a};
  }
  if (n == k) {
    Q = is_orthogonal(Q) ? Q.clone() : make_orthogonal(Q);
  } else {
    // Complete Q to a square orthogonal matrix with random columns.
    const Tensor N = randn(batch_with(Q, n, n - k), TensorOptions(Q.dtype(), Q.device()));
    Q = make_orthogonal(cat({Q, N}, -1));
  }
  remove_buffer("base");
  base = register_buffer("base", Q.contiguous());
  // -I: where every map gives I, so that forward gives base (its first k columns).
  Tensor neg_id = zeros(shape_, TensorOptions(value.dtype(), value.device()));
  diagonal(neg_id, 0, -2, -1).fill_(-1.0);
  return {neg_id};
}

// --- registration helpers -----------------------------------------------------------------------

Module& weight_norm(Module& module, const std::string& name, Tensor& field, std::optional<int64_t> dim) {
  register_parametrization(module, name, field, std::make_shared<WeightNorm>(dim));
  return module;
}

Module& spectral_norm(Module& module, const std::string& name, Tensor& field, int64_t n_power_iterations, double eps,
                      std::optional<int64_t> dim) {
  if (!field.defined()) throw Error("spectral_norm: " + tensor_name(module, name) + " is undefined");
  const int64_t d = dim ? *dim : (module.type_name().rfind("ConvTranspose", 0) == 0 ? 1 : 0);
  register_parametrization(module, name, field, std::make_shared<SpectralNorm>(field, n_power_iterations, d, eps));
  return module;
}

Module& orthogonal(Module& module, const std::string& name, Tensor& field, std::optional<OrthogonalMap> map,
                   bool use_trivialization) {
  if (!field.defined()) throw Error("orthogonal: " + tensor_name(module, name) + " is undefined");
  if (field.dim() < 2) {
    throw Error("orthogonal: " + tensor_name(module, name) + " must be matrices [*, n, k], got " + describe(field));
  }
  const OrthogonalMap m =
      map ? *map : (field.size(-2) == field.size(-1) ? OrthogonalMap::MatrixExp : OrthogonalMap::Householder);
  register_parametrization(module, name, field, std::make_shared<Orthogonal>(field, m, use_trivialization),
                           /*unsafe=*/true);
  return module;
}

}  // namespace kiln::nn
