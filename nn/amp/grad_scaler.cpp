// GradScaler: the host keeps only which optimizers were unscaled or stepped in the current step;
// every number lives on the device. step() without unscale_ checks the gradients without writing
// them and lets the optimizer divide by the scale inside its update, one pass fewer than unscaling
// first; after unscale_, the optimizer reads the already unscaled gradients.
#include "nn/amp/grad_scaler.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/foreach.h"
#include "kernels/error.h"

namespace kiln::nn::amp {
namespace {

constexpr int64_t kMaxInterval = std::numeric_limits<int32_t>::max();

void check_factor(const char* where, const char* name, double v, bool growth) {
  const bool ok = growth ? (v > 1.0 && std::isfinite(v)) : (v > 0.0 && v < 1.0);
  if (!ok) {
    throw Error(std::string(where) + ": " + name + (growth ? " must be a finite number > 1" : " must be in (0, 1)") +
                ", got " + num_str(v));
  }
}

// A scale is a float32 whose reciprocal (the unscale factor) is finite too: a normal float32 > 0.
// (1e-50 is 0 as a float32, 1e-40 a subnormal whose reciprocal is inf: either turned the next step's
// gradients into inf and NaN without a found-inf flag.)
void check_scale_value(const char* where, const char* name, double v) {
  if (!(v >= static_cast<double>(std::numeric_limits<float>::min())) ||
      !(v <= static_cast<double>(std::numeric_limits<float>::max()))) {
    throw Error(std::string(where) + ": " + name +
                " must be a normal float32 number > 0 (from 2^-126 to 3.4e38), got " + num_str(v));
  }
}

void check_interval(const char* where, const char* name, int64_t v) {
  if (v < 1 || v > kMaxInterval) {
    throw Error(std::string(where) + ": " + name + " must be in [1, 2^31 - 1], got " + std::to_string(v));
  }
}

}  // namespace

GradScaler::GradScaler() : GradScaler(Options{}) {}

GradScaler::GradScaler(Options options) : options_(options) {
  const char* where = "GradScaler";
  check_scale_value(where, "init_scale", options_.init_scale);
  check_factor(where, "growth_factor", options_.growth_factor, true);
  check_factor(where, "backoff_factor", options_.backoff_factor, false);
  check_interval(where, "growth_interval", options_.growth_interval);
  // Host tensors until the first scale(): nothing touches a device before the scaler knows which.
  scale_ = full({}, options_.init_scale, TensorOptions(DType::Float32));
  growth_tracker_ = zeros({}, TensorOptions(DType::Int32));
}

void GradScaler::place(Device device, const char* op) {
  if (!placed_) {
    if (scale_.device() != device) {
      scale_ = scale_.to(device);
      growth_tracker_ = growth_tracker_.to(device);
    }
    placed_ = true;
    return;
  }
  if (scale_.device() != device) {
    throw DeviceError(std::string(op) + ": the loss scale lives on " + scale_.device().str() + ", got a tensor on " +
                      device.str() + " (one scaler serves one device)");
  }
}

void GradScaler::require_placed(const char* op) const {
  if (!placed_) {
    throw Error(std::string(op) + ": no loss was scaled yet by this scaler; call scale(loss) and backward first");
  }
}

Tensor GradScaler::scale(const Tensor& loss) {
  const char* op = "GradScaler::scale";
  if (!loss.defined()) throw Error(std::string(op) + ": the loss is an undefined tensor");
  if (!options_.enabled) return loss;
  if (!loss.is_floating_point()) {
    throw DTypeError(std::string(op) + ": the loss is " + dtype_name(loss.dtype()) + " (shape " +
                     shape_str(loss.sizes()) + "); only floating losses can be scaled");
  }
  place(loss.device(), op);
  // The product in float32 at least: a float16 loss with dims would take the float32 0-d scale in
  // float16 (result_type), where 2^16, the first scale, is inf. The cast back keeps the loss's dtype
  // as PyTorch does, and its backward hands the float32 gradient through.
  const DType wide = promote_types(loss.dtype(), scale_.dtype());
  Tensor out = mul(loss.to(wide), scale_);  // to() of the loss's own dtype is the loss itself
  return out.to(loss.dtype());
}

GradScaler::PerOptimizer& GradScaler::state_of(const optim::Optimizer& optimizer) {
  PerOptimizer& st = per_optimizer_[&optimizer];
  if (!st.found_inf.defined() || st.found_inf.device() != scale_.device()) {
    st.found_inf = zeros({}, TensorOptions(DType::Float32, scale_.device()));
  }
  return st;
}

void GradScaler::check_grads(const optim::Optimizer& optimizer, PerOptimizer& st, bool unscale, const char* op) {
  NoGradGuard no_grad;
  const TensorList grads = optimizer.grads();
  TensorList dense, strided, copies;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (g.device() != scale_.device()) {
      throw DeviceError(std::string(op) + ": gradient " + std::to_string(i) + " (shape " + shape_str(g.sizes()) +
                        ") is on " + g.device().str() + " but the loss scale is on " + scale_.device().str());
    }
    if (g.is_non_overlapping_and_dense()) {
      dense.push_back(g);
    } else {  // a strided view (rare): a dense copy goes through the pass and is written back
      strided.push_back(g);
      copies.push_back(g.contiguous());
    }
  }
  TensorList all = dense;
  all.insert(all.end(), copies.begin(), copies.end());
  // 1 / scale on the device: correctly rounded in float32, exact for the powers of two that the
  // default options produce.
  const Tensor inv_scale = unscale ? div(Scalar(1.0), scale_) : Tensor();
  foreach_non_finite_check_and_unscale_(all, st.found_inf, inv_scale);
  if (unscale) {
    for (size_t k = 0; k < strided.size(); ++k) {
      Tensor g = strided[k];
      g.copy_(copies[k]);
    }
  }
  if (reducer_) {
    // The gradients are already unscaled and found_inf holds this rank's flag only: neither can be
    // checked again or stepped on. The optimizer waits for update(), which starts the next step.
    try {
      reducer_(st.found_inf);
    } catch (...) {
      st.stage = Stage::Failed;
      throw;
    }
  }
}

