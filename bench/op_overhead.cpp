// Per-op overhead of kiln's eager CPU path: the time of one tiny op, where the work is nothing and
// what is left is the dispatch, the output's allocation and, with autograd, building the graph and
// walking it back. Two cases, each at 1 element (the overhead) and at 4096 (beside some work):
//   add           y = a + b, float32, no tensor requires grad
//   add_backward  a, b leaves with requires_grad; y = a + b; y.backward(ones) with a fixed ones
//                 tensor made before the loop; then a's and b's gradients set to undefined, so every
//                 iteration allocates its gradients afresh (PyTorch: a.grad = None)
// One sample times --iters iterations with the steady clock and divides (one op is too short to
// time alone); the median, min and max over --samples samples, after --warmup samples untimed.
// tools/cpu_bench_peer.py times the same cases in PyTorch the same way and writes the same JSON
// lines; tools/cpu_bench.py runs both and puts them side by side. Reports speed; never asserts it.
//   usage: bench_op_overhead [--iters N] [--samples S] [--threads T] [--json FILE]   (--help: all flags)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "core/atomic_file.h"
#include "core/kiln.h"
#include "examples/common.h"
#include "examples/run_record.h"
#include "kernels/cpu/parallel.h"

using namespace kiln;
using examples::JsonLine;

namespace {

struct Options {
  int iters = 1000;
  int samples = 30;
  int warmup = 3;
  std::optional<int> threads;
  std::string json;
};

Options parse_options(int argc, char** argv) {
  Options o;
  examples::Flags app(
      "Microseconds of one tiny float32 add on the CPU (1 and 4096 elements), without autograd and with a\n"
      "backward through it: kiln's per-op overhead. JSON lines for tools/cpu_bench.py, whose PyTorch peer is\n"
      "tools/cpu_bench_peer.py.",
      "bench_op_overhead");
  app.add_option("--iters", o.iters, "iterations timed together as one sample")
      ->transform(examples::whole<int>(1, 100000000));
  app.add_option("--samples", o.samples, "timed samples per case (median, min and max reported)")
      ->transform(examples::whole<int>(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed samples per case first")->transform(examples::whole<int>(0, 100000));
  app.add_option("--threads", o.threads, "CPU threads")
      ->transform(examples::whole<int>(1))
      ->default_str("KILN_NUM_THREADS, else all cores");
  app.add_option("--json", o.json, "also write JSON lines here (a header, then one case a line)");
  app.parse(argc, argv);
  examples::check_json_path(o.json);
  return o;
}

using bench::median;

// Microseconds per iteration of `body`, one value a sample.
std::vector<double> time_per_iter(const Options& o, const std::function<void()>& body) {
  for (int s = 0; s < o.warmup; ++s) {
    for (int i = 0; i < o.iters; ++i) body();
  }
  std::vector<double> us;
  for (int s = 0; s < o.samples; ++s) {
    const auto t0 = examples::Clock::now();
    for (int i = 0; i < o.iters; ++i) body();
    us.push_back(1e6 * examples::seconds_since(t0) / o.iters);
  }
  return us;
}

struct Case {
  std::string name;
  int64_t numel = 0;
  bool autograd = false;
};

std::vector<double> run_case(const Case& c, const Options& o) {
  Tensor a = randn({c.numel});
  Tensor b = randn({c.numel});
  if (!c.autograd) {
    return time_per_iter(o, [&] { const Tensor y = a + b; });
  }
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  const Tensor ones_like_y = ones({c.numel});
  return time_per_iter(o, [&] {
    const Tensor y = a + b;
    y.backward(ones_like_y);
    a.set_grad(Tensor());
    b.set_grad(Tensor());
  });
}

JsonLine header_record(const Options& o, int argc, char** argv) {
  JsonLine h;
  h.text("record", "header").text("impl", "kiln").text("bench", "op_overhead").text("date", examples::utc_now());
  h.text("kiln_commit", examples::build_commit()).text("command", examples::command_line(argc, argv));
  h.text("device", "cpu").text("device_name", examples::device_name(Device::cpu()));
  h.integer("threads", cpu::num_threads()).integer("iters", o.iters).integer("samples", o.samples);
  h.integer("warmup", o.warmup).text("timer", "steady_clock");
  return examples::add_host_usage(h);
}

JsonLine case_record(const Case& c, const Options& o, const std::vector<double>& us) {
  JsonLine r;
  r.text("record", "case").text("impl", "kiln").text("bench", "op_overhead").text("case", c.name);
  r.text("dtype", "float32").integer("numel", c.numel).boolean("autograd", c.autograd);
  r.real("us_median", median(us), "%.4f");
  r.real("us_min", *std::min_element(us.begin(), us.end()), "%.4f");
  r.real("us_max", *std::max_element(us.begin(), us.end()), "%.4f");
  return r.integer("iters", o.iters).integer("samples", o.samples);
}

}  // namespace

// The program; main() runs it under examples::run_main, which turns every failure into one line.
static int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  if (o.threads) cpu::set_num_threads(*o.threads);
  manual_seed(1234);
  std::printf("kiln op overhead (CPU, float32), %d thread(s), median of %d samples of %d iterations, commit %s\n",
              cpu::num_threads(), o.samples, o.iters, examples::build_commit());
  std::printf("%-14s %6s %10s %10s %10s\n", "case", "numel", "median us", "min us", "max us");
  std::string text = header_record(o, argc, argv).str() + "\n";
  const std::vector<Case> cases = {
      {"add", 1, false},
      {"add_backward", 1, true},
      {"add", 4096, false},
      {"add_backward", 4096, true},
  };
  for (const Case& c : cases) {
    const std::vector<double> us = run_case(c, o);
    std::printf("%-14s %6lld %10.3f %10.3f %10.3f\n", c.name.c_str(), static_cast<long long>(c.numel), median(us),
                *std::min_element(us.begin(), us.end()), *std::max_element(us.begin(), us.end()));
    std::fflush(stdout);
    text += case_record(c, o, us).str() + "\n";
    if (!o.json.empty()) write_file_atomically(o.json, text, "bench_op_overhead");
  }
  if (!o.json.empty()) std::printf("wrote %s\n", o.json.c_str());
  return 0;
}

int main(int argc, char** argv) {
  return kiln::examples::run_main("bench_op_overhead", [&] { return run(argc, argv); });
}
