// Trains a character-level GPT on a text file (tiny Shakespeare by default) and prints a sample.
// On CUDA the default shape is nanoGPT's shakespeare-char; on the CPU a tiny model that learns in
// minutes. Non-obvious decision: batches are random windows drawn on the device from kiln's
// generator, so the checkpoint's generator state is the whole data position and a resumed (or
// --max-minutes split) run continues bit for bit.
#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "examples/common.h"
#include "core/kiln.h"
#include "nn/optim/adamw.h"
#include "nn/optim/clip.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/safetensors.h"
#include "nn/training_checkpoint.h"
#include "nn/transformer.h"

using namespace kiln;
namespace fs = std::filesystem;
using examples::Clock;
using examples::format_duration;
using examples::Progress;
using examples::seconds_since;

namespace {

// Options left at -1 take the device's default (see apply_defaults).
struct Options {
  std::string data = "../shared/data/tinyshakespeare/input.txt";
  std::string device;
  std::string out = "train_gpt_out";
  std::string resume;
  int64_t n_layer = -1, n_head = -1, n_embd = -1, block_size = -1, batch_size = -1;
  int64_t max_iters = -1, warmup_iters = 100, eval_interval = -1, eval_iters = -1;
  double lr = -1, min_lr = -1, dropout = -1;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.99, grad_clip = 1.0;
  uint64_t seed = 1337;
  double max_minutes = 0;  // > 0: checkpoint and stop after this long
  int64_t stop_at_iter = 0;  // > 0: checkpoint and stop after this iteration (splits a run)
  double max_val_loss = 0;  // > 0: exit status 1 when the best val loss is above it
  std::string prompt = "\n";
  double temperature = 0.8;
  int64_t top_k = 200;
  int64_t sample_tokens = 500;
};

void usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s [--data FILE] [--device cpu|cuda] [--out DIR] [--resume CHECKPOINT]\n"
               "          [--n-layer N] [--n-head N] [--n-embd N] [--block-size N] [--batch-size N] [--dropout P]\n"
               "          [--max-iters N] [--lr LR] [--min-lr LR] [--warmup-iters N] [--weight-decay WD]\n"
               "          [--beta2 B] [--grad-clip C] [--eval-interval N] [--eval-iters N] [--seed S]\n"
               "          [--max-minutes M] [--stop-at-iter N] [--max-val-loss V]\n"
               "          [--prompt TEXT] [--temperature T] [--top-k K] [--sample-tokens N]\n"
               "defaults on cuda (nanoGPT shakespeare-char): 6 layers, 6 heads, 384 wide, block 256, batch 64,\n"
               "  dropout 0.2, 5000 iterations, lr 1e-3 -> 1e-4, eval every 250 over 200 batches;\n"
               "on cpu: 2 layers, 4 heads, 64 wide, block 64, batch 16, dropout 0, 2000 iterations,\n"
               "  lr 4e-3 -> 4e-4, eval every 250 over 20 batches. Warmup 100, AdamW betas (0.9, 0.99),\n"
               "  weight decay 0.1 on matrices, gradient clipping at norm 1. The weights at the best evaluation\n"
               "  are kept in OUT/best.safetensors (the sample comes from them); --max-val-loss judges the best\n"
               "  val loss.\n",
               prog);
}

