// bench_tips: kiln's side of the GPU-utilization tips' A/B measurements (docs/tips/README.md). For
// each tip it runs a fixed workload twice, without the tip (variant A) and with it (B), and writes
// one JSON line per variant (after a header line: date, commit, machine, command): the median time
// per unit (a training step, an epoch, a pass) over --reps units after --warmup, the throughput where
// there is one, the workload's peak memory (the CPU allocator's live bytes at their peak, above what
// was live before the tip began), and for tip 25 the final loss and held-out accuracy. tools/tips.py
// runs it beside tools/tips_peer.py (PyTorch, the same workloads) and pastes the tables into
// docs/tips/. Reports measurements; never asserts a speed.
//
// The workloads (tools/tips_peer.py mirrors every size here):
//   cnn step      SmallCNN (train_cnn's, dropout 0) on 1x28x28 random images, AdamW lr 1e-3, cross-entropy
//   conv-bn step  3x32x32 images: [conv3x3 + BN + ReLU] at 32, 64 (then max-pool 2), 64 wide, global average
//                 pool, Linear(64, 10); batch 64, AdamW
//   loader loop   SyntheticImages 1x28x28 uint8, per sample pad-crop 2 + flip + normalize, batch 128,
//                 each batch one cnn step
//   attention     q, k, v [8, 4, 256, 64] float32, causal, forward and backward of the sum of the output
//   gelu          x [4096, 1024] float32, forward and backward of the sum (tanh form)
//   gpt step      GPT 4 layers, 4 heads, 128 wide, block 128, vocabulary 512, batch 8, AdamW
// --quick shrinks every size and count, for CI; its numbers mean nothing.
//   validation    SmallCNN in eval mode with the tape on, 16 batches of 256 (tip 19)
//   usage: bench_tips [--device cpu|cuda] [--tips 1,2,...] [--reps N] [--warmup N] [--quick] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "core/allocator.h"
#include "core/atomic_file.h"
#include "core/autocast.h"
#include "core/cuda/runtime.h"
#include "core/gpu_monitor.h"
#include "core/kiln.h"
#include "data/datasets.h"
#include "data/idx.h"
#include "data/image.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/transforms.h"
#include "examples/common.h"
#include "examples/run_record.h"
#include "kernels/cpu/parallel.h"
#include "nn/amp/grad_scaler.h"
#include "nn/optim/adamw.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/sgd.h"
#include "nn/resnet.h"
#include "nn/transformer.h"

using namespace kiln;
using examples::JsonLine;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string device = "cpu";  // cpu: the CPU tips; cuda: the GPU tips, on the first GPU
  std::vector<int> tips;       // empty: every tip of the device
  int reps = 10;
  int warmup = 2;
  bool quick = false;
  std::string json;
  std::string data_dir = data::kFashionMnistDefaultDir;
};

// What one variant measured.
struct Measured {
  double ms = 0;              // median per unit
  double rate = NAN;          // items per second at the median
  double peak_mb = NAN;       // live bytes above the start, at their peak
  std::map<std::string, double> extra;
};

struct Variant {
  std::string name;
  Measured m;
};

// A tip's A/B: the workload, the unit timed and the rate's unit, and the variants, A first.
struct TipResult {
  std::string workload, unit, rate_unit;
  std::vector<Variant> variants;
};

double since_ms(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Live bytes when the running tip began: a variant's peak counts from here, so it holds what the
// variant built (model, optimizer state, inputs) and what its units allocate, and the variants of a
// tip compare whole. (Each variant's objects die before the next one's are built.) On a GPU: the
// caching allocator's allocated bytes.
int64_t g_tip_start_bytes = 0;
bool g_gpu = false;

int64_t live_bytes() { return g_gpu ? cuda::memory_stats(0).allocated_bytes : cpu_cache_stats().allocated_bytes; }
void reset_peak() {
  if (g_gpu) cuda::reset_peak_memory_stats(0);
  else reset_cpu_peak_memory();
}
double peak_mb() {
  const int64_t peak = g_gpu ? cuda::memory_stats(0).peak_allocated_bytes : cpu_cache_stats().peak_allocated_bytes;
  return static_cast<double>(peak - g_tip_start_bytes) / (1024.0 * 1024.0);
}

// Times `unit` (warm-up first), with the peak of live bytes over the timed units. On a GPU each unit
// ends with a device synchronization, so its time is the work's, not the launches'.
Measured measure(const Options& o, const std::function<void()>& unit, double items_per_unit = NAN) {
  auto run = [&] {
    unit();
    if (g_gpu) cuda::synchronize();
  };
  for (int i = 0; i < o.warmup; ++i) run();
  reset_peak();
  std::vector<double> ms;
  for (int i = 0; i < o.reps; ++i) {
    const auto t = Clock::now();
    run();
    ms.push_back(since_ms(t));
  }
  Measured m;
  m.ms = bench::median(ms);
  m.rate = items_per_unit / (m.ms / 1e3);
  m.peak_mb = peak_mb();
  return m;
}

int64_t size(const Options& o, int64_t full, int64_t quick) { return o.quick ? quick : full; }

// --- workloads ---------------------------------------------------------------------------------------

std::shared_ptr<nn::SmallCNN> small_cnn() {
  nn::SmallCNNConfig cfg;
  cfg.dropout = 0.0;
  manual_seed(0);
  auto model = std::make_shared<nn::SmallCNN>(cfg);
  model->train();
  return model;
}

// One training step of `model` on (x, y) with `opt`: forward, cross-entropy, backward, step, zero_grad.
void train_step(nn::UnaryModule& model, nn::optim::Optimizer& opt, const Tensor& x, const Tensor& y,
                bool set_to_none = true) {
  Tensor loss = cross_entropy(model(x), y);
  loss.backward();
  opt.step();
  opt.zero_grad(set_to_none);
}

Tensor images(int64_t batch, int64_t channels, int64_t side) { return randn({batch, channels, side, side}); }
Tensor labels(int64_t batch) { return randint(0, 10, {batch}, TensorOptions(DType::Int64)); }

std::shared_ptr<nn::Sequential> conv_bn_net(bool bias) {
  manual_seed(0);
  auto block = [bias](int64_t in, int64_t out) -> std::vector<std::shared_ptr<nn::UnaryModule>> {
    return {std::make_shared<nn::Conv2d>(in, out, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}, Pair{1, 1}, 1,
                                         bias),
            std::make_shared<nn::BatchNorm2d>(out), std::make_shared<nn::ReLU>()};
  };
  auto net = std::make_shared<nn::Sequential>();
  for (auto& m : block(3, 32)) net->push_back(m);
  for (auto& m : block(32, 64)) net->push_back(m);
  net->push_back(std::make_shared<nn::MaxPool2d>(Pair{2, 2}));
  for (auto& m : block(64, 64)) net->push_back(m);
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(64, 10));
  net->train();
  return net;
}

