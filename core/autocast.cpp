// Autocast state, the parameter-cast cache and the policy table.
//
// The table is the whole policy: an op that is not in it runs in its inputs' dtypes. Ops consult it
// at their entry (autocast::cast_inputs, before any check or autograd recording), so the cast is an
// ordinary differentiable to(dtype) on the tape and backward needs no autocast logic of its own.
#include "core/autocast.h"

#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/autograd.h"
#include "kernels/error.h"

namespace kiln {
namespace {

struct ThreadState {
  AutocastState cpu{false, DType::BFloat16};
  AutocastState cuda{false, DType::Float16};
  int depth = 0;  // guards alive on this thread; the cache empties when it returns to 0
};

thread_local ThreadState tls;

AutocastState& state_of(DeviceType device) { return device == DeviceType::CPU ? tls.cpu : tls.cuda; }

// One cached cast of a parameter. The weak pointer tells a live source from a new tensor that
// happens to reuse a freed one's address; the version refuses a cast made before an in-place update
// (an optimizer step inside the guard), which PyTorch's cache would hand out stale.
struct CacheEntry {
  std::weak_ptr<TensorImpl> source;
  uint64_t version = 0;
  Tensor cast;
};

struct CacheKey {
  const TensorImpl* source;
  DType dtype;
  bool grad_mode;  // a cast made under NoGradGuard has no history, so it must not serve a forward with grad
  bool operator==(const CacheKey& o) const {
    return source == o.source && dtype == o.dtype && grad_mode == o.grad_mode;
  }
};

struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const {
    return std::hash<const void*>()(k.source) ^ (static_cast<size_t>(k.dtype) << 1) ^ static_cast<size_t>(k.grad_mode);
  }
};

using CastCache = std::unordered_map<CacheKey, CacheEntry, CacheKeyHash>;
thread_local CastCache cast_cache;
thread_local std::vector<CastCache> enclosing_caches;  // AutocastCacheScope's saved caches, innermost last

void check_dtype(DeviceType device, DType dtype) {
  if (dtype != DType::Float16 && dtype != DType::BFloat16) {
    throw DTypeError(std::string("AutocastGuard: the autocast dtype must be float16 or bfloat16, got ") +
                     dtype_name(dtype) + " (device type " + (device == DeviceType::CPU ? "cpu" : "cuda") + ")");
  }
}

void leave() {
  if (--tls.depth == 0) cast_cache.clear();
}

bool eligible(const Tensor* t) {
  // float64 stays float64, as in PyTorch: it is asked for explicitly (gradcheck, references).
  return t != nullptr && t->defined() && t->is_floating_point() && t->dtype() != DType::Float64;
}

// to(dtype), through the cache for parameters.
Tensor cast(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  if (!(t.is_leaf() && t.requires_grad()) || tls.depth == 0) return t.to(dtype);
  const CacheKey key{t.impl(), dtype, grad_enabled()};
  auto it = cast_cache.find(key);
  if (it != cast_cache.end()) {
    const std::shared_ptr<TensorImpl> source = it->second.source.lock();
    if (source.get() == t.impl() && it->second.version == t.version()) return it->second.cast;
  }
  Tensor out = t.to(dtype);
  cast_cache[key] = CacheEntry{t.impl_ptr(), t.version(), out};
  return out;
}

}  // namespace

DType autocast_default_dtype(DeviceType device) {
  return device == DeviceType::CPU ? DType::BFloat16 : DType::Float16;
}

AutocastState autocast_state(DeviceType device) { return state_of(device); }
AutocastSnapshot autocast_snapshot() { return {tls.cpu, tls.cuda}; }
bool autocast_any_enabled() { return tls.cpu.enabled || tls.cuda.enabled; }

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled) : device_(device) {
  check_dtype(device, dtype);
  prev_ = state_of(device);
  state_of(device) = AutocastState{enabled, dtype};
  ++tls.depth;
}

AutocastGuard::AutocastGuard(DeviceType device, bool enabled)
    : AutocastGuard(device, autocast_default_dtype(device), enabled) {}

AutocastGuard::~AutocastGuard() {
  state_of(device_) = prev_;
  leave();
}

AutocastSnapshotGuard::AutocastSnapshotGuard(const AutocastSnapshot& snapshot) : prev_(autocast_snapshot()) {
  tls.cpu = snapshot.cpu;
  tls.cuda = snapshot.cuda;
  ++tls.depth;
}

AutocastSnapshotGuard::~AutocastSnapshotGuard() {
  tls.cpu = prev_.cpu;
  tls.cuda = prev_.cuda;
  leave();
}

