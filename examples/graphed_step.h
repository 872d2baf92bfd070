// --cuda-graph: a whole training step (forward, backward, clipping, GradScaler, optimizer) captured
// once as a CUDA graph and replayed, so a step costs one graph launch instead of hundreds of kernel
// launches from the host (docs/cuda-graphs.md).
//
// How a run uses it: the first `warmup` steps run eagerly. They create what a capture must not
// (the optimizer's state, library handles, cuDNN's plans, the allocator's segments) and measure
// the memory one step needs, which sizes the capture's private pool. The next step copies its
// batch into static input tensors, captures the step on them and replays it; every later step
// copies its batch into the same tensors and replays. Replays run the very kernels of the eager
// step on the same data, so a graphed run gives the eager run's numbers bit for bit, dropout
// included (core/cuda/graph.h).
//
// What the step may do: anything without a host synchronization or a device allocation outside
// the pool (a capture refuses both). The learning rate and the loss scale live in device scalars
// that the host updates between replays (Optimizer::set_lr), so a schedule needs no new capture.
// A batch of another shape (an epoch's short last batch) runs eagerly, and the graph resumes with
// the next full one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/device.h"
#include "core/tensor.h"
#include "kernels/error.h"

namespace kiln::examples {

class GraphedStep {
 public:
  // One training step on `inputs` (device tensors), returning the step's loss (a device scalar).
  using Step = std::function<Tensor(const std::vector<Tensor>& inputs)>;

  // `warmup` eager steps (at least 1) before the capture, on the CUDA device `device`. `on_replay`,
  // when given, runs after each replay of a step captured earlier: the host-side bookkeeping of a
  // step that the graph does not redo (Optimizer::count_replayed_step, the host's count of steps). The
  // step captured in a call ran its host side during the capture, so that call does not run it.
  GraphedStep(Device device, int64_t warmup, std::function<void()> on_replay = {})
      : device_(device), warmup_(warmup), on_replay_(std::move(on_replay)) {
    if (!device.is_cuda()) throw DeviceError("GraphedStep: CUDA graphs need a CUDA device, not " + device.str());
    if (warmup < 1) {
      throw Error("GraphedStep: warmup " + std::to_string(warmup) +
                  " must be at least 1 (the eager step measures the capture's memory)");
    }
  }

  // Runs `step` on `inputs`: eagerly while warming up or when the shapes differ from the captured
  // ones, else by replaying the graph. Returns a copy of the loss, which the next replay does not
  // overwrite.
  Tensor run(const std::vector<Tensor>& inputs, const Step& step) {
    // The capture takes the current device: make it the step's (a DDP rank's GPU need not be 0).
    cuda::DeviceGuard on_device(device_.index);
    bool captured_now = false;
    if (!graph_.captured()) {
      if (warmed_ < warmup_) return eager_warmup(inputs, step);
      capture(inputs, step);
      captured_now = true;
    } else if (!same_shapes(inputs)) {
      ++eager_steps_;
      return step(inputs);
    } else {
      for (size_t i = 0; i < inputs.size(); ++i) static_inputs_[i].copy_(inputs[i]);
    }
    graph_.replay();
    ++replays_;
    if (!captured_now && on_replay_) on_replay_();
    return output_.clone();
  }

  bool captured() const { return graph_.captured(); }
  int64_t replays() const { return replays_; }
  // Steps run eagerly after the warm-up, for batches of another shape.
  int64_t eager_steps() const { return eager_steps_; }
  // Kernels and copies in the captured step (0 before the capture).
  size_t graph_nodes() const { return graph_.num_nodes(); }
  // What the capture reserved for the step's allocations (0 before the capture).
  size_t pool_bytes() const { return pool_bytes_; }
  // The most one eager warm-up step allocated beyond what was live before it: the step's own memory,
  // which replays (allocating nothing) do not show in the allocator's statistics.
  int64_t step_bytes() const { return step_bytes_; }

 private:
  // An eager step that also records the most memory it held beyond what was live before it.
  Tensor eager_warmup(const std::vector<Tensor>& inputs, const Step& step) {
    cuda::synchronize(device_.index);
    const int64_t before = cuda::memory_stats(device_.index).allocated_bytes;
    cuda::reset_peak_memory_stats(device_.index);
    Tensor loss = step(inputs);
    cuda::synchronize(device_.index);
    step_bytes_ = std::max(step_bytes_, cuda::memory_stats(device_.index).peak_allocated_bytes - before);
    ++warmed_;
    return loss;
  }

  void capture(const std::vector<Tensor>& inputs, const Step& step) {
    static_inputs_.clear();
    for (const Tensor& x : inputs) static_inputs_.push_back(x.clone());
    // The step's own peak with room for the pool's rounding and fragmentation: blocks freed within
    // the capture are reused only by it, in the order the step frees and asks.
    pool_bytes_ = static_cast<size_t>(step_bytes_) / 2 * 3 + (size_t{64} << 20);
    graph_.capture([&] { output_ = step(static_inputs_); }, pool_bytes_);
  }

  bool same_shapes(const std::vector<Tensor>& inputs) const {
    if (inputs.size() != static_inputs_.size()) return false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].sizes() != static_inputs_[i].sizes() || inputs[i].dtype() != static_inputs_[i].dtype()) {
        return false;
      }
    }
    return true;
  }

  Device device_;
  int64_t warmup_ = 1;
  std::function<void()> on_replay_;
  int64_t warmed_ = 0;
  int64_t step_bytes_ = 0;
  int64_t replays_ = 0;
  int64_t eager_steps_ = 0;
  size_t pool_bytes_ = 0;
  std::vector<Tensor> static_inputs_;
  Tensor output_;
  cuda::CudaGraph graph_;
};

}  // namespace kiln::examples
