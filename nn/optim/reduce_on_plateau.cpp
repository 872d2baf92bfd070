// ReduceLROnPlateau: the comparison with the best metric as PyTorch's is_better, the reduction as
// its _reduce_lr (a group's lr falls to max(lr * factor, min_lr), and only when that moves it by
// more than eps).
#include "nn/optim/reduce_on_plateau.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/factory.h"
#include "kernels/error.h"

namespace kiln::nn::optim {

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options)
    : optimizer_(optimizer),
      options_(std::move(options)),
      best_(options_.maximize ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity()) {
  const char* op = "ReduceLROnPlateau";
  const PlateauOptions& o = options_;
  if (!(o.factor >= 0.0 && o.factor < 1.0))
    throw Error(std::string(op) + ": factor must be in [0, 1), got " + num_str(o.factor));
  if (o.patience < 0 || o.cooldown < 0) {
    throw Error(std::string(op) + ": patience and cooldown must be >= 0, got " + std::to_string(o.patience) + " and " +
                std::to_string(o.cooldown));
  }
  if (!(o.threshold >= 0.0) || !std::isfinite(o.threshold) || !(o.eps >= 0.0) || !std::isfinite(o.eps)) {
    throw Error(std::string(op) + ": threshold and eps must be finite numbers >= 0, got " + num_str(o.threshold) +
                " and " + num_str(o.eps));
  }
  const size_t groups = optimizer.num_groups();
  if (o.min_lr.size() > 1 && o.min_lr.size() != groups) {
    throw Error(std::string(op) + ": expected one min_lr, or one per group (" + std::to_string(groups) + "), got " +
                std::to_string(o.min_lr.size()));
  }
  for (double m : o.min_lr) {
    if (!(m >= 0.0) || !std::isfinite(m)) {
      throw Error(std::string(op) + ": min_lr must be finite numbers >= 0, got " + num_str(m));
    }
  }
  if (options_.min_lr.empty()) options_.min_lr = {0.0};
  if (options_.min_lr.size() == 1) options_.min_lr.assign(groups, options_.min_lr[0]);
}

bool ReduceLROnPlateau::improves(double metric) const {
  const PlateauOptions& o = options_;
  if (o.maximize) return o.relative ? metric > best_ * (1.0 + o.threshold) : metric > best_ + o.threshold;
  return o.relative ? metric < best_ * (1.0 - o.threshold) : metric < best_ - o.threshold;
}

bool ReduceLROnPlateau::step(double metric) {
  ++last_step_;
  if (improves(metric)) {
    best_ = metric;
    bad_ = 0;
  } else {
    ++bad_;
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    bad_ = 0;  // bad calls during the cooldown are ignored
  }
  if (bad_ <= options_.patience) return false;
  bool reduced = false;
  for (size_t g = 0; g < optimizer_.num_groups(); ++g) {
    const double lr = optimizer_.lr(g), lower = std::max(lr * options_.factor, options_.min_lr[g]);
    if (lr - lower > options_.eps) {
      optimizer_.set_lr(g, lower);
      reduced = true;
    }
  }
  cooldown_left_ = options_.cooldown;
  bad_ = 0;
  return reduced;
}

std::map<std::string, Tensor> ReduceLROnPlateau::state_dict() const {
  const TensorOptions i64(DType::Int64);
  return {{"best", full({}, best_, TensorOptions(DType::Float64))},
          {"num_bad_epochs", full({}, static_cast<double>(bad_), i64)},
          {"cooldown_counter", full({}, static_cast<double>(cooldown_left_), i64)},
          {"last_epoch", full({}, static_cast<double>(last_step_), i64)}};
}

void ReduceLROnPlateau::load_state_dict(const std::map<std::string, Tensor>& state) {
  const char* op = "ReduceLROnPlateau::load_state_dict";
  auto get = [&](const char* key, DType dtype) -> const Tensor& {
    const auto it = state.find(key);
    if (it == state.end()) throw Error(std::string(op) + ": missing key \"" + key + "\"");
    const Tensor& t = it->second;
    if (!t.defined() || t.numel() != 1 || t.dtype() != dtype) {
      throw DTypeError(std::string(op) + ": \"" + key + "\" must be a one-element " + dtype_name(dtype) + " tensor" +
                       (t.defined()
                            ? std::string(", got ") + dtype_name(t.dtype()) + " of shape " + shape_str(t.sizes())
                            : std::string()));
    }
    return t;
  };
  for (const auto& [key, t] : state) {
    if (key != "best" && key != "num_bad_epochs" && key != "cooldown_counter" && key != "last_epoch") {
      throw Error(std::string(op) + ": unexpected key \"" + key + "\"");
    }
  }
  const double best = get("best", DType::Float64).to(Device::cpu()).item<double>();
  int64_t counts[3];
  const char* names[3] = {"num_bad_epochs", "cooldown_counter", "last_epoch"};
  for (int i = 0; i < 3; ++i) {
    counts[i] = get(names[i], DType::Int64).to(Device::cpu()).item<int64_t>();
    if (counts[i] < 0) {
      throw Error(std::string(op) + ": \"" + names[i] + "\" must be >= 0, got " + std::to_string(counts[i]));
    }
  }
  best_ = best;
  bad_ = counts[0];
  cooldown_left_ = counts[1];
  last_step_ = counts[2];
}

}  // namespace kiln::nn::optim