AutocastCacheScope::AutocastCacheScope() {
  enclosing_caches.push_back(std::move(cast_cache));
  cast_cache.clear();  // a moved-from map is valid but unspecified
}

AutocastCacheScope::~AutocastCacheScope() {
  cast_cache = std::move(enclosing_caches.back());
  enclosing_caches.pop_back();
}

size_t autocast_cache_size() { return cast_cache.size(); }
void clear_autocast_cache() { cast_cache.clear(); }

namespace autocast {

// The policy. Names are the ops' own (the name each op puts in its errors).
//
// Where kiln differs from PyTorch (torch.autocast), and why:
// - bmm, baddbmm, addmm, mm: kiln has one matrix product, matmul (batched and broadcast), so
//   matmul's row covers them.
// - batch_norm is left alone, as PyTorch leaves it (the issue that asked for autocast listed it
//   with the float32 ops): kiln's kernel already reads float16/bfloat16 activations with float32
//   weights and float32 statistics and accumulates in float32. A float32 cast would add a copy of
//   every activation of a convolutional net and a float32 output that the next conv casts back.
// - add, sub, mul, div, maximum, minimum, cat, stack and where promote to their widest input
//   themselves (kiln's type promotion, as PyTorch's), so their rows say Widest and the ops need no
//   cast at their entry; cast_inputs implements Widest for any op that lists it and does not
//   promote on its own (grid_sample and index_put, whose inputs must share a dtype, as PyTorch's
//   list has grid_sampler and index_put).
// - sum, mean and var run in float32 for any float16/bfloat16 input. PyTorch does the same for sum
//   (and prod, which kiln does not have); kiln adds mean and var because they are sums too.
// - Reductions such as amax/amin, and activations (relu, gelu, tanh, sigmoid), run in the input
//   dtype: they are exact or bounded in the low precision, as in PyTorch.
// - cross_entropy reads float16/bfloat16 logits as they are and returns a float32 loss. PyTorch
//   casts the logits to float32 first; kiln's kernels load each logit into float32 and compute
//   there, so the loss and the logits' gradient (rounded once to the logits' dtype, where the
//   cast's backward would round the float32 gradient) are the same bits, without writing and
//   re-reading a float32 copy of the logits: for GPT-2's [16384, 50257] that copy is 3.3 GB each
//   way, and it was kept for the backward.
const std::vector<PolicyRow>& policy_table() {
  static const std::vector<PolicyRow> rows = {
      // Tensor-core work: the point of autocast.
      {"matmul", Policy::LowPrecision},
      {"linear", Policy::LowPrecision},
      {"bilinear", Policy::LowPrecision},
      {"linear_gelu", Policy::LowPrecision},
      {"gelu_mlp", Policy::LowPrecision},
      {"conv2d", Policy::LowPrecision},
      {"conv_transpose2d", Policy::LowPrecision},
      {"conv3d", Policy::LowPrecision},
      {"conv_transpose3d", Policy::LowPrecision},
      {"scaled_dot_product_attention", Policy::LowPrecision},
      // Range or accuracy needs float32: exponentials, logarithms, powers, long sums, the
      // normalizations and the losses.
      {"softmax", Policy::Float32},
      {"log_softmax", Policy::Float32},
      {"layer_norm", Policy::Float32},
      {"group_norm", Policy::Float32},
      {"rms_norm", Policy::Float32},
      {"cross_entropy", Policy::Float32Result},
      {"mse_loss", Policy::Float32},
      {"l1_loss", Policy::Float32},
      {"smooth_l1_loss", Policy::Float32},
      {"huber_loss", Policy::Float32},
      {"binary_cross_entropy_with_logits", Policy::Float32},
      {"nll_loss", Policy::Float32},
      {"binary_cross_entropy", Policy::Float32},
      {"kl_div", Policy::Float32},
      {"cosine_embedding_loss", Policy::Float32},
      {"margin_ranking_loss", Policy::Float32},
      {"triplet_margin_loss", Policy::Float32},
      {"poisson_nll_loss", Policy::Float32},
      {"gaussian_nll_loss", Policy::Float32},
      {"soft_margin_loss", Policy::Float32},
      {"hinge_embedding_loss", Policy::Float32},
      {"multilabel_soft_margin_loss", Policy::Float32},
      {"multi_margin_loss", Policy::Float32},
      {"multilabel_margin_loss", Policy::Float32},
      {"ctc_loss", Policy::Float32},
      {"sum", Policy::Float32},
      {"logsumexp", Policy::Float32},
      {"cumsum", Policy::Float32},
      {"cumprod", Policy::Float32},
      {"vector_norm", Policy::Float32},
      {"cosine_similarity", Policy::Float32},
      {"cdist", Policy::Float32},
      {"pdist", Policy::Float32},
      {"mean", Policy::Float32},
      {"var", Policy::Float32},
      {"exp", Policy::Float32},
      {"log", Policy::Float32},
      {"log1p", Policy::Float32},
      {"expm1", Policy::Float32},
      {"log2", Policy::Float32},
      {"log10", Policy::Float32},
      {"tan", Policy::Float32},
      {"asin", Policy::Float32},
      {"acos", Policy::Float32},
      {"sinh", Policy::Float32},
      {"cosh", Policy::Float32},
      {"erfinv", Policy::Float32},
      {"reciprocal", Policy::Float32},
      {"pow", Policy::Float32},
      {"rsqrt", Policy::Float32},
      {"softplus", Policy::Float32},
      // The Fourier transforms take float32 or float64 only (PyTorch's CPU list casts them too).
      {"fft", Policy::Float32},
      {"ifft", Policy::Float32},
      {"rfft", Policy::Float32},
      {"irfft", Policy::Float32},
      {"hfft", Policy::Float32},
      {"ihfft", Policy::Float32},
      {"fft2", Policy::Float32},
      {"ifft2", Policy::Float32},
      {"rfft2", Policy::Float32},
      {"irfft2", Policy::Float32},
      {"fftn", Policy::Float32},
      {"ifftn", Policy::Float32},
      {"rfftn", Policy::Float32},
      {"irfftn", Policy::Float32},
      {"hfft2", Policy::Float32},
      {"ihfft2", Policy::Float32},
      {"hfftn", Policy::Float32},
      {"ihfftn", Policy::Float32},
      {"stft", Policy::Float32},
      {"istft", Policy::Float32},
      // Several inputs of possibly different dtypes: the widest wins (promoted by the ops themselves).
      {"add", Policy::Widest},
      {"sub", Policy::Widest},
      {"mul", Policy::Widest},
      {"div", Policy::Widest},
      {"maximum", Policy::Widest},
      {"minimum", Policy::Widest},
      {"atan2", Policy::Widest},
      {"cat", Policy::Widest},
      {"stack", Policy::Widest},
      {"where", Policy::Widest},
      {"grid_sample", Policy::Widest},
      {"index_put", Policy::Widest},
  };
  return rows;
}

std::optional<Policy> policy_of(const char* op) {
  for (const PolicyRow& row : policy_table()) {
    if (std::strcmp(row.op, op) == 0) return row.policy;
  }
  return std::nullopt;
}

std::optional<TensorList> cast_inputs(const char* op, std::initializer_list<const Tensor*> inputs) {
  if (!autocast_any_enabled()) return std::nullopt;
  const Tensor* first = nullptr;
  for (const Tensor* t : inputs) {
    if (t != nullptr && t->defined()) {
      first = t;
      break;
    }
  }
  if (first == nullptr) return std::nullopt;
  // Mixed devices are the op's error to report, with its own message; autocast follows the first.
  const AutocastState state = state_of(first->device().type);
  if (!state.enabled) return std::nullopt;
  const std::optional<Policy> policy = policy_of(op);
  if (!policy || *policy == Policy::Float32Result) return std::nullopt;

  DType target = state.dtype;
  if (*policy == Policy::Widest) {
    std::optional<DType> widest;
    for (const Tensor* t : inputs) {
      if (t != nullptr && t->defined() && t->is_floating_point())
        widest = widest ? promote_types(*widest, t->dtype()) : t->dtype();
    }
    if (!widest) return std::nullopt;
    target = *widest;
  }
  auto wanted = [&](const Tensor* t) -> std::optional<DType> {
    if (!eligible(t)) return std::nullopt;
    if (*policy == Policy::Float32) {
      return t->dtype() == DType::Float16 || t->dtype() == DType::BFloat16 ? std::optional<DType>(DType::Float32)
                                                                            : std::nullopt;
    }
    return t->dtype() == target ? std::nullopt : std::optional<DType>(target);
  };
  bool changes = false;
  for (const Tensor* t : inputs) changes = changes || wanted(t).has_value();
  if (!changes) return std::nullopt;
  TensorList out;
  out.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    if (t == nullptr) {
      out.emplace_back();
    } else if (const std::optional<DType> dt = wanted(t)) {
      out.push_back(cast(*t, *dt));
    } else {
      out.push_back(*t);
    }
  }
  return out;
}

bool float32_result(const char* op, const Tensor& input) {
  if (!autocast_any_enabled() || !input.defined() || !state_of(input.device().type).enabled) return false;
  if (input.dtype() != DType::Float16 && input.dtype() != DType::BFloat16) return false;
  return policy_of(op) == Policy::Float32Result;
}

}  // namespace autocast
}  // namespace kiln
