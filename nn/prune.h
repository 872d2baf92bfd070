// Pruning, as torch.nn.utils.prune: a module's tensor (a Linear's weight) is multiplied by a mask
// of zeros and ones, so that the pruned entries are zero in every forward pass and get no
// gradient, while the mask is chosen by a method: the smallest magnitudes (l1_unstructured),
// whole channels of the smallest norm (ln_structured), at random, by hand (custom_from_mask), or
// over several tensors at once (global_unstructured).
//
// How it runs (PyTorch's arrangement, so state dicts carry the same keys): pruning "weight" moves
// the parameter, keeping its identity, to "weight_orig" (what the optimizer trains), adds the
// buffer "weight_mask" (the mask, in the parameter's dtype), and registers a forward pre-hook that
// sets the C++ member the module's forward reads (`field`) to weight_orig * weight_mask each time
// the module is called. Pruning the same tensor again prunes only what is left: an unstructured
// method chooses among the entries still unpruned (its amount counts those), a structured one
// among the channels not yet entirely pruned, and the new mask is the old one with more zeros.
// remove() makes it permanent: "weight" is a plain parameter again (weight_orig, holding the
// masked values), and the mask and the hook go.
//
// Between calls the member holds the value the last call computed; after an optimizer step or a
// load_state_dict, pruned_value() computes it again. Masks are computed on the tensors' device with
// kiln's ops and record no autograd history; ties between equal scores are broken as kiln's topk
// breaks them, which PyTorch does not specify (so an exact tie may prune another entry than
// PyTorch's).
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/random.h"
#include "nn/module.h"

namespace kiln::nn::prune {

// How much to prune: a count of entries (or channels), or a fraction in [0, 1] of those eligible,
// rounded to the nearest count with ties to even (Python's round, as PyTorch). A negative count or
// a fraction outside [0, 1] is an Error; a count larger than what is eligible is one when the mask
// is computed.
class Amount {
 public:
  // Implicit, so that a count or a fraction passes as itself: l1_unstructured(m, "weight",
  // m.weight, 3) or (..., 0.3).
  template <std::integral I>
  requires(!std::same_as<I, bool>) Amount(I count)  // NOLINT
      : is_fraction_(false), count_(static_cast<int64_t>(count)) {
    check_count(std::cmp_less(count, 0));
  }
  Amount(double fraction);  // NOLINT
  // The count to prune among `eligible` entries or channels; errors name `op`.
  int64_t of(int64_t eligible, const char* op) const;
  std::string str() const;

 private:
  void check_count(bool negative) const;  // an Error for a negative count (or one past int64)
  bool is_fraction_;
  int64_t count_ = 0;
  double fraction_ = 0.0;
};

enum class PruningType : uint8_t {
  Unstructured,  // chooses single entries
  Structured,    // chooses whole channels along dim()
  Global,        // sees the whole tensor, pruned entries included (custom_from_mask)
};

// A way of choosing what to prune, PyTorch's BasePruningMethod.
class PruningMethod {
 public:
  virtual ~PruningMethod() = default;
  virtual std::string name() const = 0;  // PyTorch's class name: "L1Unstructured"
  virtual PruningType type() const = 0;
  // The channels' dim of a structured method (negative counts from the end).
  virtual int64_t dim() const { return 0; }
  // A mask of t's shape and default_mask's dtype: default_mask (ones where nothing is pruned yet)
  // with zeros where this method prunes, computed from the importance scores t.
  virtual Tensor compute_mask(const Tensor& t, const Tensor& default_mask) const = 0;
};

// Prunes nothing: the mask of ones (a pruned module with nothing pruned yet).
class Identity : public PruningMethod {
 public:
  std::string name() const override { return "Identity"; }
  PruningType type() const override { return PruningType::Unstructured; }
  Tensor compute_mask(const Tensor& t, const Tensor& default_mask) const override;
};

// The `amount` entries chosen uniformly at random.
class RandomUnstructured : public PruningMethod {
 public:
  explicit RandomUnstructured(Amount amount, std::optional<Generator> generator = std::nullopt)
      : amount(amount), generator(std::move(generator)) {}
  std::string name() const override { return "RandomUnstructured"; }
  PruningType type() const override { return PruningType::Unstructured; }
  Tensor compute_mask(const Tensor& t, const Tensor& default_mask) const override;
  Amount amount;
  std::optional<Generator> generator;
};

// The `amount` entries of the smallest absolute value.
class L1Unstructured : public PruningMethod {
 public:
  explicit L1Unstructured(Amount amount) : amount(amount) {}
  std::string name() const override { return "L1Unstructured"; }
  PruningType type() const override { return PruningType::Unstructured; }
  Tensor compute_mask(const Tensor& t, const Tensor& default_mask) const override;
  Amount amount;
};

// `amount` channels along `dim` chosen uniformly at random. The tensor must have 2 dims or more.
class RandomStructured : public PruningMethod {
 public:
  RandomStructured(Amount amount, int64_t dim = -1, std::optional<Generator> generator = std::nullopt)
      : amount(amount), generator(std::move(generator)), dim_(dim) {}
  std::string name() const override { return "RandomStructured"; }
  PruningType type() const override { return PruningType::Structured; }
  int64_t dim() const override { return dim_; }
  Tensor compute_mask(const Tensor& t, const Tensor& default_mask) const override;
  Amount amount;
  std::optional<Generator> generator;

