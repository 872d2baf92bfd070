// Multi-tensor ops: checks, bucketing by dtype, one kernel call per bucket. A dense tensor is
// handed to the kernels as one flat block from its first element, which is valid whatever its
// dimension order, so channels-last parameters need no copy; all this file reads of the scalar
// tensors is their device pointer, never their value.
#include "core/ops/foreach.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"
#include "kernels/foreach.h"

namespace kiln {
namespace {

std::string at(const char* what, size_t i) { return std::string(what) + " " + std::to_string(i); }

// A list element must be defined and dense; returns it as a kernel entry.
ForeachTensor flat(const char* op, const Tensor& t, const std::string& what) {
  ops::check_defined(op, t, what.c_str());
  if (!t.is_non_overlapping_and_dense()) {
    throw Error(std::string(op) + ": " + what + " (shape " + shape_str(t.sizes()) + ", strides " +
                shape_str(t.strides()) + ") is not dense; multi-tensor ops need contiguous or channels-last tensors");
  }
  return ForeachTensor{t.data_ptr(), t.numel()};
}

// `t` (the i-th of `what`) must match param i in shape and layout.
void check_like_param(const char* op, const Tensor& t, const Tensor& param, const std::string& what) {
  if (t.sizes() != param.sizes()) {
    throw ShapeError(std::string(op) + ": " + what + " has shape " + shape_str(t.sizes()) + " but its parameter has " +
                     shape_str(param.sizes()));
  }
  if (!same_layout(t, param)) {
    throw Error(std::string(op) + ": " + what + " has strides " + shape_str(t.strides()) +
                " but its parameter has strides " + shape_str(param.strides()) + " (shape " +
                shape_str(param.sizes()) + "); they must share one memory layout");
  }
}

void check_length(const char* op, const TensorList& list, size_t n, const char* what) {
  if (list.size() != n) {
    throw Error(std::string(op) + ": expected " + std::to_string(n) + " " + what + " (one per parameter), got " +
                std::to_string(list.size()));
  }
}

// Whether `s`, a scalar argument, is there: undefined is an Error when required, else false; a
// defined one must have one element of a dtype in `dtypes` (named `dtype_words` in the error) and
// live on `device`.
bool check_scalar(const char* op, const Tensor& s, const char* what, Device device, bool required,
                  std::initializer_list<DType> dtypes, const char* dtype_words) {
  if (!s.defined()) {
    if (required) throw Error(std::string(op) + ": " + what + " is an undefined tensor");
    return false;
  }
  if (s.numel() != 1 || std::find(dtypes.begin(), dtypes.end(), s.dtype()) == dtypes.end()) {
    throw DTypeError(std::string(op) + ": " + what + " must be a one-element " + dtype_words + " tensor, got " +
                     dtype_name(s.dtype()) + " of shape " + shape_str(s.sizes()));
  }
  if (s.device() != device) {
    throw DeviceError(std::string(op) + ": " + what + " is on " + s.device().str() + " but the tensors are on " +
                      device.str());
  }
  return true;
}

// A one-element float32 scalar on `device`; returns its pointer (nullptr when optional and absent).
const float* scalar_ptr(const char* op, const Tensor& s, const char* what, Device device, bool required) {
  if (!check_scalar(op, s, what, device, required, {DType::Float32}, "float32")) return nullptr;
  return static_cast<const float*>(s.data_ptr());
}

// The learning rate: a one-element float64 or float32 tensor on `device`, as float64 there (a float32 one is
// converted on the device into `holder`, which the caller keeps until the kernels are queued).
const double* lr_ptr(const char* op, const Tensor& lr, Device device, Tensor& holder) {
  check_scalar(op, lr, "lr", device, true, {DType::Float64, DType::Float32}, "float64 or float32");
  holder = lr.dtype() == DType::Float64 ? lr : lr.to(DType::Float64);
  return static_cast<const double*>(holder.data_ptr());
}

Device list_device(const char* op, std::initializer_list<const TensorList*> lists) {
  std::vector<const Tensor*> all;
  for (const TensorList* l : lists)
    for (const Tensor& t : *l) all.push_back(&t);
  return ops::common_device(op, all);
}

// Indices of `n` items grouped by key, groups in order of first appearance (so launches and norm
// partials come in a fixed order).
template <typename Key, typename KeyOf> std::vector<std::pair<Key, std::vector<size_t>>> bucket(size_t n, KeyOf key_of) {
  std::vector<std::pair<Key, std::vector<size_t>>> buckets;
  for (size_t i = 0; i < n; ++i) {
    const Key k = key_of(i);
    auto it = buckets.begin();
    while (it != buckets.end() && !(it->first == k)) ++it;
    if (it == buckets.end()) {
      buckets.push_back({k, {i}});
    } else {
      it->second.push_back(i);
    }
  }
  return buckets;
}

std::vector<ForeachTensor> gather(const std::vector<ForeachTensor>& all, const std::vector<size_t>& idx) {
  std::vector<ForeachTensor> out;
  out.reserve(idx.size());
  for (size_t i : idx) out.push_back(all[i]);
  return out;
}

struct DTypePair {
  DType param, state;
  bool operator==(const DTypePair& o) const { return param == o.param && state == o.state; }
};

// An update writes its parameters and states in place while it reads the gradients and the step
// counts, so none of the tensors it writes may share a byte with any other tensor of the update
// (gradients and steps may share with each other: they are only read). The CPU loops take the
// arrays as restrict pointers, and on the GPU two chunks over one memory would race; a parameter
// listed twice would be updated twice. The tensors are dense (flat() checked), so each is the one
// range of its numel elements.
void check_disjoint(const char* op, const TensorList& params, const TensorList& grads, const TensorList& steps,
                    const std::vector<std::pair<const TensorList*, const char*>>& states) {
  // A range names its tensor by list name and index; the text is built only for an error, as this
  // runs at every optimizer step.
  struct Range {
    uintptr_t begin, end;
    bool written;
    const char* list;
    size_t index;
  };
  std::vector<Range> ranges;
  auto add = [&](const TensorList& list, const char* what, bool written) {
    for (size_t i = 0; i < list.size(); ++i) {
      const Tensor& t = list[i];
      if (t.numel() == 0) continue;
      const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
      ranges.push_back({begin, begin + static_cast<uintptr_t>(t.numel()) * t.element_size(), written, what, i});
    }
  };
  add(params, "parameter", true);
  add(grads, "gradient", false);
  add(steps, "step", false);
  for (const auto& [list, what] : states) add(*list, what, true);
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  // Sweep in address order. A written range that reaches into the next one is caught there, so the
  // last written range is the only written one a later range can start inside; a written range
  // can start inside any earlier range, so the one that reaches furthest so far is kept as well.
  const Range* furthest = nullptr;
  const Range* last_written = nullptr;
  for (const Range& r : ranges) {
    const Range* clash = nullptr;
    if (last_written != nullptr && r.begin < last_written->end) clash = last_written;
    else if (r.written && furthest != nullptr && r.begin < furthest->end) clash = furthest;
    if (clash != nullptr) {
      throw Error(std::string(op) + ": " + at(clash->list, clash->index) + " and " + at(r.list, r.index) +
                  " share memory; the parameters and states an update writes in place must each have memory of "
                  "their own, apart from every other tensor of the update");
    }
    if (furthest == nullptr || r.end > furthest->end) furthest = &r;
    if (r.written) last_written = &r;
  }
}

// Checks of an optimizer update: params floating and dense, each state list like the params with a
// dtype of float32 or the param's. Returns the flat entries of params (index 0), grads (1) and each
// state list. The callers then check the devices, and then check_disjoint.
std::vector<std::vector<ForeachTensor>> check_update(const char* op, const TensorList& params, const TensorList& grads,
                                                     const std::vector<std::pair<const TensorList*, const char*>>& states) {
  check_length(op, grads, params.size(), "gradients");
  for (const auto& [list, what] : states) check_length(op, *list, params.size(), what);
  std::vector<std::vector<ForeachTensor>> flats(2 + states.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    flats[0].push_back(flat(op, p, at("parameter", i)));
    ops::check_floating(op, p, at("parameter", i).c_str());
    flats[1].push_back(flat(op, grads[i], at("gradient", i)));
    if (grads[i].dtype() != p.dtype()) {
      throw DTypeError(std::string(op) + ": gradient " + std::to_string(i) + " is " + dtype_name(grads[i].dtype()) +
                       " but its parameter is " + dtype_name(p.dtype()));
    }
    check_like_param(op, grads[i], p, at("gradient", i));
    for (size_t k = 0; k < states.size(); ++k) {
      const Tensor& s = (*states[k].first)[i];
      const std::string what = at(states[k].second, i);
      flats[2 + k].push_back(flat(op, s, what));
      check_like_param(op, s, p, what);
      if (s.dtype() != p.dtype() && s.dtype() != DType::Float32) {
        throw DTypeError(std::string(op) + ": " + what + " is " + dtype_name(s.dtype()) +
                         "; optimizer state must be float32 or the parameter's dtype " + dtype_name(p.dtype()));
      }
      if (k > 0 && s.dtype() != (*states[0].first)[i].dtype()) {
        throw DTypeError(std::string(op) + ": the states of parameter " + std::to_string(i) + " differ in dtype (" +
                         dtype_name((*states[0].first)[i].dtype()) + " and " + dtype_name(s.dtype()) + ")");
      }
    }
  }
  return flats;
}

// The step counts of an update: one per parameter, or one that all share; each a one-element float32
// tensor on `device`. Returns the kernel entries, one per parameter.
std::vector<ForeachTensor> step_entries(const char* op, const TensorList& steps, size_t n, Device device) {
  if (steps.size() != n && steps.size() != 1) {
    throw Error(std::string(op) + ": expected " + std::to_string(n) +
                " step counts (one per parameter, or one for all), got " + std::to_string(steps.size()));
  }
  std::vector<ForeachTensor> out;
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string what = at("step", i);
    out.push_back(ForeachTensor{const_cast<float*>(scalar_ptr(op, steps[i], what.c_str(), device, true)), 1});
  }
  out.resize(n, out.front());
  return out;
}

void bump(const TensorList& list) {
  for (const Tensor& t : list) t.bump_version();
}

// A hyperparameter must be a finite number, at least `min` and below `below` when those are given.
// The kernels take them as they are, and a NaN or infinity would spread through every parameter.
void check_hyper(const char* op, const char* what, double v, std::optional<double> min,
                 std::optional<double> below = std::nullopt) {
  if (std::isfinite(v) && (!min || v >= *min) && (!below || v < *below)) return;
  std::string want = "a finite number";
  if (min) want += " >= " + num_str(*min);
  if (below) want += std::string(min ? " and" : "") + " below " + num_str(*below);
  throw Error(std::string(op) + ": " + what + " must be " + want + ", got " + num_str(v));
}

}  // namespace

