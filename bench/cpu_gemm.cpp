// CPU GEMM benchmark: float32 kiln::matmul (so the op's output allocation is in the time, as a
// model sees it) on random inputs, median of several timed runs after warm-up, in GFLOP/s. Input
// pairs rotate through ~64 MB so packing reads them from memory, not from a warm cache. A plain
// i-k-j loop on one thread is timed once as the baseline. Reports speed; never asserts it.
//   usage: bench_cpu_gemm [--threads N] [--reps R]   (--help: the flags and their defaults)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "examples/common.h"
#include "kernels/cpu/parallel.h"

using namespace kiln;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Shape3 {
  const char* what;
  int64_t m, n, k;
};

// Median seconds of `reps` products x[m, k] @ w[k, n] after two warm-up calls.
double time_matmul(const Shape3& s, int reps) {
  const double pair_bytes = 4.0 * static_cast<double>(s.m * s.k + s.k * s.n);
  const int sets = static_cast<int>(std::clamp(64e6 / pair_bytes, 1.0, 16.0));
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
  return median(times);
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

}  // namespace

// The program; main() runs it under examples::run_main, which turns every failure into one line.
static int run(int argc, char** argv) {
  // The flag policy of the examples (examples/common.h): strict numbers, exit code 2 for bad flags.
  int reps = 11;
  std::optional<int> threads;
  CLI::App app(
      "GFLOP/s of kiln's CPU GEMM (float32 kiln::matmul, median of R timed runs after warm-up) on square and\n"
      "MLP-layer shapes, and of a plain one-thread i-k-j loop as the baseline.",
      "bench_cpu_gemm");
  examples::set_flag_defaults(app);
  app.add_option("--threads", threads, "CPU threads")
      ->transform(examples::whole<int>(1))
      ->default_str("KILN_NUM_THREADS, else all cores");
  app.add_option("--reps", reps, "timed runs per shape")->transform(examples::whole<int>(1));
  examples::parse_or_exit(app, argc, argv);
  if (threads) cpu::set_num_threads(*threads);
  manual_seed(1234);
  std::printf("kiln CPU GEMM (float32, kiln::matmul), %d thread(s), median of %d runs\n", cpu::num_threads(), reps);
  const std::vector<Shape3> shapes = {
      {"square 256", 256, 256, 256},
      {"square 512", 512, 512, 512},
      {"square 1024", 1024, 1024, 1024},
      {"MLP layer [4096,784]@[784,128]", 4096, 128, 784},
  };
  std::printf("%-32s %6s %6s %6s %10s %9s\n", "shape", "m", "n", "k", "ms", "GFLOP/s");
  for (const Shape3& s : shapes) {
    const double t = time_matmul(s, reps);
    const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    std::printf("%-32s %6lld %6lld %6lld %10.3f %9.1f\n", s.what, static_cast<long long>(s.m),
                static_cast<long long>(s.n), static_cast<long long>(s.k), t * 1e3, flops / t * 1e-9);
  }
  const double tn = time_naive(256, 256, 256);
  std::printf("%-32s %6d %6d %6d %10.3f %9.1f\n", "baseline: plain i-k-j, 1 thread", 256, 256, 256, tn * 1e3,
              2.0 * 256 * 256 * 256 / tn * 1e-9);
  return 0;
}

int main(int argc, char** argv) {
  return kiln::examples::run_main("bench_cpu_gemm", [&] { return run(argc, argv); });
}
