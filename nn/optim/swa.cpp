// Weight averaging (nn/optim/swa.h): the averaging rules are lerps of tensor ops under no_grad, the
// model's tensors matched to the average's by dotted name first.
#include "nn/optim/swa.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/math.h"
#include "kernels/error.h"
#include "nn/norm.h"

namespace kiln::nn::optim {
namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

// The model's tensors of one kind (parameters or buffers), in the average's order, after checking
// that both have the same names and shapes.
TensorList matched(const Named& average, const Named& model, const char* kind) {
  const char* op = "AveragedModel.update_parameters";
  if (average.size() != model.size()) {
    auto count = [kind](size_t n) { return std::to_string(n) + " " + kind + (n == 1 ? "" : "s"); };
    throw ShapeError(std::string(op) + ": the model has " + count(model.size()) + ", the average " +
                     count(average.size()) + " (the average must be made as the model)");
  }
  TensorList out;
  for (size_t i = 0; i < average.size(); ++i) {
    const auto& [name, a] = average[i];
    const auto& [model_name, m] = model[i];
    if (name != model_name) {
      throw Error(std::string(op) + ": " + kind + " " + std::to_string(i) + " is '" + model_name +
                  "' in the model but '" + name + "' in the average (the average must be made as the model)");
    }
    if (a.sizes() != m.sizes()) {
      throw ShapeError(std::string(op) + ": " + kind + " '" + name + "' has the shape " + shape_str(m.sizes()) +
                       " in the model but " + shape_str(a.sizes()) + " in the average");
    }
    if (is_floating(a.dtype()) != is_floating(m.dtype())) {
      throw DTypeError(std::string(op) + ": " + kind + " '" + name + "' is " + dtype_name(m.dtype()) +
                       " in the model but " + dtype_name(a.dtype()) + " in the average");
    }
    out.push_back(m.detach().to(a.device(), a.dtype()));
  }
  return out;
}

// average <- lerp(average, model, weight) for each pair, weight a 0-d float64 tensor converted once
// per dtype and device of the averages.
void lerp_all(const TensorList& averages, const TensorList& models, const Tensor& weight) {
  std::map<std::tuple<DType, DeviceType, int>, Tensor> weights;
  for (size_t i = 0; i < averages.size(); ++i) {
    Tensor a = averages[i];
    Tensor& w = weights[{a.dtype(), a.device().type, a.device().index}];
    if (!w.defined()) w = weight.to(a.device(), a.dtype());
    a.copy_(lerp(a, models[i], w));
  }
}

}  // namespace

MultiAverageFn swa_average() {
  // 1 / (n + 1): 1 at the first update, a copy of the model.
  return [](const TensorList& averages, const TensorList& models, const Tensor& num_averaged) {
    lerp_all(averages, models, reciprocal(add(num_averaged.to(DType::Float64), 1.0)));
  };
}

MultiAverageFn ema_average(double decay) {
  if (!(decay >= 0.0 && decay <= 1.0)) {
    throw Error("ema_average: decay must be in [0, 1], got " + num_str(decay));
  }
  // 1 - decay, and 1 at the first update (a copy of the model).
  return [decay](const TensorList& averages, const TensorList& models, const Tensor& num_averaged) {
    lerp_all(averages, models, sub(1.0, mul(ne(num_averaged, 0).to(DType::Float64), decay)));
  };
}

AveragedModel::AveragedModel(std::shared_ptr<Module> average, MultiAverageFn rule, bool use_buffers)
    : average_(std::move(average)), rule_(std::move(rule)), use_buffers_(use_buffers) {
  if (!average_) throw Error("AveragedModel: the average module is null");
  if (!rule_) throw Error("AveragedModel: the averaging rule is empty");
  register_module("module", average_);
  n_averaged_ = register_buffer("n_averaged", zeros({}, DType::Int64));
}

std::string AveragedModel::extra_repr() const { return use_buffers_ ? "use_buffers=true" : ""; }

int64_t AveragedModel::num_averaged() const { return n_averaged_.item<int64_t>(); }

void AveragedModel::update_parameters(const Module& model) {
  const Named mine = average_->named_parameters(), mine_buffers = average_->named_buffers();
  const TensorList models = matched(mine, model.named_parameters(), "parameter");
  const TensorList model_buffers = matched(mine_buffers, model.named_buffers(), "buffer");
  NoGradGuard no_grad;
  // What is averaged: floating parameters, and floating buffers with use_buffers; the rest is
  // copied from the model.
  TensorList averaged, from, copied, copied_from;
  auto route = [&](const Tensor& a, const Tensor& m, bool average) {
    (average && is_floating(a.dtype()) ? averaged : copied).push_back(a);
    (average && is_floating(a.dtype()) ? from : copied_from).push_back(m);
  };
  for (size_t i = 0; i < mine.size(); ++i) route(mine[i].second, models[i], true);
  for (size_t i = 0; i < mine_buffers.size(); ++i) route(mine_buffers[i].second, model_buffers[i], use_buffers_);
  rule_(averaged, from, n_averaged_);
  for (size_t i = 0; i < copied.size(); ++i) copied[i].copy_(copied_from[i]);
  n_averaged_.add_(1);
}

void update_bn(Module& model, const std::function<void()>& run) {
  if (!run) throw Error("update_bn: the function that runs the data is empty");
  std::vector<std::pair<BatchNorm*, std::optional<double>>> norms;
  for (const auto& [name, m] : model.named_modules()) {
    auto* bn = dynamic_cast<BatchNorm*>(m.get());
    if (bn && bn->track_running_stats) norms.emplace_back(bn, bn->momentum);
  }
  if (norms.empty()) return;
  const bool was_training = model.is_training();
  for (auto& [bn, momentum] : norms) {
    bn->reset_running_stats();
    bn->momentum = std::nullopt;
  }
  auto restore = [&] {
    for (auto& [bn, momentum] : norms) bn->momentum = momentum;
    model.train(was_training);
  };
  model.train(true);
  try {
    NoGradGuard no_grad;
    run();
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

void update_bn(UnaryModule& model, const TensorList& inputs) {
  update_bn(model, [&] {
    for (const Tensor& x : inputs) (void)model(x);
  });
}

double swa_lr(int64_t step, double base_lr, double swa_lr, int64_t anneal_steps, bool cos_anneal) {
  for (auto [what, v] : {std::pair{"base_lr", base_lr}, std::pair{"swa_lr", swa_lr}}) {
    if (!(v >= 0.0) || !std::isfinite(v)) {
      throw Error(std::string("swa_lr: ") + what + " must be a finite number >= 0, got " + num_str(v));
    }
  }
  if (anneal_steps < 0) throw Error("swa_lr: anneal_steps must be >= 0, got " + std::to_string(anneal_steps));
  const double t =
      anneal_steps == 0
          ? 1.0
          : std::clamp(static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(anneal_steps), 0.0, 1.0);
  const double a = cos_anneal ? (1.0 - std::cos(std::numbers::pi * t)) / 2.0 : t;
  return swa_lr * a + base_lr * (1.0 - a);
}

SWALR::SWALR(Optimizer& optimizer, double base_lr, double swa_lr, int64_t anneal_steps, bool cos_anneal)
    : LRScheduler(optimizer, base_lr),
      base_lr_(base_lr),
      swa_lr_(swa_lr),
      anneal_steps_(anneal_steps),
      cos_(cos_anneal) {
  optim::swa_lr(0, base_lr, swa_lr, anneal_steps, cos_anneal);  // the checks
  apply();
}

}  // namespace kiln::nn::optim