data::transforms::Compose augment() {
  namespace T = data::transforms;
  std::vector<T::Step> steps;
  steps.emplace_back(T::RandomCrop(28, 2));
  steps.emplace_back(T::RandomHorizontalFlip());
  steps.emplace_back(T::Normalize({0.286}, {0.353}));
  return T::Compose(std::move(steps), ImageLayout::CHW, MemoryFormat::Contiguous);
}

// The loader loop: `batches` batches of augmented synthetic images, each one cnn step.
TipResult loader_loop(const Options& o, const std::string& name_a, const data::DataLoaderOptions& a,
                      const std::string& name_b, const data::DataLoaderOptions& b) {
  const int64_t batch = size(o, 128, 16), batches = size(o, 16, 2);
  auto dataset = std::make_shared<data::SyntheticImages>(batch * batches, 1, 28, 28, 10, 0, false, augment());
  TipResult r{"loader loop: SyntheticImages 1x28x28, pad-crop 2 + flip + normalize per sample, batch " +
                  std::to_string(batch) + ", " + std::to_string(batches) + " batches an epoch, a cnn step each",
              "epoch", "images/s", {}};
  for (const auto& [name, options] : {std::pair{name_a, a}, std::pair{name_b, b}}) {
    auto model = small_cnn();
    nn::optim::AdamW opt(model->parameters(), 1e-3);
    data::DataLoaderOptions lo = options;
    lo.batch_size = batch;
    lo.persistent_workers = true;
    data::DataLoader loader(dataset, lo);
    const Measured m = measure(
        o,
        [&] {
          while (auto ex = loader.next()) train_step(*model, opt, ex->data, ex->target);
        },
        static_cast<double>(batch * batches));
    r.variants.push_back({name, m});
  }
  return r;
}

// --- the tips ----------------------------------------------------------------------------------------

TipResult tip_batch_size(const Options& o) {
  TipResult r{"cnn step (SmallCNN, 1x28x28), AdamW", "step", "images/s", {}};
  for (const int64_t batch : {size(o, 32, 4), size(o, 256, 16)}) {
    auto model = small_cnn();
    nn::optim::AdamW opt(model->parameters(), 1e-3);
    const Tensor x = images(batch, 1, 28), y = labels(batch);
    r.variants.push_back({"batch " + std::to_string(batch),
                          measure(o, [&] { train_step(*model, opt, x, y); }, static_cast<double>(batch))});
  }
  return r;
}

TipResult tip_workers(const Options& o) {
  data::DataLoaderOptions a, b;
  a.num_workers = 0;
  b.num_workers = 2;
  return loader_loop(o, "0 workers", a, "2 workers", b);
}

TipResult tip_prefetch(const Options& o) {
  data::DataLoaderOptions a, b;
  a.num_workers = b.num_workers = 2;
  a.prefetch_factor = 1;
  b.prefetch_factor = 4;
  return loader_loop(o, "prefetch 1", a, "prefetch 4", b);
}

