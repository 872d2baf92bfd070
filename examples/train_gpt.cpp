// Trains a GPT and prints a sample: a character-level model on a text file (tiny Shakespeare, shipped
// in data/, by default), or on a token file or synthetic tokens (--model gpt2-124m is GPT-2 small).
// On CUDA the default character shape is nanoGPT's shakespeare-char; on the CPU a tiny model that
// learns in minutes. Non-obvious decision: training windows are keyed by (seed, iteration, row) and
// evaluation batches come from kiln's generators, so the checkpoint's generator state is the whole
// data position and a resumed (or --max-minutes split) run continues bit for bit.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "core/atomic_file.h"
#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "data/datasets.h"
#include "data/loader.h"
#include "data/prefetcher.h"
#include "data/sampler.h"
#include "data/token_file.h"
#include "dist/ddp.h"
#include "examples/common.h"
#include "examples/distributed.h"
#include "examples/doctor.h"
#include "examples/graphed_step.h"
#include "examples/mixed_precision.h"
#include "examples/run_record.h"
#include "examples/train_gpt_options.h"
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
using examples::gpt::Options;
using examples::gpt::parse_options;

namespace {

// Loader threads when --workers is unset: see examples/train_gpt_options.h.
constexpr int64_t kDefaultWorkers = examples::gpt::kDefaultWorkers;

using examples::gpt::DataKind;

// The tokens of a run and its vocabulary.
// - Text: character ids (data::CharCorpus: the vocabulary is the text's sorted distinct bytes),
//   split 90/10 into training and validation ids on the CPU (the loader cuts training windows from
//   them), the same splits on the device for the loss estimates.
// - Synthetic: --vocab-size uniformly random ids from the seed, held as a text's are.
// - Tokens: a memory-mapped training file and validation file (data/token_file.h), never copied
//   whole: the loader reads windows from the training file, the estimates batches from both.
// And the prompt's ids (checked now rather than after a long run).
struct Corpus {
  DataKind kind = DataKind::Text;
  int64_t vocab_size = 0;
  std::optional<data::CharCorpus> chars;  // text only: decodes the sample
  Tensor train_ids, val_ids;              // text and synthetic: int64, CPU
  Tensor train, val;                      // the same on the device
  std::shared_ptr<const data::TokenFile> train_file, val_file;  // token files
  std::vector<int64_t> prompt_ids;
  // What a checkpoint refers to: this text and its character map, or the token files' sizes and
  // the vocabulary (token ids mean nothing without them). Computed once: every checkpoint carries it.
  std::map<std::string, std::string> fingerprint;

  int64_t train_tokens() const { return train_file ? train_file->size() : train_ids.size(0); }
  int64_t val_tokens() const { return val_file ? val_file->size() : val_ids.size(0); }
};

// A data file that exists and is not a folder, or bad input.
void check_data_file(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    examples::input_error("cannot read " + flag + " " + path + (fs::is_directory(path, ec) ? ": it is a folder" :
                          " (relative paths resolve against " + fs::current_path().string() + ")"));
  }
}

// Both splits must hold one window of block + 1 tokens; `source` names where the split comes from
// (--data, or --val-data for a token file's validation tokens).
void check_split_length(const Options& opt, const std::string& source, const char* split, int64_t tokens) {
  if (tokens <= opt.block_size + 1) {
    examples::input_error(source + ": its " + split + " split has " + std::to_string(tokens) +
                          " tokens, too few for block size " + std::to_string(opt.block_size));
  }
}

