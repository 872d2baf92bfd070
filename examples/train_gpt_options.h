// train_gpt's command line: its settings (some defaults depend on the device) and their parsing,
// in a header of their own so that the command-line fuzzer (fuzz/fuzz_cli.cpp) parses exactly what
// the program parses.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "core/device.h"
#include "examples/common.h"
#include "examples/distributed.h"
#include "examples/loader_options.h"
#include "examples/precision_options.h"
#include "nn/transformer.h"

namespace kiln::examples::gpt {

#ifdef KILN_SOURCE_DIR
inline constexpr const char* kDefaultData = KILN_SOURCE_DIR "/data/tinyshakespeare/input.txt";
#else
inline constexpr const char* kDefaultData = "data/tinyshakespeare/input.txt";
#endif

// Loader threads when --workers is unset. A training batch is a few memcpys of token windows, so one
// thread reading ahead is plenty; bench/RESULTS.md has the measurement.
inline constexpr int64_t kDefaultWorkers = 1;

// --data synthetic: uniformly random tokens, for throughput (the loss stays near ln(vocabulary)).
inline constexpr const char* kSyntheticData = "synthetic";
// Tokens of --data synthetic: enough distinct windows for any batch, small on the device.
inline constexpr int64_t kSyntheticTokens = int64_t{1} << 22;

// What --data holds: a text whose bytes are the vocabulary, a token file (data/token_file.h), or
// synthetic tokens.
enum class DataKind { Text, Tokens, Synthetic };

inline DataKind data_kind(const std::string& data) {
  if (data == kSyntheticData) return DataKind::Synthetic;
  if (data.size() > 4 && data.compare(data.size() - 4, 4, ".bin") == 0) return DataKind::Tokens;
  return DataKind::Text;
}

// The settings of a run, every default resolved (some depend on the device).
struct Options {
  std::string model = "char";  // char: the per-device character model; gpt2-124m: GPT-2 small
  std::string data;            // resolved: the text, token file or "synthetic"
  DataKind kind = DataKind::Text;
  std::string val_data;        // token files: the validation file
  int64_t vocab_size = 0;      // token and synthetic data (text: its characters, known once read)
  std::string device_name;  // --device; "" picks cuda when available
  Device device;
  std::string out = "train_gpt_out";
  std::string resume;
  int64_t n_layer = 0, n_head = 0, n_embd = 0, block_size = 0, batch_size = 0;
  int64_t max_iters = 0, warmup_iters = 100, eval_interval = 0, eval_iters = 0;
  double lr = 0, min_lr = 0, dropout = 0;
  // beta2: 0.99, 0.95 for gpt2-124m; grad_clip 0: no clipping.
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.99, grad_clip = 1.0;  // grad_clip 0: no clipping
  uint64_t seed = 1337;
  std::optional<double> max_minutes;   // checkpoint and stop after this long
  std::optional<int64_t> stop_at_iter;  // checkpoint and stop after this iteration (splits a run)
  std::optional<double> max_val_loss;  // exit status 1 when the best val loss is above it
  std::string prompt = "\n";
  double temperature = 0.8;
  int64_t top_k = 200;  // 0: sample from the whole vocabulary
  double top_p = 1.0;   // nucleus sampling; 1: no filtering
  int64_t sample_tokens = 500;
  PrecisionOptions precision;  // --amp, --tf32, --recompute, --grad-accum, --memory
  LoaderFlags loader;          // --workers, --prefetch, --pin-memory
  bool ddp = false;            // data-parallel over the ranks of mpirun (dist/ddp.h)
  bool zero = false;           // --zero: with --ddp, AdamW's state sharded over the ranks (dist/zero.h)
  int zero_stage = 1;          // --zero-stage: 2 shards the gradients too
  double bucket_mb = 25;       // --bucket-mb: with --ddp, the gradient buckets' size in MB
  int64_t bucket_bytes = int64_t{25} << 20;  // resolved from bucket_mb
  std::string comm_dtype_name;  // --comm-dtype: with --ddp, bf16, fp16 or fp32; empty: the parameters' own
  std::optional<DType> comm_dtype;  // resolved from comm_dtype_name
  bool bucket_view = false;         // --bucket-view: with --ddp, the gradients live in DDP's buckets
};

// The device-dependent defaults: nanoGPT's shakespeare-char shape on CUDA, a tiny model on the CPU.
template <typename T> T on_device(const std::optional<T>& flag, bool cuda, T cuda_value, T cpu_value) {
  return flag.value_or(cuda ? cuda_value : cpu_value);
}

inline Options parse_options(int argc, const char* const* argv) {
  using examples::whole, examples::real, examples::Ends;
  Options o;
  std::optional<int64_t> n_layer, n_head, n_embd, block_size, batch_size, max_iters, eval_interval, eval_iters;
  std::optional<int64_t> vocab_size, sample_tokens;
  std::optional<double> lr, min_lr, dropout, beta2;
  std::optional<std::string> data, val_data, prompt;
  examples::Flags app(
      "Trains a GPT with AdamW, warmup and cosine decay on a text file (characters; the first 90% trains, the rest\n"
      "validates), a token file or synthetic tokens, then prints a sample from the weights of the best evaluation.\n"
      "Writes OUT/metrics.jsonl, OUT/checkpoint.safetensors at every evaluation (and when stopped early),\n"
      "OUT/best.safetensors and OUT/model.safetensors; --resume continues a run bit for bit. Defaults marked\n"
      "cuda/cpu depend on the device: nanoGPT's shakespeare-char shape on a GPU, a tiny model that learns in\n"
      "minutes on the CPU; --model gpt2-124m is GPT-2 small.",
      "train_gpt");
  app.add_option("--model", o.model,
                 "char: the character model below; gpt2-124m: GPT-2 small (12 layers, 12 heads, 768 wide, block "
                 "1024, vocabulary 50257, batch 16, lr 6e-4, beta2 0.95, dropout 0; shape flags still override)")
      ->one_of({"char", "gpt2-124m"});
  app.add_option("--data", data,
                 "a text (its bytes are the vocabulary), a token file (*.bin, nanoGPT's or llm.c's) or 'synthetic' "
                 "(random tokens, for throughput)")
      ->type_name("FILE")
      ->default_str("char: data/tinyshakespeare/input.txt; gpt2-124m: synthetic");
  app.add_option("--val-data", val_data, "token files: the validation tokens")
      ->type_name("FILE")
      ->default_str("val.bin beside a train.bin");
  app.add_option("--vocab-size", vocab_size, "token and synthetic data: token ids are below this")
      ->transform(whole<int64_t>(2, int64_t{1} << 31))
      ->default_str("50257 (GPT-2's)");
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
  app.add_option("--beta2", beta2, "AdamW's second-moment decay")
      ->transform(real(0, 1, Ends::open_high))
      ->default_str("char 0.99, gpt2-124m 0.95");
  app.add_option("--grad-clip", o.grad_clip, "clip the gradient norm to C; 0 turns clipping off")->transform(real(0));
  positive("--eval-interval", eval_interval, "evaluate every N steps", "250");
  positive("--eval-iters", eval_iters, "batches per loss estimate", "cuda 200, cpu 20");
  app.add_option("--seed", o.seed, "seed of the initial weights, batches and dropout")->transform(whole<uint64_t>());
  app.add_option("--max-minutes", o.max_minutes,
                 "checkpoint and stop once this many minutes have passed (with --ddp: on any rank; the ranks agree "
                 "on it every step)")
      ->transform(real(0, INFINITY, Ends::open_low))
      ->default_str("none");
  app.add_option("--stop-at-iter", o.stop_at_iter, "checkpoint and stop after this step (splits a run)")
      ->transform(whole<int64_t>(1))
      ->default_str("none");
  app.add_option("--max-val-loss", o.max_val_loss, "exit with status 1 when the best val loss is above V")
      ->transform(real(0, INFINITY, Ends::open_low))
      ->default_str("none");
  app.add_option("--prompt", prompt,
                 "text data: the sample's first characters (token data has no tokenizer: its "
                 "sample continues the validation split's first token)")
      ->default_str("a newline");
  app.add_option("--temperature", o.temperature, "sampling temperature")
      ->transform(real(0, INFINITY, Ends::open_low));
  app.add_option("--top-k", o.top_k, "sample among the K likeliest characters; 0: all")->transform(whole<int64_t>(0));
  app.add_option("--top-p", o.top_p,
                 "nucleus sampling: among the likeliest characters that hold this much probability (after "
                 "--top-k); 1: all")
      ->transform(real(0, 1, Ends::open_low));
  app.add_option("--sample-tokens", sample_tokens,
                 "tokens to sample at the end (token data prints their ids: kiln has no tokenizer); 0: no sample")
      ->transform(whole<int64_t>(0))
      ->default_str("500 for text, 0 otherwise");
  examples::add_precision_options(app, o.precision, /*image_model=*/false);
  examples::add_loader_options(app, o.loader, std::to_string(kDefaultWorkers));
  examples::add_ddp_flag(app, o.ddp);
  examples::add_zero_flag(app, o.zero);
  examples::Option* zero_stage = examples::add_zero_stage_flag(app, o.zero_stage);
  examples::Option* bucket_mb = examples::add_bucket_flag(app, o.bucket_mb);
  examples::add_comm_dtype_flag(app, o.comm_dtype_name);
  examples::add_bucket_view_flag(app, o.bucket_view);
  app.parse(argc, argv);

  o.device = examples::choose_device(o.device_name);
  const bool cuda = o.device.is_cuda();
  const bool gpt2 = o.model == "gpt2-124m";
  o.data = data.value_or(gpt2 ? kSyntheticData : kDefaultData);
  o.kind = data_kind(o.data);
  if (o.kind == DataKind::Text && vocab_size) {
    examples::input_error("--vocab-size applies to token and synthetic data; a text's vocabulary is its bytes");
  }
  o.vocab_size = vocab_size.value_or(50257);
  if (val_data && o.kind != DataKind::Tokens) examples::input_error("--val-data applies to token files (*.bin)");
  if (prompt && o.kind != DataKind::Text) {  // it would be ignored: kiln has no tokenizer to encode it
    examples::input_error(
        "--prompt applies to text data; token data has no tokenizer (its sample continues the "
        "validation split's first token)");
  }
  if (prompt) o.prompt = *prompt;
  if (o.kind == DataKind::Tokens) {
    const std::filesystem::path train(o.data);
    if (val_data) o.val_data = *val_data;
    else if (train.filename() == "train.bin") o.val_data = (train.parent_path() / "val.bin").string();
    else examples::input_error("--data " + o.data + ": name the validation tokens with --val-data");
  }
  if (gpt2) {  // GPT-2 small, whatever the device; nanoGPT's train_gpt2 recipe for the optimizer
    const nn::GPTConfig g = nn::GPTConfig::gpt2_124m();
    o.n_layer = n_layer.value_or(g.n_layer);
    o.n_head = n_head.value_or(g.n_head);
    o.n_embd = n_embd.value_or(g.n_embd);
    o.block_size = block_size.value_or(g.block_size);
    o.batch_size = batch_size.value_or(16);
    o.dropout = dropout.value_or(0.0);
    o.lr = lr.value_or(6e-4);
    o.beta2 = beta2.value_or(0.95);
    o.eval_iters = eval_iters.value_or(20);
  } else {
    o.n_layer = on_device<int64_t>(n_layer, cuda, 6, 2);
    o.n_head = on_device<int64_t>(n_head, cuda, 6, 4);
    o.n_embd = on_device<int64_t>(n_embd, cuda, 384, 64);
    o.block_size = on_device<int64_t>(block_size, cuda, 256, 64);
    o.batch_size = on_device<int64_t>(batch_size, cuda, 64, 16);
    o.dropout = on_device(dropout, cuda, 0.2, 0.0);
    // The tiny CPU model tolerates, and needs, a larger step to learn within its few iterations.
    o.lr = on_device(lr, cuda, 1e-3, 4e-3);
    o.beta2 = beta2.value_or(0.99);
    o.eval_iters = on_device<int64_t>(eval_iters, cuda, 200, 20);
  }
  o.max_iters = on_device<int64_t>(max_iters, cuda, 5000, 2000);
  o.eval_interval = eval_interval.value_or(250);
  o.sample_tokens = sample_tokens.value_or(o.kind == DataKind::Text ? 500 : 0);
  o.min_lr = min_lr.value_or(o.lr / 10);
  if (o.min_lr > o.lr) {  // the cosine would climb instead of decay: a typo, not a schedule
    examples::input_error("--min-lr " + examples::format_number(o.min_lr) + " is above the peak --lr " +
                          examples::format_number(o.lr));
  }
  o.warmup_iters = std::min(o.warmup_iters, o.max_iters);  // short runs warm up over all of it
  if (o.stop_at_iter && *o.stop_at_iter > o.max_iters) {  // it would never come: the run would not split
    examples::input_error("--stop-at-iter " + std::to_string(*o.stop_at_iter) + " is past the run's end (--max-iters " +
                          std::to_string(o.max_iters) + ")");
  }
  examples::check_grad_accum(o.precision, o.batch_size);
  examples::check_zero(o.zero, o.ddp, o.precision.cuda_graph, zero_stage->count() > 0);
  o.bucket_bytes = examples::bucket_bytes(o.bucket_mb, bucket_mb->count() > 0, o.ddp);
  o.comm_dtype = examples::comm_dtype(o.comm_dtype_name, o.ddp);
  examples::check_bucket_view(o.bucket_view, o.ddp, o.zero, o.comm_dtype_name);
  examples::check_cuda_graph(o.precision, o.device);
  if (o.n_embd % o.n_head != 0) {
    examples::input_error("--n-embd " + std::to_string(o.n_embd) + " must be a multiple of --n-head " +
                          std::to_string(o.n_head));
  }
  return o;
}

}  // namespace kiln::examples::gpt