TipResult tip_persistent(const Options& o) {
  const int64_t batch = size(o, 64, 8), batches = 4;
  auto dataset = std::make_shared<data::SyntheticImages>(batch * batches, 1, 28, 28, 10, 0, false, augment());
  TipResult r{"a 2-worker DataLoader alone: SyntheticImages with the loader loop's augmentation, batch " +
                  std::to_string(batch) + ", " + std::to_string(batches) + " batches an epoch",
              "epoch", "images/s", {}};
  for (const bool persistent : {false, true}) {
    data::DataLoaderOptions lo;
    lo.batch_size = batch;
    lo.num_workers = 2;
    lo.persistent_workers = persistent;
    data::DataLoader loader(dataset, lo);
    const Measured m = measure(
        o,
        [&] {
          while (auto ex = loader.next()) {
          }
        },
        static_cast<double>(batch * batches));
    r.variants.push_back({persistent ? "persistent workers" : "workers started each epoch", m});
  }
  return r;
}

TipResult tip_zero_grad(const Options& o) {
  const int64_t batch = size(o, 64, 4);
  TipResult r{"cnn step, batch " + std::to_string(batch), "step", "images/s", {}};
  for (const bool none : {false, true}) {
    auto model = small_cnn();
    nn::optim::AdamW opt(model->parameters(), 1e-3);
    const Tensor x = images(batch, 1, 28), y = labels(batch);
    r.variants.push_back({none ? "zero_grad(set_to_none)" : "zero_grad(fill with zeros)",
                          measure(o, [&] { train_step(*model, opt, x, y, none); }, static_cast<double>(batch))});
  }
  return r;
}

TipResult tip_conv_bias(const Options& o) {
  const int64_t batch = size(o, 64, 4);
  TipResult r{"conv-bn step, batch " + std::to_string(batch), "step", "images/s", {}};
  for (const bool bias : {true, false}) {
    auto net = conv_bn_net(bias);
    nn::optim::AdamW opt(net->parameters(), 1e-3);
    const Tensor x = images(batch, 3, 32), y = labels(batch);
    Measured m = measure(o, [&] { train_step(*net, opt, x, y); }, static_cast<double>(batch));
    m.extra["parameters"] = static_cast<double>(net->num_parameters());
    r.variants.push_back({bias ? "conv bias before BN" : "no conv bias", m});
  }
  return r;
}

TipResult tip_no_grad(const Options& o) {
  const int64_t batch = size(o, 512, 8);
  TipResult r{"evaluation pass of SmallCNN (eval mode), batch " + std::to_string(batch), "pass", "images/s", {}};
  auto model = small_cnn();
  model->eval();
  const Tensor x = images(batch, 1, 28);
  for (const bool no_grad : {false, true}) {
    const Measured m = measure(
        o,
        [&] {
          std::optional<NoGradGuard> guard;
          if (no_grad) guard.emplace();
          Tensor logits = (*model)(x);
          (void)argmax(logits, 1);
        },
        static_cast<double>(batch));
    r.variants.push_back({no_grad ? "NoGradGuard" : "tape on", m});
  }
  return r;
}

TipResult tip_attention(const Options& o) {
  const int64_t b = size(o, 8, 2), h = 4, t = size(o, 256, 32), d = 64;
  TipResult r{"attention, q k v [" + std::to_string(b) + ", 4, " + std::to_string(t) +
                  ", 64] float32, causal, forward + backward",
              "pass", "", {}};
  manual_seed(0);
  Tensor q = randn({b, h, t, d}), k = randn({b, h, t, d}), v = randn({b, h, t, d});
  for (Tensor* p : {&q, &k, &v}) p->set_requires_grad(true);
  const Tensor mask = triu(ones({t, t}, TensorOptions(DType::Bool)), 1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (const bool fused : {false, true}) {
    const Measured m = measure(o, [&] {
      Tensor out;
      if (fused) {
        out = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, /*is_causal=*/true);
      } else {
        Tensor s = matmul(q, k.transpose(-2, -1)) * scale;
        out = matmul(softmax(masked_fill(s, mask, -INFINITY), -1), v);
      }
      out.sum().backward();
      for (Tensor* p : {&q, &k, &v}) p->set_grad(Tensor());
    });
    r.variants.push_back({fused ? "scaled_dot_product_attention" : "matmul, mask, softmax, matmul", m});
  }
  return r;
}

TipResult tip_channels_last(const Options& o) {
  const int64_t batch = size(o, 64, 4);
  TipResult r{"conv-bn step (no bias), batch " + std::to_string(batch), "step", "images/s", {}};
  for (const bool nhwc : {false, true}) {
    auto net = conv_bn_net(false);
    Tensor x = images(batch, 3, 32);
    if (nhwc) {
      net->to(MemoryFormat::ChannelsLast);
      x = x.contiguous(MemoryFormat::ChannelsLast);
    }
    nn::optim::AdamW opt(net->parameters(), 1e-3);
    const Tensor y = labels(batch);
    r.variants.push_back({nhwc ? "channels-last (NHWC)" : "NCHW",
                          measure(o, [&] { train_step(*net, opt, x, y); }, static_cast<double>(batch))});
  }
  return r;
}

TipResult tip_anomaly(const Options& o) {
  const int64_t batch = size(o, 64, 4);
  TipResult r{"cnn step, batch " + std::to_string(batch), "step", "images/s", {}};
  for (const bool anomaly : {true, false}) {
    auto model = small_cnn();
    nn::optim::AdamW opt(model->parameters(), 1e-3);
    const Tensor x = images(batch, 1, 28), y = labels(batch);
    AnomalyModeGuard guard(anomaly);
    r.variants.push_back({anomaly ? "anomaly mode on" : "anomaly mode off",
                          measure(o, [&] { train_step(*model, opt, x, y); }, static_cast<double>(batch))});
  }
  return r;
}

