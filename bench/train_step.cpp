// Training-step benchmark of kiln's precision and memory modes (docs/mixed-precision.md): one whole
// step (forward under autocast, backward, GradScaler where float16 needs it, AdamW, zero_grad) of a
// nanoGPT-shaped GPT, of GPT-2 small (124M; run only when named: --workload gpt2-124m), of ResNet-18
// for 32x32 images and of train_cnn's SmallCNN for 28x28 one-channel images (dropout 0), on a fixed
// synthetic batch, in each mode:
//   fp32            float32, TF32 off
//   tf32            float32 matmuls and convolutions on TF32 tensor cores
//   bf16            autocast bfloat16 (TF32 on for whatever stays float32)
//   fp16            autocast float16 + GradScaler (TF32 on)
//   bf16-recompute  bf16 + activation recompute of every GPT block / ResNet BasicBlock (not cnn:
//                   SmallCNN has no recompute)
//   bf16-nhwc       bf16 + channels-last weights and activations (resnet18 and cnn: 4-d activations)
//   fp16-nhwc       fp16 + GradScaler + channels-last (resnet18 and cnn): the usual CNN recipe
// Each case builds its model and optimizer afresh, runs --warmup steps (cuDNN's algorithm search,
// the allocator's first segments), then times --steps steps: on the GPU one pair of CUDA events
// around each step, read only after the loop so nothing waits on the host; on the CPU the steady
// clock. It reports the median, min and max step time, tokens/s or images/s at the median, on the
// GPU the allocator's peak of allocated bytes over the timed steps, and the first step's latency
// (from building the model to the end of the first step: plan searches and first allocations).
// --cuda-graph captures the whole step as a CUDA graph at the end of the warm-up and times its
// replays (examples/graphed_step.h). --time optimizer times the optimizer's step() alone instead:
// after the warm-up, one forward and backward leave gradients, and each timed update applies them
// (no GradScaler, no zero_grad); its records say "timed": "optimizer" and have no throughput.
// tools/train_step_peer.py
// times the same models and modes in PyTorch the same way and writes the same JSON lines;
// tools/train_step_compare.py puts the two side by side. Reports speed; never asserts it.
//   usage: bench_train_step [--workload gpt|resnet18|cnn|all] [--mode M]... [--json FILE]   (--help: all flags)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "core/atomic_file.h"
#include "core/autocast.h"
#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "examples/common.h"
#include "examples/graphed_step.h"
#include "examples/run_record.h"
#include "kernels/attention.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/parallel.h"
#include "nn/amp/grad_scaler.h"
#include "nn/optim/adamw.h"
#include "nn/resnet.h"
#include "nn/transformer.h"

using namespace kiln;
using examples::JsonLine;

