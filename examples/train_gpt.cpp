// Trains a character-level GPT on a text file (tiny Shakespeare, shipped in data/, by default) and
// prints a sample. On CUDA the default shape is nanoGPT's shakespeare-char; on the CPU a tiny model
// that learns in minutes. Non-obvious decision: batches are random windows drawn on the device from
// kiln's generator, so the checkpoint's generator state is the whole data position and a resumed
// (or --max-minutes split) run continues bit for bit.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "examples/common.h"
#include "examples/run_record.h"
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
using examples::seconds_since;

namespace {

#ifdef KILN_SOURCE_DIR
constexpr const char* kDefaultData = KILN_SOURCE_DIR "/data/tinyshakespeare/input.txt";
#else
constexpr const char* kDefaultData = "data/tinyshakespeare/input.txt";
#endif

// The settings of a run, every default resolved (some depend on the device).
struct Options {
  std::string data = kDefaultData;
  std::string device_name;  // --device; "" picks cuda when available
  Device device;
  std::string out = "train_gpt_out";
  std::string resume;
  int64_t n_layer = 0, n_head = 0, n_embd = 0, block_size = 0, batch_size = 0;
  int64_t max_iters = 0, warmup_iters = 100, eval_interval = 0, eval_iters = 0;
  double lr = 0, min_lr = 0, dropout = 0;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.99, grad_clip = 1.0;  // grad_clip 0: no clipping
  uint64_t seed = 1337;
  std::optional<double> max_minutes;   // checkpoint and stop after this long
  std::optional<int64_t> stop_at_iter;  // checkpoint and stop after this iteration (splits a run)
  std::optional<double> max_val_loss;  // exit status 1 when the best val loss is above it
  std::string prompt = "\n";
  double temperature = 0.8;
  int64_t top_k = 200;  // 0: sample from the whole vocabulary
  int64_t sample_tokens = 500;
};

// The device-dependent defaults: nanoGPT's shakespeare-char shape on CUDA, a tiny model on the CPU.
template <typename T> T on_device(const std::optional<T>& flag, bool cuda, T cuda_value, T cpu_value) {
  return flag.value_or(cuda ? cuda_value : cpu_value);
}

Options parse_options(int argc, char** argv) {
  using examples::whole, examples::real, examples::Ends;
  Options o;
  std::optional<int64_t> n_layer, n_head, n_embd, block_size, batch_size, max_iters, eval_interval, eval_iters;
  std::optional<double> lr, min_lr, dropout;
  CLI::App app(
      "Trains a character-level GPT on a text file (the first 90% trains, the rest validates) with AdamW, warmup\n"
      "and cosine decay, then prints a sample from the weights of the best evaluation. Writes OUT/metrics.jsonl,\n"
      "OUT/checkpoint.safetensors at every evaluation (and when stopped early), OUT/best.safetensors and\n"
      "OUT/model.safetensors; --resume continues a run bit for bit. Defaults marked cuda/cpu depend on the device:\n"
      "nanoGPT's shakespeare-char shape on a GPU, a tiny model that learns in minutes on the CPU.",
      "train_gpt");
  examples::set_flag_defaults(app);
  app.add_option("--data", o.data, "the text to learn (bytes are the vocabulary)")->type_name("FILE");
  examples::add_device_option(app, o.device_name);
  app.add_option("--out", o.out, "folder for metrics, checkpoints and models (created)")->type_name("DIR");
  app.add_option("--resume", o.resume, "continue from this checkpoint")->type_name("CHECKPOINT")->default_str("");
  auto positive = [&](const char* flag, std::optional<int64_t>& v, const char* help, const char* defaults) {
    app.add_option(flag, v, help)->transform(whole<int64_t>(1))->default_str(defaults);
  };
  positive("--n-layer", n_layer, "transformer blocks", "cuda 6, cpu 2");
  positive("--n-head", n_head, "attention heads", "cuda 6, cpu 4");
  positive("--n-embd", n_embd, "embedding width (a multiple of --n-head)", "cuda 384, cpu 64");
  positive("--block-size", block_size, "context length in characters", "cuda 256, cpu 64");
  positive("--batch-size", batch_size, "sequences per step", "cuda 64, cpu 16");
  app.add_option("--dropout", dropout, "dropout probability")
      ->transform(real(0, 1, Ends::open_high))
      ->default_str("cuda 0.2, cpu 0");
  app.add_option("--max-iters", max_iters, "training steps")
      ->transform(whole<int64_t>(0))
      ->default_str("cuda 5000, cpu 2000");
  app.add_option("--lr", lr, "peak learning rate")
      ->transform(real(0, INFINITY, Ends::open_low))
      ->default_str("cuda 1e-3, cpu 4e-3");
  app.add_option("--min-lr", min_lr, "learning rate at the end of the cosine decay")
      ->transform(real(0))
      ->default_str("lr/10");
  app.add_option("--warmup-iters", o.warmup_iters, "linear warmup steps (at most --max-iters)")
      ->transform(whole<int64_t>(0));
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay of the weight matrices")->transform(real(0));
  app.add_option("--beta2", o.beta2, "AdamW's second-moment decay")->transform(real(0, 1, Ends::open_high));
  app.add_option("--grad-clip", o.grad_clip, "clip the gradient norm to C; 0 turns clipping off")->transform(real(0));
  positive("--eval-interval", eval_interval, "evaluate every N steps", "250");
  positive("--eval-iters", eval_iters, "batches per loss estimate", "cuda 200, cpu 20");
  app.add_option("--seed", o.seed, "seed of the initial weights, batches and dropout")->transform(whole<uint64_t>());
  app.add_option("--max-minutes", o.max_minutes, "checkpoint and stop once this many minutes have passed")
      ->transform(real(0, INFINITY, Ends::open_low))
      ->default_str("none");
  app.add_option("--stop-at-iter", o.stop_at_iter, "checkpoint and stop after this step (splits a run)")
      ->transform(whole<int64_t>(1))
      ->default_str("none");
  app.add_option("--max-val-loss", o.max_val_loss, "exit with status 1 when the best val loss is above V")
      ->transform(real(0, INFINITY, Ends::open_low))
      ->default_str("none");
  app.add_option("--prompt", o.prompt, "the sample's first characters")->default_str("a newline");
  app.add_option("--temperature", o.temperature, "sampling temperature")
      ->transform(real(0, INFINITY, Ends::open_low));
  app.add_option("--top-k", o.top_k, "sample among the K likeliest characters; 0: all")->transform(whole<int64_t>(0));
  app.add_option("--sample-tokens", o.sample_tokens, "characters to sample at the end; 0: no sample")
      ->transform(whole<int64_t>(0));
  examples::parse_or_exit(app, argc, argv);

  o.device = examples::choose_device(o.device_name);
  const bool cuda = o.device.is_cuda();
  o.n_layer = on_device<int64_t>(n_layer, cuda, 6, 2);
  o.n_head = on_device<int64_t>(n_head, cuda, 6, 4);
  o.n_embd = on_device<int64_t>(n_embd, cuda, 384, 64);
  o.block_size = on_device<int64_t>(block_size, cuda, 256, 64);
  o.batch_size = on_device<int64_t>(batch_size, cuda, 64, 16);
  o.dropout = on_device(dropout, cuda, 0.2, 0.0);
  o.max_iters = on_device<int64_t>(max_iters, cuda, 5000, 2000);
  // The tiny CPU model tolerates, and needs, a larger step to learn within its few iterations.
  o.lr = on_device(lr, cuda, 1e-3, 4e-3);
  o.eval_interval = eval_interval.value_or(250);
  o.eval_iters = on_device<int64_t>(eval_iters, cuda, 200, 20);
  o.min_lr = min_lr.value_or(o.lr / 10);
  o.warmup_iters = std::min(o.warmup_iters, o.max_iters);  // short runs warm up over all of it
  if (o.n_embd % o.n_head != 0) {
    examples::input_error("--n-embd " + std::to_string(o.n_embd) + " must be a multiple of --n-head " +
                          std::to_string(o.n_head));
  }
  return o;
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

// The text as token ids on the device, split 90/10 into training and validation, and the prompt's
// ids (checked now rather than after a long run).
struct Corpus {
  std::string text;
  Vocab vocab;
  Tensor train, val;
  std::vector<int64_t> prompt_ids;
};

Corpus load_corpus(const Options& opt) {
  std::ifstream in(opt.data, std::ios::binary);
  if (!in) {
    examples::input_error("cannot read --data " + opt.data + " (relative paths resolve against " +
                          fs::current_path().string() + ")");
  }
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  Vocab vocab(text);
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = vocab.id[static_cast<unsigned char>(text[i])];
  std::vector<int64_t> prompt_ids;
  for (unsigned char c : opt.prompt) {
    if (vocab.id[c] < 0) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", c);
      examples::input_error(std::string("--prompt: byte ") + byte + " is not in the vocabulary of " + opt.data);
    }
    prompt_ids.push_back(vocab.id[c]);
  }
  if (prompt_ids.empty()) prompt_ids.push_back(0);  // generation needs one token of context
  const int64_t n_train = static_cast<int64_t>(ids.size()) * 9 / 10;
  Tensor all = tensor(ids).to(opt.device);
  Tensor train = all.narrow(0, 0, n_train);
  Tensor val = all.narrow(0, n_train, all.size(0) - n_train);
  if (val.size(0) <= opt.block_size + 1) {
    examples::input_error("--data " + opt.data + " is too short for block size " + std::to_string(opt.block_size) +
                          " (" + std::to_string(text.size()) + " bytes)");
  }
  return Corpus{std::move(text), std::move(vocab), train, val, std::move(prompt_ids)};
}

// The initial weights come from kiln's generator, seeded by --seed just before.
std::shared_ptr<nn::GPT> build_model(const Options& opt, int64_t vocab_size) {
  manual_seed(opt.seed);
  nn::GPTConfig cfg;
  cfg.vocab_size = vocab_size;
  cfg.block_size = opt.block_size;
  cfg.n_layer = opt.n_layer;
  cfg.n_head = opt.n_head;
  cfg.n_embd = opt.n_embd;
  cfg.dropout = opt.dropout;
  auto model = std::make_shared<nn::GPT>(cfg);
  model->to(opt.device);
  model->train();
  return model;
}

// `batch` random windows of block+1 tokens from `data` (int64, on the device): inputs are the first
// block tokens, targets the last block. The offsets come from the device generator: no host sync.
std::pair<Tensor, Tensor> get_batch(const Tensor& data, int64_t batch, int64_t block) {
  const TensorOptions i64(DType::Int64, data.device());
  Tensor start = randint(0, data.size(0) - block, {batch, 1}, i64);
  Tensor index = start + arange(0, block + 1, 1, i64).view({1, block + 1});
  Tensor window = index_select(data, 0, index.reshape({-1})).view({batch, block + 1});
  return {window.narrow(1, 0, block).contiguous(), window.narrow(1, 1, block).contiguous()};
}

// Mean loss over --eval-iters random batches, in eval mode (no dropout) and without autograd.
double estimate_loss(nn::GPT& model, const Tensor& data, const Options& opt) {
  NoGradGuard no_grad;
  model.eval();
  Tensor total = zeros({}, TensorOptions(DType::Float32, data.device()));
  for (int64_t i = 0; i < opt.eval_iters; ++i) {
    auto [x, y] = get_batch(data, opt.batch_size, opt.block_size);
    total = total + model.loss(x, y);
  }
  model.train();
  return total.item<double>() / static_cast<double>(opt.eval_iters);
}

// The best validation loss so far and its iteration. As nanoGPT does, the weights at the best
// evaluation are kept (best.safetensors): this small dataset is overfitted long before the end of
// the schedule, and the best loss is the run's result.
struct Best {
  double val = std::numeric_limits<double>::infinity();
  int64_t iter = -1;
};

// A checkpoint carries the best loss too (as its double's bit pattern: the loop position holds
// integers), so a resumed run makes the same decisions.
void save_checkpoint(const std::string& path, const nn::GPT& model, const nn::optim::AdamW& optimizer,
                     const Options& opt, int64_t iter, const Best& best) {
  nn::TrainingState st;
  st.step = iter;
  st.data_position = {{"seed", static_cast<int64_t>(opt.seed)},
                      {"best_val_bits", std::bit_cast<int64_t>(best.val)},
                      {"best_iter", best.iter}};
  nn::save_checkpoint(path, model, &optimizer, st);
}

// Restores --resume; returns the iteration it reached and the best evaluation so far.
std::pair<int64_t, Best> resume_from(const Options& opt, nn::GPT& model, nn::optim::AdamW& optimizer) {
  Best best;
  nn::TrainingState st;
  try {
    st = nn::load_checkpoint(opt.resume, model, &optimizer);
  } catch (const Error& e) {
    examples::input_error(e.what());
  }
  if (auto it = st.data_position.find("best_val_bits"); it != st.data_position.end())
    best.val = std::bit_cast<double>(it->second);
  if (auto it = st.data_position.find("best_iter"); it != st.data_position.end()) best.iter = it->second;
  std::printf("resumed from %s at iteration %lld\n", opt.resume.c_str(), static_cast<long long>(st.step));
  return {st.step, best};
}

// The sample, from the best weights as nanoGPT samples from its best checkpoint.
std::string sample(nn::GPT& model, const Corpus& corpus, const Options& opt, const Best& best,
                   const std::string& best_path) {
  if (best.iter >= 0) nn::load_into(model, best_path);
  model.eval();
  Tensor idx = tensor(corpus.prompt_ids).view({1, -1}).to(opt.device);
  std::optional<int64_t> top_k;
  if (opt.top_k > 0) top_k = opt.top_k;
  Tensor out = model.generate(idx, opt.sample_tokens, opt.temperature, top_k);
  std::string text;
  for (int64_t id : out.to(Device::cpu()).view({-1}).to_vector<int64_t>()) {
    text.push_back(static_cast<char>(corpus.vocab.chars[static_cast<size_t>(id)]));
  }
  return text;
}

examples::JsonLine settings(const Options& opt, const Corpus& corpus, int64_t parameters) {
  examples::JsonLine s;
  s.integer("data_bytes", static_cast<int64_t>(corpus.text.size())).integer("vocab_size", corpus.vocab.size());
  s.integer("n_layer", opt.n_layer).integer("n_head", opt.n_head).integer("n_embd", opt.n_embd);
  s.integer("block_size", opt.block_size).integer("parameters", parameters).integer("batch_size", opt.batch_size);
  s.real("dropout", opt.dropout, "%g").integer("max_iters", opt.max_iters).real("lr", opt.lr, "%g");
  s.real("min_lr", opt.min_lr, "%g").integer("warmup_iters", opt.warmup_iters);
  s.integer("eval_interval", opt.eval_interval).integer("eval_iters", opt.eval_iters);
  s.boolean("tf32", opt.device.is_cuda());
  return s.unsigned_integer("seed", opt.seed);
}

// Training throughput of this process: evaluation time is left out.
struct Throughput {
  int64_t iters = 0;
  double seconds = 0;
  double tokens_per_s(const Options& opt) const {
    return seconds > 0 ? static_cast<double>(iters * opt.batch_size * opt.block_size) / seconds : 0;
  }
};

examples::JsonLine summary_record(bool finished, int64_t iter, double val_loss, const Best& best,
                                  const Throughput& t, const Options& opt, double wall_seconds) {
  examples::JsonLine s;
  s.text("record", "summary").boolean("finished", finished).integer("iterations", iter);
  s.real("final_val_loss", val_loss, "%.6f");
  if (best.iter >= 0) s.real("best_val_loss", best.val, "%.6f").integer("best_iter", best.iter);
  s.integer("tokens", t.iters * opt.batch_size * opt.block_size).real("tokens_per_s", t.tokens_per_s(opt), "%.1f");
  s.real("train_seconds", t.seconds, "%.2f").real("wall_seconds", wall_seconds, "%.2f");
  return examples::add_host_usage(s);
}

// --- what the run prints ----------------------------------------------------------------------------

void print_banner(const Options& opt, const Corpus& corpus, nn::GPT& model) {
  std::printf("GPT on %s (%s): %zu bytes, vocabulary %lld; %lld layers, %lld heads, %lld wide, block %lld, "
              "%.2fM parameters; batch %lld, dropout %g, %lld iterations, AdamW lr %g -> %g\n",
              opt.data.c_str(), opt.device.str().c_str(), corpus.text.size(),
              static_cast<long long>(corpus.vocab.size()), static_cast<long long>(opt.n_layer),
              static_cast<long long>(opt.n_head), static_cast<long long>(opt.n_embd),
              static_cast<long long>(opt.block_size), static_cast<double>(model.get_num_params()) / 1e6,
              static_cast<long long>(opt.batch_size), opt.dropout, static_cast<long long>(opt.max_iters), opt.lr,
              opt.min_lr);
  std::fflush(stdout);
}

std::string progress_line(const Options& opt, int64_t iter, double mean_loss, double lr, double tokens_per_s) {
  const double eta =
      static_cast<double>(opt.max_iters - iter) * static_cast<double>(opt.batch_size * opt.block_size) / tokens_per_s;
  char line[256];
  std::snprintf(line, sizeof line, "iter %lld/%lld  loss %.4f  lr %.2e  %.0f tokens/s  ETA %s",
                static_cast<long long>(iter), static_cast<long long>(opt.max_iters), mean_loss, lr, tokens_per_s,
                format_duration(eta).c_str());
  return line;
}

void print_result(const Options& opt, int64_t iter, double val_loss, const Best& best, const std::string& best_path,
                  const Throughput& trained, double seconds) {
  std::printf("final val loss %.4f after %lld iterations (%s, %.0f tokens/s while training)\n", val_loss,
              static_cast<long long>(iter), format_duration(seconds).c_str(), trained.tokens_per_s(opt));
  if (best.iter >= 0) {
    std::printf("best val loss %.4f at iteration %lld (%s)\n", best.val, static_cast<long long>(best.iter),
                best_path.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse_options(argc, argv);
  // As nanoGPT: TF32 matmuls on the GPU (10-bit mantissa products, float accumulation).
  if (opt.device.is_cuda()) cuda::math_switches().allow_tf32_matmul = true;
  const Corpus corpus = load_corpus(opt);
  auto model = build_model(opt, corpus.vocab.size());
  nn::optim::AdamW optimizer(nn::optim::decay_groups(model->named_parameters(), opt.lr, opt.weight_decay),
                             {opt.beta1, opt.beta2});
  nn::optim::WarmupCosine schedule(optimizer, opt.lr, opt.warmup_iters, opt.max_iters, opt.min_lr);
  const TensorList params = model->parameters();

  examples::make_out_dir(opt.out);
  const std::string checkpoint_path = (fs::path(opt.out) / "checkpoint.safetensors").string();
  const std::string best_path = (fs::path(opt.out) / "best.safetensors").string();
  int64_t iter = 0;
  Best best;
  if (!opt.resume.empty()) {
    std::tie(iter, best) = resume_from(opt, *model, optimizer);
    schedule.set_step(iter);
  }
  examples::MetricsFile metrics((fs::path(opt.out) / "metrics.jsonl").string(), /*append=*/!opt.resume.empty());
  metrics.write(examples::run_record("train_gpt", argc, argv, opt.device, opt.resume,
                                     settings(opt, corpus, model->get_num_params())));
  print_banner(opt, corpus, *model);

  const auto t_start = Clock::now();
  const double tokens_per_iter = static_cast<double>(opt.batch_size * opt.block_size);
  Throughput trained;
  examples::Progress progress;
  std::optional<double> val_loss;
  auto evaluate = [&] {
    const double tr = estimate_loss(*model, corpus.train, opt);
    const double va = estimate_loss(*model, corpus.val, opt);
    val_loss = va;
    if (va < best.val) {
      best = {va, iter};
      nn::save_safetensors(best_path, model->state_dict());
    }
    progress.end_line();
    std::printf("step %lld: train loss %.4f, val loss %.4f  (%.0f tokens/s, %s)\n", static_cast<long long>(iter), tr,
                va, trained.tokens_per_s(opt), format_duration(seconds_since(t_start)).c_str());
    std::fflush(stdout);
    metrics.write(examples::JsonLine()
                      .text("record", "eval")
                      .integer("step", iter)
                      .real("train_loss", tr, "%.6f")
                      .real("val_loss", va, "%.6f")
                      .real("lr", schedule.current_lr(), "%.6g")
                      .real("tokens_per_s", trained.tokens_per_s(opt), "%.1f")
                      .real("seconds", seconds_since(t_start), "%.2f"));
  };
  // nanoGPT's step-0 estimate (about ln(vocabulary)); a resumed run already has its own.
  if (iter == 0 && opt.resume.empty()) evaluate();

  bool stopped = false;
  int64_t window_iters = 0;
  Tensor loss_window = zeros({}, TensorOptions(DType::Float32, opt.device));  // summed on the device
  auto t_window = Clock::now();  // throughput since the last report, so evaluation time does not count
  while (iter < opt.max_iters) {
    auto [x, y] = get_batch(corpus.train, opt.batch_size, opt.block_size);
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
    const bool out_of_time = (opt.max_minutes && seconds_since(t_start) >= *opt.max_minutes * 60) ||
                             (opt.stop_at_iter && iter == *opt.stop_at_iter);
    if (!progress.due() && !eval_now && !out_of_time) continue;
    const double mean_loss = loss_window.item<double>() / static_cast<double>(window_iters);  // waits
    const double secs = seconds_since(t_window);
    trained.seconds += secs;
    trained.iters += window_iters;
    progress.print(progress_line(opt, iter, mean_loss, schedule.current_lr(),
                                 static_cast<double>(window_iters) * tokens_per_iter / secs));
    loss_window.zero_();
    window_iters = 0;
    if (eval_now) evaluate();
    // After the evaluation: its draws are part of the generator state a resume restores.
    if (eval_now || out_of_time) save_checkpoint(checkpoint_path, *model, optimizer, opt, iter, best);
    t_window = Clock::now();
    if (out_of_time && iter < opt.max_iters) {
      stopped = true;
      break;
    }
  }
  progress.end_line();

  if (stopped) {
    // The checkpoint is already written; this estimate's draws do not reach it.
    if (!val_loss || iter % opt.eval_interval != 0) val_loss = estimate_loss(*model, corpus.val, opt);
    std::printf("stopped after %s at iteration %lld/%lld with val loss %.4f; continue with --resume %s\n",
                format_duration(seconds_since(t_start)).c_str(), static_cast<long long>(iter),
                static_cast<long long>(opt.max_iters), *val_loss, checkpoint_path.c_str());
    metrics.write(summary_record(false, iter, *val_loss, best, trained, opt, seconds_since(t_start)));
    return 0;  // a split run is not finished, so --max-val-loss does not judge it yet
  }
  if (!val_loss) val_loss = estimate_loss(*model, corpus.val, opt);
  nn::save_safetensors((fs::path(opt.out) / "model.safetensors").string(), model->state_dict());
  print_result(opt, iter, *val_loss, best, best_path, trained, seconds_since(t_start));
  metrics.write(summary_record(true, iter, *val_loss, best, trained, opt, seconds_since(t_start)));
  if (opt.sample_tokens > 0) {
    std::printf("---------- sample (temperature %g, top-k %lld) ----------\n%s\n----------\n", opt.temperature,
                static_cast<long long>(opt.top_k), sample(*model, corpus, opt, best, best_path).c_str());
  }
  const double result = best.iter >= 0 ? std::min(best.val, *val_loss) : *val_loss;
  if (opt.max_val_loss && !(result <= *opt.max_val_loss)) {
    std::printf("FAIL: best val loss %.4f is above --max-val-loss %.4f\n", result, *opt.max_val_loss);
    return 1;
  }
  return 0;
}
