// GPU microbenchmarks (ARCHITECTURE.md section 7). Memory-bound cases: a device-to-device copy
// measured in the same run is the bandwidth ceiling; elementwise add, GELU, sums (full and per row),
// softmax and layer_norm in float32 and bfloat16 report GB/s and % of it. Compute-bound cases:
// matmul (cuBLASLt) in bfloat16 and in float32 with TF32, and conv2d forward (cuDNN) in bfloat16
// (NCHW and channels-last) and float32 (TF32, cuDNN's default) report TFLOP/s and % of the 8192^3
// matmul of the same precision in the same run, the compute ceiling. CUDA events around each run,
// the median of many after warm-up, inputs rotated over at least 4 sets that together exceed 4x
// L2, random data. tools/torch_peer.py times PyTorch the same way and writes the same JSON lines.
// Never asserts speed.
//   usage: gpu_bench [--json FILE] [--elements N] [--runs R] [--warmup W]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"

using namespace kiln;

namespace {

struct Options {
  int64_t elements = int64_t(1) << 26;  // 256 MiB of float32 per tensor: each run alone exceeds L2
  int runs = 100;
  int warmup = 10;
  std::string json;
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

std::string json_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      r += ' ';
    } else {
      r += c;
    }
  }
  return r;
}

std::string shape_json(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One benchmark case: `make(set)` builds input set `set` (called once per set before timing), and
// `run(set)` is the timed work on it. `bytes` counts each input read once and each output written
// once, the fewest bytes the work must move.
struct Case {
  std::string name;
  DType dtype;
  Shape shape;
  double bytes;
  int64_t input_bytes_per_set;
  std::function<void(int)> make;
  std::function<void(int)> run;
  // Compute-bound cases: floating-point operations per run (a multiply-add counts 2), the precision
  // whose matmul ceiling they are measured against ("bf16", "tf32"), and whether this case is that
  // ceiling (the 8192^3 matmul).
  double flops = 0;
  std::string precision = {};
  bool is_compute_ceiling = false;
};

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

  Result time(const Case& c) {
    Result r;
    r.name = c.name;
    r.dtype = dtype_name(c.dtype);
    r.shape = c.shape;
    r.bytes = c.bytes;
    r.flops = c.flops;
    r.precision = c.precision;
    r.sets = sets_for(c.input_bytes_per_set);
    try {
      for (int s = 0; s < r.sets; ++s) c.make(s);
      Stream stream = cuda::current_stream();
      for (int i = 0; i < opt_.warmup; ++i) c.run(i % r.sets);
      cuda::synchronize();
      for (int i = 0; i < opt_.runs; ++i) {
        start_[static_cast<size_t>(i)]->record(stream);
        c.run(i % r.sets);
        end_[static_cast<size_t>(i)]->record(stream);
      }
      cuda::synchronize();
      std::vector<double> ms;
      for (int i = 0; i < opt_.runs; ++i) {
        ms.push_back(start_[static_cast<size_t>(i)]->elapsed_ms(*end_[static_cast<size_t>(i)]));
      }
      r.median_ms = median(ms);
      r.gbps = c.bytes / (r.median_ms * 1e-3) / 1e9;
      r.tflops = c.flops / (r.median_ms * 1e-3) / 1e12;
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

// Cases own their tensors through shared vectors captured by the lambdas; clearing them after a
// case frees its memory before the next one.
struct Buffers {
  std::vector<Tensor> a, b;
  void clear() {
    a.clear();
    b.clear();
  }
};

std::vector<Case> make_cases(int64_t n, Buffers& buf) {
  std::vector<Case> cases;
  const double nd = static_cast<double>(n);
  auto ensure = [](std::vector<Tensor>& v, int s, const Shape& shape, DType t) {
    if (static_cast<int>(v.size()) <= s) v.resize(static_cast<size_t>(s) + 1);
    v[static_cast<size_t>(s)] = random_on_gpu(shape, t);
  };
  // The ceiling: cudaMemcpyAsync device to device, bytes read + written.
  {
    Case c{"copy", DType::Float32, {n}, 2 * 4 * nd, 4 * n, nullptr, nullptr};
    c.make = [&buf, ensure, n](int s) {
      ensure(buf.a, s, {n}, DType::Float32);
      if (static_cast<int>(buf.b.size()) <= s) buf.b.resize(static_cast<size_t>(s) + 1);
      buf.b[static_cast<size_t>(s)] = empty({n}, TensorOptions(DType::Float32, kCuda));
    };
    c.run = [&buf](int s) {
      const Tensor& src = buf.a[static_cast<size_t>(s)];
      const Tensor& dst = buf.b[static_cast<size_t>(s)];
      cuda::copy_bytes(dst.data_ptr(), kCuda, src.data_ptr(), kCuda, static_cast<size_t>(src.numel()) * 4,
                       cuda::current_stream(), true);
    };
    cases.push_back(c);
  }
  // kiln's own copy kernel (Tensor::copy_) against that ceiling.
  {
    Case c{"copy_", DType::Float32, {n}, 2 * 4 * nd, 4 * n, nullptr, nullptr};
    c.make = cases[0].make;
    c.run = [&buf](int s) { buf.b[static_cast<size_t>(s)].copy_(buf.a[static_cast<size_t>(s)]); };
    cases.push_back(c);
  }
  for (DType t : {DType::Float32, DType::BFloat16}) {
    const double es = static_cast<double>(element_size(t));
    const int64_t esi = static_cast<int64_t>(element_size(t));
    {
      Case c{"add", t, {n}, 3 * es * nd, 2 * esi * n, nullptr, nullptr};
      c.make = [&buf, ensure, n, t](int s) {
        ensure(buf.a, s, {n}, t);
        ensure(buf.b, s, {n}, t);
      };
      c.run = [&buf](int s) { Tensor out = buf.a[static_cast<size_t>(s)] + buf.b[static_cast<size_t>(s)]; };
      cases.push_back(c);
    }
    {
      Case c{"gelu", t, {n}, 2 * es * nd, esi * n, nullptr, nullptr};
      c.make = [&buf, ensure, n, t](int s) { ensure(buf.a, s, {n}, t); };
      c.run = [&buf](int s) { Tensor out = gelu(buf.a[static_cast<size_t>(s)]); };
      cases.push_back(c);
    }
    {
      Case c{"sum", t, {n}, es * nd + es, esi * n, nullptr, nullptr};
      c.make = [&buf, ensure, n, t](int s) { ensure(buf.a, s, {n}, t); };
      c.run = [&buf](int s) { Tensor out = sum(buf.a[static_cast<size_t>(s)]); };
      cases.push_back(c);
    }
    {
      const int64_t cols = 1024, rows = n / cols;
      Case c{"sum_rows", t, {rows, cols}, es * static_cast<double>(rows * cols + rows), esi * rows * cols, nullptr,
             nullptr};
      c.make = [&buf, ensure, rows, t](int s) { ensure(buf.a, s, {rows, 1024}, t); };
      c.run = [&buf](int s) { Tensor out = sum(buf.a[static_cast<size_t>(s)], {1}); };
      cases.push_back(c);
    }
    // Row-wise ops of a transformer: rows of 1024, one read and one write per element.
    {
      const int64_t cols = 1024, rows = n / cols;
      Case c{"softmax", t, {rows, cols}, 2 * es * static_cast<double>(rows * cols), esi * rows * cols, nullptr,
             nullptr};
      c.make = [&buf, ensure, rows, t](int s) { ensure(buf.a, s, {rows, 1024}, t); };
      c.run = [&buf](int s) { Tensor out = softmax(buf.a[static_cast<size_t>(s)], -1); };
      cases.push_back(c);
    }
    {
      const int64_t cols = 1024, rows = n / cols;
      Case c{"layer_norm", t, {rows, cols}, 2 * es * static_cast<double>(rows * cols) + 2 * 4 * cols,
             esi * rows * cols, nullptr, nullptr};
      c.make = [&buf, ensure, rows, t](int s) {
        ensure(buf.a, s, {rows, 1024}, t);
        if (buf.b.empty()) buf.b.resize(1);
        buf.b[0] = ones({1024}, TensorOptions(DType::Float32, kCuda));  // float32 parameters
      };
      c.run = [&buf](int s) {
        Tensor out = layer_norm(buf.a[static_cast<size_t>(s)], {1024}, buf.b[0], Tensor());
      };
      cases.push_back(c);
    }
  }
  return cases;
}

// The math switches a case runs under, set before every run (and restored after the case by
// restore_switches), so that each case states its precision itself.
void use_precision(bool tf32) {
  cuda::math_switches().allow_tf32_matmul = tf32;
  cuda::math_switches().allow_tf32_cudnn = tf32;
  cuda::math_switches().cudnn_benchmark = true;  // search once per shape, as a training loop would
}

// Compute-bound cases: matmul [m, k] x [k, n] and conv2d forward. The 8192^3 matmul of each
// precision comes first (before its 4096^3 sibling) and is that precision's ceiling.
std::vector<Case> make_compute_cases(Buffers& buf) {
  std::vector<Case> cases;
  auto ensure = [](std::vector<Tensor>& v, int s, const Shape& shape, DType t, MemoryFormat f) {
    if (static_cast<int>(v.size()) <= s) v.resize(static_cast<size_t>(s) + 1);
    Tensor x = random_on_gpu(shape, t);
    v[static_cast<size_t>(s)] = f == MemoryFormat::ChannelsLast ? x.contiguous(MemoryFormat::ChannelsLast) : x;
  };
  struct Precision {
    const char* name;
    DType dtype;
    bool tf32;
  };
  const Precision precisions[] = {{"bf16", DType::BFloat16, false}, {"tf32", DType::Float32, true}};
  for (const Precision& p : precisions) {
    const double es = static_cast<double>(element_size(p.dtype));
    for (int64_t n : {int64_t(8192), int64_t(4096)}) {
      const double nd = static_cast<double>(n);
      Case c{std::string("matmul") + (p.tf32 ? "_tf32" : ""), p.dtype, {n, n, n}, 3 * es * nd * nd,
             2 * static_cast<int64_t>(es) * n * n, nullptr, nullptr};
      c.flops = 2 * nd * nd * nd;
      c.precision = p.name;
      c.is_compute_ceiling = n == 8192;
      c.make = [&buf, ensure, n, p](int s) {
        ensure(buf.a, s, {n, n}, p.dtype, MemoryFormat::Contiguous);
        ensure(buf.b, s, {n, n}, p.dtype, MemoryFormat::Contiguous);
      };
      c.run = [&buf, p](int s) {
        use_precision(p.tf32);
        Tensor out = matmul(buf.a[static_cast<size_t>(s)], buf.b[static_cast<size_t>(s)]);
      };
      cases.push_back(c);
    }
  }
  // A ResNet stage's 3x3 convolution: x [64, 128, 56, 56], weight [128, 128, 3, 3], padding 1.
  struct ConvCase {
    const char* name;
    Precision p;
    MemoryFormat format;
  };
  const ConvCase convs[] = {{"conv2d_nhwc", precisions[0], MemoryFormat::ChannelsLast},
                            {"conv2d_nchw", precisions[0], MemoryFormat::Contiguous},
                            {"conv2d_nchw", precisions[1], MemoryFormat::Contiguous}};
  const int64_t N = 64, C = 128, H = 56, W = 56, K = 128, R = 3;
  for (const ConvCase& cc : convs) {
    const double es = static_cast<double>(element_size(cc.p.dtype));
    const double x_elems = static_cast<double>(N * C * H * W), w_elems = static_cast<double>(K * C * R * R);
    const double out_elems = static_cast<double>(N * K * H * W);
    Case c{cc.name, cc.p.dtype, {N, C, H, W}, es * (x_elems + w_elems + out_elems),
           static_cast<int64_t>(es * (x_elems + w_elems)), nullptr, nullptr};
    c.flops = 2 * out_elems * static_cast<double>(C * R * R);
    c.precision = cc.p.name;
    const ConvCase conv = cc;
    c.make = [&buf, ensure, conv, N, C, H, W, K, R](int s) {
      ensure(buf.a, s, {N, C, H, W}, conv.p.dtype, conv.format);
      ensure(buf.b, s, {K, C, R, R}, conv.p.dtype, conv.format);
    };
    c.run = [&buf, conv](int s) {
      use_precision(conv.p.tf32);
      Tensor out = conv2d(buf.a[static_cast<size_t>(s)], buf.b[static_cast<size_t>(s)], Tensor(), {1, 1}, {1, 1});
    };
    cases.push_back(c);
  }
  return cases;
}

// The ceilings each result is measured against, taken from the cases that measure them: the copy
// for memory-bound cases, each precision's 8192^3 matmul for compute-bound ones. A ceiling case
// runs before the cases measured against it.
struct Ceilings {
  double copy_gbps = 0;
  std::map<std::string, double> matmul_tflops;  // precision -> TFLOP/s

  void relate(const Case& c, Result& r) {
    if (!r.error.empty()) return;
    if (c.flops > 0) {
      if (c.is_compute_ceiling) matmul_tflops[c.precision] = r.tflops;
      const auto it = matmul_tflops.find(c.precision);
      if (it != matmul_tflops.end() && it->second > 0) r.pct_of_matmul = 100.0 * r.tflops / it->second;
    } else {
      if (c.name == "copy") copy_gbps = r.gbps;
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
  const std::string shape = shape_json(r.shape);
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
                  "\", \"shape\": " + shape_json(r.shape);
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
    s += ", \"error\": \"" + json_escape(r.error) + "\"";
  }
  std::snprintf(num, sizeof num, ", \"runs\": %d, \"warmup\": %d, \"sets\": %d", o.runs, o.warmup, r.sets);
  s += num;
  s += ", \"gpu\": \"" + json_escape(b.device().name) + "\", \"date\": \"" + utc_now() + "\", \"command\": \"" +
       json_escape(o.command) + "\"}";
  return s;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "gpu_bench: %s\nusage: gpu_bench [--json FILE] [--elements N] [--runs R] [--warmup W]\n", why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 0; i < argc; ++i) {
    if (i) o.command += ' ';
    o.command += argv[i];
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--json") {
      o.json = value();
    } else if (a == "--elements") {
      o.elements = std::atoll(value().c_str());
    } else if (a == "--runs") {
      o.runs = std::atoi(value().c_str());
    } else if (a == "--warmup") {
      o.warmup = std::atoi(value().c_str());
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  if (o.elements < 1024 || o.elements % 1024 != 0) usage("--elements must be a positive multiple of 1024");
  if (o.runs < 1 || o.warmup < 0) usage("--runs must be >= 1 and --warmup >= 0");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse(argc, argv);
  if (!cuda::is_available()) {
    std::fprintf(stderr, "gpu_bench: no usable CUDA device (%s)\n", cuda::unavailable_reason().c_str());
    return 1;
  }
  Bench bench(opt, device_info());
  std::printf("kiln gpu_bench on %s (L2 %.0f MiB), %lld elements, median of %d runs after %d warm-up, %s\n",
              bench.device().name.c_str(), static_cast<double>(bench.device().l2_bytes) / (1 << 20),
              static_cast<long long>(opt.elements), opt.runs, opt.warmup, utc_now().c_str());

  Buffers buf;
  std::vector<Case> cases = make_cases(opt.elements, buf);
  for (Case& c : make_compute_cases(buf)) cases.push_back(std::move(c));
  std::vector<Result> results;
  Ceilings ceilings;
  const cuda::MathSwitches saved = cuda::math_switches();
  print_header(false);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (c.flops > 0 && (i == 0 || cases[i - 1].flops == 0)) print_header(true);
    Result r = bench.time(c);
    buf.clear();
    cuda::math_switches() = saved;  // a case may have set its own precision
    ceilings.relate(c, r);
    print_row(r);
    results.push_back(r);
  }

  if (!opt.json.empty()) {
    // Atomically: a temporary file beside the target, renamed over it once complete.
    const std::string tmp = opt.json + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    bool ok = f != nullptr;
    for (size_t i = 0; ok && i < results.size(); ++i) ok = std::fprintf(f, "%s\n", result_json(results[i], bench).c_str()) > 0;
    if (f) ok = std::fclose(f) == 0 && ok;
    if (!ok || std::rename(tmp.c_str(), opt.json.c_str()) != 0) {
      std::remove(tmp.c_str());
      std::fprintf(stderr, "gpu_bench: cannot write %s\n", opt.json.c_str());
      return 1;
    }
    std::printf("wrote %s\n", opt.json.c_str());
  }
  bool copy_ok = !results.empty() && results[0].error.empty();
  return copy_ok ? 0 : 1;
}