void foreach_sgd_(const TensorList& params, const TensorList& grads, const TensorList& momentum_buffers,
                  const Tensor& lr, double momentum, double dampening, bool nesterov, double weight_decay,
                  const TensorList& steps, const Tensor& found_inf, const Tensor& grad_scale, bool maximize) {
  const char* op = "foreach_sgd_";
  check_hyper(op, "momentum", momentum, 0.0);
  check_hyper(op, "dampening", dampening, std::nullopt);
  check_hyper(op, "weight_decay", weight_decay, 0.0);
  const bool use_buf = momentum != 0.0;
  if (use_buf || !momentum_buffers.empty()) check_length(op, momentum_buffers, params.size(), "momentum buffers");
  std::vector<std::pair<const TensorList*, const char*>> states;
  if (use_buf) states.push_back({&momentum_buffers, "momentum buffer"});
  const std::vector<std::vector<ForeachTensor>> flats = check_update(op, params, grads, states);
  if (params.empty()) return;
  const Device dev = list_device(op, {&params, &grads, &momentum_buffers});
  const std::vector<ForeachTensor> step_list = step_entries(op, steps, params.size(), dev);
  check_disjoint(op, params, grads, steps, states);
  ForeachScalars s;
  Tensor lr64;
  s.lr = lr_ptr(op, lr, dev, lr64);
  s.found_inf = scalar_ptr(op, found_inf, "found_inf", dev, false);
  s.grad_scale = scalar_ptr(op, grad_scale, "grad_scale", dev, false);
  SgdHyper h;
  h.momentum = momentum;
  h.dampening = dampening;
  h.weight_decay = weight_decay;
  h.nesterov = nesterov;
  h.maximize = maximize;

  const auto buckets = bucket<DTypePair>(params.size(), [&](size_t i) {
    return DTypePair{params[i].dtype(), use_buf ? momentum_buffers[i].dtype() : params[i].dtype()};
  });
  ops::KernelScope scope(op, dev);
  for (const auto& [types, idx] : buckets) {
    const std::vector<ForeachTensor> p = gather(flats[0], idx), g = gather(flats[1], idx);
    const std::vector<ForeachTensor> b = use_buf ? gather(flats[2], idx) : std::vector<ForeachTensor>();
    const ForeachTensor* bp = use_buf ? b.data() : nullptr;
    const std::vector<ForeachTensor> st = gather(step_list, idx);
    const int64_t n = static_cast<int64_t>(idx.size());
    scope.run(kernels::sgd_step, p.data(), g.data(), bp, st.data(), n, types.param, types.state, h, s);
  }
  bump(params);
  if (use_buf) bump(momentum_buffers);
}