Corpus load_token_corpus(const Options& opt) {
  Corpus c;
  c.kind = opt.kind;
  c.vocab_size = opt.vocab_size;
  if (opt.kind == DataKind::Synthetic) {
    // From its own generator: the model's initial weights do not depend on the data.
    Generator g(opt.seed ^ 0x5D47'ACE5ull);
    Tensor ids = randint(0, opt.vocab_size, {examples::gpt::kSyntheticTokens}, TensorOptions(DType::Int64), g);
    const int64_t n_train = ids.size(0) * 9 / 10;
    c.train_ids = ids.narrow(0, 0, n_train).contiguous();
    c.val_ids = ids.narrow(0, n_train, ids.size(0) - n_train).contiguous();
    c.train = c.train_ids.to(opt.device);
    c.val = c.val_ids.to(opt.device);
    // The tokens are drawn from --seed: a resume with another seed would train on other tokens, so
    // the seed is part of what the checkpoint refers to (a resume must pass the run's --seed).
    c.fingerprint = {{"data", "synthetic"},
                     {"tokens", std::to_string(ids.size(0))},
                     {"vocab_size", std::to_string(opt.vocab_size)},
                     {"synthetic_seed", std::to_string(opt.seed)}};
  } else {
    check_data_file("--data", opt.data);
    check_data_file("--val-data", opt.val_data);
    try {
      c.train_file = std::make_shared<const data::TokenFile>(opt.data);
      c.val_file = std::make_shared<const data::TokenFile>(opt.val_data);
    } catch (const Error& e) {
      examples::input_error(e.what());
    }
    c.fingerprint = {{"data", "tokens"},
                     {"train_tokens", std::to_string(c.train_file->size())},
                     {"val_tokens", std::to_string(c.val_file->size())},
                     {"vocab_size", std::to_string(opt.vocab_size)}};
  }
  check_split_length(opt, "--data " + opt.data, "training", c.train_tokens());
  check_split_length(opt, c.val_file ? "--val-data " + opt.val_data : "--data " + opt.data, "validation",
                     c.val_tokens());
  // No tokenizer: the sample continues the validation split's first token.
  c.prompt_ids = {c.val_file ? c.val_file->token(0) : c.val_ids.narrow(0, 0, 1).item<int64_t>()};
  return c;
}

Corpus load_corpus(const Options& opt) {
  if (opt.kind != DataKind::Text) return load_token_corpus(opt);
  check_data_file("--data", opt.data);
  std::optional<data::CharCorpus> chars;
  try {
    chars.emplace(data::CharCorpus::from_file(opt.data));
  } catch (const Error& e) {
    examples::input_error(e.what());
  }
  const auto bytes = static_cast<int64_t>(chars->text().size());
  // Checked first: an empty or short file is the problem, whatever else is wrong with it.
  if (bytes - bytes * 9 / 10 <= opt.block_size + 1) {
    examples::input_error("--data " + opt.data + " is too short for block size " + std::to_string(opt.block_size) +
                          " (" + std::to_string(bytes) + " bytes)");
  }
  std::vector<int64_t> prompt_ids;
  for (unsigned char c : opt.prompt) {
    if (chars->id(c) < 0) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", c);
      examples::input_error(std::string("--prompt: byte ") + byte + " is not in the vocabulary of " + opt.data);
    }
    prompt_ids.push_back(chars->id(c));
  }
  if (prompt_ids.empty()) prompt_ids.push_back(0);  // generation needs one token of context
  const int64_t n_train = bytes * 9 / 10;
  Tensor train_ids = chars->ids().narrow(0, 0, n_train);
  Tensor val_ids = chars->ids().narrow(0, n_train, bytes - n_train);
  Corpus c;
  c.kind = DataKind::Text;
  c.vocab_size = chars->vocab_size();
  c.fingerprint = chars->fingerprint();
  c.chars.emplace(std::move(*chars));
  c.train_ids = train_ids;
  c.val_ids = val_ids;
  c.train = train_ids.to(opt.device);
  c.val = val_ids.to(opt.device);
  c.prompt_ids = std::move(prompt_ids);
  return c;
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
  cfg.recompute = opt.precision.recompute;
  auto model = std::make_shared<nn::GPT>(cfg);
  model->to(opt.device);
  model->train();
  return model;
}

