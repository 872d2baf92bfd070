// Parametrizations, as torch.nn.utils.parametrize: a module's tensor (a Linear's weight) becomes a
// function of other tensors, the originals, which are what the optimizer trains and what the state
// dict saves. weight_norm, spectral_norm and orthogonal are the three PyTorch ships; a
// Parametrization of one's own (symmetric or positive weights, a constrained basis) registers the
// same way.
//
// How it runs: registering moves the tensor out of the module's parameters into the child
// "parametrizations.<name>" (a ParametrizationList holding "original", or "original0",
// "original1", ... when the first parametrization's right_inverse makes several tensors, and the
// parametrizations as children "0", "1", ...), so the state dict's keys are PyTorch's. A forward
// pre-hook on the module (nn/module.h) then computes the tensor from the originals each time the
// module is called and stores it in the C++ member that forward reads (`field`), so gradients reach
// the originals. Between calls the member holds the last value computed: after an optimizer step
// or a load_state_dict, read it through parametrized_value() or refresh_parametrizations().
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "nn/module.h"

namespace kiln::nn {

// A function from the original tensor(s) to the tensor the module uses. A Module, so that its
// state (spectral norm's vectors) is saved with the model, moves with to() and sees train()/eval().
class Parametrization : public Module {
 public:
  // The first parametrization of a chain gets the originals (one tensor, or as many as its
  // right_inverse makes); each later one gets one tensor, the output of the one before.
  virtual Tensor forward(const TensorList& originals) = 0;
  // Originals whose forward gives `value` (or a value the parametrization treats as equal): what
  // registration stores from the module's tensor and what assign_parametrized stores. The default,
  // the value itself, suits a parametrization whose forward changes nothing of a valid value.
  virtual TensorList right_inverse(const Tensor& value) { return {value}; }
};

// One parametrized tensor: its originals and its chain of parametrizations.
class ParametrizationList : public Module {
 public:
  std::string type_name() const override { return "ParametrizationList"; }
  // The chain applied to the originals: the tensor the module uses.
  Tensor value();
  TensorList originals() const;
  size_t size() const { return chain_.size(); }
  const std::shared_ptr<Parametrization>& operator[](size_t i) const;

 private:
  friend class ParametrizationDict;
  friend void register_parametrization(Module&, const std::string&, Tensor&, std::shared_ptr<Parametrization>, bool);
  friend void assign_parametrized(Module&, const std::string&, const Tensor&);
  friend void remove_parametrizations(Module&, const std::string&, bool);
  std::vector<std::shared_ptr<Parametrization>> chain_;
  std::vector<Tensor> originals_;
  bool buffers_ = false;  // the originals are buffers (the tensor was a buffer), not parameters
};

// Registers `parametrization` on the module's parameter or buffer `name`, whose C++ member is
// `field` (Linear's "weight" and linear.weight). The hook writes through &field on every call, so
// field must live as long as the module: a member of it (or of a container it holds), never a
// copy of the handle; kiln checks that it holds the registered tensor, not where it lives (the
// overload below, with a pointer to member, cannot be given anything else). The first
// registration on a name moves the tensor into its originals through right_inverse (one original
// keeps the tensor's identity, so an optimizer made before still trains it); a later one appends
// to the chain. Unless unsafe, the chain's output must keep the tensor's shape and dtype, and one
// original must keep them too. Errors (a kiln::Error naming the module and tensor): no such
// parameter or buffer, a field that is another tensor, a null parametrization, a changed shape or
// dtype, a child already named "parametrizations" that is not one.
void register_parametrization(Module& module, const std::string& name, Tensor& field,
                              std::shared_ptr<Parametrization> parametrization, bool unsafe = false);
// The same with the member named by a pointer to member: register_parametrization(lin, "weight",
// &Linear::weight, p).
template <class M, class B>
requires std::derived_from<M, B> && std::derived_from<M, Module>
void register_parametrization(M& module, const std::string& name, Tensor B::*member,
                              std::shared_ptr<Parametrization> parametrization, bool unsafe = false) {
  register_parametrization(static_cast<Module&>(module), name, module.*member, std::move(parametrization), unsafe);
}

// Whether the module has a parametrization on `name` (empty: on any tensor).
bool is_parametrized(const Module& module, const std::string& name = "");

// The parametrization list of `name`, or a kiln::Error when it is not parametrized.
std::shared_ptr<ParametrizationList> parametrization_list(const Module& module, const std::string& name);

// Computes every parametrized tensor of the module (not its children) into its field, as calling
// the module does, and returns nothing; parametrized_value computes one and also returns it.
void refresh_parametrizations(Module& module);
Tensor parametrized_value(Module& module, const std::string& name);

// Sets a parametrized tensor to `value` (Python's `module.name = value`): the chain's
// right_inverses, last to first, give the originals, which are copied into in place (shapes and
// dtypes must match; no autograd history is recorded), and the field is refreshed.
void assign_parametrized(Module& module, const std::string& name, const Tensor& value);

// Removes the parametrizations on `name` and registers a plain parameter (or buffer) there again,
// which the field then holds. leave_parametrized: its value is the chain's output (one original
// keeps its identity when the shape and dtype allow); otherwise it is the original itself (an Error
// when there are several). The "parametrizations" child and the hook go with the last name.
void remove_parametrizations(Module& module, const std::string& name, bool leave_parametrized = true);

// --- the built-in parametrizations -------------------------------------------------------------

// weight = g * v / ||v||, as torch.nn.utils.parametrizations.weight_norm: the originals are the
// magnitude g ("original0", the norm of each slice along `dim`, size 1 on the other dims) and the
// direction v ("original1", the tensor). dim nullopt: one norm over the whole tensor. PyTorch reads
// dim = -1 as the whole tensor too, which kiln does not guess at: -1 is an Error naming both
// spellings (nullopt, or ndim - 1 for the last dim); other negative dims count from the end.
class WeightNorm : public Parametrization {
 public:
  explicit WeightNorm(std::optional<int64_t> dim = 0) : dim_(dim) {}
  std::string type_name() const override { return "_WeightNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const TensorList& originals) override;
  TensorList right_inverse(const Tensor& value) override;

 private:
  Tensor norm_except_dim(const Tensor& v) const;
  std::optional<int64_t> dim_;
};

// weight / sigma(weight), sigma the largest singular value of the weight as a matrix (dim moved
// first, the rest flattened: [h, w]), estimated by power iteration, as
// torch.nn.utils.parametrizations.spectral_norm. Buffers "_u" [h] and "_v" [w] hold the singular
// vector estimates: 15 iterations from random unit vectors at construction, then
// n_power_iterations more per computation in training mode and none in eval mode. sigma = u^T W v
// is differentiated through W only. A 1-d weight is divided by its norm (max(||w||, eps)).
class SpectralNorm : public Parametrization {
 public:
  SpectralNorm(const Tensor& weight, int64_t n_power_iterations = 1, int64_t dim = 0, double eps = 1e-12);
  std::string type_name() const override { return "_SpectralNorm"; }
  Tensor forward(const TensorList& originals) override;