void foreach_adam_(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                   const TensorList& exp_avg_sqs, const TensorList& max_exp_avg_sqs, const Tensor& lr,
                   const TensorList& steps, const AdamHyper& o, const Tensor& found_inf, const Tensor& grad_scale) {
  const char* op = o.decoupled_weight_decay ? "foreach_adamw_" : "foreach_adam_";
  check_hyper(op, "beta1", o.beta1, 0.0, 1.0);
  check_hyper(op, "beta2", o.beta2, 0.0, 1.0);
  check_hyper(op, "eps", o.eps, 0.0);
  check_hyper(op, "weight_decay", o.weight_decay, 0.0);
  if (!o.amsgrad && !max_exp_avg_sqs.empty()) {
    throw Error(std::string(op) + ": got " + std::to_string(max_exp_avg_sqs.size()) +
                " max_exp_avg_sq tensors without amsgrad (pass none, or set amsgrad)");
  }
  std::vector<std::pair<const TensorList*, const char*>> states = {{&exp_avgs, "exp_avg"},
                                                                   {&exp_avg_sqs, "exp_avg_sq"}};
  if (o.amsgrad) states.push_back({&max_exp_avg_sqs, "max_exp_avg_sq"});
  const std::vector<std::vector<ForeachTensor>> flats = check_update(op, params, grads, states);
  if (params.empty()) return;
  const Device dev = list_device(op, {&params, &grads, &exp_avgs, &exp_avg_sqs, &max_exp_avg_sqs});
  const std::vector<ForeachTensor> step_list = step_entries(op, steps, params.size(), dev);
  check_disjoint(op, params, grads, steps, states);
  ForeachScalars s;
  Tensor lr64;
  s.lr = lr_ptr(op, lr, dev, lr64);
  s.found_inf = scalar_ptr(op, found_inf, "found_inf", dev, false);
  s.grad_scale = scalar_ptr(op, grad_scale, "grad_scale", dev, false);

  const auto buckets = bucket<DTypePair>(
      params.size(), [&](size_t i) { return DTypePair{params[i].dtype(), exp_avgs[i].dtype()}; });
  ops::KernelScope scope(op, dev);
  for (const auto& [types, idx] : buckets) {
    const std::vector<ForeachTensor> p = gather(flats[0], idx), g = gather(flats[1], idx);
    const std::vector<ForeachTensor> m = gather(flats[2], idx), v = gather(flats[3], idx);
    const std::vector<ForeachTensor> vm = o.amsgrad ? gather(flats[4], idx) : std::vector<ForeachTensor>();
    const std::vector<ForeachTensor> st = gather(step_list, idx);
    const int64_t n = static_cast<int64_t>(idx.size());
    scope.run(kernels::adam_step, p.data(), g.data(), m.data(), v.data(), o.amsgrad ? vm.data() : nullptr, st.data(), n,
              types.param, types.state, o, s);
  }
  bump(params);
  bump(exp_avgs);
  bump(exp_avg_sqs);
  if (o.amsgrad) bump(max_exp_avg_sqs);
}