void GradScaler::require_not_failed(const PerOptimizer& st, const char* op) {
  if (st.stage == Stage::Failed) {
    throw Error(std::string(op) +
                ": the found-inf reduction of this step failed for this optimizer; call update() "
                "to start the next step");
  }
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  const char* op = "GradScaler::unscale_";
  if (!options_.enabled) return;
  require_placed(op);
  PerOptimizer& st = state_of(optimizer);
  require_not_failed(st, op);
  if (st.stage == Stage::Unscaled) {
    throw Error(std::string(op) + ": unscale_() was already called for this optimizer since the last update()");
  }
  if (st.stage == Stage::Stepped) throw Error(std::string(op) + ": unscale_() is being called after step()");
  check_grads(optimizer, st, /*unscale=*/true, op);
  st.stage = Stage::Unscaled;
}

void GradScaler::step(optim::Optimizer& optimizer) {
  const char* op = "GradScaler::step";
  if (!options_.enabled) {
    optimizer.step();
    return;
  }
  require_placed(op);
  PerOptimizer& st = state_of(optimizer);
  require_not_failed(st, op);
  if (st.stage == Stage::Stepped) {
    throw Error(std::string(op) + ": step() was already called for this optimizer since the last update()");
  }
  Tensor divide_by;
  if (st.stage == Stage::Ready) {
    check_grads(optimizer, st, /*unscale=*/false, op);
    divide_by = scale_;
  }
  const Tensor prev_inf = optimizer.found_inf(), prev_scale = optimizer.grad_scale();
  optimizer.set_grad_scaling(st.found_inf, divide_by);
  try {
    optimizer.step();
  } catch (...) {
    optimizer.set_grad_scaling(prev_inf, prev_scale);
    // No step happened: a flag this call's check set must not skip the next step. (After an
    // unscale_ the flag stays: the gradients are unscaled, and update() counts it.)
    if (st.stage == Stage::Ready) {
      NoGradGuard no_grad;
      st.found_inf.zero_();
    }
    throw;
  }
  optimizer.set_grad_scaling(prev_inf, prev_scale);
  st.stage = Stage::Stepped;
}

void GradScaler::reset_step() {
  TensorList flags;
  for (auto& [opt, st] : per_optimizer_) {
    if (st.stage != Stage::Ready && st.found_inf.defined()) flags.push_back(st.found_inf);
    st.stage = Stage::Ready;
  }
  NoGradGuard no_grad;
  if (!flags.empty()) foreach_zero_(flags);
}