TipResult tip_fused_pointwise(const Options& o) {
  const int64_t rows = size(o, 4096, 64), cols = 1024;
  TipResult r{"GELU (tanh form) of [" + std::to_string(rows) + ", 1024] float32, forward + backward of the sum",
              "pass", "", {}};
  manual_seed(0);
  Tensor x = randn({rows, cols});
  x.set_requires_grad(true);
  const double c = std::sqrt(2.0 / M_PI);
  for (const bool fused : {false, true}) {
    const Measured m = measure(o, [&] {
      Tensor y = fused ? gelu(x, GeluApprox::Tanh) : x * 0.5 * (tanh((x + x * x * x * 0.044715) * c) + 1.0);
      y.sum().backward();
      x.set_grad(Tensor());
    });
    r.variants.push_back({fused ? "one GELU kernel" : "a chain of pointwise ops", m});
  }
  return r;
}

// A validation loop that forgets no_grad and logs its losses: summed as tensors, each loss keeps its
// batch's whole graph (every activation saved for a backward that never comes) until the sum dies;
// summed as numbers, each graph dies with its batch. (A training loop's backward frees the saved
// activations, so there the kept history is only the graph's nodes: docs/tips/19-no-history.md.)
TipResult tip_no_history(const Options& o) {
  const int64_t batch = size(o, 256, 8), batches = size(o, 16, 3);
  TipResult r{"validation of SmallCNN with the tape on (no NoGradGuard), " + std::to_string(batches) +
                  " batches of " + std::to_string(batch) + ", the losses summed for the log",
              "pass", "images/s", {}};
  auto model = small_cnn();
  model->eval();
  const Tensor x = images(batch, 1, 28), y = labels(batch);
  for (const bool as_number : {false, true}) {
    const Measured m = measure(
        o,
        [&] {
          Tensor logged = zeros({});
          double logged_number = 0;
          for (int64_t b = 0; b < batches; ++b) {
            Tensor loss = cross_entropy((*model)(x), y);
            if (as_number) logged_number += loss.item<double>();
            else logged = logged + loss;
          }
          (void)(logged.item<double>() + logged_number);
        },
        static_cast<double>(batch * batches));
    r.variants.push_back({as_number ? "loss.item() summed" : "loss tensors summed (graphs kept)", m});
  }
  return r;
}

TipResult tip_free_memory(const Options& o) {
  const int64_t batch = size(o, 256, 8);
  TipResult r{"cnn step, batch " + std::to_string(batch) + "; the CPU allocator's cache", "step", "images/s", {}};
  for (const bool empty : {false, true}) {
    auto model = small_cnn();
    nn::optim::AdamW opt(model->parameters(), 1e-3);
    const Tensor x = images(batch, 1, 28), y = labels(batch);
    Measured m = measure(
        o,
        [&] {
          train_step(*model, opt, x, y);
          if (empty) cpu_empty_cache();
        },
        static_cast<double>(batch));
    m.extra["cached_mb"] = static_cast<double>(cpu_cache_stats().cached_bytes) / (1024.0 * 1024.0);
    r.variants.push_back({empty ? "cache emptied after every step" : "cache kept", m});
  }
  return r;
}

TipResult tip_grad_accum(const Options& o) {
  const int64_t batch = size(o, 256, 16), micro = 4;
  TipResult r{"cnn step, batch " + std::to_string(batch), "step", "images/s", {}};
  for (const int64_t k : {int64_t{1}, micro}) {
    auto model = small_cnn();
    nn::optim::AdamW opt(model->parameters(), 1e-3);
    const Tensor x = images(batch, 1, 28), y = labels(batch);
    const int64_t rows = batch / k;
    const Measured m = measure(
        o,
        [&] {
          for (int64_t i = 0; i < k; ++i) {
            Tensor loss = cross_entropy((*model)(x.narrow(0, i * rows, rows)), y.narrow(0, i * rows, rows));
            (loss / static_cast<double>(k)).backward();
          }
          opt.step();
          opt.zero_grad();
        },
        static_cast<double>(batch));
    r.variants.push_back({k == 1 ? "one pass of " + std::to_string(batch)
                                 : std::to_string(k) + " micro-batches of " + std::to_string(rows),
                          m});
  }
  return r;
}