void foreach_adamw_(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                    const TensorList& exp_avg_sqs, const Tensor& lr, const TensorList& steps, double beta1,
                    double beta2, double eps, double weight_decay, const Tensor& found_inf, const Tensor& grad_scale) {
  AdamHyper o;
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.eps = eps;
  o.weight_decay = weight_decay;
  o.decoupled_weight_decay = true;
  foreach_adam_(params, grads, exp_avgs, exp_avg_sqs, {}, lr, steps, o, found_inf, grad_scale);
}

Tensor foreach_norm(const TensorList& tensors, double norm_type) {
  const char* op = "foreach_norm";
  if (!(norm_type > 0.0)) {  // also NaN
    throw Error(std::string(op) + ": norm_type must be positive (or infinity), got " + num_str(norm_type));
  }
  std::vector<ForeachTensor> flats;
  for (size_t i = 0; i < tensors.size(); ++i) {
    flats.push_back(flat(op, tensors[i], at("tensor", i)));
    ops::check_floating(op, tensors[i], at("tensor", i).c_str());
  }
  if (tensors.empty()) return zeros({}, TensorOptions(DType::Float32));
  const Device dev = list_device(op, {&tensors});
  const int64_t chunks = foreach_num_chunks(flats.data(), static_cast<int64_t>(flats.size()));
  // float64 tensors get a float64 norm (the float32 one is inf past 3.4e38, a norm of float64
  // gradients that clip_grad_norm_ must still scale by); the others a float32 one.
  const bool any_f64 =
      std::any_of(tensors.begin(), tensors.end(), [](const Tensor& t) { return t.dtype() == DType::Float64; });
  const DType out_dtype = any_f64 ? DType::Float64 : DType::Float32;
  Tensor partials = empty({chunks}, TensorOptions(DType::Float64, dev));
  Tensor out = empty({}, TensorOptions(out_dtype, dev));
  double* part = static_cast<double*>(partials.data_ptr());
  const auto buckets = bucket<DType>(tensors.size(), [&](size_t i) { return tensors[i].dtype(); });
  // Each bucket's partials follow the previous bucket's, in one fixed order.
  int64_t offset = 0;
  ops::KernelScope scope(op, dev);
  for (const auto& [dtype, idx] : buckets) {
    const std::vector<ForeachTensor> list = gather(flats, idx);
    const int64_t n = static_cast<int64_t>(list.size());
    scope.run(kernels::foreach_norm_partials, part + offset, list.data(), n, dtype, norm_type);
    offset += foreach_num_chunks(list.data(), n);
  }
  scope.run(kernels::foreach_norm_finish, out.data_ptr(), out_dtype, static_cast<const double*>(part), chunks,
            norm_type);
  return out;
}

