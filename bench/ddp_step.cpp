// DDP step benchmark, run under mpirun: what DistributedDataParallel's overlap and bucket size do
// to a training step. A small GPT (random tokens) trains with AdamW on every rank; for each case
// the step (forward, backward with DDP's all-reduces, optimizer) is timed as the slowest rank's
// mean over --steps steps. Cases: the step without DDP (compute only, what the ranks would take
// alone), the whole gradient all-reduced once (communication only), and DDP with each --bucket-mb,
// with the overlap on and off (DDPOptions::overlap) and with its gradients as views of its buckets
// (DDPOptions::gradient_as_bucket_view), and ZeRO-1 with each --bucket-mb, its reduce-scatters
// overlapping backward or issued after it (ZeroOptions::overlap; dist/zero.h: 1/N of AdamW's state
// per rank, the weights all-gathered after the update), and ZeRO-2 (the gradients given up once
// reduced) with the overlap; then DDP and ZeRO-2 with their gradients on the wire in bfloat16
// (comm_dtype), beside the whole gradient all-reduced once in bfloat16. "exposed" is a step minus
// the compute-only step: the communication the step still waits for. Each case also records the
// memory in live tensors (the largest rank's; kiln's CPU allocator counts it): the most at once in
// forward and backward and in the optimizer's step over the timed steps, and what stays between
// steps. Reports; never asserts.
//   usage: mpirun -np N bench_ddp_step [--layers 4] [--width 256] [--batch 8] [--block 128]
//                                       [--bucket-mb 1,4,25] [--steps 10] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/atomic_file.h"
#include "core/kiln.h"
#include "dist/ddp.h"
#include "dist/zero.h"
#include "examples/common.h"
#include "examples/run_record.h"
#include "nn/optim/adamw.h"
#include "nn/transformer.h"

using namespace kiln;
using examples::JsonLine;