TipResult tip_checkpointing(const Options& o) {
  nn::GPTConfig cfg;
  cfg.vocab_size = 512;
  cfg.block_size = size(o, 128, 16);
  cfg.n_layer = size(o, 4, 2);
  cfg.n_head = 4;
  cfg.n_embd = size(o, 128, 32);
  const int64_t batch = size(o, 8, 2);
  TipResult r{"gpt step: " + std::to_string(cfg.n_layer) + " layers, " + std::to_string(cfg.n_embd) +
                  " wide, block " + std::to_string(cfg.block_size) + ", batch " + std::to_string(batch),
              "step", "tokens/s", {}};
  for (const bool recompute : {false, true}) {
    cfg.recompute = recompute;
    manual_seed(0);
    auto model = std::make_shared<nn::GPT>(cfg);
    model->train();
    nn::optim::AdamW opt(model->parameters(), 1e-3);
    const TensorOptions i64(DType::Int64);
    const Tensor idx = randint(0, cfg.vocab_size, {batch, cfg.block_size}, i64);
    const Tensor targets = randint(0, cfg.vocab_size, {batch, cfg.block_size}, i64);
    const Measured m = measure(
        o,
        [&] {
          model->loss(idx, targets).backward();
          opt.step();
          opt.zero_grad();
        },
        static_cast<double>(batch * cfg.block_size));
    r.variants.push_back({recompute ? "recompute each block" : "activations kept", m});
  }
  return r;
}

TipResult tip_preprocess_once(const Options& o) {
  const int64_t n = size(o, 1024, 32), batch = 64;
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("kiln_tips_png_" + std::to_string(::getpid()));
  manual_seed(0);
  for (int64_t i = 0; i < n; ++i) {
    const fs::path dir = root / ("class" + std::to_string(i % 10));
    fs::create_directories(dir);
    const Tensor img = randint(0, 256, {3, 32, 32}, TensorOptions(DType::UInt8));
    data::write_png((dir / (std::to_string(i) + ".png")).string(), img);
  }
  TipResult r{std::to_string(n) + " PNG images 3x32x32 in class folders, an epoch of batch " +
                  std::to_string(batch) + " through a DataLoader (no workers)",
              "epoch", "images/s", {}};
  auto folder = std::make_shared<data::ImageFolder>(root.string());
  // Decoded once: every image into one uint8 tensor, with its label.
  std::vector<Tensor> decoded, targets;
  for (int64_t i = 0; i < folder->size(); ++i) {
    data::Example e = folder->get(i);
    decoded.push_back(e.data);
    targets.push_back(e.target);
  }
  auto tensors = std::make_shared<data::TensorDataset>(stack(decoded), stack(targets));
  for (const bool once : {false, true}) {
    data::DataLoaderOptions lo;
    lo.batch_size = batch;
    data::DataLoader loader(once ? std::static_pointer_cast<const data::Dataset>(tensors)
                                 : std::static_pointer_cast<const data::Dataset>(folder),
                            lo);
    const Measured m = measure(
        o,
        [&] {
          while (auto ex = loader.next()) {
          }
        },
        static_cast<double>(n));
    r.variants.push_back({once ? "decoded once into a tensor" : "PNG decoded every epoch", m});
  }
  fs::remove_all(root);
  return r;
}

TipResult tip_lr_scaling(const Options& o) {
  const int64_t n = size(o, 8192, 512), small_batch = 32, batch = size(o, 512, 128), epochs = size(o, 4, 1);
  const double base_lr = 0.01;  // SGD with momentum 0.9, tuned for batch 32
  const data::FashionMnistDataset train(o.data_dir, "train", n);
  const data::FashionMnistDataset test(o.data_dir, "t10k", size(o, 2000, 200));
  Tensor x_test, y_test;
  {
    std::vector<Tensor> xs, ys;
    for (int64_t i = 0; i < test.size(); ++i) {
      data::Example e = test.get(i);
      xs.push_back((e.data.to(DType::Float32) / 255.0 - 0.286) / 0.353);
      ys.push_back(e.target);
    }
    x_test = stack(xs);
    y_test = stack(ys);
  }
  std::vector<Tensor> xs, ys;
  for (int64_t i = 0; i < train.size(); ++i) {
    data::Example e = train.get(i);
    xs.push_back((e.data.to(DType::Float32) / 255.0 - 0.286) / 0.353);
    ys.push_back(e.target);
  }
  const Tensor x = stack(xs), y = stack(ys);
  const int64_t steps_per_epoch = n / batch, total = steps_per_epoch * epochs;
  TipResult r{"SmallCNN on " + std::to_string(n) + " Fashion-MNIST images, batch " + std::to_string(batch) + ", " +
                  std::to_string(epochs) + (epochs == 1 ? " epoch" : " epochs") +
                  " of SGD momentum 0.9 (lr 0.01 is tuned for batch 32), cosine decay",
              "run", "images/s", {}};
  for (const bool scaled : {false, true}) {
    auto model = small_cnn();
    const double lr = scaled ? base_lr * static_cast<double>(batch) / static_cast<double>(small_batch) : base_lr;
    nn::optim::SGD opt(model->parameters(), lr, 0.9);
    nn::optim::WarmupCosine schedule(opt, lr, scaled ? steps_per_epoch : 0, total, 0.0);
    double last_loss = NAN;
    reset_peak();
    const auto t = Clock::now();
    for (int64_t s = 0; s < total; ++s) {
      const int64_t at = (s % steps_per_epoch) * batch;
      Tensor loss = cross_entropy((*model)(x.narrow(0, at, batch)), y.narrow(0, at, batch));
      loss.backward();
      opt.step();
      opt.zero_grad();
      schedule.step();
      if (s == total - steps_per_epoch) last_loss = 0;  // the last epoch's mean training loss
      if (s >= total - steps_per_epoch) last_loss += loss.item<double>() / static_cast<double>(steps_per_epoch);
    }
    Measured m;
    m.ms = since_ms(t);
    m.rate = static_cast<double>(total * batch) / (m.ms / 1e3);
    m.peak_mb = peak_mb();
    model->eval();
    NoGradGuard no_grad;
    const Tensor correct = (argmax((*model)(x_test), 1) == y_test).to(DType::Float64).mean();
    m.extra["final_loss"] = last_loss;
    m.extra["test_accuracy"] = correct.item<double>();
    m.extra["lr"] = lr;
    r.variants.push_back({scaled ? "lr x" + std::to_string(batch / small_batch) + " with one epoch of warmup"
                                 : "batch 32's lr, no warmup",
                          m});
  }
  return r;
}