void foreach_mul_(const TensorList& tensors, const Tensor& scalar) {
  const char* op = "foreach_mul_";
  std::vector<ForeachTensor> flats;
  for (size_t i = 0; i < tensors.size(); ++i) {
    flats.push_back(flat(op, tensors[i], at("tensor", i)));
    ops::check_floating(op, tensors[i], at("tensor", i).c_str());
  }
  ops::check_defined(op, scalar, "scalar");
  if (tensors.empty()) return;
  const Device dev = list_device(op, {&tensors});
  // A float16/bfloat16 factor becomes float32 on its device (a kernel, not a sync); a float64 one
  // stays float64, so that float64 tensors take it whole (a clip factor below 1e-38 is not 0).
  const bool wide = scalar.dtype() == DType::Float32 || scalar.dtype() == DType::Float64;
  const Tensor factor = scalar.is_floating_point() && !wide ? scalar.to(DType::Float32) : scalar;
  check_scalar(op, factor, "scalar", dev, true, {DType::Float32, DType::Float64}, "float32 or float64");
  const auto buckets = bucket<DType>(tensors.size(), [&](size_t i) { return tensors[i].dtype(); });
  ops::KernelScope scope(op, dev);
  for (const auto& [dtype, idx] : buckets) {
    const std::vector<ForeachTensor> list = gather(flats, idx);
    scope.run(kernels::foreach_mul_scalar, list.data(), static_cast<int64_t>(list.size()), dtype,
              static_cast<const void*>(factor.data_ptr()), factor.dtype());
  }
  bump(tensors);
}

void foreach_add_scalar_(const TensorList& tensors, double value, const Tensor& found_inf) {
  const char* op = "foreach_add_scalar_";
  std::vector<ForeachTensor> flats;
  for (size_t i = 0; i < tensors.size(); ++i) {
    flats.push_back(flat(op, tensors[i], at("tensor", i)));
    ops::check_floating(op, tensors[i], at("tensor", i).c_str());
  }
  if (tensors.empty()) return;
  const Device dev = list_device(op, {&tensors});
  const float* inf = scalar_ptr(op, found_inf, "found_inf", dev, false);
  const auto buckets = bucket<DType>(tensors.size(), [&](size_t i) { return tensors[i].dtype(); });
  ops::KernelScope scope(op, dev);
  for (const auto& [dtype, idx] : buckets) {
    const std::vector<ForeachTensor> list = gather(flats, idx);
    scope.run(kernels::foreach_add_scalar, list.data(), static_cast<int64_t>(list.size()), dtype, value, inf);
  }
  bump(tensors);
}