Options parse(int argc, char** argv) {
  Options o;
  examples::CommandLine cl(argc, argv, usage);
  while (cl.next()) {
    if (cl.is("--data")) o.data = cl.text();
    else if (cl.is("--device")) o.device = cl.text();
    else if (cl.is("--out")) o.out = cl.text();
    else if (cl.is("--resume")) o.resume = cl.text();
    else if (cl.is("--n-layer")) o.n_layer = cl.integer();
    else if (cl.is("--n-head")) o.n_head = cl.integer();
    else if (cl.is("--n-embd")) o.n_embd = cl.integer();
    else if (cl.is("--block-size")) o.block_size = cl.integer();
    else if (cl.is("--batch-size")) o.batch_size = cl.integer();
    else if (cl.is("--dropout")) o.dropout = cl.real();
    else if (cl.is("--max-iters")) o.max_iters = cl.integer();
    else if (cl.is("--lr")) o.lr = cl.real();
    else if (cl.is("--min-lr")) o.min_lr = cl.real();
    else if (cl.is("--warmup-iters")) o.warmup_iters = cl.integer();
    else if (cl.is("--weight-decay")) o.weight_decay = cl.real();
    else if (cl.is("--beta2")) o.beta2 = cl.real();
    else if (cl.is("--grad-clip")) o.grad_clip = cl.real();
    else if (cl.is("--eval-interval")) o.eval_interval = cl.integer();
    else if (cl.is("--eval-iters")) o.eval_iters = cl.integer();
    else if (cl.is("--seed")) o.seed = cl.unsigned_integer();
    else if (cl.is("--max-minutes")) o.max_minutes = cl.real();
    else if (cl.is("--stop-at-iter")) o.stop_at_iter = cl.integer();
    else if (cl.is("--max-val-loss")) o.max_val_loss = cl.real();
    else if (cl.is("--prompt")) o.prompt = cl.text();
    else if (cl.is("--temperature")) o.temperature = cl.real();
    else if (cl.is("--top-k")) o.top_k = cl.integer();
    else if (cl.is("--sample-tokens")) o.sample_tokens = cl.integer();
    else cl.unknown();
  }
  return o;
}

// Fills the options left unset with the device's defaults.
void apply_defaults(Options& o, bool on_cuda) {
  auto set = [](auto& v, auto cuda_value, auto cpu_value, bool cuda) {
    if (v < 0) v = cuda ? cuda_value : cpu_value;
  };
  set(o.n_layer, 6, 2, on_cuda);
  set(o.n_head, 6, 4, on_cuda);
  set(o.n_embd, 384, 64, on_cuda);
  set(o.block_size, 256, 64, on_cuda);
  set(o.batch_size, 64, 16, on_cuda);
  set(o.dropout, 0.2, 0.0, on_cuda);
  set(o.max_iters, 5000, 2000, on_cuda);
  // The tiny CPU model tolerates, and needs, a larger step to learn within its few iterations.
  set(o.lr, 1e-3, 4e-3, on_cuda);
  set(o.eval_interval, 250, 250, on_cuda);
  set(o.eval_iters, 200, 20, on_cuda);
  if (o.min_lr < 0) o.min_lr = o.lr / 10;
  o.warmup_iters = std::min(o.warmup_iters, o.max_iters);  // short runs warm up over all of it
}

bool check_options(const Options& o) {
  auto bad = [](const char* what) {
    std::fprintf(stderr, "%s\n", what);
    return false;
  };
  if (o.n_layer <= 0 || o.n_head <= 0 || o.n_embd <= 0 || o.block_size <= 0 || o.batch_size <= 0) {
    return bad("--n-layer, --n-head, --n-embd, --block-size and --batch-size must be positive");
  }
  if (o.n_embd % o.n_head != 0) return bad("--n-embd must be a multiple of --n-head");
  if (o.max_iters < 0 || o.eval_interval <= 0 || o.eval_iters <= 0) {
    return bad("--max-iters must be non-negative, --eval-interval and --eval-iters positive");
  }
  if (o.warmup_iters < 0) return bad("--warmup-iters must be non-negative");
  if (!(o.dropout >= 0 && o.dropout < 1)) return bad("--dropout must lie in [0, 1)");
  if (!(o.temperature > 0)) return bad("--temperature must be positive");
  return true;
}

// The vocabulary: the sorted distinct bytes of the text.
struct Vocab {
  std::vector<unsigned char> chars;
  std::array<int64_t, 256> id{};
  explicit Vocab(const std::string& text) {
    std::array<bool, 256> seen{};
    for (unsigned char c : text) seen[c] = true;
    id.fill(-1);
    for (int c = 0; c < 256; ++c) {
      if (seen[static_cast<size_t>(c)]) {
        id[static_cast<size_t>(c)] = static_cast<int64_t>(chars.size());
        chars.push_back(static_cast<unsigned char>(c));
      }
    }
  }
  int64_t size() const { return static_cast<int64_t>(chars.size()); }
};

// `batch` random windows of block+1 tokens from `data` (int64, on the device): inputs are the first
// block tokens, targets the last block. The offsets come from the device generator: no host sync.
std::pair<Tensor, Tensor> get_batch(const Tensor& data, int64_t batch, int64_t block) {
  const TensorOptions i64(DType::Int64, data.device());
  Tensor start = randint(0, data.size(0) - block, {batch, 1}, i64);
  Tensor index = start + arange(0, block + 1, 1, i64).view({1, block + 1});
  Tensor window = index_select(data, 0, index.reshape({-1})).view({batch, block + 1});
  return {window.narrow(1, 0, block).contiguous(), window.narrow(1, 1, block).contiguous()};
}

