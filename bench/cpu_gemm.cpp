// CPU GEMM benchmark: float32 kiln::matmul (so the op's output allocation is in the time, as a
// model sees it) on random inputs, median of several timed runs after warm-up, in GFLOP/s. Input
// pairs rotate through ~64 MB so packing reads them from memory, not from a warm cache. A plain
// i-k-j loop on one thread is timed once as the baseline. --sizes times only the square products
// of those sizes (no baseline); --json also writes JSON lines (a header naming the commit, CPU,
// thread count and GEMM backend, then one case a shape), which tools/cpu_bench.py puts beside
// tools/cpu_bench_peer.py's PyTorch and NumPy numbers. Reports speed; never asserts it.
//   usage: bench_cpu_gemm [--threads N] [--reps R] [--sizes 512,1024,2048] [--json FILE]
//          (--help: the flags and their defaults)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "core/atomic_file.h"
#include "core/kiln.h"
#include "examples/common.h"
#include "examples/run_record.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/parallel.h"

using namespace kiln;
using examples::JsonLine;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using bench::median;

struct Shape3 {
  std::string what;
  int64_t m, n, k;
};

// How many input pairs rotate: enough to fill ~64 MB, 1 to 16 (tools/cpu_bench_peer.py does the same).
int input_sets(const Shape3& s) {
  const double pair_bytes = 4.0 * static_cast<double>(s.m * s.k + s.k * s.n);
  return static_cast<int>(std::clamp(64e6 / pair_bytes, 1.0, 16.0));
}

// Seconds of each of `reps` products x[m, k] @ w[k, n] after two warm-up calls.
std::vector<double> time_matmul(const Shape3& s, int reps) {
  const int sets = input_sets(s);
  std::vector<Tensor> xs, ws;
  for (int i = 0; i < sets; ++i) {
    xs.push_back(randn({s.m, s.k}));
    ws.push_back(randn({s.k, s.n}));
  }
  for (int i = 0; i < 2; ++i) (void)matmul(xs[0], ws[0]);
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const Tensor& x = xs[static_cast<size_t>(r % sets)];
    const Tensor& w = ws[static_cast<size_t>(r % sets)];
    auto t0 = Clock::now();
    Tensor y = matmul(x, w);
    times.push_back(seconds_since(t0));
  }
  return times;
}

// The baseline: the textbook i-k-j loop (contiguous inner loop, float accumulation), one thread.
double time_naive(int64_t m, int64_t n, int64_t k) {
  std::vector<float> a(static_cast<size_t>(m * k), 0.5f), b(static_cast<size_t>(k * n), 0.25f),
      c(static_cast<size_t>(m * n));
  auto t0 = Clock::now();
  for (int64_t i = 0; i < m; ++i) {
    float* crow = c.data() + i * n;
    std::fill(crow, crow + n, 0.0f);
    for (int64_t p = 0; p < k; ++p) {
      const float av = a[static_cast<size_t>(i * k + p)];
      const float* brow = b.data() + p * n;
      for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
    }
  }
  double s = seconds_since(t0);
  volatile float sink = c[0];
  (void)sink;
  return s;
}

JsonLine header_record(int reps, int argc, char** argv) {
  JsonLine h;
  h.text("record", "header").text("impl", "kiln").text("bench", "cpu_gemm").text("date", examples::utc_now());
  h.text("kiln_commit", examples::build_commit()).text("command", examples::command_line(argc, argv));
  h.text("device", "cpu").text("device_name", examples::device_name(Device::cpu()));
  h.integer("threads", cpu::num_threads());
  h.text("gemm_backend", cpu::gemm_backend_name(cpu::gemm_backend())).text("blas", cpu::blas_description());
  h.integer("reps", reps).text("timer", "steady_clock");
  return examples::add_host_usage(h);
}