void foreach_zero_(const TensorList& tensors) {
  const char* op = "foreach_zero_";
  std::vector<ForeachTensor> flats;
  for (size_t i = 0; i < tensors.size(); ++i) flats.push_back(flat(op, tensors[i], at("tensor", i)));
  if (tensors.empty()) return;
  const Device dev = list_device(op, {&tensors});
  const auto buckets = bucket<size_t>(tensors.size(), [&](size_t i) { return tensors[i].element_size(); });
  ops::KernelScope scope(op, dev);
  for (const auto& [size, idx] : buckets) {
    const std::vector<ForeachTensor> list = gather(flats, idx);
    scope.run(kernels::foreach_zero, list.data(), static_cast<int64_t>(list.size()), size);
  }
  bump(tensors);
}

void foreach_non_finite_check_and_unscale_(const TensorList& tensors, const Tensor& found_inf,
                                           const Tensor& inv_scale) {
  const char* op = "foreach_non_finite_check_and_unscale_";
  std::vector<ForeachTensor> flats;
  for (size_t i = 0; i < tensors.size(); ++i) {
    flats.push_back(flat(op, tensors[i], at("tensor", i)));
    ops::check_floating(op, tensors[i], at("tensor", i).c_str());
  }
  // The scalars are checked even for an empty list: a wrong flag is a mistake whatever the list.
  const Device dev =
      tensors.empty() ? (found_inf.defined() ? found_inf.device() : Device::cpu()) : list_device(op, {&tensors});
  float* flag = const_cast<float*>(scalar_ptr(op, found_inf, "found_inf", dev, true));
  const float* inv = scalar_ptr(op, inv_scale, "inv_scale", dev, false);
  if (tensors.empty()) return;
  const auto buckets = bucket<DType>(tensors.size(), [&](size_t i) { return tensors[i].dtype(); });
  ops::KernelScope scope(op, dev);
  for (const auto& [dtype, idx] : buckets) {
    const std::vector<ForeachTensor> list = gather(flats, idx);
    scope.run(kernels::foreach_non_finite_check_and_unscale, list.data(), static_cast<int64_t>(list.size()), dtype,
              flag, inv);
  }
  if (inv != nullptr) bump(tensors);
  found_inf.bump_version();
}

void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, int64_t growth_interval) {
  const char* op = "amp_update_scale_";
  if (!(growth_factor > 1.0) || !std::isfinite(growth_factor)) {
    throw Error(std::string(op) + ": growth_factor must be a finite number > 1, got " + num_str(growth_factor));
  }
  if (!(backoff_factor > 0.0 && backoff_factor < 1.0)) {
    throw Error(std::string(op) + ": backoff_factor must be in (0, 1), got " + num_str(backoff_factor));
  }
  if (growth_interval < 1 || growth_interval > std::numeric_limits<int32_t>::max()) {
    throw Error(std::string(op) + ": growth_interval must be in [1, 2^31 - 1] (the tracker is int32), got " +
                std::to_string(growth_interval));
  }
  ops::check_defined(op, scale, "scale");
  const Device dev = scale.device();
  float* s = const_cast<float*>(scalar_ptr(op, scale, "scale", dev, true));
  const float* inf = scalar_ptr(op, found_inf, "found_inf", dev, true);
  ops::check_defined(op, growth_tracker, "growth_tracker");
  if (growth_tracker.numel() != 1 || growth_tracker.dtype() != DType::Int32) {
    throw DTypeError(std::string(op) + ": growth_tracker must be a one-element int32 tensor, got " +
                     dtype_name(growth_tracker.dtype()) + " of shape " + shape_str(growth_tracker.sizes()));
  }
  if (growth_tracker.device() != dev) {
    throw DeviceError(std::string(op) + ": growth_tracker is on " + growth_tracker.device().str() +
                      " but scale is on " + dev.str());
  }
  ops::launch(op, dev, kernels::amp_update_scale, s, static_cast<int32_t*>(growth_tracker.data_ptr()), inf,
              growth_factor, backoff_factor, static_cast<int32_t>(growth_interval));
  scale.bump_version();
  growth_tracker.bump_version();
}

}  // namespace kiln
