// GPU microbenchmarks (docs/architecture.md section 8) of the op table's bench cases (OpRow::bench, listed
// by bench/case_list.h; `--list-cases` writes that list without touching the GPU). Memory-bound cases
// report GB/s and % of a device-to-device copy, compute-bound ones TFLOP/s and % of the 8192^3 matmul
// of their precision, both ceilings measured in the same run. CUDA events around each run, median of
// many after warm-up, inputs rotated over >= 4 sets that together exceed 4x L2. Never asserts speed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "bench/case_list.h"
#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "examples/flags.h"

using namespace kiln;
using bench::ListedCase;

namespace {

struct Options {
  int64_t elements = int64_t(1) << 26;  // 256 MiB of float32 per tensor: each run alone exceeds L2
  int runs = 100;
  int warmup = 10;
  std::string json;
  bool list_cases = false;
  std::string command;
};

struct DeviceInfo {
  std::string name;
  int64_t l2_bytes = 0;
};

DeviceInfo device_info() {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) throw std::runtime_error("cudaGetDeviceProperties failed");
  return {p.name, static_cast<int64_t>(p.l2CacheSize)};
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

using bench::median;

const Device kCuda = Device::cuda(0);

// Random normal values of `dtype` on the GPU (drawn in float32, then cast: one code path for every
// dtype, and the draw is not timed). Should the GPU draw or cast be missing, the values are made on
// the CPU and copied, so the other cases are still measured.
Tensor random_on_gpu(const Shape& shape, DType dtype) {
  try {
    Tensor t = randn(shape, TensorOptions(DType::Float32, kCuda));
    return dtype == DType::Float32 ? t : t.to(dtype);
  } catch (const DeviceError&) {
    return randn(shape, TensorOptions(DType::Float32)).to(dtype).to(kCuda);
  }
}

TensorList make_inputs(const test::BenchSetup& s) {
  TensorList in;
  for (const test::BenchInput& b : s.inputs) {
    const TensorOptions o(b.dtype, kCuda);
    Tensor t;
    switch (b.fill) {
      case test::BenchInput::Fill::Normal: t = random_on_gpu(b.shape, b.dtype); break;
      case test::BenchInput::Fill::Ones: t = ones(b.shape, o); break;
      case test::BenchInput::Fill::Empty: t = empty(b.shape, o); break;
      case test::BenchInput::Fill::Tokens: t = randint(0, b.upper, b.shape, o); break;
    }
    in.push_back(b.format == MemoryFormat::ChannelsLast ? t.contiguous(MemoryFormat::ChannelsLast) : t);
  }
  return in;
}

// The math switches a compute-bound case runs under, set before every run (and restored after the
// case), so that each case states its precision itself.
void use_precision(bool tf32) {
  cuda::math_switches().allow_tf32_matmul = tf32;
  cuda::math_switches().allow_tf32_cudnn = tf32;
  cuda::math_switches().cudnn_benchmark = true;  // search once per shape, as a training loop would
}

// The timed work of one case on one input set: the copy ceiling's cudaMemcpyAsync, or the bench
// spec's own call, or else the row's op. The outputs are dropped at once, as a model drops them.
void run_case(const ListedCase& c, const TensorList& in) {
  if (c.copy_ceiling) {
    const Tensor& dst = in[0];
    const Tensor& src = in[1];
    cuda::copy_bytes(dst.data_ptr(), kCuda, src.data_ptr(), kCuda,
                     static_cast<size_t>(src.numel()) * src.element_size(), cuda::current_stream(), true);
    return;
  }
  if (c.compute_bound()) use_precision(c.setup.tf32);
  TensorList out = c.spec->run ? c.spec->run(in) : c.row->op(in);
}

struct Result {
  std::string name, dtype, error, precision;
  Shape shape;
  double bytes = 0, median_ms = 0, gbps = 0, pct_of_copy = 0;
  double flops = 0, tflops = 0, pct_of_matmul = 0;
  int sets = 0;
};

class Bench {
 public:
  Bench(Options o, DeviceInfo d) : opt_(std::move(o)), dev_(std::move(d)) {
    for (int i = 0; i < opt_.runs; ++i) {
      start_.push_back(std::make_unique<cuda::Event>(true));
      end_.push_back(std::make_unique<cuda::Event>(true));
    }
  }

  // Sets to rotate over: at least 4, and together at least 4x L2, so no run reads a warm cache.
  int sets_for(int64_t input_bytes_per_set) const {
    int64_t want = 4 * dev_.l2_bytes;
    int64_t n = (want + input_bytes_per_set - 1) / std::max<int64_t>(input_bytes_per_set, 1);
    return static_cast<int>(std::clamp<int64_t>(n, 4, 64));
  }