// --- the GPU tips (--device cuda) -----------------------------------------------------------------------

const Device kGpu = Device::cuda(0);

// nanoGPT's character model (6 layers, 6 heads, 384 wide, block 256, vocabulary 65), batch 32, AdamW:
// the matmul-heavy step of tips 10 and 17.
struct GptStep {
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<nn::optim::AdamW> opt;
  Tensor idx, targets;
  int64_t tokens = 0;
};

GptStep gpt_step(const Options& o) {
  nn::GPTConfig cfg;
  cfg.vocab_size = 65;
  cfg.block_size = size(o, 256, 32);
  cfg.n_layer = size(o, 6, 2);
  cfg.n_head = 6;
  cfg.n_embd = size(o, 384, 48);
  const int64_t batch = size(o, 32, 2);
  manual_seed(0);
  GptStep g;
  g.model = std::make_shared<nn::GPT>(cfg);
  g.model->to(kGpu);
  g.model->train();
  g.opt = std::make_unique<nn::optim::AdamW>(g.model->parameters(), 1e-3);
  const TensorOptions i64(DType::Int64, kGpu);
  g.idx = randint(0, cfg.vocab_size, {batch, cfg.block_size}, i64);
  g.targets = randint(0, cfg.vocab_size, {batch, cfg.block_size}, i64);
  g.tokens = batch * cfg.block_size;
  return g;
}

std::string gpt_workload(const Options& o) {
  return "gpt step on the GPU: " + std::to_string(size(o, 6, 2)) + " layers, 6 heads, " +
         std::to_string(size(o, 384, 48)) + " wide, block " + std::to_string(size(o, 256, 32)) +
         ", vocabulary 65, batch " +
         std::to_string(size(o, 32, 2)) + ", AdamW";
}

TipResult tip_pinned(const Options& o) {
  const int64_t batch = size(o, 256, 8);
  TipResult r{"a batch of " + std::to_string(batch) + " uint8 images 3x224x224 copied to the GPU", "copy", "GB/s", {}};
  const Tensor pageable = randint(0, 256, {batch, 3, 224, 224}, TensorOptions(DType::UInt8));
  const double gb = static_cast<double>(pageable.numel()) / 1e9;
  const Tensor pinned = pageable.pin_memory();
  for (const bool pin : {false, true}) {
    const Tensor& src = pin ? pinned : pageable;
    r.variants.push_back({pin ? "page-locked, non_blocking" : "pageable",
                          measure(o, [&] { (void)src.to(kGpu, /*non_blocking=*/pin); }, gb)});
  }
  return r;
}

TipResult tip_cudnn_benchmark(const Options& o) {
  const int64_t batch = size(o, 128, 4);
  TipResult r{"ResNet-18 for 32x32 images on the GPU, float32 with TF32, batch " + std::to_string(batch) + ", AdamW",
              "step", "images/s", {}};
  for (const bool benchmark : {false, true}) {
    cuda::math_switches().cudnn_benchmark = benchmark;
    manual_seed(0);
    auto model = std::make_shared<nn::ResNet>(nn::ResNetConfig::resnet18_cifar());
    model->to(kGpu);
    model->train();
    nn::optim::AdamW opt(model->parameters(), 1e-3);
    const Tensor x = randn({batch, 3, 32, 32}, TensorOptions(DType::Float32, kGpu));
    const Tensor y = randint(0, 10, {batch}, TensorOptions(DType::Int64, kGpu));
    r.variants.push_back({benchmark ? "cuDNN benchmark mode" : "cuDNN's heuristic",
                          measure(o, [&] { train_step(*model, opt, x, y); }, static_cast<double>(batch))});
  }
  cuda::math_switches().cudnn_benchmark = false;
  return r;
}

TipResult tip_on_device(const Options& o) {
  const int64_t side = size(o, 4096, 64);
  TipResult r{"a [" + std::to_string(side) + ", " + std::to_string(side) +
                  "] float32 tensor of normal draws for the GPU",
              "tensor", "", {}};
  for (const bool on_device : {false, true}) {
    r.variants.push_back({on_device ? "made on the GPU" : "made on the CPU, then copied",
                          measure(o, [&] {
                            (void)(on_device ? randn({side, side}, TensorOptions(DType::Float32, kGpu))
                                             : randn({side, side}).to(kGpu));
                          })});
  }
  return r;
}