// `batch` random windows of block+1 tokens from `data` (int64, on the device), for the loss
// estimates: inputs are the first block tokens, targets the last block. The offsets come from the
// device generator: no host sync. (Training batches come from the DataLoader.)
std::pair<Tensor, Tensor> get_batch(const Tensor& data, int64_t batch, int64_t block) {
  const TensorOptions i64(DType::Int64, data.device());
  Tensor start = randint(0, data.size(0) - block, {batch, 1}, i64);
  Tensor index = start + arange(0, block + 1, 1, i64).view({1, block + 1});
  Tensor window = index_select(data, 0, index.reshape({-1})).view({batch, block + 1});
  return {window.narrow(1, 0, block).contiguous(), window.narrow(1, 1, block).contiguous()};
}

// A loss-estimate batch of a token file's split: from a CPU generator of its own, keyed by (seed,
// iteration, split), so that the estimates of an evaluation do not depend on what ran before it.
std::pair<Tensor, Tensor> file_batch(const data::TokenFile& file, const Options& opt, Generator& generator,
                                     int64_t vocab_size) {
  auto [x, y] = file.random_batch(opt.batch_size, opt.block_size, generator);
  const int64_t top = std::max(max(x).item<int64_t>(), max(y).item<int64_t>());
  if (top >= vocab_size) {
    examples::input_error(file.path() + ": token " + std::to_string(top) + " is outside the vocabulary [0, " +
                          std::to_string(vocab_size) + ") of --vocab-size");
  }
  return {x.to(opt.device), y.to(opt.device)};
}