  // Times one case; its input sets are freed on return, before the next case.
  Result time(const ListedCase& c) {
    Result r;
    r.name = c.name;
    r.dtype = dtype_name(c.dtype);
    r.shape = c.setup.shape;
    r.bytes = c.setup.bytes;
    r.flops = c.setup.flops;
    r.precision = c.setup.precision;
    r.sets = sets_for(c.set_bytes);
    try {
      std::vector<TensorList> sets;
      for (int s = 0; s < r.sets; ++s) sets.push_back(make_inputs(c.setup));
      Stream stream = cuda::current_stream();
      for (int i = 0; i < opt_.warmup; ++i) run_case(c, sets[static_cast<size_t>(i % r.sets)]);
      cuda::synchronize();
      for (int i = 0; i < opt_.runs; ++i) {
        start_[static_cast<size_t>(i)]->record(stream);
        run_case(c, sets[static_cast<size_t>(i % r.sets)]);
        end_[static_cast<size_t>(i)]->record(stream);
      }
      cuda::synchronize();
      std::vector<double> ms;
      for (int i = 0; i < opt_.runs; ++i) {
        ms.push_back(start_[static_cast<size_t>(i)]->elapsed_ms(*end_[static_cast<size_t>(i)]));
      }
      r.median_ms = median(ms);
      // A rate from a zero time would be infinite, which JSON cannot hold: the case timed no GPU work.
      if (!(r.median_ms > 0)) throw Error("the median run took " + std::to_string(r.median_ms) + " ms on the GPU");
      r.gbps = c.setup.bytes / (r.median_ms * 1e-3) / 1e9;
      r.tflops = c.setup.flops / (r.median_ms * 1e-3) / 1e12;
    } catch (const std::exception& e) {
      r.error = e.what();
      try {
        cuda::synchronize();
      } catch (const std::exception&) {
      }
    }
    return r;
  }

  const Options& options() const { return opt_; }
  const DeviceInfo& device() const { return dev_; }

 private:
  Options opt_;
  DeviceInfo dev_;
  std::vector<std::unique_ptr<cuda::Event>> start_, end_;
};

// The ceilings each result is measured against, taken from the cases that measure them: the copy
// for memory-bound cases, each precision's 8192^3 matmul for compute-bound ones. The case list puts
// a ceiling before the cases measured against it.
struct Ceilings {
  double copy_gbps = 0;
  std::map<std::string, double> matmul_tflops;  // precision -> TFLOP/s

