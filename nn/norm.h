// The normalization layers, PyTorch-shaped as nn/layers.h's: batch norm (with the cross-process
// statistics of synchronized batch norm), layer norm, group norm, RMS norm, instance norm and local
// response norm. nn/layers.h includes this header.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ops/batch_norm.h"
#include "nn/module.h"

namespace kiln::nn {

// Cross-process batch statistics for batch norm (synchronized batch norm in data-parallel
// training): sums a tensor over the processes of the job, differentiably (its backward sums the
// gradient the same way). dist::convert_sync_batchnorm installs one; nn knows nothing of dist.
class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  virtual Tensor sum_over_ranks(const Tensor& t) = 0;
  // The number of processes summed over.
  virtual int64_t ranks() const = 0;
};

// What batch norm and instance norm share (PyTorch's _NormBase): the options, parameters weight
// (ones) and bias (zeros) [C] when affine, and buffers running_mean (zeros), running_var (ones) and
// num_batches_tracked (int64 0) when track_running_stats; printed as PyTorch prints them.
// momentum weighs each batch's statistics in the running ones; std::nullopt (PyTorch's None) makes
// batch norm's running statistics the plain average over all batches so far (weight 1 /
// num_batches_tracked, which reads the count on the host each training step, as PyTorch does),
// while instance norm then leaves them as they are (PyTorch passes it a momentum of 0).
class NormBase : public UnaryModule {
 public:
  std::string extra_repr() const override;
  void reset_running_stats();

  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;
  Tensor weight, bias;
  Tensor running_mean, running_var, num_batches_tracked;

 protected:
  // `name` is the class's, for errors.
  NormBase(const char* name, int64_t num_features, double eps, std::optional<double> momentum, bool affine,
           bool track_running_stats);
};

// Batch norm over dim 1 of [N, C, *] (PyTorch's _BatchNorm): BatchNorm1d, BatchNorm2d and
// BatchNorm3d differ only in the input dims they accept. Training normalizes with the batch
// statistics and updates the running ones; eval uses the running statistics (or the batch's when
// they are not tracked).
class BatchNorm : public NormBase {
 public:
  Tensor forward(const Tensor& x) override;
  // relu(forward(x) + residual) (the residual when defined, the ReLU when epilogue.relu) in batch
  // norm's normalizing pass: batch_norm with the epilogue, the same bits as the three ops. A
  // synchronized module, or a residual batch_norm does not take (another dtype, device or shape:
  // add broadcasts it), runs the ops one after another. Sequential runs a batch norm and the ReLU
  // after it this way; so do ResNet's blocks.
  Tensor forward(const Tensor& x, const BatchNormEpilogue& epilogue);
  using UnaryModule::operator();
  Tensor operator()(const Tensor& x, const BatchNormEpilogue& epilogue) { return call(*this, x, epilogue); }

  // When set, training normalizes with the statistics of the whole job's batch (every process's
  // share), through two sums over the processes; evaluation still uses the running statistics.
  std::shared_ptr<BatchNormSync> sync;

 protected:
  // `name` is the class's (for errors); the input must have one of `dims` dims, described in errors
  // by `layout` ("[N, C, H, W]").
  BatchNorm(const char* name, std::vector<int64_t> dims, const char* layout, int64_t num_features, double eps,
            std::optional<double> momentum, bool affine, bool track_running_stats);

 private:
  Tensor synced_forward(const Tensor& x);
  // The weight of this training batch's statistics in the running ones: momentum, or for none
  // 1 / (the batches tracked so far + 1).
  double update_weight() const;
  std::vector<int64_t> dims_;
  const char* layout_;
};

// Input [N, C] or [N, C, L] (features of a linear layer, or channels of a sequence).
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm("BatchNorm1d", {2, 3}, "[N, C] or [N, C, L]", num_features, eps, momentum, affine,
                  track_running_stats) {}
  std::string type_name() const override { return "BatchNorm1d"; }
};

// Input [N, C, H, W].
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm("BatchNorm2d", {4}, "[N, C, H, W]", num_features, eps, momentum, affine, track_running_stats) {}
  std::string type_name() const override { return "BatchNorm2d"; }
};