TipResult tip_tf32(const Options& o) {
  TipResult r{gpt_workload(o) + ", float32", "step", "tokens/s", {}};
  for (const bool tf32 : {false, true}) {
    cuda::math_switches().allow_tf32_matmul = tf32;
    cuda::math_switches().allow_tf32_cudnn = tf32;
    GptStep g = gpt_step(o);
    r.variants.push_back({tf32 ? "TF32 on" : "TF32 off", measure(o, [&] {
                            g.model->loss(g.idx, g.targets).backward();
                            g.opt->step();
                            g.opt->zero_grad();
                          }, static_cast<double>(g.tokens))});
  }
  cuda::math_switches().allow_tf32_matmul = false;
  cuda::math_switches().allow_tf32_cudnn = true;
  return r;
}

TipResult tip_autocast(const Options& o) {
  TipResult r{gpt_workload(o), "step", "tokens/s", {}};
  cuda::math_switches().allow_tf32_matmul = true;  // the baseline is float32 as nanoGPT runs it
  for (const char* mode : {"fp32", "bf16", "fp16"}) {
    GptStep g = gpt_step(o);
    const bool fp16 = std::string(mode) == "fp16";
    nn::amp::GradScaler scaler(nn::amp::GradScaler::Options{.enabled = fp16});
    const Measured m = measure(o, [&] {
      Tensor loss;
      {
        std::optional<AutocastGuard> autocast;
        if (std::string(mode) != "fp32") autocast.emplace(DeviceType::CUDA, fp16 ? DType::Float16 : DType::BFloat16);
        loss = g.model->loss(g.idx, g.targets);
      }
      scaler.scale(loss).backward();
      scaler.step(*g.opt);
      scaler.update();
      g.opt->zero_grad();
    }, static_cast<double>(g.tokens));
    r.variants.push_back({std::string(mode) == "fp32" ? "float32 with TF32"
                          : fp16                      ? "float16 autocast + GradScaler"
                                                      : "bfloat16 autocast",
                          m});
  }
  cuda::math_switches().allow_tf32_matmul = false;
  return r;
}

TipResult tip_gpu_augment(const Options& o) {
  const int64_t batch = size(o, 256, 16), batches = size(o, 16, 2);
  TipResult r{"SmallCNN steps on the GPU fed by a 2-worker DataLoader: 1x28x28 images, pad-crop 2 + flip + normalize, "
                  "batch " + std::to_string(batch) + ", " + std::to_string(batches) + " batches an epoch",
              "epoch", "images/s", {}};
  const data::transforms::Compose transform = augment();
  for (const bool on_gpu : {false, true}) {
    auto dataset = std::make_shared<data::SyntheticImages>(batch * batches, 1, 28, 28, 10, 0, false,
                                                           on_gpu ? data::Transform{} : data::Transform(transform));
    auto model = small_cnn();
    model->to(kGpu);
    nn::optim::AdamW opt(model->parameters(), 1e-3);
    data::DataLoaderOptions lo;
    lo.batch_size = batch;
    lo.num_workers = 2;
    lo.pin_memory = true;
    lo.persistent_workers = true;
    data::DataLoader loader(dataset, lo);
    r.variants.push_back({on_gpu ? "uint8 batches, one augmentation kernel per batch"
                                 : "augmented per sample on the CPU",
                          measure(o, [&] {
                            while (auto ex = loader.next()) {
                              const Tensor x = ex->data.to(kGpu, /*non_blocking=*/true);
                              train_step(*model, opt, on_gpu ? transform.apply_batch(x) : x, ex->target.to(kGpu));
                            }
                          }, static_cast<double>(batch * batches))});
  }
  return r;
}

TipResult tip_monitor(const Options& o) {
  const int64_t batch = size(o, 256, 16);
  TipResult r{"SmallCNN steps on the GPU, batch " + std::to_string(batch) +
                  ", while the NVML sampler reads every 100 ms",
              "step", "images/s", {}};
  for (const bool sample : {false, true}) {
    auto model = small_cnn();
    model->to(kGpu);
    nn::optim::AdamW opt(model->parameters(), 1e-3);
    const Tensor x = randn({batch, 1, 28, 28}, TensorOptions(DType::Float32, kGpu));
    const Tensor y = randint(0, 10, {batch}, TensorOptions(DType::Int64, kGpu));
    std::optional<monitor::GpuSampler> sampler;
    if (sample) sampler.emplace(kGpu);
    Measured m = measure(o, [&] { train_step(*model, opt, x, y); }, static_cast<double>(batch));
    if (sampler) m.extra["samples"] = static_cast<double>(sampler->summary().samples);
    r.variants.push_back({sample ? "GPU monitor on" : "GPU monitor off", m});
  }
  return r;
}

// --- the registry ------------------------------------------------------------------------------------

struct Tip {
  int number;
  const char* slug;
  bool gpu;  // run with --device cuda
  std::function<TipResult(const Options&)> run;
};