// Mean loss over `iters` random batches, in eval mode (no dropout) and without autograd.
double estimate_loss(nn::GPT& model, const Tensor& data, int64_t iters, int64_t batch, int64_t block) {
  NoGradGuard no_grad;
  model.eval();
  Tensor total = zeros({}, TensorOptions(DType::Float32, data.device()));
  for (int64_t i = 0; i < iters; ++i) {
    auto [x, y] = get_batch(data, batch, block);
    total = total + model.loss(x, y);
  }
  model.train();
  return total.item<double>() / static_cast<double>(iters);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse(argc, argv);
  const std::optional<Device> chosen = examples::choose_device(opt.device);
  if (!chosen) return 2;
  const Device device = *chosen;
  apply_defaults(opt, device.is_cuda());
  if (!check_options(opt)) return 2;
  // As nanoGPT: TF32 matmuls on the GPU (10-bit mantissa products, float accumulation).
  if (device.is_cuda()) cuda::math_switches().allow_tf32_matmul = true;

  std::string text;
  {
    std::ifstream in(opt.data, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read --data %s (relative paths resolve against %s)\n", opt.data.c_str(),
                   fs::current_path().c_str());
      return 2;
    }
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const Vocab vocab(text);
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = vocab.id[static_cast<unsigned char>(text[i])];
  // The prompt is checked now rather than after a long run.
  std::vector<int64_t> prompt_ids;
  for (unsigned char c : opt.prompt) {
    if (vocab.id[c] < 0) {
      std::fprintf(stderr, "--prompt: byte 0x%02x is not in the vocabulary of %s\n", c, opt.data.c_str());
      return 2;
    }
    prompt_ids.push_back(vocab.id[c]);
  }
  if (prompt_ids.empty()) prompt_ids.push_back(0);  // generation needs one token of context
  const int64_t n_train = static_cast<int64_t>(ids.size()) * 9 / 10;
  Tensor all = tensor(ids).to(device);
  Tensor train_data = all.narrow(0, 0, n_train);
  Tensor val_data = all.narrow(0, n_train, all.size(0) - n_train);
  if (val_data.size(0) <= opt.block_size + 1) {
    std::fprintf(stderr, "--data %s is too short for block size %lld (%zu bytes)\n", opt.data.c_str(),
                 static_cast<long long>(opt.block_size), text.size());
    return 2;
  }

  manual_seed(opt.seed);
  nn::GPTConfig cfg;
  cfg.vocab_size = vocab.size();
  cfg.block_size = opt.block_size;
  cfg.n_layer = opt.n_layer;
  cfg.n_head = opt.n_head;
  cfg.n_embd = opt.n_embd;
  cfg.dropout = opt.dropout;
  auto model = std::make_shared<nn::GPT>(cfg);
  model->to(device);
  model->train();
  nn::optim::AdamW optimizer(nn::optim::decay_groups(model->named_parameters(), opt.lr, opt.weight_decay),
                             {opt.beta1, opt.beta2});
  nn::optim::WarmupCosine schedule(optimizer, opt.lr, opt.warmup_iters, opt.max_iters, opt.min_lr);
  const TensorList params = model->parameters();

  std::error_code ec;
  fs::create_directories(opt.out, ec);
  if (ec) {
    std::fprintf(stderr, "cannot create --out %s: %s\n", opt.out.c_str(), ec.message().c_str());
    return 2;
  }
  const std::string checkpoint_path = (fs::path(opt.out) / "checkpoint.safetensors").string();
  const std::string metrics_path = (fs::path(opt.out) / "metrics.jsonl").string();
  const std::string best_path = (fs::path(opt.out) / "best.safetensors").string();
  int64_t iter = 0;
  // The best validation loss so far and its iteration. As nanoGPT does, the weights at the best
  // evaluation are kept (best.safetensors): this small dataset is overfitted long before the end
  // of the schedule, and the best loss is the run's result. A checkpoint carries both (the loss as
  // its double's bit pattern: the checkpoint's loop position holds integers), so a resumed run
  // makes the same decisions.
  double best_val = std::numeric_limits<double>::infinity();
  int64_t best_iter = -1;
  if (!opt.resume.empty()) {
    try {
      const nn::TrainingState st = nn::load_checkpoint(opt.resume, *model, &optimizer);
      iter = st.step;
      if (auto it = st.data_position.find("best_val_bits"); it != st.data_position.end())
        best_val = std::bit_cast<double>(it->second);
      if (auto it = st.data_position.find("best_iter"); it != st.data_position.end()) best_iter = it->second;
    } catch (const Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
    schedule.set_step(iter);
    std::printf("resumed from %s at iteration %lld\n", opt.resume.c_str(), static_cast<long long>(iter));
  }
  std::FILE* metrics = std::fopen(metrics_path.c_str(), opt.resume.empty() ? "w" : "a");
  if (!metrics) {
    std::fprintf(stderr, "cannot write %s\n", metrics_path.c_str());
    return 2;
  }
  auto save = [&]() {
    nn::TrainingState st;
    st.step = iter;
    st.data_position = {{"seed", static_cast<int64_t>(opt.seed)},
                        {"best_val_bits", std::bit_cast<int64_t>(best_val)},
                        {"best_iter", best_iter}};
    nn::save_checkpoint(checkpoint_path, *model, &optimizer, st);
  };

  std::printf("GPT on %s (%s): %lld bytes, vocabulary %lld; %lld layers, %lld heads, %lld wide, block %lld, "
              "%.2fM parameters; batch %lld, dropout %g, %lld iterations, AdamW lr %g -> %g\n",
              opt.data.c_str(), device.str().c_str(), static_cast<long long>(text.size()),
              static_cast<long long>(vocab.size()), static_cast<long long>(opt.n_layer),
              static_cast<long long>(opt.n_head), static_cast<long long>(opt.n_embd),
              static_cast<long long>(opt.block_size), static_cast<double>(model->get_num_params()) / 1e6,
              static_cast<long long>(opt.batch_size), opt.dropout, static_cast<long long>(opt.max_iters), opt.lr,
              opt.min_lr);
  std::fflush(stdout);

  const auto t_start = Clock::now();
  int64_t window_iters = 0;
  double train_secs = 0;  // training only (no evaluation), for the tokens/s of the metrics
  int64_t trained_iters = 0;
  const double tokens_per_iter = static_cast<double>(opt.batch_size * opt.block_size);
  Progress progress;
  std::optional<double> val_loss;
  auto evaluate = [&]() {
    const double tr = estimate_loss(*model, train_data, opt.eval_iters, opt.batch_size, opt.block_size);
    const double va = estimate_loss(*model, val_data, opt.eval_iters, opt.batch_size, opt.block_size);
    val_loss = va;
    if (va < best_val) {
      best_val = va;
      best_iter = iter;
      nn::save_safetensors(best_path, model->state_dict());
    }
    const double tps = train_secs > 0 ? static_cast<double>(trained_iters) * tokens_per_iter / train_secs : 0;
    progress.end_line();
    std::printf("step %lld: train loss %.4f, val loss %.4f  (%.0f tokens/s, %s)\n", static_cast<long long>(iter), tr,
                va, tps, format_duration(seconds_since(t_start)).c_str());
    std::fprintf(metrics,
                 "{\"step\": %lld, \"train_loss\": %.6f, \"val_loss\": %.6f, \"lr\": %.6g, \"tokens_per_s\": %.1f, "
                 "\"seconds\": %.2f}\n",
                 static_cast<long long>(iter), tr, va, schedule.current_lr(), tps, seconds_since(t_start));
    std::fflush(metrics);
    std::fflush(stdout);
  };
  // nanoGPT's step-0 estimate (about ln(vocabulary)); a resumed run already has its own.
  if (iter == 0 && opt.resume.empty()) evaluate();

  bool stopped = false;
  Tensor loss_window = zeros({}, TensorOptions(DType::Float32, device));  // summed on the device
  auto t_window = Clock::now();  // throughput since the last report, so evaluation time does not count
  while (iter < opt.max_iters) {
    auto [x, y] = get_batch(train_data, opt.batch_size, opt.block_size);
    Tensor loss = model->loss(x, y);
    loss.backward();
    if (opt.grad_clip > 0) nn::optim::clip_grad_norm_(params, opt.grad_clip);
    optimizer.step();
    optimizer.zero_grad();
    schedule.step();
    ++iter;
    ++window_iters;
    loss_window.add_(loss.detach());

    const bool eval_now = iter % opt.eval_interval == 0 || iter == opt.max_iters;
    const bool out_of_time = (opt.max_minutes > 0 && seconds_since(t_start) >= opt.max_minutes * 60) ||
                             (opt.stop_at_iter > 0 && iter == opt.stop_at_iter);
    if (progress.due() || eval_now || out_of_time) {
      const double mean_loss = loss_window.item<double>() / static_cast<double>(window_iters);  // waits
      const double secs = seconds_since(t_window);
      train_secs += secs;
      trained_iters += window_iters;
      const double tps = static_cast<double>(window_iters) * tokens_per_iter / secs;
      const double eta = static_cast<double>(opt.max_iters - iter) * tokens_per_iter / tps;
      char line[256];
      std::snprintf(line, sizeof line, "iter %lld/%lld  loss %.4f  lr %.2e  %.0f tokens/s  ETA %s",
                    static_cast<long long>(iter), static_cast<long long>(opt.max_iters), mean_loss,
                    schedule.current_lr(), tps, format_duration(eta).c_str());
      progress.print(line);
      loss_window.zero_();
      window_iters = 0;
      if (eval_now) {
        evaluate();
        save();  // after the evaluation: its draws are part of the generator state a resume restores
      } else if (out_of_time) {
        save();
      }
      t_window = Clock::now();
      if (out_of_time && iter < opt.max_iters) {
        stopped = true;
        break;
      }
    }
  }
  progress.end_line();
  std::fclose(metrics);

  if (stopped) {
    // The checkpoint is already written; this estimate's draws do not reach it.
    if (!val_loss || iter % opt.eval_interval != 0) {
      val_loss = estimate_loss(*model, val_data, opt.eval_iters, opt.batch_size, opt.block_size);
    }
    std::printf("stopped after %s at iteration %lld/%lld with val loss %.4f; continue with --resume %s\n",
                format_duration(seconds_since(t_start)).c_str(), static_cast<long long>(iter),
                static_cast<long long>(opt.max_iters), *val_loss, checkpoint_path.c_str());
    return 0;  // a split run is not finished, so --max-val-loss does not judge it yet
  } else {
    if (!val_loss) val_loss = estimate_loss(*model, val_data, opt.eval_iters, opt.batch_size, opt.block_size);
    nn::save_safetensors((fs::path(opt.out) / "model.safetensors").string(), model->state_dict());
    const double tps = train_secs > 0 ? static_cast<double>(trained_iters) * tokens_per_iter / train_secs : 0;
    std::printf("final val loss %.4f after %lld iterations (%s, %.0f tokens/s while training)\n", *val_loss,
                static_cast<long long>(iter), format_duration(seconds_since(t_start)).c_str(), tps);
    if (best_iter >= 0) {
      std::printf("best val loss %.4f at iteration %lld (%s)\n", best_val, static_cast<long long>(best_iter),
                  best_path.c_str());
    }
    if (opt.sample_tokens > 0) {
      // From the best weights, as nanoGPT samples from its best checkpoint.
      if (best_iter >= 0) nn::load_into(*model, best_path);
      model->eval();
      Tensor idx = tensor(prompt_ids).view({1, -1}).to(device);
      std::optional<int64_t> top_k;
      if (opt.top_k > 0) top_k = opt.top_k;
      Tensor out = model->generate(idx, opt.sample_tokens, opt.temperature, top_k);
      std::string sample;
      for (int64_t id : out.to(Device::cpu()).view({-1}).to_vector<int64_t>()) {
        sample.push_back(static_cast<char>(vocab.chars[static_cast<size_t>(id)]));
      }
      std::printf("---------- sample (temperature %g, top-k %lld) ----------\n%s\n----------\n", opt.temperature,
                  static_cast<long long>(opt.top_k), sample.c_str());
    }
  }
  const double result = best_iter >= 0 ? std::min(best_val, *val_loss) : *val_loss;
  if (opt.max_val_loss > 0 && !(result <= opt.max_val_loss)) {
    std::printf("FAIL: best val loss %.4f is above --max-val-loss %.4f\n", result, opt.max_val_loss);
    return 1;
  }
  return 0;
}