  int64_t n_power_iterations, dim;
  double eps;
  Tensor u, v;  // the buffers "_u" and "_v" (undefined for a 1-d weight)

 private:
  Tensor as_matrix(const Tensor& weight) const;
  void power_method(const Tensor& matrix, int64_t iterations);
};

// Which map orthogonal() uses to turn its original into an orthogonal matrix.
enum class OrthogonalMap : uint8_t {
  MatrixExp,    // e^A of the skew-symmetric A = X - X^T built from X's lower triangle
  Cayley,       // (I - A / 2)^-1 (I + A / 2) of the same A
  Householder,  // the product of the reflections whose vectors are X's columns below the diagonal
};

// A matrix (or batch) with orthonormal columns, or rows when it is wider than tall, as
// torch.nn.utils.parametrizations.orthogonal: Q = map(X) for the original X. With
// use_trivialization (the default) Q = base map(X), where the buffer "base" is the orthogonal
// matrix that right_inverse was last given (made orthogonal by QR when it is not, completed to a
// square one with random columns when it is not square) and X starts at -I, where map(X) = I: the
// optimizer moves X in a flat space around base, and assigning the weight again moves base.
// Without it, right_inverse inverts the Householder map (geqrf) and is an Error for the others.
// The Householder map multiplies its columns by the signs of X's diagonal (PyTorch by that diagonal
// truncated to integers: the same at +-1, where right_inverse puts it and plain gradients leave it
// (they do not reach it), but a zero column under 1 and a non-orthogonal one from 2 up).
class Orthogonal : public Parametrization {
 public:
  Orthogonal(const Tensor& weight, OrthogonalMap map, bool use_trivialization = true);
  std::string type_name() const override { return "_Orthogonal"; }
  Tensor forward(const TensorList& originals) override;
  TensorList right_inverse(const Tensor& value) override;

  OrthogonalMap map;
  bool use_trivialization;
  Tensor base;  // the buffer "base" [*, n, n] (n the larger of the two sizes); undefined until set

 private:
  Shape shape_;
};

// Registers Orthogonal on the module's tensor `name` (at least 2-d, float32 or float64), with
// unsafe, as PyTorch: the weight becomes the Q of its QR (with R's diagonal positive). map nullopt:
// MatrixExp for square matrices, Householder otherwise.
Module& orthogonal(Module& module, const std::string& name, Tensor& field,
                   std::optional<OrthogonalMap> map = std::nullopt, bool use_trivialization = true);

// Registers WeightNorm on the module's tensor `name` (member `field`); returns the module.
Module& weight_norm(Module& module, const std::string& name, Tensor& field, std::optional<int64_t> dim = 0);
// Registers SpectralNorm. dim nullopt: 1 for the ConvTranspose modules (their weight is [in, out,
// ...]), 0 otherwise, as PyTorch. n_power_iterations must be positive and eps positive.
Module& spectral_norm(Module& module, const std::string& name, Tensor& field, int64_t n_power_iterations = 1,
                      double eps = 1e-12, std::optional<int64_t> dim = std::nullopt);

// The same on a module's `weight` member: nn::weight_norm(*linear), nn::spectral_norm(*conv).
template <class M>
M& weight_norm(M& module, std::optional<int64_t> dim = 0) {
  weight_norm(static_cast<Module&>(module), "weight", module.weight, dim);
  return module;
}
template <class M>
M& spectral_norm(M& module, int64_t n_power_iterations = 1, double eps = 1e-12,
                 std::optional<int64_t> dim = std::nullopt) {
  spectral_norm(static_cast<Module&>(module), "weight", module.weight, n_power_iterations, eps, dim);
  return module;
}

template <class M>
M& orthogonal(M& module, std::optional<OrthogonalMap> map = std::nullopt, bool use_trivialization = true) {
  orthogonal(static_cast<Module&>(module), "weight", module.weight, map, use_trivialization);
  return module;
}

}  // namespace kiln::nn
