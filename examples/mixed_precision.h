// The one training step that honours the examples' precision flags (examples/precision_options.h):
// autocast around the forward, a GradScaler for float16, gradient accumulation over micro-batches,
// clipping of the true (unscaled) gradients. Nothing in the step reads a value back to the host.
//
// --grad-accum K keeps --batch-size the batch of one optimizer step and computes it as K
// micro-batches of about batch-size / K rows, each mean loss weighted by its share of the rows: the
// update is that of the whole batch (up to the order of float additions, and per-micro-batch
// batch-norm statistics), while only one micro-batch's activations are alive at a time. The data
// order, the schedule and a checkpoint's position do not depend on K.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/autocast.h"
#include "core/cuda/memory_summary.h"
#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "dist/ddp.h"
#include "dist/zero.h"
#include "examples/common.h"
#include "examples/precision_options.h"
#include "examples/run_record.h"
#include "nn/amp/grad_scaler.h"
#include "nn/optim/clip.h"
#include "nn/optim/optimizer.h"

namespace kiln::examples {

// One optimizer step over K micro-batches.
class TrainStep {
 public:
  TrainStep(const PrecisionOptions& p, Device device, nn::optim::Optimizer& optimizer, TensorList params,
            double grad_clip)
      : p_(p), device_(device), optimizer_(optimizer), params_(std::move(params)), grad_clip_(grad_clip) {
    if (p.loss_scaling()) scaler_ = std::make_unique<nn::amp::GradScaler>();
  }

  // One step over a batch of `rows` rows: micro_loss(start, len) returns the mean loss of rows
  // [start, start + len) of it. Returns the batch's mean loss, detached, on the device.
  Tensor run(int64_t rows, const std::function<Tensor(int64_t, int64_t)>& micro_loss) {
    const int64_t k_total = std::min(p_.grad_accum, rows);
    Tensor total;
    for (int64_t k = 0, start = 0; k < k_total; ++k) {
      const int64_t len = rows / k_total + (k < rows % k_total ? 1 : 0);
      Tensor loss;
      {
        profile::PhaseScope forward(profiler_, profile::Phase::Forward);
        std::optional<AutocastGuard> autocast;
        if (const std::optional<DType> dt = p_.amp_dtype()) autocast.emplace(device_.type, *dt);
        loss = micro_loss(start, len);
      }
      start += len;
      profile::PhaseScope backward(profiler_, profile::Phase::Backward);
      // With DDP or ZeRO, the micro-batches before the last accumulate locally; the last backward
      // all-reduces (reduce-scatters) the sum once, instead of every micro-batch's gradients.
      std::optional<dist::NoSync> local;
      if (ddp_ && k + 1 < k_total) local.emplace(ddp_->no_sync());
      if (zero_ && k + 1 < k_total) local.emplace(zero_->no_sync());
      // Weighting each mean by its share of the rows makes the accumulated gradient the whole
      // batch's mean; one micro-batch is not scaled at all, so a run without accumulation is bit
      // for bit what it was before the flag existed.
      if (k_total > 1) loss = loss * (static_cast<double>(len) / static_cast<double>(rows));
      (scaler_ ? scaler_->scale(loss) : loss).backward();
      total = total.defined() ? total + loss.detach() : loss.detach();
    }
    profile::PhaseScope optimizer(profiler_, profile::Phase::Optimizer);
    if (zero_) {  // the clip of the reduced shards, the shards' update, the all-gather
      if (grad_clip_ > 0) zero_->clip_grad_norm_(grad_clip_, 2.0, scaler_.get());
      if (scaler_) {
        zero_->step(*scaler_);
        scaler_->update();
      } else {
        zero_->step();
      }
      zero_->zero_grad();
      return total;
    }
    if (grad_clip_ > 0) {
      if (scaler_) scaler_->unscale_(optimizer_);  // clip the true gradients
      nn::optim::clip_grad_norm_(params_, grad_clip_);
    }
    if (scaler_) {
      scaler_->step(optimizer_);
      scaler_->update();
    } else {
      optimizer_.step();
    }
    optimizer_.zero_grad();
    return total;
  }

  // The loss scaler (fp16 only), for checkpoints; nullptr otherwise.
  nn::amp::GradScaler* scaler() { return scaler_.get(); }
  // --profile: run() marks its forward, backward and optimizer phases on `profiler` (null: none).
  void set_profiler(profile::StepProfiler* profiler) { profiler_ = profiler; }
  // --ddp: the model's DistributedDataParallel, whose all-reduces run() keeps to one per step.
  void set_ddp(dist::DistributedDataParallel* ddp) { ddp_ = ddp; }
  // --zero: the ZeRO-1 optimizer that steps in place of the optimizer given (its local() shard
  // optimizer); it reduce-scatters the gradients during the last micro-batch's backward.
  void set_zero(dist::ZeroRedundancyOptimizer* zero) { zero_ = zero; }

 private:
  const PrecisionOptions& p_;
  Device device_;
  nn::optim::Optimizer& optimizer_;
  TensorList params_;
  double grad_clip_;
  std::unique_ptr<nn::amp::GradScaler> scaler_;
  profile::StepProfiler* profiler_ = nullptr;
  dist::DistributedDataParallel* ddp_ = nullptr;
  dist::ZeroRedundancyOptimizer* zero_ = nullptr;
};

// --memory: the device allocator's summary; on the CPU, the process's peak resident memory.
inline void print_memory(const PrecisionOptions& p, Device device) {
  if (!p.memory) return;
  if (device.is_cuda()) {
    std::printf("%s", cuda::memory_summary(device.index).c_str());
  } else {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("memory: peak resident set size %.1f MiB (the CPU has no caching allocator to summarize)\n",
                static_cast<double>(usage.ru_maxrss) / 1024.0);
  }
  std::fflush(stdout);
}

// The first step's latency: waits for `loss` (the end of this process's first step), then prints
// and records the seconds since `launch`, the program's start. Setup, data loading, cuDNN's and
// cuBLASLt's plan searches and the allocator's first segments are all in it: what a user waits
// before training runs at speed.
inline void report_first_step(MetricsFile& metrics, Progress& progress, int64_t step, const Tensor& loss,
                              Clock::time_point launch) {
  (void)loss.item<double>();
  const double seconds = seconds_since(launch);
  progress.end_line();
  std::printf("first step done %.2f s after launch\n", seconds);
  std::fflush(stdout);
  metrics.write(first_step_record(step, seconds));
}

}  // namespace kiln::examples