namespace {

// --- modes and flags -------------------------------------------------------------------------------

struct Mode {
  std::string name;
  std::optional<DType> amp;  // the autocast dtype; none: float32
  bool tf32 = false;
  bool scaler = false;  // float16's dynamic loss scaling
  bool recompute = false;
  bool channels_last = false;  // 4-d activations only: the image models
};

// In the order the cases run and the tables list them: fp32 first, the baseline of every speedup.
const std::vector<Mode>& all_modes() {
  static const std::vector<Mode> modes = {
      {"fp32", std::nullopt, false, false, false, false},
      {"tf32", std::nullopt, true, false, false, false},
      {"bf16", DType::BFloat16, true, false, false, false},
      {"fp16", DType::Float16, true, true, false, false},
      {"bf16-recompute", DType::BFloat16, true, false, true, false},
      {"bf16-nhwc", DType::BFloat16, true, false, false, true},
      {"fp16-nhwc", DType::Float16, true, true, false, true},
  };
  return modes;
}

// Channels-last needs 4-d activations (not the GPT's); recompute needs a model that checkpoints its
// blocks (SmallCNN does not, and timing its bf16 step under the name bf16-recompute would mislead).
bool is_gpt(const std::string& workload) { return workload == "gpt" || workload == "gpt2-124m"; }

bool mode_fits(const std::string& workload, const Mode& m) {
  if (m.channels_last && is_gpt(workload)) return false;
  if (m.recompute && workload == "cnn") return false;
  return true;
}

struct Options {
  std::string workload = "all";
  std::vector<std::string> modes = {"all"};
  int steps = 20;
  int warmup = 5;
  std::string device;
  std::optional<int64_t> batch;  // default: default_batch(workload)
  // gpt: nanoGPT's Shakespeare-character shape (6 layers, 384 wide, 6 heads, vocabulary 65, T 256).
  int64_t n_layer = 6, n_head = 6, n_embd = 384;
  // T of both GPTs: 256 for gpt, 1024 for gpt2-124m (GPTConfig::gpt2_124m(), B16) unless set.
  std::optional<int64_t> block_size;
  // resnet18: resnet18_cifar() on 3x32x32 images, 10 classes; --base-width shrinks it for the CPU.
  // cnn: SmallCNN's own 28x28 one-channel input (Fashion-MNIST's), whatever --image-size says: the
  // model is small enough to time at its real size even in CI's smoke run.
  int64_t image_size = 32;
  std::optional<int64_t> base_width;
  uint64_t seed = 1337;
  bool cuda_graph = false;
  std::string timed = "step";  // or "optimizer": the optimizer's step() alone
  std::string json;
};

constexpr int64_t kVocab = 65;  // tiny Shakespeare's characters
constexpr int64_t kClasses = 10;
constexpr int64_t kCnnImage = 28;

int64_t default_batch(const std::string& workload) {
  if (workload == "gpt2-124m") return 16;
  return workload == "resnet18" ? 512 : 64;
}

std::vector<std::string> chosen_workloads(const Options& o) {
  if (o.workload == "all") return {"gpt", "resnet18", "cnn"};
  return {o.workload};
}

Options parse_options(int argc, char** argv) {
  Options o;
  examples::Flags app(
      "Step time, throughput and peak memory of one training step (forward, backward, AdamW) of a nanoGPT-shaped\n"
      "GPT, of ResNet-18 for 32x32 images and of SmallCNN for 28x28 one-channel images, in each precision and\n"
      "memory mode; JSON lines for tools/train_step_compare.py, whose PyTorch peer is tools/train_step_peer.py.",
      "bench_train_step");
  app.add_option("--workload", o.workload, "which model: gpt, gpt2-124m, resnet18, cnn or all (gpt, resnet18, cnn)")
      ->one_of({"gpt", "gpt2-124m", "resnet18", "cnn", "all"});
  std::vector<std::string> names;
  for (const Mode& m : all_modes()) names.push_back(m.name);
  names.push_back("all");
  app.add_option("--mode", o.modes, "mode(s) to time, repeatable or comma-separated: fp32, tf32, bf16, fp16, "
                                    "bf16-recompute (gpt, resnet18), bf16-nhwc and fp16-nhwc (resnet18, cnn), or all")
      ->take_all()
      ->delimiter(',')
      ->one_of(names);
  app.add_option("--steps", o.steps, "timed steps per case (median, min and max reported)")
      ->transform(examples::whole<int>(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed steps per case first")->transform(examples::whole<int>(0, 100000));
  examples::add_device_option(app, o.device);
  app.add_option("--batch", o.batch, "batch size of every workload")
      ->transform(examples::whole<int64_t>(1, int64_t(1) << 20))
      ->default_str("64 for gpt and cnn, 16 for gpt2-124m, 512 for resnet18");
  // Each size flag with the workloads that read it (checked below).
  struct SizeFlag {
    const char* name;
    examples::Option* flag;
    std::vector<std::string> readers;
  };
  std::vector<SizeFlag> sizes;
  const auto size_flag = [&](const char* name, auto& value, const char* help, int64_t lo, int64_t hi,
                             std::vector<std::string> readers) {
    examples::Option* flag = app.add_option(name, value, help)->transform(examples::whole<int64_t>(lo, hi));
    sizes.push_back({name, flag, std::move(readers)});
    return flag;
  };
  size_flag("--n-layer", o.n_layer, "gpt: transformer blocks", 1, 1024, {"gpt"});
  size_flag("--n-head", o.n_head, "gpt: attention heads", 1, 1024, {"gpt"});
  size_flag("--n-embd", o.n_embd, "gpt: width (a multiple of --n-head)", 1, 65536, {"gpt"});
  size_flag("--block-size", o.block_size, "gpt, gpt2-124m: tokens per sequence (T)", 1, 65536, {"gpt", "gpt2-124m"})
      ->default_str("256 for gpt, 1024 for gpt2-124m");
  size_flag("--image-size", o.image_size, "resnet18: square image side (cnn: always 28)", 4, 4096, {"resnet18"});
  size_flag("--base-width", o.base_width, "resnet18: first stage's width, the others scaled alike", 1, 4096,
            {"resnet18"})
      ->default_str("resnet18_cifar()'s");
  app.add_option("--seed", o.seed, "seed of the weights and the synthetic batch")
      ->transform(examples::whole<uint64_t>(0));
  app.add_flag("--cuda-graph", o.cuda_graph,
               "capture the whole step as a CUDA graph at the end of the warm-up and time its replays "
               "(needs --warmup 2 or more: the eager steps size the graph's memory)");
  app.add_option("--time", o.timed,
                 "what each timed repetition is: the whole training step, or the optimizer's step() alone "
                 "(on the gradients of one backward after the warm-up)")
      ->one_of({"step", "optimizer"});
  app.add_option("--json", o.json, "write the JSON lines here (atomically, after every case) instead of stdout");
  app.parse(argc, argv);

  // A size flag that none of the chosen workloads reads is bad input: the run would time the default
  // shape (gpt2-124m's, SmallCNN's 28x28) as if it were the one asked for.
  for (const SizeFlag& f : sizes) {
    if (f.flag->count() == 0) continue;
    bool read = false;
    for (const std::string& w : chosen_workloads(o)) {
      read = read || std::find(f.readers.begin(), f.readers.end(), w) != f.readers.end();
    }
    if (!read) {
      std::string names;
      for (const std::string& r : f.readers) names += (names.empty() ? "" : " or ") + r;
      examples::input_error(std::string(f.name) + " applies to --workload " + names + " (or all), not " + o.workload);
    }
  }
  if (o.n_embd % o.n_head != 0) {
    examples::input_error("--n-embd " + std::to_string(o.n_embd) + " is not a multiple of --n-head " +
                          std::to_string(o.n_head));
  }
  if (o.cuda_graph && o.timed == "optimizer") {
    examples::input_error("--cuda-graph times captured whole steps; it does not go with --time optimizer");
  }
  if (o.cuda_graph && o.warmup < 2) {
    examples::input_error("--cuda-graph needs --warmup 2 or more (eager steps, then the capture), not " +
                          std::to_string(o.warmup));
  }
  examples::check_json_path(o.json);
  return o;
}

// The chosen modes in all_modes()' order, each once. A mode that fits none of the chosen workloads
// (bf16-nhwc for gpt alone, bf16-recompute for cnn alone) is bad input: timing nothing would look
// like a result.
std::vector<Mode> chosen_modes(const Options& o) {
  const bool all = std::find(o.modes.begin(), o.modes.end(), "all") != o.modes.end();
  std::vector<Mode> out;
  for (const Mode& m : all_modes()) {
    if (!all && std::find(o.modes.begin(), o.modes.end(), m.name) == o.modes.end()) continue;
    bool fits = false;
    for (const std::string& w : chosen_workloads(o)) fits = fits || mode_fits(w, m);
    if (!fits && !all) {
      examples::input_error("--mode " + m.name + " does not fit --workload " + o.workload +
                            (m.channels_last ? " (it needs 4-d activations: use --workload resnet18, cnn or all)"
                                             : " (SmallCNN has no recompute: use --workload gpt, resnet18 or all)"));
    }
    if (fits) out.push_back(m);
  }
  return out;
}

// --- workloads --------------------------------------------------------------------------------------

// A model, its fixed synthetic batch and the one forward that gives the mean loss.
struct Workload {
  std::string name;
  int64_t batch = 0;
  double items_per_step = 0;  // tokens or images
  const char* unit = "";
  std::shared_ptr<nn::Module> model;
  std::function<Tensor()> loss;
  JsonLine shape;  // the model's sizes, which the peer must match
};

// gpt: nanoGPT's character model at --n-layer/--n-head/--n-embd; gpt2-124m: GPT-2 small as it is.
Workload make_gpt(const std::string& name, const Options& o, const Mode& m, Device device) {
  nn::GPTConfig cfg;
  if (name == "gpt2-124m") {
    cfg = nn::GPTConfig::gpt2_124m();
    cfg.block_size = o.block_size.value_or(1024);
  } else {
    cfg.vocab_size = kVocab;
    cfg.block_size = o.block_size.value_or(256);
    cfg.n_layer = o.n_layer;
    cfg.n_head = o.n_head;
    cfg.n_embd = o.n_embd;
  }
  cfg.dropout = 0.0;  // a step's cost without dropout's masks; the peer does the same
  cfg.bias = true;
  cfg.recompute = m.recompute;
  manual_seed(o.seed);
  auto model = std::make_shared<nn::GPT>(cfg);
  model->to(device);
  model->train();

  Workload w;
  w.name = name;
  w.batch = o.batch.value_or(default_batch(name));
  w.items_per_step = static_cast<double>(w.batch * cfg.block_size);
  w.unit = "tokens/s";
  const TensorOptions i64(DType::Int64, device);
  const Tensor idx = randint(0, cfg.vocab_size, {w.batch, cfg.block_size}, i64);
  const Tensor targets = randint(0, cfg.vocab_size, {w.batch, cfg.block_size}, i64);
  w.loss = [model, idx, targets] { return model->loss(idx, targets); };
  w.model = model;
  w.shape.integer("n_layer", cfg.n_layer).integer("n_head", cfg.n_head).integer("n_embd", cfg.n_embd);
  w.shape.integer("block_size", cfg.block_size).integer("vocab_size", cfg.vocab_size);
  return w;
}

std::string joined(const auto& values) {
  std::string s;
  for (const int64_t v : values) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

// An image classifier's workload: the model moved and laid out for the mode, a fixed batch of
// random images (channels x side x side) and labels, the mean cross-entropy; the shape record starts
// with the image's sizes.
Workload image_workload(const std::string& name, std::shared_ptr<nn::UnaryModule> model, const Options& o,
                        const Mode& m, Device device, int64_t channels, int64_t side) {
  model->to(device);
  if (m.channels_last) model->to(MemoryFormat::ChannelsLast);
  model->train();
  Workload w;
  w.name = name;
  w.batch = o.batch.value_or(default_batch(name));
  w.items_per_step = static_cast<double>(w.batch);
  w.unit = "images/s";
  Tensor x = randn({w.batch, channels, side, side}, TensorOptions(DType::Float32, device));
  if (m.channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
  const Tensor y = randint(0, kClasses, {w.batch}, TensorOptions(DType::Int64, device));
  w.loss = [model, x, y] { return cross_entropy((*model)(x), y); };
  w.model = model;
  w.shape.integer("image_size", side).integer("in_channels", channels).integer("num_classes", kClasses);
  return w;
}

Workload make_resnet(const Options& o, const Mode& m, Device device) {
  nn::ResNetConfig cfg = nn::ResNetConfig::resnet18_cifar();
  cfg.in_channels = 3;
  cfg.num_classes = kClasses;
  cfg.recompute = m.recompute;
  if (o.base_width) {
    // Every stage keeps its ratio to the first (64:128:256:512 in ResNet-18), rounded down, at least 1.
    const int64_t first = cfg.widths[0];
    for (auto& width : cfg.widths) width = std::max<int64_t>(1, width * *o.base_width / first);
  }
  manual_seed(o.seed);
  Workload w = image_workload("resnet18", std::make_shared<nn::ResNet>(cfg), o, m, device, 3, o.image_size);
  w.shape.text("widths", joined(cfg.widths)).text("blocks", joined(cfg.blocks));
  return w;
}

// train_cnn's SmallCNN on 1x28x28 images: two conv3x3 (no bias) + BN + ReLU + max-pool stages (32 and
// 64 wide), Linear(64*7*7, 128), ReLU, Linear(128, 10).
Workload make_cnn(const Options& o, const Mode& m, Device device) {
  nn::SmallCNNConfig cfg;
  cfg.in_channels = 1;
  cfg.num_classes = kClasses;
  cfg.image_size = kCnnImage;
  cfg.dropout = 0.0;  // a step's cost without dropout's masks, as the gpt workload; the peer has none
  manual_seed(o.seed);
  Workload w = image_workload("cnn", std::make_shared<nn::SmallCNN>(cfg), o, m, device, cfg.in_channels, kCnnImage);
  w.shape.text("widths", "32,64").integer("hidden", cfg.hidden).real("dropout", cfg.dropout, "%g");
  return w;
}

// --- one case ---------------------------------------------------------------------------------------

using bench::median;

struct Result {
  std::vector<double> step_ms;
  std::optional<int64_t> peak_bytes, start_bytes;  // the GPU's caching allocator only
  double final_loss = NAN;
  std::optional<double> first_step_s;  // none with --warmup 0
  size_t graph_nodes = 0;              // --cuda-graph: kernels and copies in the captured step
  int64_t parameters = 0;
  std::string attention;  // attention_kernels()
  std::string error;
};

// Which attention kernels ran a case, from the tensor-core forward's launch counters over the case
// (kernels/attention.h): "none" in a model without attention, "cpu", "scalar" (CUDA's float kernels:
// the tensor-core switch off, or a shape they do not take), "mma.sync" or "wgmma" (the tensor-core
// kernels; KILN_ATTENTION_TENSOR_CORES=1, and KILN_ATTENTION_WGMMA=1 for wgmma on a device of compute
// capability 9.0; either with ", fused backward" when every backward was the fused one,
// KILN_ATTENTION_FUSED_BACKWARD=1), "mixed" when the calls took two of these. A GPT's attention calls
// all have one shape.
std::string attention_kernels(bool has_attention, Device device, int64_t tc_forwards, int64_t wgmma_forwards,
                              int64_t tc_backwards, int64_t fused_backwards) {
  if (!has_attention) return "none";
  if (device.is_cpu()) return "cpu";
  if (tc_forwards == 0) return "scalar";
  const bool mixed_forwards = wgmma_forwards > 0 && wgmma_forwards != tc_forwards;
  if (mixed_forwards || (fused_backwards > 0 && fused_backwards != tc_backwards)) return "mixed";
  const std::string kernels = wgmma_forwards == 0 ? "mma.sync" : "wgmma";
  return fused_backwards > 0 ? kernels + ", fused backward" : kernels;
}

// The timed region is the step as a training loop runs it; the loss stays on the device (no host
// sync inside a step, in any mode), and is read once after the last step. `started` is when the
// case began building its model: the first step's latency counts from there.
Result run_case(const Workload& w, const Mode& m, Device device, const Options& o,
                examples::Clock::time_point started) {
  Result r;
  r.parameters = w.model->num_parameters();
  // nanoGPT's AdamW: weight decay on matrices only, betas (0.9, 0.99); the values do not change the
  // cost, but a peer with the same groups does the same work.
  nn::optim::AdamW optimizer(nn::optim::decay_groups(w.model->named_parameters(), 1e-3, 0.1), {0.9, 0.99});
  std::unique_ptr<nn::amp::GradScaler> scaler;
  if (m.scaler) scaler = std::make_unique<nn::amp::GradScaler>();
  auto step = [&] {
    Tensor loss;
    {
      std::optional<AutocastGuard> autocast;
      if (m.amp) autocast.emplace(device.type, *m.amp);
      loss = w.loss();
    }
    if (scaler) {
      scaler->scale(loss).backward();
      scaler->step(optimizer);
      scaler->update();
    } else {
      loss.backward();
      optimizer.step();
    }
    optimizer.zero_grad();
    return loss.detach();
  };
  // --cuda-graph: the last warm-up step captures the step (its batch is fixed: no inputs to copy).
  std::optional<examples::GraphedStep> graphed;
  if (o.cuda_graph) graphed.emplace(device, o.warmup - 1);
  auto run_step = [&] {
    return graphed ? graphed->run({}, [&](const std::vector<Tensor>&) { return step(); }) : step();
  };

  for (int i = 0; i < o.warmup; ++i) {
    run_step();
    if (i == 0) {
      if (device.is_cuda()) cuda::synchronize(device.index);
      r.first_step_s = examples::seconds_since(started);
    }
  }
  if (graphed) r.graph_nodes = graphed->graph_nodes();
  Tensor last;
  std::function<Tensor()> timed = run_step;
  if (o.timed == "optimizer") {
    // Gradients to apply, from one more forward (under the mode's autocast, as a step's) and
    // backward; every timed update applies them.
    {
      std::optional<AutocastGuard> autocast;
      if (m.amp) autocast.emplace(device.type, *m.amp);
      last = w.loss();
    }
    last.backward();
    last = last.detach();
    timed = [&] {
      optimizer.step();
      return last;
    };
  }
  if (device.is_cuda()) {
    std::vector<std::unique_ptr<cuda::Event>> start, end;
    for (int i = 0; i < o.steps; ++i) {
      start.push_back(std::make_unique<cuda::Event>(true));
      end.push_back(std::make_unique<cuda::Event>(true));
    }
    // The peak from here on: what the model, the optimizer's moments and the batch hold, plus the
    // most any timed step added (activations, gradients, casts, workspaces).
    cuda::synchronize(device.index);
    cuda::reset_peak_memory_stats(device.index);
    r.start_bytes = cuda::memory_stats(device.index).allocated_bytes;
    const Stream stream = cuda::current_stream(device.index);
    for (int i = 0; i < o.steps; ++i) {
      start[static_cast<size_t>(i)]->record(stream);
      last = timed();
      end[static_cast<size_t>(i)]->record(stream);
    }
    cuda::synchronize(device.index);
    r.peak_bytes = cuda::memory_stats(device.index).peak_allocated_bytes;
    // Replays allocate nothing (the graph's memory is its capture pool's), so the allocator's peak
    // would leave the step out: count the step's own memory as the eager warm-up measured it.
    if (graphed) r.peak_bytes = std::max(*r.peak_bytes, *r.start_bytes + graphed->step_bytes());
    for (int i = 0; i < o.steps; ++i) {
      r.step_ms.push_back(start[static_cast<size_t>(i)]->elapsed_ms(*end[static_cast<size_t>(i)]));
    }
  } else {
    // CPU ops return when their work is done, so the clock around a step times the step.
    for (int i = 0; i < o.steps; ++i) {
      const auto t0 = examples::Clock::now();
      last = timed();
      r.step_ms.push_back(1e3 * examples::seconds_since(t0));
    }
  }
  r.final_loss = last.item<float>();
  return r;
}

// --- records ----------------------------------------------------------------------------------------

JsonLine header_record(const Options& o, Device device, int argc, char** argv) {
  JsonLine h;
  h.text("record", "header").text("impl", "kiln").text("date", examples::utc_now());
  h.text("kiln_commit", examples::build_commit());
  h.text("command", examples::command_line(argc, argv)).text("device", device.str());
  h.text("device_name", examples::device_name(device)).integer("threads", cpu::num_threads());
  h.integer("steps", o.steps).integer("warmup", o.warmup);
  h.text("timer", device.is_cuda() ? "cuda events" : "steady_clock").boolean("cuda_graph", o.cuda_graph);
  h.text("timed", o.timed);
  if (device.is_cpu()) {  // which GEMM, and which OpenBLAS core (blas.h), the float32 products ran on
    h.text("gemm_backend", cpu::gemm_backend_name(cpu::gemm_backend())).text("blas", cpu::blas_description());
  }
  return examples::add_host_usage(h);
}

JsonLine case_record(const Workload& w, const Mode& m, Device device, const Options& o, const Result& r) {
  JsonLine c;
  c.text("record", "case").text("impl", "kiln").text("workload", w.name).text("mode", m.name);
  c.text("device", device.str()).text("device_name", examples::device_name(device));
  c.integer("batch", w.batch).object("shape", w.shape).integer("parameters", r.parameters);
  if (m.amp) c.text("amp", dtype_name(*m.amp));
  else c.null("amp");
  c.boolean("tf32", device.is_cuda() && m.tf32).boolean("loss_scaling", m.scaler);
  c.boolean("recompute", m.recompute).boolean("channels_last", m.channels_last);
  c.integer("steps", o.steps).integer("warmup", o.warmup).boolean("cuda_graph", o.cuda_graph);
  c.text("timed", o.timed);
  if (!r.error.empty()) return c.text("error", r.error);
  c.text("attention", r.attention);
  if (r.first_step_s) c.real("first_step_s", *r.first_step_s, "%.4f");
  else c.null("first_step_s");
  if (o.cuda_graph) c.integer("graph_nodes", static_cast<int64_t>(r.graph_nodes));
  const double med = median(r.step_ms);
  c.real("step_ms_median", med, "%.4f");
  c.real("step_ms_min", *std::min_element(r.step_ms.begin(), r.step_ms.end()), "%.4f");
  c.real("step_ms_max", *std::max_element(r.step_ms.begin(), r.step_ms.end()), "%.4f");
  if (o.timed == "step") {
    c.real("throughput", w.items_per_step / (med * 1e-3), "%.1f").text("throughput_unit", w.unit);
  } else {
    c.null("throughput").null("throughput_unit");  // an update alone processes no tokens or images
  }
  if (r.peak_bytes) c.integer("peak_bytes", *r.peak_bytes).integer("start_bytes", *r.start_bytes);
  else c.null("peak_bytes").null("start_bytes");
  return c.real("final_loss", r.final_loss, "%.6g");
}

// The human-readable table: on stdout, or on stderr when the JSON lines take stdout.
void print_row(std::FILE* out, const Workload& w, const Mode& m, const Result& r, bool optimizer_only) {
  if (!r.error.empty()) {
    std::fprintf(out, "%-9s %-15s %6lld  n/a: %s\n", w.name.c_str(), m.name.c_str(), static_cast<long long>(w.batch),
                 r.error.c_str());
  } else {
    const double med = median(r.step_ms);
    char peak[32] = "-";
    if (r.peak_bytes) std::snprintf(peak, sizeof peak, "%.0f", static_cast<double>(*r.peak_bytes) / (1 << 20));
    char first[32] = "-";
    if (r.first_step_s) std::snprintf(first, sizeof first, "%.3f", *r.first_step_s);
    char throughput[48] = "-";  // an update alone processes no tokens or images
    if (!optimizer_only) {
      std::snprintf(throughput, sizeof throughput, "%12.0f %-8s", w.items_per_step / (med * 1e-3), w.unit);
    }
    std::fprintf(out, "%-9s %-15s %6lld %10.3f %10.3f %10.3f %21s %9s %10.4f %12s\n", w.name.c_str(), m.name.c_str(),
                 static_cast<long long>(w.batch), med, *std::min_element(r.step_ms.begin(), r.step_ms.end()),
                 *std::max_element(r.step_ms.begin(), r.step_ms.end()), throughput, peak, r.final_loss, first);
  }
  std::fflush(out);
}

}  // namespace

// The program; main() runs it under examples::run_main, which turns every failure into one line.
static int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  const Device device = examples::choose_device(o.device);
  if (o.cuda_graph && !device.is_cuda()) {
    examples::input_error("--cuda-graph needs a CUDA device; this run is on " + device.str());
  }
  const std::vector<Mode> modes = chosen_modes(o);
  std::FILE* table = o.json.empty() ? stderr : stdout;

  const JsonLine header = header_record(o, device, argc, argv);
  std::string text = header.str() + "\n";
  if (o.json.empty()) {
    std::printf("%s", text.c_str());
    std::fflush(stdout);
  }
  std::fprintf(table, "kiln training-step bench on %s (%s), commit %s, median of %d %s after %d warm-up, %s\n",
               device.str().c_str(), examples::device_name(device).c_str(), examples::build_commit(), o.steps,
               o.timed == "step" ? "steps" : "optimizer updates", o.warmup, examples::utc_now().c_str());
  std::fprintf(table, "%-9s %-15s %6s %10s %10s %10s %12s %-8s %9s %10s %12s\n", "workload", "mode", "batch",
               "median ms", "min ms", "max ms", "throughput", "", "peak MiB", "last loss", "first step s");

  const cuda::MathSwitches saved = cuda::math_switches();
  int failed = 0;
  for (const std::string& name : chosen_workloads(o)) {
    for (const Mode& m : modes) {
      if (!mode_fits(name, m)) continue;
      // Each mode states its own precision; cuDNN searches each convolution shape once, in the
      // warm-up, as a training run with benchmark mode does.
      cuda::math_switches().allow_tf32_matmul = m.tf32;
      cuda::math_switches().allow_tf32_cudnn = m.tf32;
      cuda::math_switches().cudnn_benchmark = true;
      std::optional<Workload> w;
      Result r;
      try {
        const auto started = examples::Clock::now();
        if (is_gpt(name)) w = make_gpt(name, o, m, device);
        else if (name == "cnn") w = make_cnn(o, m, device);
        else w = make_resnet(o, m, device);
        const int64_t tc0 = attention_tc_launches(), wgmma0 = attention_wgmma_launches();
        const int64_t backward0 = attention_tc_backward_launches(), fused0 = attention_fused_backward_launches();
        r = run_case(*w, m, device, o, started);
        r.attention = attention_kernels(is_gpt(name), device, attention_tc_launches() - tc0,
                                        attention_wgmma_launches() - wgmma0,
                                        attention_tc_backward_launches() - backward0,
                                        attention_fused_backward_launches() - fused0);
      } catch (const std::exception& e) {  // report and go on: one failing mode must not hide the others
        r.error = e.what();
        if (!w) {
          w.emplace();
          w->name = name;
          w->batch = o.batch.value_or(default_batch(name));
        }
      }
      if (!r.error.empty()) ++failed;
      print_row(table, *w, m, r, o.timed == "optimizer");
      const std::string line = case_record(*w, m, device, o, r).str() + "\n";
      text += line;
      // Written after every case, so a run stopped by the GPU host's time limit keeps what it measured.
      if (o.json.empty()) {
        std::printf("%s", line.c_str());
        std::fflush(stdout);
      } else {
        write_file_atomically(o.json, text, "bench_train_step");
      }
      w.reset();
      cuda::math_switches() = saved;
      // The next case starts from an empty cache, as a fresh process would.
      if (device.is_cuda()) {
        try {
          cuda::synchronize(device.index);
          cuda::empty_cache();
        } catch (const std::exception&) {
        }
      }
    }
  }
  if (!o.json.empty()) std::printf("wrote %s\n", o.json.c_str());
  if (failed > 0) {
    std::fprintf(stderr, "bench_train_step: %d case(s) failed (their records carry the error)\n", failed);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return kiln::examples::run_main("bench_train_step", [&] { return run(argc, argv); });
}