  void relate(const ListedCase& c, Result& r) {
    if (!r.error.empty()) return;
    if (c.compute_bound()) {
      if (c.setup.ceiling) matmul_tflops[c.setup.precision] = r.tflops;
      const auto it = matmul_tflops.find(c.setup.precision);
      if (it != matmul_tflops.end() && it->second > 0) r.pct_of_matmul = 100.0 * r.tflops / it->second;
    } else {
      if (c.copy_ceiling) copy_gbps = r.gbps;
      if (copy_gbps > 0) r.pct_of_copy = 100.0 * r.gbps / copy_gbps;
    }
  }
};

void print_header(bool compute) {
  if (compute) {
    std::printf("\n%-12s %-9s %-18s %5s %10s %9s %12s\n", "case", "dtype", "shape", "sets", "median ms", "TFLOP/s",
                "% of matmul");
  } else {
    std::printf("%-10s %-9s %-14s %5s %10s %10s %9s %10s\n", "case", "dtype", "shape", "sets", "MB moved",
                "median ms", "GB/s", "% of copy");
  }
}

void print_row(const Result& r) {
  const bool compute = r.flops > 0;
  const std::string shape = bench::shape_json(r.shape);
  if (!r.error.empty()) {
    std::printf(compute ? "%-12s %-9s %-18s  n/a: %s\n" : "%-10s %-9s %-14s  n/a: %s\n", r.name.c_str(), r.dtype.c_str(),
                shape.c_str(), r.error.c_str());
  } else if (compute) {
    std::printf("%-12s %-9s %-18s %5d %10.4f %9.1f %11.1f%%\n", r.name.c_str(), r.dtype.c_str(), shape.c_str(), r.sets,
                r.median_ms, r.tflops, r.pct_of_matmul);
  } else {
    std::printf("%-10s %-9s %-14s %5d %10.1f %10.4f %9.1f %9.1f%%\n", r.name.c_str(), r.dtype.c_str(), shape.c_str(),
                r.sets, r.bytes / 1e6, r.median_ms, r.gbps, r.pct_of_copy);
  }
  std::fflush(stdout);
}

std::string result_json(const Result& r, const Bench& b) {
  const Options& o = b.options();
  std::string s = "{\"impl\": \"kiln\", \"case\": \"" + r.name + "\", \"dtype\": \"" + r.dtype +
                  "\", \"shape\": " + bench::shape_json(r.shape);
  char num[512];
  if (r.error.empty()) {
    std::snprintf(num, sizeof num,
                  ", \"bytes\": %.0f, \"median_ms\": %.6f, \"gbps\": %.2f, \"pct_of_copy\": %.2f", r.bytes,
                  r.median_ms, r.gbps, r.pct_of_copy);
    s += num;
    if (r.flops > 0) {
      std::snprintf(num, sizeof num, ", \"flops\": %.0f, \"tflops\": %.2f, \"pct_of_matmul\": %.2f, \"precision\": \"%s\"",
                    r.flops, r.tflops, r.pct_of_matmul, r.precision.c_str());
      s += num;
    }
  } else {
    s += ", \"error\": \"" + bench::json_escape(r.error) + "\"";
    // So that tools/bench_compare.py still files a failed compute-bound case as compute-bound.
    if (r.flops > 0) {
      std::snprintf(num, sizeof num, ", \"flops\": %.0f, \"precision\": \"%s\"", r.flops, r.precision.c_str());
      s += num;
    }
  }
  std::snprintf(num, sizeof num, ", \"runs\": %d, \"warmup\": %d, \"sets\": %d", o.runs, o.warmup, r.sets);
  s += num;
  s += ", \"gpu\": \"" + bench::json_escape(b.device().name) + "\", \"date\": \"" + utc_now() + "\", \"command\": \"" +
       bench::json_escape(o.command) + "\"}";
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  opt.command = examples::command_line(argc, argv);
  examples::Flags app(
      "kiln's GPU microbenchmarks: the op table's bench cases against ceilings measured in the same run.", "gpu_bench");
  app.add_option("--json", opt.json, "write results (or, with --list-cases, the case list) as JSON lines here");
  app.add_option("--elements", opt.elements, "elements per memory-bound tensor (a positive multiple of 1024)")
      ->transform(examples::whole<int64_t>(1024, int64_t{1} << 40));
  app.add_option("--runs", opt.runs, "timed runs per case (the median is reported)")
      ->transform(examples::whole<int>(1, 1000000));
  app.add_option("--warmup", opt.warmup, "untimed runs per case first")->transform(examples::whole<int>(0, 1000000));
  app.add_flag("--list-cases", opt.list_cases, "write the case list to --json and exit; needs no GPU");
  try {
    app.parse(argc, argv);
  } catch (const examples::ExitRequest& e) {
    return e.code;
  }
  if (opt.elements < 1024 || opt.elements % 1024 != 0) {
    std::fprintf(stderr, "gpu_bench: --elements must be a positive multiple of 1024\n");
    return 2;
  }
  if (opt.list_cases) {
    if (opt.json.empty()) {
      std::fprintf(stderr, "gpu_bench: --list-cases needs --json FILE\n");
      return 2;
    }
    const std::string err = bench::write_case_list(opt.json, opt.elements);
    if (!err.empty()) {
      std::fprintf(stderr, "gpu_bench: %s\n", err.c_str());
      return 1;
    }
    std::printf("wrote %s\n", opt.json.c_str());
    return 0;
  }

  std::vector<ListedCase> cases;
  try {
    cases = bench::list_cases(opt.elements);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
  if (!cuda::is_available()) {
    std::fprintf(stderr, "gpu_bench: no usable CUDA device (%s)\n", cuda::unavailable_reason().c_str());
    return 1;
  }
  Bench bench(opt, device_info());
  std::printf("kiln gpu_bench on %s (L2 %.0f MiB), %lld elements, median of %d runs after %d warm-up, %s\n",
              bench.device().name.c_str(), static_cast<double>(bench.device().l2_bytes) / (1 << 20),
              static_cast<long long>(opt.elements), opt.runs, opt.warmup, utc_now().c_str());

  std::vector<Result> results;
  Ceilings ceilings;
  const cuda::MathSwitches saved = cuda::math_switches();
  print_header(false);
  for (size_t i = 0; i < cases.size(); ++i) {
    const ListedCase& c = cases[i];
    if (c.compute_bound() && (i == 0 || !cases[i - 1].compute_bound())) print_header(true);
    Result r = bench.time(c);
    cuda::math_switches() = saved;  // a case may have set its own precision
    ceilings.relate(c, r);
    print_row(r);
    results.push_back(r);
    // The file is rewritten after every case, so a run stopped by its time limit (or by a kernel
    // that never finishes) keeps every case it measured.
    if (!opt.json.empty()) {
      std::string text;
      for (const Result& done : results) text += result_json(done, bench) + "\n";
      if (!bench::write_atomic(opt.json, text)) {
        std::fprintf(stderr, "gpu_bench: cannot write %s\n", opt.json.c_str());
        return 1;
      }
    }
  }
  if (!opt.json.empty()) std::printf("wrote %s\n", opt.json.c_str());
  bool copy_ok = !results.empty() && results[0].error.empty();
  return copy_ok ? 0 : 1;
}
