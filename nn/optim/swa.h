// Weight averaging, as torch.optim.swa_utils has it: AveragedModel keeps a running average of a
// model's weights, either the equal average of stochastic weight averaging (SWA, Izmailov et al.,
// "Averaging Weights Leads to Wider Optima and Better Generalization") or an exponential moving
// average (EMA, the Polyak average that many recipes evaluate in place of the last weights);
// update_bn recomputes BatchNorm's running statistics for the averaged weights, and SWALR anneals
// the learning rate to the constant one SWA samples at.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/tensor.h"
#include "nn/module.h"
#include "nn/optim/lr_scheduler.h"

namespace kiln::nn::optim {

// How AveragedModel folds a model's tensors into the averages: every averaged tensor in `averages`
// is updated in place from the tensor at its position in `models` (the same shape, converted to
// the average's dtype and device already). `num_averaged` is the count of models averaged before
// this one, a 0-d int64 tensor on the average's device (PyTorch's multi_avg_fn gets it as a tensor
// too): reading it on the host would make every update wait for the GPU, so a rule computes with
// it on the device. At 0 a rule must copy the model (both rules below lerp with weight 1 then,
// which gives the model exactly while the average holds finite values).
using MultiAverageFn =
    std::function<void(const TensorList& averages, const TensorList& models, const Tensor& num_averaged)>;
// The equal average of every model seen: average += (model - average) / (num_averaged + 1).
// PyTorch's default (get_swa_multi_avg_fn).
MultiAverageFn swa_average();
// The exponential moving average: average = decay average + (1 - decay) model, decay in [0, 1]
// (get_ema_multi_avg_fn; 0.999 and 0.9999 are usual).
MultiAverageFn ema_average(double decay = 0.999);

// A module that holds the average of another's weights. `average` must have the architecture of the
// models it averages: kiln modules are not copyable, so make it as the model was made (its own
// initial values do not matter: the first update copies the model's). It is registered as the child
// "module", beside an int64 buffer "n_averaged" counting the models averaged, so state_dict() has
// PyTorch's keys ("module.<name>", "n_averaged") and a checkpoint resumes the average. Evaluate
// with `average` itself (or module()).
//
// update_parameters(model) averages each parameter (matched by dotted name; each must have the
// average's shape, and converts to its dtype and device, so a float32 average may follow a bfloat16
// model on another device). Buffers are copied from the model as they are (BatchNorm's running
// statistics: run update_bn after the last update for SWA), or with use_buffers averaged too where
// floating (integer buffers, num_batches_tracked, are copied). An update never reads the count on
// the host (PyTorch's does, to pick the first update's copy): it stays a device tensor.
class AveragedModel : public Module {
 public:
  explicit AveragedModel(std::shared_ptr<Module> average, MultiAverageFn rule = swa_average(),
                         bool use_buffers = false);
  std::string type_name() const override { return "AveragedModel"; }
  std::string extra_repr() const override;

  void update_parameters(const Module& model);
  // How many models have been averaged (a host read of n_averaged).
  int64_t num_averaged() const;
  const std::shared_ptr<Module>& module() const { return average_; }

 private:
  std::shared_ptr<Module> average_;
  MultiAverageFn rule_;
  bool use_buffers_;
  Tensor n_averaged_;
};

// Recomputes the running statistics of every BatchNorm in `model` (1-d, 2-d and 3-d, with running
// statistics) from data: they are reset, their momentum set to none (a cumulative average over the
// batches), `run` makes the forward passes over the data with the model in training mode and no
// gradients recorded, and each momentum and the model's mode come back as they were. A model
// without BatchNorm returns at once without calling `run`. PyTorch's update_bn, with the loop over
// a loader given as a function.
void update_bn(Module& model, const std::function<void()>& run);
// The same over a list of inputs to a one-input model.
void update_bn(UnaryModule& model, const TensorList& inputs);

// The lr of SWALR at `step`: from base_lr to swa_lr over anneal_steps steps, by a cosine half wave
// (cos_anneal) or a straight line, then swa_lr: swa_lr a + base_lr (1 - a) with
// a = anneal(min(step / anneal_steps, 1)), anneal(t) = (1 - cos(pi t)) / 2 or t; with anneal_steps
// 0, swa_lr from step 0. base_lr and swa_lr finite and >= 0, anneal_steps >= 0.
double swa_lr(int64_t step, double base_lr, double swa_lr, int64_t anneal_steps, bool cos_anneal = true);
// PyTorch's SWALR as a scheduler of kiln's (one step per scheduler.step(); PyTorch's examples step
// it once per epoch, so anneal_steps counts whatever the caller steps by). Groups follow in
// proportion to their initial lr, as with every kiln scheduler: a group made at base_lr anneals to
// swa_lr itself, one made at a tenth of base_lr to a tenth of swa_lr (PyTorch gives every group the
// one swa_lr).
class SWALR : public LRScheduler {
 public:
  SWALR(Optimizer& optimizer, double base_lr, double swa_lr, int64_t anneal_steps = 10, bool cos_anneal = true);
  double lr_at(int64_t step) const override { return optim::swa_lr(step, base_lr_, swa_lr_, anneal_steps_, cos_); }

 private:
  double base_lr_, swa_lr_;
  int64_t anneal_steps_;
  bool cos_;
};

}  // namespace kiln::nn::optim