 private:
  int64_t dim_;
};

// The `amount` channels along `dim` of the smallest L_n norm (the norm of each channel's entries
// over the other dims: n = 2 is PyTorch's "fro", n = +-inf the largest or smallest magnitude, n = 0
// the count of nonzeros). The tensor must have 2 dims or more.
class LnStructured : public PruningMethod {
 public:
  // n must not be NaN.
  LnStructured(Amount amount, double n, int64_t dim = -1);
  std::string name() const override { return "LnStructured"; }
  PruningType type() const override { return PruningType::Structured; }
  int64_t dim() const override { return dim_; }
  Tensor compute_mask(const Tensor& t, const Tensor& default_mask) const override;
  Amount amount;
  double n;

 private:
  int64_t dim_;
};

// The entries where `mask` is zero (mask of the tensor's shape, any dtype: nonzero keeps).
class CustomFromMask : public PruningMethod {
 public:
  explicit CustomFromMask(Tensor mask) : mask(std::move(mask)) {}
  std::string name() const override { return "CustomFromMask"; }
  PruningType type() const override { return PruningType::Global; }
  Tensor compute_mask(const Tensor& t, const Tensor& default_mask) const override;
  Tensor mask;
};

// Prunes the module's parameter `name`, whose C++ member is `field` (Linear's "weight" and
// linear.weight; as with register_parametrization, the member itself, never a copy of the handle:
// kiln checks that it holds the registered tensor, not where it lives, and a copy would get the
// masked tensor while forward kept reading the member),
// with `method`, choosing on importance_scores (a tensor of the parameter's shape) when given and
// on the tensor as the module uses it otherwise (its pruned entries zero). Pruning a tensor
// already pruned adds to its mask (see above); the mask is then a new buffer, so a forward pass
// that saved the old one can still run backward. Errors (a kiln::Error naming the module and
// tensor, and nothing changed): no such parameter, a member that is another tensor, importance
// scores of another shape or device, an amount larger than what is eligible, a structured method
// on a 1-d tensor or a dim out of range, a "weight_orig" or "weight_mask" already taken, a
// parametrized tensor or a parametrization's original.
Module& apply(Module& module, const std::string& name, Tensor& field, std::shared_ptr<PruningMethod> method,
              const Tensor& importance_scores = Tensor());

Module& identity(Module& module, const std::string& name, Tensor& field);
Module& random_unstructured(Module& module, const std::string& name, Tensor& field, Amount amount,
                            std::optional<Generator> generator = std::nullopt);
Module& l1_unstructured(Module& module, const std::string& name, Tensor& field, Amount amount,
                        const Tensor& importance_scores = Tensor());
Module& random_structured(Module& module, const std::string& name, Tensor& field, Amount amount, int64_t dim,
                          std::optional<Generator> generator = std::nullopt);
Module& ln_structured(Module& module, const std::string& name, Tensor& field, Amount amount, double n, int64_t dim,
                      const Tensor& importance_scores = Tensor());
Module& custom_from_mask(Module& module, const std::string& name, Tensor& field, const Tensor& mask);

// One tensor of global_unstructured: the module, the parameter's name and its member, and
// optionally its importance scores.
struct Target {
  Module* module;
  std::string name;
  Tensor* field;
  Tensor importance_scores = Tensor();
};

// Prunes the targets together with one unstructured method (its amount counts the entries of all
// of them not yet pruned): the lowest magnitudes over the whole network rather than per tensor.
// Every target then carries its own mask, as if pruned with custom_from_mask. Every target is
// checked (as apply checks) before any changes; a structured or global method, a target named
// twice or targets on several devices are Errors too.
void global_unstructured(const std::vector<Target>& targets, const std::shared_ptr<PruningMethod>& method);

// Makes the pruning of `name` permanent: the parameter "name" again (the former "name_orig", so an
// optimizer that holds it keeps training it, now holding the masked values), without mask or hook.
// An Error when `name` is not pruned.
Module& remove(Module& module, const std::string& name);

// Whether the module or any module below it has a pruned tensor.
bool is_pruned(Module& module);

// The methods applied to `name`, oldest first (an Error when it is not pruned).
std::vector<std::shared_ptr<PruningMethod>> methods(const Module& module, const std::string& name);

// Computes orig * mask into the member and returns it, as a call of the module would.
Tensor pruned_value(Module& module, const std::string& name);

}  // namespace kiln::nn::prune