JsonLine case_record(const Shape3& s, const std::vector<double>& times) {
  const double t = median(times);
  const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  JsonLine c;
  c.text("record", "case").text("impl", "kiln").text("bench", "cpu_gemm").text("case", s.what);
  c.text("dtype", "float32").integer("m", s.m).integer("n", s.n).integer("k", s.k);
  c.real("ms_median", t * 1e3, "%.4f");
  c.real("ms_min", *std::min_element(times.begin(), times.end()) * 1e3, "%.4f");
  c.real("ms_max", *std::max_element(times.begin(), times.end()) * 1e3, "%.4f");
  c.real("gflops", flops / t * 1e-9, "%.2f");
  return c.integer("reps", static_cast<int64_t>(times.size())).integer("input_sets", input_sets(s));
}

}  // namespace

// The program; main() runs it under examples::run_main, which turns every failure into one line.
static int run(int argc, char** argv) {
  // The flag policy of the examples (examples/flags.h): strict numbers, exit code 2 for bad flags.
  int reps = 11;
  std::optional<int> threads;
  std::vector<int64_t> sizes;
  std::string json;
  examples::Flags app(
      "GFLOP/s of kiln's CPU GEMM (float32 kiln::matmul, median of R timed runs after warm-up) on square and\n"
      "MLP-layer shapes, and of a plain one-thread i-k-j loop as the baseline; --sizes: those square shapes only.",
      "bench_cpu_gemm");
  app.add_option("--threads", threads, "CPU threads")
      ->transform(examples::whole<int>(1))
      ->default_str("KILN_NUM_THREADS, else all cores");
  app.add_option("--reps", reps, "timed runs per shape")->transform(examples::whole<int>(1));
  app.add_option("--sizes", sizes, "square float32 products of these sizes only, comma-separated (no baseline)")
      ->delimiter(',')
      ->take_all()
      ->transform(examples::whole<int64_t>(1, 65536))
      ->default_str("256, 512, 1024 and an MLP layer, then the baseline");
  app.add_option("--json", json, "also write JSON lines here (a header, then one case a shape)");
  app.parse(argc, argv);
  examples::check_json_path(json);
  if (threads) cpu::set_num_threads(*threads);
  manual_seed(1234);
  std::printf("kiln CPU GEMM (float32, kiln::matmul), %d thread(s), median of %d runs\n", cpu::num_threads(), reps);
  std::vector<Shape3> shapes;
  if (sizes.empty()) {
    shapes = {
        {"square 256", 256, 256, 256},
        {"square 512", 512, 512, 512},
        {"square 1024", 1024, 1024, 1024},
        {"MLP layer [4096,784]@[784,128]", 4096, 128, 784},
    };
  } else {
    for (const int64_t n : sizes) shapes.push_back({"square " + std::to_string(n), n, n, n});
  }
  // The header is taken before the first product, so its cpu_seconds and load average say what the
  // machine was doing when the timing started.
  std::string text = header_record(reps, argc, argv).str() + "\n";
  std::printf("%-32s %6s %6s %6s %10s %9s\n", "shape", "m", "n", "k", "ms", "GFLOP/s");
  for (const Shape3& s : shapes) {
    const std::vector<double> times = time_matmul(s, reps);
    const double t = median(times);
    const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    std::printf("%-32s %6lld %6lld %6lld %10.3f %9.1f\n", s.what.c_str(), static_cast<long long>(s.m),
                static_cast<long long>(s.n), static_cast<long long>(s.k), t * 1e3, flops / t * 1e-9);
    std::fflush(stdout);
    text += case_record(s, times).str() + "\n";
    if (!json.empty()) write_file_atomically(json, text, "bench_cpu_gemm");
  }
  if (sizes.empty()) {
    const double tn = time_naive(256, 256, 256);
    std::printf("%-32s %6d %6d %6d %10.3f %9.1f\n", "baseline: plain i-k-j, 1 thread", 256, 256, 256, tn * 1e3,
                2.0 * 256 * 256 * 256 / tn * 1e-9);
  }
  if (!json.empty()) std::printf("wrote %s\n", json.c_str());
  return 0;
}

int main(int argc, char** argv) {
  return kiln::examples::run_main("bench_cpu_gemm", [&] { return run(argc, argv); });
}