namespace {

struct Options {
  int64_t layers = 4, width = 256, heads = 4, batch = 8, block = 128, vocab = 256, steps = 10, warmup = 2;
  std::vector<double> bucket_mb{1, 4, 25};
  std::string json;
};

// The largest rank's `value` (the slowest rank's time is what a synchronous step waits for).
double largest(dist::ProcessGroup& g, double value) {
  Tensor t = full_like(zeros({1}, TensorOptions(DType::Float64)), value);
  g.all_reduce(t, dist::ReduceOp::Max)->wait();
  return t.item<double>();
}

int run(int argc, char** argv) {
  Options o;
  examples::Flags app(
      "Times DDP training steps (overlap on and off, bucket sizes) against compute alone, under mpirun.",
      "bench_ddp_step");
  app.add_option("--layers", o.layers, "transformer blocks")->transform(examples::whole<int64_t>(1, 64));
  app.add_option("--width", o.width, "embedding width (a multiple of --heads)")
      ->transform(examples::whole<int64_t>(8, 8192));
  app.add_option("--heads", o.heads, "attention heads")->transform(examples::whole<int64_t>(1, 128));
  app.add_option("--batch", o.batch, "sequences per rank per step")->transform(examples::whole<int64_t>(1, 4096));
  app.add_option("--block", o.block, "tokens per sequence")->transform(examples::whole<int64_t>(2, 8192));
  app.add_option("--bucket-mb", o.bucket_mb, "DDP bucket sizes to time, in MB (2^20 bytes)")
      ->delimiter(',')
      ->transform(examples::real(0, 1 << 16, examples::Ends::open_low));
  app.add_option("--steps", o.steps, "timed steps per case")->transform(examples::whole<int64_t>(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed steps per case")->transform(examples::whole<int64_t>(0, 1000));
  app.add_option("--json", o.json, "rank 0 writes the records (JSON lines) to this file");
  app.parse(argc, argv);
  if (o.width % o.heads != 0) examples::input_error("--width must be a multiple of --heads");

  dist::ProcessGroup& g = dist::world();
  const int n = g.size();
  nn::GPTConfig cfg;
  cfg.vocab_size = o.vocab;
  cfg.block_size = o.block;
  cfg.n_layer = o.layers;
  cfg.n_head = o.heads;
  cfg.n_embd = o.width;
  Generator data_gen(1000 + static_cast<uint64_t>(g.rank()));
  const Tensor idx = randint(0, o.vocab, {o.batch, o.block}, TensorOptions(DType::Int64), data_gen);
  const Tensor targets = randint(0, o.vocab, {o.batch, o.block}, TensorOptions(DType::Int64), data_gen);

  const std::string command = examples::command_line(argc, argv);
  JsonLine header;
  header.text("record", "header").text("impl", "kiln").text("date", examples::utc_now());
  header.text("kiln_commit", examples::build_commit()).text("command", command).text("backend", g.backend());
  header.integer("ranks", n).text("device", "cpu").text("device_name", examples::device_name(Device::cpu()));
  header.integer("layers", o.layers).integer("width", o.width).integer("batch", o.batch).integer("block", o.block);
  std::string text = header.str() + "\n";

  // One case: a fresh model (the same weights every case), `steps` timed steps. `zero_options`: the
  // step goes through ZeRO (no DDP); `comm_only`: the step is one all-reduce of the whole gradient,
  // in `comm_dtype` (float32 when none).
  struct Timed {
    double seconds;
    int64_t buckets;
    double peak_backward_bytes, peak_step_bytes, resident_bytes;
  };
  auto time_case = [&](const std::string& name, std::optional<dist::DDPOptions> ddp_options, bool comm_only,
                       std::optional<dist::ZeroOptions> zero_options = std::nullopt,
                       std::optional<DType> comm_dtype = std::nullopt) {
    manual_seed(7);
    auto model = std::make_shared<nn::GPT>(cfg);
    model->train();
    std::optional<nn::optim::AdamW> opt;
    std::optional<dist::ZeroRedundancyOptimizer> zero_opt;
    if (zero_options) {
      nn::optim::ParamGroup all;
      all.params = model->parameters();
      all.lr = 1e-4;
      zero_opt.emplace(std::vector<nn::optim::ParamGroup>{all}, g,
                       [](std::vector<nn::optim::ParamGroup> shards) {
                         return std::make_unique<nn::optim::AdamW>(std::move(shards));
                       },
                       *zero_options);
    } else {
      opt.emplace(model->parameters(), 1e-4);
    }
    std::optional<dist::DistributedDataParallel> ddp;
    if (ddp_options) ddp.emplace(model, g, *ddp_options);
    int64_t grad_bytes = 0;
    for (const Tensor& p : model->parameters()) grad_bytes += p.numel() * static_cast<int64_t>(p.element_size());
    // Only the all-reduce case holds it: the gradient's elements (float32 parameters), in its dtype.
    Tensor flat = comm_only ? zeros({grad_bytes / 4}, TensorOptions(comm_dtype.value_or(DType::Float32))) : Tensor();
    // Memory in live tensors: the most at once in forward and backward, and in the optimizer's step
    // (a lock and two counters each: no cost the timing could see), and what stays between steps.
    int64_t peak_backward = 0, peak_step = 0;
    auto peak_into = [](int64_t& peak) {
      peak = std::max(peak, cpu_cache_stats().peak_allocated_bytes);
      reset_cpu_peak_memory();
    };
    auto step = [&] {
      reset_cpu_peak_memory();
      if (comm_only) {
        g.all_reduce(flat, dist::ReduceOp::Avg)->wait();
        return;
      }
      if (zero_opt) {
        zero_opt->zero_grad();
      } else {
        opt->zero_grad();
      }
      model->loss(idx, targets).backward();
      peak_into(peak_backward);
      if (zero_opt) {
        zero_opt->step();
      } else {
        opt->step();
      }
      peak_into(peak_step);
    };
    for (int64_t i = 0; i < o.warmup; ++i) step();
    g.barrier();
    peak_backward = peak_step = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < o.steps; ++i) step();
    const double s = largest(g, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                                    static_cast<double>(o.steps));
    const double peak_b = largest(g, static_cast<double>(peak_backward));
    const double peak_s = largest(g, static_cast<double>(peak_step));
    const double peak = std::max(peak_b, peak_s);
    const double resident = largest(g, static_cast<double>(cpu_cache_stats().allocated_bytes));
    JsonLine c;
    c.text("record", "case").text("case", name).integer("ranks", n).integer("grad_bytes", grad_bytes);
    if (ddp_options) {
      c.real("bucket_mb", static_cast<double>(ddp_options->bucket_bytes) / (1 << 20), "%g");
      c.boolean("overlap", ddp_options->overlap).integer("buckets", static_cast<int64_t>(ddp->buckets().size()));
      c.boolean("gradient_as_bucket_view", ddp_options->gradient_as_bucket_view);
    }
    if (zero_options) {
      c.real("bucket_mb", static_cast<double>(zero_options->bucket_bytes) / (1 << 20), "%g");
      c.boolean("overlap", zero_options->overlap).integer("buckets", static_cast<int64_t>(zero_opt->num_buckets()));
      c.integer("stage", zero_options->stage);
      comm_dtype = zero_options->comm_dtype;
    }
    if (ddp_options) comm_dtype = ddp_options->comm_dtype;
    if (comm_dtype) c.text("comm_dtype", dtype_name(*comm_dtype));
    // The optimizer's state on this rank: AdamW's two moments, of the whole model or of one shard.
    int64_t state_bytes = 0;
    for (const auto& [key, t] : (zero_opt ? zero_opt->local().state_dict() : opt->state_dict())) {
      if (key.rfind("state.", 0) == 0) state_bytes += t.numel() * static_cast<int64_t>(t.element_size());
    }
    if (!comm_only) c.integer("optimizer_state_bytes", state_bytes);
    c.integer("steps", o.steps).real("step_seconds", s, "%.6g").integer("peak_bytes", static_cast<int64_t>(peak));
    if (!comm_only) {
      c.integer("peak_backward_bytes", static_cast<int64_t>(peak_b));
      c.integer("peak_step_bytes", static_cast<int64_t>(peak_s));
      c.integer("resident_bytes", static_cast<int64_t>(resident));
    }
    text += c.str() + "\n";
    const size_t buckets = ddp ? ddp->buckets().size() : zero_opt ? zero_opt->num_buckets() : 0;
    return Timed{s, static_cast<int64_t>(buckets), peak_b, peak_s, resident};
  };

  const Timed compute_case = time_case("compute", std::nullopt, false);
  const double compute = compute_case.seconds;
  const double comm = time_case("all_reduce", std::nullopt, true).seconds;
  const double comm_bf16 = time_case("all_reduce", std::nullopt, true, std::nullopt, DType::BFloat16).seconds;
  if (g.rank() == 0) {
    std::printf("DDP steps of a %lld-layer, %lld-wide GPT, batch %lld x %lld tokens per rank, %d ranks (%s)\n",
                static_cast<long long>(o.layers), static_cast<long long>(o.width), static_cast<long long>(o.batch),
                static_cast<long long>(o.block), n, g.backend().c_str());
    std::printf("compute only (no DDP): %.2f ms; the whole gradient all-reduced once: %.2f ms (in bfloat16: %.2f ms)\n",
                compute * 1e3, comm * 1e3, comm_bf16 * 1e3);
    std::printf("MiB in live tensors: the most in forward and backward, in the optimizer's step, between steps\n");
    std::printf("%11s %10s %8s %8s %12s %12s %9s %9s %9s\n", "", "bucket MB", "buckets", "overlap", "step ms",
                "exposed ms", "backward", "step", "between");
    std::printf("%11s %10s %8s %8s %12.2f %12s %9.1f %9.1f %9.1f\n", "compute", "", "", "", compute * 1e3, "",
                compute_case.peak_backward_bytes / (1 << 20), compute_case.peak_step_bytes / (1 << 20),
                compute_case.resident_bytes / (1 << 20));
  }
  // DDP, DDP with its gradients as views of the buckets (the overlap on), ZeRO-1 (its
  // reduce-scatter, 1/N of AdamW's state, the all-gather after the update), then ZeRO-2, which also
  // gives the gradients up once reduced (with the overlap only: without it, the step reduces them
  // all at once, and they are held through backward as in ZeRO-1); then DDP and ZeRO-2 sending
  // their gradients in bfloat16 (with the overlap).
  const char* const names[] = {"DDP", "DDP views", "ZeRO-1", "ZeRO-2", "DDP bf16", "ZeRO-2 bf16"};
  for (const int kind : {0, 1, 2, 3, 4, 5}) {
    for (double mb : o.bucket_mb) {
      for (bool overlap : {true, false}) {
        if ((kind == 1 || kind >= 3) && !overlap) continue;
        const int64_t bytes = std::max<int64_t>(1, static_cast<int64_t>(mb * (1 << 20)));
        Timed r{};
        if (kind == 2 || kind == 3 || kind == 5) {
          dist::ZeroOptions z;
          z.bucket_bytes = bytes;
          z.overlap = overlap;
          z.stage = kind == 2 ? 1 : 2;
          if (kind == 5) z.comm_dtype = DType::BFloat16;
          r = time_case("zero", std::nullopt, false, z);
        } else {
          dist::DDPOptions d;
          d.bucket_bytes = bytes;
          d.overlap = overlap;
          d.gradient_as_bucket_view = kind == 1;
          if (kind == 4) d.comm_dtype = DType::BFloat16;
          r = time_case("ddp", d, false);
        }
        if (g.rank() == 0) {
          std::printf("%11s %10g %8lld %8s %12.2f %12.2f %9.1f %9.1f %9.1f\n", names[kind], mb,
                      static_cast<long long>(r.buckets),
                      overlap ? "on" : "off", r.seconds * 1e3, (r.seconds - compute) * 1e3,
                      r.peak_backward_bytes / (1 << 20), r.peak_step_bytes / (1 << 20), r.resident_bytes / (1 << 20));
          std::fflush(stdout);
        }
      }
    }
  }
  if (g.rank() == 0 && !o.json.empty()) {
    write_file_atomically(o.json, text, "bench_ddp_step");
    std::printf("wrote %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::examples::run_main("bench_ddp_step", [&] { return run(argc, argv); });
}