// Mean loss over --eval-iters random batches of a split, in eval mode (no dropout) and without
// autograd. `iter` keys a token file's batches (the other kinds draw from the device generator).
double estimate_loss(nn::GPT& model, const Corpus& corpus, bool val, const Options& opt, int64_t iter) {
  const Tensor& data = val ? corpus.val : corpus.train;
  const data::TokenFile* file = (val ? corpus.val_file : corpus.train_file).get();
  Generator generator(opt.seed ^ (0x9E37'79B9'7F4A'7C15ull * static_cast<uint64_t>(2 * iter + (val ? 2 : 1))));
  NoGradGuard no_grad;
  std::optional<AutocastGuard> autocast;  // evaluate in the precision the run trains in
  if (const std::optional<DType> dt = opt.precision.amp_dtype()) autocast.emplace(opt.device.type, *dt);
  model.eval();
  Tensor total = zeros({}, TensorOptions(DType::Float32, opt.device));
  for (int64_t i = 0; i < opt.eval_iters; ++i) {
    auto [x, y] = file ? file_batch(*file, opt, generator, corpus.vocab_size)
                       : get_batch(data, opt.batch_size, opt.block_size);
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

// The run's resolved settings: the run record's, and each checkpoint's (below).
examples::JsonLine settings(const Options& opt, const Corpus& corpus, int64_t parameters);

// A checkpoint carries the best loss too (as its double's bit pattern: the loop position holds
// integers), so a resumed run makes the same decisions; and the settings, so a resume can say what
// it changes.
void save_checkpoint(const std::string& path, const nn::GPT& model, const nn::optim::Checkpointable& optimizer,
                     const nn::amp::GradScaler* scaler, const Options& opt, const Corpus& corpus, int64_t iter,
                     const Best& best) {
  nn::TrainingState st;
  st.step = iter;
  st.data_fingerprint = corpus.fingerprint;
  st.data_position = {{"seed", static_cast<int64_t>(opt.seed)},
                      {"best_val_bits", std::bit_cast<int64_t>(best.val)},
                      {"best_iter", best.iter},
                      {"batch_size", opt.batch_size},
                      {"max_iters", opt.max_iters}};
  st.settings = settings(opt, corpus, model.get_num_params()).scalars();
  nn::save_checkpoint(path, model, &optimizer, st, scaler);
}

// Restores --resume; returns the iteration it reached and the best evaluation so far, and takes the
// checkpoint's seed (the batches and the estimates' draws depend on it, so --seed cannot change a
// resumed run). A checkpoint of another text or character map, or whose numbers do not fit, is bad
// input. The best weights are in best.safetensors beside the checkpoint: resumed into another
// --out, a copy of them comes along (each rank's folder gets its own).
std::pair<int64_t, Best> resume_from(Options& opt, const Corpus& corpus, nn::GPT& model,
                                     nn::optim::Checkpointable& optimizer, nn::amp::GradScaler* scaler,
                                     const std::string& best_path) {
  Best best;
  nn::TrainingState st;
  try {
    st = nn::load_checkpoint(opt.resume, model, &optimizer, corpus.fingerprint, scaler);
    best.iter = st.position("best_iter", -1, st.step, opt.resume);
    best.val = std::bit_cast<double>(st.position("best_val_bits", INT64_MIN, INT64_MAX, opt.resume));
    // seed is a uint64 stored in an int64: every value is one.
    const auto seed = static_cast<uint64_t>(st.position("seed", INT64_MIN, INT64_MAX, opt.resume));
    if (seed != opt.seed) {
      std::printf("note: the checkpoint's run had --seed %llu; it replaces %llu\n",
                  static_cast<unsigned long long>(seed), static_cast<unsigned long long>(opt.seed));
      opt.seed = seed;
    }
    // Iteration i reads samples [i * batch, (i + 1) * batch) of the run's windows: another batch size
    // reads other windows. (Checkpoints of older kiln versions do not say; they load.)
    if (st.data_position.count("batch_size")) {
      const int64_t batch_size = st.position("batch_size", 1, INT64_MAX, opt.resume);
      if (batch_size != opt.batch_size) {
        examples::input_error("--resume " + opt.resume + ": the checkpoint was trained with --batch-size " +
                              std::to_string(batch_size) + "; got " + std::to_string(opt.batch_size));
      }
    }
    if (st.data_position.count("max_iters")) {
      const int64_t max_iters = st.position("max_iters", 0, INT64_MAX, opt.resume);
      if (max_iters != opt.max_iters) {
        std::printf("note: the checkpoint's run had --max-iters %lld, this one %lld: the schedule changes\n",
                    static_cast<long long>(max_iters), static_cast<long long>(opt.max_iters));
      }
    }
    // Settings that change the training's numbers (not the loader's, the buckets', nor those checked
    // above or fixed by the data and the weights' shapes; the evaluation's do: its batches draw from
    // the generator dropout draws from): a note names each one changed.
    const std::vector<std::string> changed = examples::changed_settings(
        st.settings, settings(opt, corpus, model.get_num_params()).scalars(),
        {"seed", "batch_size", "max_iters", "workers", "prefetch", "pin_memory", "cuda_graph", "recompute", "bucket_mb",
         "bucket_view", "model", "data", "data_bytes", "train_tokens", "val_tokens", "vocab_size", "parameters"});
    if (!st.settings.empty() && !changed.empty()) examples::note_changed_settings(opt.resume, changed);
    const bool none_yet = best.iter < 0 && best.val == std::numeric_limits<double>::infinity();
    if (!none_yet && !(best.iter >= 0 && std::isfinite(best.val))) {
      examples::input_error("--resume " + opt.resume + ": best validation loss " + std::to_string(best.val) +
                            " at iteration " + std::to_string(best.iter) + " is not a result of a run");
    }
  } catch (const Error& e) {
    examples::input_error(e.what());
  }
  const fs::path saved_best = fs::path(opt.resume).parent_path() / "best.safetensors";
  std::error_code ec;
  if (best.iter >= 0 && !fs::equivalent(saved_best, best_path, ec)) {
    if (!fs::exists(saved_best)) {
      examples::input_error("--resume " + opt.resume + ": the best weights (iteration " + std::to_string(best.iter) +
                            ") should be in " + saved_best.string() + ", which is missing");
    }
    std::ifstream in(saved_best, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) examples::input_error("--resume: cannot read " + saved_best.string());
    write_file_atomically(best_path, bytes, "train_gpt");
  }
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
  std::optional<double> top_p;
  if (opt.top_p < 1.0) top_p = opt.top_p;
  Tensor out = model.generate(idx, opt.sample_tokens, opt.temperature, top_k, top_p);
  const std::vector<int64_t> ids = out.to(Device::cpu()).view({-1}).to_vector<int64_t>();
  if (corpus.chars) return corpus.chars->decode(ids);
  std::string text = "token ids (kiln has no tokenizer to decode them):";  // token and synthetic data
  for (const int64_t id : ids) {
    text += ' ';
    text += std::to_string(id);
  }
  return text;
}

examples::JsonLine settings(const Options& opt, const Corpus& corpus, int64_t parameters) {
  examples::JsonLine s;
  s.text("model", opt.model);
  if (corpus.chars) {
    s.integer("data_bytes", static_cast<int64_t>(corpus.chars->text().size()));
  } else {
    s.text("data", corpus.kind == DataKind::Synthetic ? "synthetic" : "tokens");
    s.integer("train_tokens", corpus.train_tokens()).integer("val_tokens", corpus.val_tokens());
  }
  s.integer("vocab_size", corpus.vocab_size);
  s.integer("n_layer", opt.n_layer).integer("n_head", opt.n_head).integer("n_embd", opt.n_embd);
  s.integer("block_size", opt.block_size).integer("parameters", parameters).integer("batch_size", opt.batch_size);
  s.real("dropout", opt.dropout, "%g").integer("max_iters", opt.max_iters).real("lr", opt.lr, "%g");
  s.real("beta1", opt.beta1, "%g").real("beta2", opt.beta2, "%g").boolean("cuda_graph", opt.precision.cuda_graph);
  s.real("weight_decay", opt.weight_decay, "%g").real("grad_clip", opt.grad_clip, "%g").boolean("ddp", opt.ddp);
  s.real("min_lr", opt.min_lr, "%g").integer("warmup_iters", opt.warmup_iters);
  s.integer("eval_interval", opt.eval_interval).integer("eval_iters", opt.eval_iters);
  s.text("amp", opt.precision.amp).boolean("tf32", opt.device.is_cuda() && opt.precision.tf32);
  s.boolean("recompute", opt.precision.recompute).integer("grad_accum", opt.precision.grad_accum);
  s.boolean("zero", opt.zero).integer("zero_stage", opt.zero_stage).real("bucket_mb", opt.bucket_mb, "%g");
  s.text("comm_dtype", opt.comm_dtype ? dtype_name(*opt.comm_dtype) : "own").boolean("bucket_view", opt.bucket_view);
  const data::DataLoaderOptions lo = opt.loader.loader_options(opt.device, kDefaultWorkers);
  s.integer("workers", lo.num_workers).integer("prefetch", lo.prefetch_factor).boolean("pin_memory", lo.pin_memory);
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
  const std::string size = corpus.chars ? std::to_string(corpus.chars->text().size()) + " bytes"
                                        : std::to_string(corpus.train_tokens()) + " training tokens";
  std::printf("GPT on %s (%s): %s, vocabulary %lld; %lld layers, %lld heads, %lld wide, block %lld, "
              "%.2fM parameters; batch %lld, dropout %g, %lld iterations, AdamW lr %g -> %g; %s; %s\n",
              opt.data.c_str(), opt.device.str().c_str(), size.c_str(),
              static_cast<long long>(corpus.vocab_size), static_cast<long long>(opt.n_layer),
              static_cast<long long>(opt.n_head), static_cast<long long>(opt.n_embd),
              static_cast<long long>(opt.block_size), static_cast<double>(model.get_num_params()) / 1e6,
              static_cast<long long>(opt.batch_size), opt.dropout, static_cast<long long>(opt.max_iters), opt.lr,
              opt.min_lr, examples::precision_str(opt.precision, opt.device).c_str(),
              opt.loader.str(opt.device, kDefaultWorkers).c_str());
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

// The program; main() runs it under examples::run_main, which turns every failure into one line.
static int run(int argc, char** argv) {
  const auto t_launch = Clock::now();  // the first step's latency counts from here
  Options opt = parse_options(argc, argv);
  // --ddp: every rank runs this program on its share of each batch (examples/distributed.h).
  dist::ProcessGroup* group =
      examples::start_ddp(opt.ddp, opt.device, opt.batch_size, opt.out, opt.precision.grad_accum);
  // As nanoGPT: TF32 matmuls on the GPU (10-bit mantissa products, float accumulation) unless --no-tf32.
  examples::apply_math_switches(opt.precision);
  const Corpus corpus = load_corpus(opt);
  auto model = build_model(opt, corpus.vocab_size);
  const std::pair<double, double> betas{opt.beta1, opt.beta2};
  examples::ExampleOptimizer adamw(
      nn::optim::decay_groups(model->named_parameters(), opt.lr, opt.weight_decay),
      [betas](std::vector<nn::optim::ParamGroup> groups) {
        return std::make_unique<nn::optim::AdamW>(std::move(groups), betas);
      },
      opt.zero ? group : nullptr, examples::zero_options(opt.bucket_bytes, opt.zero_stage, opt.comm_dtype));
  nn::optim::Optimizer& optimizer = adamw.stepping();
  nn::optim::WarmupCosine schedule(optimizer, opt.lr, opt.warmup_iters, opt.max_iters, opt.min_lr);
  // DDP first: it makes every rank start from rank 0's weights and averages each backward's gradients.
  std::optional<dist::DistributedDataParallel> ddp;
  if (group && !opt.zero) {
    ddp.emplace(model, *group, examples::ddp_options(opt.bucket_bytes, opt.comm_dtype, opt.bucket_view));
  }
  examples::TrainStep train_step(opt.precision, opt.device, optimizer, model->parameters(), opt.grad_clip);
  if (ddp) train_step.set_ddp(&*ddp);
  train_step.set_zero(adamw.zero());
  std::optional<examples::GraphedStep> graphed;  // --cuda-graph
  if (opt.precision.cuda_graph) {
    graphed.emplace(opt.device, examples::kGraphWarmupSteps, [&optimizer] { optimizer.count_replayed_step(); });
  }

  examples::make_out_dir(opt.out);
  const std::string checkpoint_path = (fs::path(opt.out) / "checkpoint.safetensors").string();
  const std::string best_path = (fs::path(opt.out) / "best.safetensors").string();
  int64_t iter = 0;
  Best best;
  if (!opt.resume.empty()) {
    std::tie(iter, best) = resume_from(opt, corpus, *model, adamw.state(), train_step.scaler(), best_path);
    if (opt.stop_at_iter && *opt.stop_at_iter <= iter) {
      examples::input_error("--stop-at-iter " + std::to_string(*opt.stop_at_iter) + " is not after the checkpoint's "
                            "iteration " + std::to_string(iter));
    }
    schedule.set_step(iter);
  }
  const int64_t first_iter = iter + 1;  // this process's first step
  examples::MetricsFile metrics((fs::path(opt.out) / "metrics.jsonl").string(),
                                opt.resume.empty() ? std::nullopt : std::optional<int64_t>(iter));
  const examples::JsonLine run_record = examples::run_record("train_gpt", argc, argv, opt.device, opt.resume,
                                                             settings(opt, corpus, model->get_num_params()));
  metrics.write(run_record);
  // --profile and --doctor: the phases of each step, marked here and by train_step.
  examples::RunProfile run_profile(opt.precision, opt.device, run_record);
  profile::StepProfiler& profiler = run_profile.steps();
  train_step.set_profiler(run_profile.profiler());
  if (ddp) ddp->set_profiler(run_profile.profiler());  // the all-reduces backward waits for: comm
  if (auto* zero = adamw.zero()) zero->set_profiler(run_profile.profiler());  // likewise its reduce-scatters
  print_banner(opt, corpus, *model);

  // Training batches: random windows keyed by (seed, iteration, row), so the loader's position is
  // the iteration and a resume continues the same windows. One epoch covers the whole run.
  const int64_t samples = std::max<int64_t>(opt.max_iters, iter + 1) * opt.batch_size;
  auto windows = corpus.train_file
                     ? std::make_shared<data::TokenWindows>(corpus.train_file, opt.block_size, samples)
                     : std::make_shared<data::TokenWindows>(corpus.train_ids, opt.block_size, samples);
  windows->check_below(corpus.vocab_size);
  data::DataLoaderOptions loader_options = opt.loader.loader_options(opt.device, kDefaultWorkers);
  loader_options.batch_size = opt.batch_size;
  loader_options.seed = opt.seed;
  if (group) {  // this rank's rows of every global batch: the windows a single process would read
    loader_options.batch_size = opt.batch_size / group->size();
    loader_options.sampler = std::make_shared<data::DistributedSampler>(windows->size(), group->size(), group->rank(),
                                                                        /*shuffle=*/false);
  }
  data::DataLoader loader(windows, loader_options);
  loader.set_position({0, iter});
  data::DevicePrefetcher batches(loader, opt.device);

  const auto t_start = Clock::now();
  const double tokens_per_iter = static_cast<double>(opt.batch_size * opt.block_size);
  Throughput trained;
  examples::Progress progress;
  examples::RateWindow rate;  // for the train records
  std::optional<double> val_loss;
  // The lr the last step ran with (the schedule has moved on to the next), as the train records
  // give it; before the first step, the first step's.
  auto last_lr = [&] { return schedule.lr_at(std::max<int64_t>(iter - 1, 0)); };
  auto evaluate = [&] {
    const double tr = estimate_loss(*model, corpus, /*val=*/false, opt, iter);
    const double va = estimate_loss(*model, corpus, /*val=*/true, opt, iter);
    examples::check_finite_loss(tr, "the training-set estimate of iteration " + std::to_string(iter));
    examples::check_finite_loss(va, "the validation estimate of iteration " + std::to_string(iter));
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
                      .real("lr", last_lr(), "%.6g")
                      .real("tokens_per_s", trained.tokens_per_s(opt), "%.1f")
                      .real("seconds", seconds_since(t_start), "%.2f"));
  };
  // nanoGPT's step-0 estimate (about ln(vocabulary)); a resumed run already has its own.
  // Its checkpoint too: from here on OUT's checkpoint and best weights are this run's, even before
  // the first interval (a checkpoint another run left in OUT would resume with these best weights).
  if (iter == 0 && opt.resume.empty()) {
    evaluate();
    save_checkpoint(checkpoint_path, *model, adamw.state(), train_step.scaler(), opt, corpus, iter, best);
    rate.restart();  // the first train record's rate counts training only, as the later ones do
  }

  bool stopped = false;
  int64_t window_iters = 0;
  Tensor loss_window = zeros({}, TensorOptions(DType::Float32, opt.device));  // summed on the device
  auto t_window = Clock::now();  // throughput since the last report, so evaluation time does not count
  while (iter < opt.max_iters) {
    profiler.begin(profile::Phase::DataWait);
    const data::Example batch = *batches.next();
    // The step on inputs {tokens, targets}: run as it is, or through the graph on static copies.
    auto step = [&](const std::vector<Tensor>& in) {
      return train_step.run(in[0].size(0), [&](int64_t start, int64_t len) {
        return model->loss(in[0].narrow(0, start, len), in[1].narrow(0, start, len));
      });
    };
    Tensor loss = graphed ? graphed->run({batch.data, batch.target}, step) : step({batch.data, batch.target});
    schedule.step();
    profiler.end_step();
    ++iter;
    ++window_iters;
    loss_window.add_(loss.detach());
    rate.items += tokens_per_iter;
    if (iter == first_iter) examples::report_first_step(metrics, progress, iter, loss, t_launch);
    if (opt.precision.log_every > 0 && iter % opt.precision.log_every == 0) {
      metrics.write(
          examples::train_record(iter, loss.item<double>(), last_lr(), "tokens_per_s", rate.take_rate(), opt.device));
    }
    if (run_profile.doctor_due(iter)) {
      progress.end_line();
      run_profile.doctor_report(iter, /*final=*/false, metrics);
    }

    const bool eval_now = iter % opt.eval_interval == 0 || iter == opt.max_iters;
    // Every rank must stop at the same iteration, and each has its own clock: --max-minutes is the
    // ranks' agreement (examples::any_rank), --stop-at-iter the same number everywhere.
    const bool out_of_time =
        (opt.max_minutes && examples::any_rank(group, seconds_since(t_start) >= *opt.max_minutes * 60)) ||
        (opt.stop_at_iter && iter == *opt.stop_at_iter);
    if (!progress.due() && !eval_now && !out_of_time) continue;
    const double mean_loss = loss_window.item<double>() / static_cast<double>(window_iters);  // waits
    examples::check_finite_loss(mean_loss, "iteration " + std::to_string(iter));
    const double secs = seconds_since(t_window);
    trained.seconds += secs;
    trained.iters += window_iters;
    progress.print(
        progress_line(opt, iter, mean_loss, last_lr(), static_cast<double>(window_iters) * tokens_per_iter / secs));
    loss_window.zero_();
    window_iters = 0;
    if (eval_now && run_profile.profiling()) {  // the steps since the last evaluation, averaged
      const profile::StepTimes times = run_profile.take_profile();
      progress.end_line();
      std::printf("profile: %s\n", times.str().c_str());
      metrics.write(examples::profile_record(times, iter));
    }
    if (eval_now) evaluate();
    // After the evaluation: its draws are part of the generator state a resume restores.
    if (eval_now || out_of_time) {
      save_checkpoint(checkpoint_path, *model, adamw.state(), train_step.scaler(), opt, corpus, iter, best);
    }
    t_window = Clock::now();
    if (eval_now || out_of_time) rate.restart();  // the evaluation and the checkpoint are not training
    if (out_of_time && iter < opt.max_iters) {
      stopped = true;
      break;
    }
  }
  progress.end_line();
  run_profile.doctor_report(iter, /*final=*/true, metrics);

  if (stopped) {
    // The checkpoint is already written; this estimate's draws do not reach it.
    if (!val_loss || iter % opt.eval_interval != 0) val_loss = estimate_loss(*model, corpus, true, opt, iter);
    std::printf("stopped after %s at iteration %lld/%lld with val loss %.4f; continue with --resume %s\n",
                format_duration(seconds_since(t_start)).c_str(), static_cast<long long>(iter),
                static_cast<long long>(opt.max_iters), *val_loss, checkpoint_path.c_str());
    metrics.write(summary_record(false, iter, *val_loss, best, trained, opt, seconds_since(t_start)));
    return 0;  // a split run is not finished, so --max-val-loss does not judge it yet
  }
  if (!val_loss) val_loss = estimate_loss(*model, corpus, /*val=*/true, opt, iter);
  nn::save_safetensors((fs::path(opt.out) / "model.safetensors").string(), model->state_dict());
  print_result(opt, iter, *val_loss, best, best_path, trained, seconds_since(t_start));
  examples::print_memory(opt.precision, opt.device);
  metrics.write(summary_record(true, iter, *val_loss, best, trained, opt, seconds_since(t_start)));
  if (opt.sample_tokens > 0) {
    std::printf("---------- sample (temperature %g, top-k %lld, top-p %g) ----------\n%s\n----------\n",
                opt.temperature, static_cast<long long>(opt.top_k), opt.top_p,
                sample(*model, corpus, opt, best, best_path).c_str());
  }
  const double result = best.iter >= 0 ? std::min(best.val, *val_loss) : *val_loss;
  if (opt.max_val_loss && !(result <= *opt.max_val_loss)) {
    std::printf("FAIL: best val loss %.4f is above --max-val-loss %.4f\n", result, *opt.max_val_loss);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return kiln::examples::run_main("train_gpt", [&] { return run(argc, argv); });
}
