// train_cnn's command line: its settings and their parsing, in a header of their own so that the
// command-line fuzzer (fuzz/fuzz_cli.cpp) parses exactly what the program parses.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "data/idx.h"
#include "examples/common.h"
#include "examples/distributed.h"
#include "examples/loader_options.h"
#include "examples/precision_options.h"

namespace kiln::examples::cnn {

// Loader threads when --workers is unset: see the data-loading rows of bench/RESULTS.md.
inline constexpr int64_t kDefaultWorkers = 1;

// The settings of a run, every default resolved.
struct Options {
  std::string data_dir = data::kFashionMnistDefaultDir;
  std::string device;  // "" picks cuda when available
  std::string model = "small-cnn";
  std::string optimizer = "adamw";
  std::string out = "train_cnn_out";
  std::string resume;
  int epochs = 0;
  int64_t batch_size = 128;
  double lr = 0, weight_decay = 0;
  bool augment = false;
  std::optional<int64_t> train_limit;  // unset: all 60,000 training images
  std::optional<int64_t> test_limit;   // unset: all 10,000 held-out images
  std::optional<double> min_accuracy;  // set: exit status 1 below it, or when the loss did not fall
  uint64_t seed = 0;
  std::optional<int64_t> stop_at_step;  // checkpoint and exit after this global step (splits a run)
  std::optional<double> max_minutes;    // checkpoint and exit once this much time has passed
  PrecisionOptions precision;  // --amp, --tf32, --channels-last, --recompute, --grad-accum, --memory
  LoaderFlags loader;          // --workers, --prefetch, --pin-memory
  bool ddp = false;            // data-parallel over the ranks of mpiexec (dist/ddp.h)
  bool sync_bn = true;         // with --ddp: batch norm over the whole global batch (dist/sync_batch_norm.h)
  bool zero = false;           // --zero: with --ddp, the optimizer's state sharded over the ranks (dist/zero.h)
  int zero_stage = 1;          // --zero-stage: 2 shards the gradients too
  double bucket_mb = 25;       // --bucket-mb: with --ddp, the gradient buckets' size in MB
  int64_t bucket_bytes = int64_t{25} << 20;  // resolved from bucket_mb
  std::string comm_dtype_name;  // --comm-dtype: with --ddp, bf16, fp16 or fp32; empty: the parameters' own
  std::optional<DType> comm_dtype;  // resolved from comm_dtype_name
  bool bucket_view = false;         // --bucket-view: with --ddp, the gradients live in DDP's buckets
  double dropout = 0.5;        // SmallCNN's classifier dropout
};

inline Options parse_options(int argc, const char* const* argv) {
  using examples::whole, examples::real, examples::Ends;
  Options o;
  // Unset, these take the model's or the optimizer's default below.
  std::optional<int> epochs;
  std::optional<double> lr, weight_decay;
  std::optional<bool> augment;
  examples::Flags app(
      "Trains SmallCNN or a small ResNet on Fashion-MNIST (AdamW or SGD, warmup then cosine decay to lr/100),\n"
      "printing the held-out accuracy after every epoch. Writes OUT/metrics.jsonl, OUT/checkpoint.safetensors\n"
      "after every epoch (and when stopped early) and OUT/model.safetensors at the end; --resume continues a\n"
      "run exactly where its checkpoint left it.",
      "train_cnn");
  app.add_option("--data", o.data_dir, "folder with Fashion-MNIST's four .gz files")->type_name("DIR");
  examples::add_device_option(app, o.device);
  app.add_option("--model", o.model, "the network")->one_of({"small-cnn", "resnet"});
  app.add_option("--epochs", epochs, "passes over the training images")
      ->transform(whole<int>(1))
      ->default_str("5 for small-cnn, 30 for resnet");
  app.add_option("--batch-size", o.batch_size, "images per step")->transform(whole<int64_t>(1));
  app.add_option("--optimizer", o.optimizer, "AdamW, or SGD with Nesterov momentum 0.9")
      ->one_of({"adamw", "sgd"});
  app.add_option("--lr", lr, "peak learning rate")
      ->transform(real(0, INFINITY, Ends::open_low))
      ->default_str("1e-3 for adamw, 0.05 for sgd");
  app.add_option("--weight-decay", weight_decay, "weight decay of the weight matrices and kernels")
      ->transform(real(0))
      ->default_str("0.05 for adamw, 5e-4 for sgd");
  auto* on = app.add_flag_callback("--augment", [&] { augment = true; },
                                   "random crops and flips of the training images (default: on for resnet, off for "
                                   "small-cnn)");
  auto* off = app.add_flag_callback("--no-augment", [&] { augment = false; }, "no augmentation, whatever the model");
  on->excludes(off);
  app.add_option("--out", o.out, "folder for metrics, checkpoints and the model (created)")->type_name("DIR");
  app.add_option("--resume", o.resume, "continue from this checkpoint")->type_name("CHECKPOINT")->default_str("");
  app.add_option("--train-limit", o.train_limit, "train on the first N training images")
      ->transform(whole<int64_t>(1))
      ->default_str("all 60000");
  app.add_option("--test-limit", o.test_limit, "evaluate on the first N held-out images")
      ->transform(whole<int64_t>(1))
      ->default_str("all 10000");
  app.add_option("--min-accuracy", o.min_accuracy,
                 "exit with status 1 when the final accuracy is below A or the training loss did not fall")
      ->transform(real(0, 1))
      ->default_str("none");
  app.add_option("--seed", o.seed, "seed of the initial weights, shuffling, augmentation and dropout")
      ->transform(whole<uint64_t>());
  app.add_option("--stop-at-step", o.stop_at_step, "checkpoint and stop after this step (splits a run)")
      ->transform(whole<int64_t>(1))
      ->default_str("none");
  app.add_option("--max-minutes", o.max_minutes,
                 "checkpoint and stop once this many minutes have passed (with --ddp: on any rank; the ranks agree "
                 "on it every step)")
      ->transform(real(0, INFINITY, Ends::open_low))
      ->default_str("none");
  examples::add_precision_options(app, o.precision, /*image_model=*/true);
  examples::add_loader_options(app, o.loader, std::to_string(kDefaultWorkers));
  examples::add_ddp_flag(app, o.ddp);
  app.add_flag("--sync-bn,!--no-sync-bn", o.sync_bn,
               "with --ddp, batch norm normalizes with the statistics of the whole global batch (every rank's "
               "share), so the run equals one process's; --no-sync-bn uses each rank's share alone");
  examples::add_zero_flag(app, o.zero);
  examples::Option* zero_stage = examples::add_zero_stage_flag(app, o.zero_stage);
  examples::Option* bucket_mb = examples::add_bucket_flag(app, o.bucket_mb);
  examples::add_comm_dtype_flag(app, o.comm_dtype_name);
  examples::add_bucket_view_flag(app, o.bucket_view);
  auto* dropout = app.add_option("--dropout", o.dropout, "dropout probability of SmallCNN's classifier")
                      ->transform(real(0, 1, Ends::open_high));
  app.parse(argc, argv);
  examples::check_zero(o.zero, o.ddp, o.precision.cuda_graph, zero_stage->count() > 0);
  o.bucket_bytes = examples::bucket_bytes(o.bucket_mb, bucket_mb->count() > 0, o.ddp);
  o.comm_dtype = examples::comm_dtype(o.comm_dtype_name, o.ddp);
  examples::check_bucket_view(o.bucket_view, o.ddp, o.zero, o.comm_dtype_name);
  if (dropout->count() > 0 && o.model != "small-cnn") {
    examples::input_error("--dropout applies to --model small-cnn only (the ResNet has no dropout)");
  }

  const bool adamw = o.optimizer == "adamw";
  o.epochs = epochs.value_or(o.model == "resnet" ? 30 : 5);
  o.lr = lr.value_or(adamw ? 1e-3 : 0.05);
  o.weight_decay = weight_decay.value_or(adamw ? 0.05 : 5e-4);
  o.augment = augment.value_or(o.model == "resnet");
  examples::check_grad_accum(o.precision, o.batch_size);
  if (o.precision.recompute && o.model != "resnet") {
    examples::input_error("--recompute needs --model resnet (the small CNN has no blocks to recompute)");
  }
  return o;
}

}  // namespace kiln::examples::cnn