void GradScaler::update() {
  const char* op = "GradScaler::update";
  if (!options_.enabled) return;
  require_placed(op);
  TensorList flags;
  bool failed = false;
  for (const auto& [opt, st] : per_optimizer_) {
    if (st.stage != Stage::Ready) flags.push_back(st.found_inf);
    failed = failed || st.stage == Stage::Failed;
  }
  if (flags.empty()) {
    throw Error(std::string(op) + ": no optimizer was unscaled or stepped through this scaler since the last update()");
  }
  if (failed) {  // a step cut short by its reducer says nothing about the scale
    reset_step();
    return;
  }
  NoGradGuard no_grad;
  // Any optimizer's inf backs the scale off: the flags are 0 or 1, so their sum is nonzero exactly then.
  Tensor found_inf = flags.front();
  for (size_t k = 1; k < flags.size(); ++k) found_inf = add(found_inf, flags[k]);
  amp_update_scale_(scale_, growth_tracker_, found_inf, options_.growth_factor, options_.backoff_factor,
                    options_.growth_interval);
  reset_step();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_scale_value("GradScaler::update", "new_scale", new_scale);
  NoGradGuard no_grad;
  scale_.fill_(new_scale);
  reset_step();
}

double GradScaler::get_scale() const { return options_.enabled ? scale_.item<double>() : 1.0; }

int64_t GradScaler::get_growth_tracker() const { return options_.enabled ? growth_tracker_.item<int64_t>() : 0; }

std::map<std::string, Tensor> GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  NoGradGuard no_grad;
  return {
      {"scale", scale_.clone()},
      {"growth_tracker", growth_tracker_.clone()},
      {"growth_factor", full({}, options_.growth_factor, TensorOptions(DType::Float64))},
      {"backoff_factor", full({}, options_.backoff_factor, TensorOptions(DType::Float64))},
      {"growth_interval", full({}, options_.growth_interval, TensorOptions(DType::Int64))},
  };
}

void GradScaler::check_state_dict(const std::map<std::string, Tensor>& state) const {
  const char* op = "GradScaler::load_state_dict";
  if (!options_.enabled) return;
  if (state.empty()) {
    throw Error(std::string(op) + ": the state is empty (was it saved from a disabled GradScaler?)");
  }
  const std::vector<std::pair<std::string, DType>> keys = {{"scale", DType::Float32},
                                                           {"growth_tracker", DType::Int32},
                                                           {"growth_factor", DType::Float64},
                                                           {"backoff_factor", DType::Float64},
                                                           {"growth_interval", DType::Int64}};
  for (const auto& [key, t] : state) {
    bool known = false;
    for (const auto& k : keys) known = known || k.first == key;
    if (!known) throw Error(std::string(op) + ": unexpected key \"" + key + "\"");
  }
  std::map<std::string, double> v;
  for (const auto& [key, dtype] : keys) {
    auto it = state.find(key);
    if (it == state.end()) throw Error(std::string(op) + ": missing key \"" + key + "\"");
    const Tensor& t = it->second;
    if (!t.defined()) throw Error(std::string(op) + ": \"" + key + "\" is an undefined tensor");
    if (t.numel() != 1 || t.dtype() != dtype) {
      throw DTypeError(std::string(op) + ": \"" + key + "\" must be a one-element " + dtype_name(dtype) +
                       " tensor, got " + dtype_name(t.dtype()) + " of shape " + shape_str(t.sizes()));
    }
    v[key] = t.item<double>();
  }
  check_scale_value(op, "\"scale\"", v["scale"]);
  check_factor(op, "\"growth_factor\"", v["growth_factor"], true);
  check_factor(op, "\"backoff_factor\"", v["backoff_factor"], false);
  const int64_t interval = state.at("growth_interval").item<int64_t>();
  check_interval(op, "\"growth_interval\"", interval);
  const int64_t tracker = state.at("growth_tracker").item<int64_t>();
  if (tracker < 0 || tracker >= interval) {
    throw Error(std::string(op) + ": \"growth_tracker\" must be in [0, growth_interval - 1] = [0, " +
                std::to_string(interval - 1) + "], got " + std::to_string(tracker));
  }
}

void GradScaler::load_state_dict(const std::map<std::string, Tensor>& state) {
  if (!options_.enabled) return;
  check_state_dict(state);
  NoGradGuard no_grad;
  // One element of any shape, held as state_dict gives it: 0-d (a loss keeps its shape when scaled).
  const Tensor scale = state.at("scale").reshape({});
  const Tensor tracker = state.at("growth_tracker").reshape({});
  if (placed_) {
    // In place: the tensors keep their memory, which a captured CUDA graph may read.
    scale_.copy_(scale);
    growth_tracker_.copy_(tracker);
  } else {
    scale_ = scale.to(Device::cpu()).clone();
    growth_tracker_ = tracker.to(Device::cpu()).clone();
  }
  options_.growth_factor = state.at("growth_factor").item<double>();
  options_.backoff_factor = state.at("backoff_factor").item<double>();
  options_.growth_interval = state.at("growth_interval").item<int64_t>();
}

}  // namespace kiln::nn::amp