const std::vector<Tip>& tips() {
  static const std::vector<Tip> all = {
      {1, "batch-size", false, tip_batch_size},
      {2, "loader-workers", false, tip_workers},
      {3, "prefetch-factor", false, tip_prefetch},
      {4, "pinned-memory", true, tip_pinned},
      {5, "persistent-workers", false, tip_persistent},
      {6, "zero-grad-none", false, tip_zero_grad},
      {7, "no-conv-bias-before-bn", false, tip_conv_bias},
      {8, "cudnn-benchmark", true, tip_cudnn_benchmark},
      {9, "create-on-device", true, tip_on_device},
      {10, "tf32", true, tip_tf32},
      {11, "no-grad-eval", false, tip_no_grad},
      {12, "fused-attention", false, tip_attention},
      {14, "gpu-augmentation", true, tip_gpu_augment},
      {15, "channels-last", false, tip_channels_last},
      {16, "debug-apis-off", false, tip_anomaly},
      {17, "autocast", true, tip_autocast},
      {18, "fused-pointwise", false, tip_fused_pointwise},
      {19, "no-history", false, tip_no_history},
      {20, "free-memory", false, tip_free_memory},
      {21, "grad-accumulation", false, tip_grad_accum},
      {22, "checkpointing", false, tip_checkpointing},
      {23, "monitor-utilization", true, tip_monitor},
      {24, "preprocess-once", false, tip_preprocess_once},
      {25, "lr-scaling-warmup", false, tip_lr_scaling},
  };
  return all;
}

JsonLine variant_record(const Tip& tip, const TipResult& r, size_t i) {
  const Variant& v = r.variants[i];
  JsonLine line;
  line.text("record", "tip").integer("tip", tip.number).text("slug", tip.slug).text("impl", "kiln");
  line.text("device", tip.gpu ? "cuda" : "cpu").integer("threads", cpu::num_threads()).text("workload", r.workload);
  line.text("variant", v.name).text("role", i == 0 ? "A" : "B").text("unit", r.unit);
  line.real("ms", v.m.ms, "%.4f").real("rate", v.m.rate, "%.1f").text("rate_unit", r.rate_unit);
  line.real("peak_mb", v.m.peak_mb, "%.2f");
  for (const auto& [key, value] : v.m.extra) line.real(key, value, "%.6g");
  return line;
}

Options parse(int argc, char** argv) {
  Options o;
  examples::Flags app("Measures the tips' A/Bs on the CPU (docs/tips/README.md) and writes one JSON line per variant.",
               "bench_tips");
  app.add_option("--device", o.device, "cpu: the CPU tips; cuda: the GPU tips (4, 8, 9, 10, 14, 17, 23)")
      ->one_of({"cpu", "cuda"});
  app.add_option("--tips", o.tips, "the tips to run (default: every tip of --device)")
      ->delimiter(',')
      ->transform(examples::whole<int>(1, 25));
  app.add_option("--reps", o.reps, "timed units per variant (median reported)")->transform(examples::whole<int>(1));
  app.add_option("--warmup", o.warmup, "untimed units first")->transform(examples::whole<int>(0));
  app.add_flag("--quick", o.quick, "tiny sizes and counts, for CI: the numbers mean nothing");
  app.add_option("--json", o.json, "also write the records to FILE (atomically)")->type_name("FILE");
  app.add_option("--data", o.data_dir, "Fashion-MNIST's folder (tip 25)")->type_name("DIR");
  app.parse(argc, argv);
  const bool gpu = o.device == "cuda";
  for (const int t : o.tips) {
    const auto it = std::find_if(tips().begin(), tips().end(), [t](const Tip& tip) { return tip.number == t; });
    if (it == tips().end()) {
      examples::input_error("--tips: there is no tip " + std::to_string(t) +
                            " in bench_tips (tools/tips.py measures 13 through bench_ddp_step)");
    }
    if (it->gpu != gpu) {
      examples::input_error("--tips: tip " + std::to_string(t) + " is a " + (it->gpu ? "GPU" : "CPU") +
                            " tip: run it with --device " + (it->gpu ? "cuda" : "cpu"));
    }
  }
  if (gpu && !cuda::is_available()) {
    examples::input_error("--device cuda: no GPU (" + cuda::unavailable_reason() + ")");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_main("bench_tips", [&] {
    const Options o = parse(argc, argv);
    std::string command = "bench_tips";
    for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
    JsonLine header;
    header.text("record", "header").text("impl", "kiln").text("date", examples::utc_now());
    header.text("kiln_commit", examples::build_commit()).text("command", command);
    const Device device = o.device == "cuda" ? kGpu : Device::cpu();
    header.text("device", device.str()).text("device_name", examples::device_name(device));
    header.integer("threads", cpu::num_threads()).boolean("quick", o.quick);
    std::string out = header.str() + "\n";
    std::printf("%s", out.c_str());
    g_gpu = o.device == "cuda";
    for (const Tip& tip : tips()) {
      if (tip.gpu != g_gpu) continue;
      if (!o.tips.empty() && std::find(o.tips.begin(), o.tips.end(), tip.number) == o.tips.end()) continue;
      g_tip_start_bytes = live_bytes();
      const TipResult r = tip.run(o);
      for (size_t i = 0; i < r.variants.size(); ++i) {
        const std::string line = variant_record(tip, r, i).str();
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
        out += line + "\n";
      }
    }
    if (!o.json.empty()) write_file_atomically(o.json, out, "bench_tips");
    return 0;
  });
}