// Input [N, C, D, H, W].
class BatchNorm3d : public BatchNorm {
 public:
  explicit BatchNorm3d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm("BatchNorm3d", {5}, "[N, C, D, H, W]", num_features, eps, momentum, affine, track_running_stats) {}
  std::string type_name() const override { return "BatchNorm3d"; }
};

// Batch norm's forward warns once per process when its input comes straight from a conv2d with a
// bias (wasted: batch norm cancels it). Tests re-arm that warning with this.
void reset_conv_bias_warning_for_testing();

// Normalizes over the trailing dims normalized_shape; weight ones, bias zeros (bias = false drops
// it).
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true, bool bias = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine, bias) {}
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  Shape normalized_shape;
  double eps;
  bool elementwise_affine;
  Tensor weight, bias;
};

// PyTorch's GroupNorm: input [N, C, *], C split into num_groups groups normalized separately;
// weight ones and bias zeros [C] (affine = false drops both).
class GroupNorm : public UnaryModule {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  std::string type_name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  int64_t num_groups, num_channels;
  double eps;
  bool affine;
  Tensor weight, bias;
};

// PyTorch's RMSNorm over the trailing normalized_shape dims: weight ones (elementwise_affine =
// false drops it); eps unset means the machine epsilon of the input's dtype, as PyTorch's None.
class RMSNorm : public UnaryModule {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  explicit RMSNorm(int64_t normalized_size, std::optional<double> eps = std::nullopt, bool elementwise_affine = true)
      : RMSNorm(Shape{normalized_size}, eps, elementwise_affine) {}
  std::string type_name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  Shape normalized_shape;
  std::optional<double> eps;
  bool elementwise_affine;
  Tensor weight;
};

// Instance norm over dim 1 (PyTorch's _InstanceNorm): each sample's channel is normalized by its
// own statistics over its positions. InstanceNorm1d, InstanceNorm2d and InstanceNorm3d differ only
// in the input dims they accept: [N, C, *] or, unbatched, [C, *]. PyTorch's defaults: no affine
// parameters and no running statistics. The running statistics are updated in training with the
// samples' average statistics and used in eval; num_batches_tracked is kept for PyTorch's state
// dicts (instance norm never counts). Without either, any channel count is accepted
// (PyTorch warns), since nothing is sized by num_features.
class InstanceNorm : public NormBase {
 public:
  Tensor forward(const Tensor& x) override;

 protected:
  // `name` is the class's (for errors); `spatial` the number of position dims (1, 2 or 3),
  // described in errors by `layout` ("[N, C, H, W] or [C, H, W]").
  InstanceNorm(const char* name, int64_t spatial, const char* layout, int64_t num_features, double eps,
               std::optional<double> momentum, bool affine, bool track_running_stats);

 private:
  int64_t spatial_;
  const char* layout_;
};

class InstanceNorm1d : public InstanceNorm {
 public:
  explicit InstanceNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                          bool affine = false, bool track_running_stats = false)
      : InstanceNorm("InstanceNorm1d", 1, "[N, C, L] or [C, L]", num_features, eps, momentum, affine,
                     track_running_stats) {}
  std::string type_name() const override { return "InstanceNorm1d"; }
};

class InstanceNorm2d : public InstanceNorm {
 public:
  explicit InstanceNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                          bool affine = false, bool track_running_stats = false)
      : InstanceNorm("InstanceNorm2d", 2, "[N, C, H, W] or [C, H, W]", num_features, eps, momentum, affine,
                     track_running_stats) {}
  std::string type_name() const override { return "InstanceNorm2d"; }
};

class InstanceNorm3d : public InstanceNorm {
 public:
  explicit InstanceNorm3d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                          bool affine = false, bool track_running_stats = false)
      : InstanceNorm("InstanceNorm3d", 3, "[N, C, D, H, W] or [C, D, H, W]", num_features, eps, momentum, affine,
                     track_running_stats) {}
  std::string type_name() const override { return "InstanceNorm3d"; }
};

// local_response_norm over the channels of [N, C, *] (AlexNet's normalization across neighbouring
// channels).
class LocalResponseNorm : public UnaryModule {
 public:
  explicit LocalResponseNorm(int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0);
  std::string type_name() const override { return "LocalResponseNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  int64_t size;
  double alpha, beta, k;
};

}  // namespace kiln::nn
