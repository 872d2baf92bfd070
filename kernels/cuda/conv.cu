// cuDNN convolutions through its legacy API. Descriptors come from kiln's element strides, so NCHW
// and channels-last tensors go in as they are. The algorithm of each problem is chosen once (by
// heuristics, or by timing with cudnn_benchmark) and cached; only algorithms cuDNN reports as
// deterministic are taken while one exists, so a step's gradients are the same bits on every run.
// Math modes never down-convert float32 to float16: TF32 tensor cores when allowed, else FMA only.
// Each choice is logged once, when it enters the cache (kernels/log.h: no spdlog in a .cu file).
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"
#include "kernels/factory.h"
#include "kernels/log.h"

namespace kiln {
namespace {

using namespace cuda_detail;

// The most workspace one algorithm may take (and an algorithm search is given): an algorithm that
// needs more is passed over for the next best.
constexpr size_t kMaxWorkspaceBytes = size_t{1} << 30;

enum class Direction : int { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

// Dense memory the convolution overwrites but cuDNN would not touch (an empty sum): zeros.
void zero(const StridedArg& a, const KernelContext& ctx) {
  StridedArg o = a;
  collapse_dims({&o});
  fill_cuda(o, 0.0, 0, ctx);
}

const char* op_name(Direction d) {
  switch (d) {
    case Direction::Forward: return "conv2d";
    case Direction::BackwardData: return "conv2d backward (input)";
    case Direction::BackwardFilter: return "conv2d backward (weight)";
  }
  return "conv2d";
}

void check(cudnnStatus_t st, const char* op, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  throw DeviceError(std::string(op) + ": " + what + " failed: " + cudnnGetErrorString(st) +
                    (detail[0] ? std::string(" (") + detail + ")" : std::string()));
}

cudnnHandle_t create_cudnn_handle() {
  cudnnHandle_t h = nullptr;
  check(cudnnCreate(&h), "conv2d", "cudnnCreate");
  return h;
}

cudnnDataType_t data_type(DType t, const char* op) {
  switch (t) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    default: break;
  }
  throw DTypeError(std::string(op) + ": unsupported dtype " + dtype_name(t) + " on CUDA");
}

// Accumulation in float (double for float64), as on the CPU.
cudnnDataType_t compute_type(DType t) { return t == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }

// The math mode asked for. CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION is never used: it may convert
// float32 data to float16. float32 gets TF32 tensor cores (CUDNN_TENSOR_OP_MATH) only when allowed,
// else CUDNN_FMA_MATH, which excludes tensor-core kernels (and with them TF32).
cudnnMathType_t wanted_math(const Conv2dArgs& p) {
  switch (p.dtype) {
    case DType::Float16:
    case DType::BFloat16: return CUDNN_TENSOR_OP_MATH;
    case DType::Float32: return p.allow_tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    default: return CUDNN_DEFAULT_MATH;
  }
}

int to_int(int64_t v, const char* op, const char* what) {
  if (v < 0 || v > INT_MAX) {
    throw ShapeError(std::string(op) + ": " + what + " " + std::to_string(v) +
                     " does not fit the int that cuDNN's legacy API takes");
  }
  return static_cast<int>(v);
}

std::string describe(const Conv2dArgs& p, int64_t batch) {
  const Conv2dGeometry& g = p.geo;
  const Window2d& w = g.window;
  auto pair = [](int64_t a, int64_t b) { return std::to_string(a) + "x" + std::to_string(b); };
  return "input [" + std::to_string(batch) + ", " + std::to_string(g.channels) + ", " + std::to_string(g.in_h) + ", " +
         std::to_string(g.in_w) + "] " + dtype_name(p.dtype) + (p.channels_last ? " channels-last" : "") +
         ", weight [" + std::to_string(p.out_channels) + ", " + std::to_string(g.channels / p.groups) + ", " +
         std::to_string(w.kernel_h) + ", " + std::to_string(w.kernel_w) + "], stride " +
         pair(w.stride_h, w.stride_w) + ", padding " + pair(w.pad_h, w.pad_w) + ", dilation " +
         pair(w.dilation_h, w.dilation_w) + ", groups " + std::to_string(p.groups);
}

// cuDNN strides for an image [n, c, h, w]. A size-1 dim addresses nothing, so its stride is
// arbitrary in kiln, but cuDNN infers the layout from strides: such a dim gets the stride it has in
// a dense tensor of the layout.
std::array<int, 4> cudnn_strides(ImageStrides s, int64_t n, int64_t c, int64_t h, int64_t w, bool channels_last,
                                 const char* op) {
  const int64_t dense_n = c * h * w;
  const int64_t dense_c = channels_last ? 1 : h * w;
  const int64_t dense_h = channels_last ? w * c : w;
  const int64_t dense_w = channels_last ? c : 1;
  return {to_int(n == 1 ? dense_n : s.n, op, "batch stride"), to_int(c == 1 ? dense_c : s.c, op, "channel stride"),
          to_int(h == 1 ? dense_h : s.h, op, "row stride"), to_int(w == 1 ? dense_w : s.w, op, "column stride")};
}

// The descriptors of one cuDNN call (the problem with its batch cut to `batch`). Host objects only.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

void make_descriptors(Descriptors& d, const Conv2dArgs& p, int64_t batch, const char* op) {
  const Conv2dGeometry& g = p.geo;
  const Window2d& win = g.window;
  const cudnnDataType_t dt = data_type(p.dtype, op);
  check(cudnnCreateTensorDescriptor(&d.x), op, "cudnnCreateTensorDescriptor");
  check(cudnnCreateTensorDescriptor(&d.y), op, "cudnnCreateTensorDescriptor");
  check(cudnnCreateFilterDescriptor(&d.w), op, "cudnnCreateFilterDescriptor");
  check(cudnnCreateConvolutionDescriptor(&d.conv), op, "cudnnCreateConvolutionDescriptor");
  const std::array<int, 4> xs = cudnn_strides(p.x_strides, batch, g.channels, g.in_h, g.in_w, p.channels_last, op);
  check(cudnnSetTensor4dDescriptorEx(d.x, dt, to_int(batch, op, "batch"), to_int(g.channels, op, "channels"),
                                     to_int(g.in_h, op, "height"), to_int(g.in_w, op, "width"), xs[0], xs[1], xs[2],
                                     xs[3]),
        op, "cudnnSetTensor4dDescriptorEx (input)");
  const std::array<int, 4> ys =
      cudnn_strides(p.y_strides, batch, p.out_channels, g.out_h, g.out_w, p.channels_last, op);
  check(cudnnSetTensor4dDescriptorEx(d.y, dt, to_int(batch, op, "batch"), to_int(p.out_channels, op, "channels"),
                                     to_int(g.out_h, op, "height"), to_int(g.out_w, op, "width"), ys[0], ys[1], ys[2],
                                     ys[3]),
        op, "cudnnSetTensor4dDescriptorEx (output)");
  // Filter dims are always given as [k, c, h, w]; the format says how they lie in memory.
  check(cudnnSetFilter4dDescriptor(d.w, dt, p.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                   to_int(p.out_channels, op, "channels"),
                                   to_int(g.channels / p.groups, op, "channels"),
                                   to_int(win.kernel_h, op, "kernel"), to_int(win.kernel_w, op, "kernel")),
        op, "cudnnSetFilter4dDescriptor");
  check(cudnnSetConvolution2dDescriptor(d.conv, to_int(win.pad_h, op, "padding"), to_int(win.pad_w, op, "padding"),
                                        to_int(win.stride_h, op, "stride"), to_int(win.stride_w, op, "stride"),
                                        to_int(win.dilation_h, op, "dilation"), to_int(win.dilation_w, op, "dilation"),
                                        CUDNN_CROSS_CORRELATION, compute_type(p.dtype)),
        op, "cudnnSetConvolution2dDescriptor");
  check(cudnnSetConvolutionGroupCount(d.conv, to_int(p.groups, op, "groups")), op, "cudnnSetConvolutionGroupCount");
}

// One direction's call on one chunk, with what an algorithm search needs (it runs the convolution
// for real: out is overwritten).
struct Call {
  Direction dir;
  cudnnHandle_t handle;
  const Descriptors& d;
  const void* in0;  // forward: x, backward data: w, backward filter: x
  const void* in1;  // forward: w, backward data: dy, backward filter: dy
  void* out;        // forward: y, backward data: dx, backward filter: dw
};

// An algorithm as the three directions' perf structs describe it (time_ms: what a search measured).
struct Perf {
  int algo;
  cudnnStatus_t status;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
  float time_ms = 0.0f;
  size_t memory = 0;
};

template <typename P> std::vector<Perf> to_perfs(const std::vector<P>& results, int count) {
  std::vector<Perf> out;
  for (int i = 0; i < count; ++i) {
    const P& r = results[static_cast<size_t>(i)];
    out.push_back({static_cast<int>(r.algo), r.status, r.determinism, r.mathType, r.time, r.memory});
  }
  return out;
}

int algo_count(Direction dir) {
  switch (dir) {
    case Direction::Forward: return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case Direction::BackwardData: return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    case Direction::BackwardFilter: return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
  return 0;
}

// The algorithms cuDNN documents as nondeterministic (atomics), whatever a perf struct says.
bool known_nondeterministic(Direction dir, int algo) {
  if (dir == Direction::BackwardData) return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  if (dir == Direction::BackwardFilter) {
    return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
  }
  return false;
}

int max_algo_count(const Call& c, const char* op) {
  int count = 0;
  switch (c.dir) {
    case Direction::Forward:
      check(cudnnGetConvolutionForwardAlgorithmMaxCount(c.handle, &count), op,
            "cudnnGetConvolutionForwardAlgorithmMaxCount");
      break;
    case Direction::BackwardData:
      check(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(c.handle, &count), op,
            "cudnnGetConvolutionBackwardDataAlgorithmMaxCount");
      break;
    case Direction::BackwardFilter:
      check(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(c.handle, &count), op,
            "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount");
      break;
  }
  return std::max(count, 1);
}

// The workspace `algo` needs under the descriptor's current math type; nullopt when cuDNN does
// not support it for this problem.
std::optional<size_t> workspace_size(const Call& c, int algo) {
  size_t bytes = 0;
  cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
  switch (c.dir) {
    case Direction::Forward:
      st = cudnnGetConvolutionForwardWorkspaceSize(c.handle, c.d.x, c.d.w, c.d.conv, c.d.y,
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes);
      break;
    case Direction::BackwardData:
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(c.handle, c.d.w, c.d.y, c.d.conv, c.d.x,
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes);
      break;
    case Direction::BackwardFilter:
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(c.handle, c.d.x, c.d.y, c.d.conv, c.d.w,
                                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes);
      break;
  }
  if (st != CUDNN_STATUS_SUCCESS) return std::nullopt;
  return bytes;
}

// cuDNN's heuristics, best first.
std::vector<Perf> heuristic_perfs(const Call& c, const char* op) {
  const int max = max_algo_count(c, op);
  int returned = 0;
  switch (c.dir) {
    case Direction::Forward: {
      std::vector<cudnnConvolutionFwdAlgoPerf_t> r(static_cast<size_t>(max));
      check(cudnnGetConvolutionForwardAlgorithm_v7(c.handle, c.d.x, c.d.w, c.d.conv, c.d.y, max, &returned, r.data()),
            op, "cudnnGetConvolutionForwardAlgorithm_v7");
      return to_perfs(r, std::min(returned, max));
    }
    case Direction::BackwardData: {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> r(static_cast<size_t>(max));
      check(cudnnGetConvolutionBackwardDataAlgorithm_v7(c.handle, c.d.w, c.d.y, c.d.conv, c.d.x, max, &returned,
                                                        r.data()),
            op, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      return to_perfs(r, std::min(returned, max));
    }
    case Direction::BackwardFilter: {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> r(static_cast<size_t>(max));
      check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.handle, c.d.x, c.d.y, c.d.conv, c.d.w, max, &returned,
                                                          r.data()),
            op, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
      return to_perfs(r, std::min(returned, max));
    }
  }
  return {};
}

// Every algorithm timed on the real buffers, fastest first (cuDNN synchronizes while it times).
std::vector<Perf> searched_perfs(const Call& c, void* workspace, size_t bytes, const char* op) {
  const int max = max_algo_count(c, op);
  int returned = 0;
  switch (c.dir) {
    case Direction::Forward: {
      std::vector<cudnnConvolutionFwdAlgoPerf_t> r(static_cast<size_t>(max));
      check(cudnnFindConvolutionForwardAlgorithmEx(c.handle, c.d.x, c.in0, c.d.w, c.in1, c.d.conv, c.d.y, c.out, max,
                                                   &returned, r.data(), workspace, bytes),
            op, "cudnnFindConvolutionForwardAlgorithmEx");
      return to_perfs(r, std::min(returned, max));
    }
    case Direction::BackwardData: {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> r(static_cast<size_t>(max));
      check(cudnnFindConvolutionBackwardDataAlgorithmEx(c.handle, c.d.w, c.in0, c.d.y, c.in1, c.d.conv, c.d.x, c.out,
                                                        max, &returned, r.data(), workspace, bytes),
            op, "cudnnFindConvolutionBackwardDataAlgorithmEx");
      return to_perfs(r, std::min(returned, max));
    }
    case Direction::BackwardFilter: {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> r(static_cast<size_t>(max));
      check(cudnnFindConvolutionBackwardFilterAlgorithmEx(c.handle, c.d.x, c.in0, c.d.y, c.in1, c.d.conv, c.d.w, c.out,
                                                          max, &returned, r.data(), workspace, bytes),
            op, "cudnnFindConvolutionBackwardFilterAlgorithmEx");
      return to_perfs(r, std::min(returned, max));
    }
  }
  return {};
}

// Every algorithm of the direction in enum order: the last resort when the heuristics offer
// nothing usable (pick() still asks cuDNN whether each one supports the problem).
std::vector<Perf> all_perfs(const Call& c, cudnnMathType_t math) {
  std::vector<Perf> out;
  for (int a = 0; a < algo_count(c.dir); ++a) {
    out.push_back({a, CUDNN_STATUS_SUCCESS,
                   known_nondeterministic(c.dir, a) ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC, math});
  }
  return out;
}

struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
  bool deterministic = true;
};

// --- names for the log ---------------------------------------------------------------------------

const char* algo_name(Direction dir, int algo) {
  static const char* const fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM",     "DIRECT",
                                    "FFT",           "FFT_TILING",            "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const bwd_data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const bwd_filter[] = {"ALGO_0",   "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                           "FFT_TILING"};
  auto at = [algo](const auto& names) -> const char* {
    return algo >= 0 && static_cast<size_t>(algo) < std::size(names) ? names[algo] : "?";
  };
  switch (dir) {
    case Direction::Forward: return at(fwd);
    case Direction::BackwardData: return at(bwd_data);
    case Direction::BackwardFilter: return at(bwd_filter);
  }
  return "?";
}

// The last convolution of this thread (last_conv_math_cuda). Per thread, as ops run on their caller's.
thread_local ConvMathRecord t_last_conv;

ConvMathType math_kind(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_DEFAULT_MATH: return ConvMathType::Default;
    case CUDNN_TENSOR_OP_MATH: return ConvMathType::TensorOp;
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return ConvMathType::TensorOpAllowConversion;
    case CUDNN_FMA_MATH: return ConvMathType::Fma;
  }
  return ConvMathType::None;
}

ConvPass pass_of(Direction d) {
  switch (d) {
    case Direction::Forward: return ConvPass::Forward;
    case Direction::BackwardData: return ConvPass::BackwardData;
    case Direction::BackwardFilter: return ConvPass::BackwardFilter;
  }
  return ConvPass::None;
}

const char* math_name(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_DEFAULT_MATH: return "default math";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op math";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op math with conversion";
    case CUDNN_FMA_MATH: return "FMA math";
  }
  return "unknown math";
}

// One line listing every candidate as cuDNN returned it, best first; with times when searched.
std::string candidates_str(Direction dir, const std::vector<Perf>& perfs, bool timed) {
  std::string s;
  for (const Perf& r : perfs) {
    if (!s.empty()) s += "; ";
    s += algo_name(dir, r.algo);
    if (r.status != CUDNN_STATUS_SUCCESS) {
      s += std::string(" (") + cudnnGetErrorString(r.status) + ")";
      continue;
    }
    if (timed) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " %.4f ms", static_cast<double>(r.time_ms));
      s += buf;
    }
    s += ", workspace " + format_bytes(r.memory) + ", " + math_name(r.math);
    if (r.determinism != CUDNN_DETERMINISTIC || known_nondeterministic(dir, r.algo)) s += ", nondeterministic";
  }
  return s.empty() ? "none" : s;
}

// The first of `perfs` (best first) that succeeded, is deterministic when asked, runs under the
// wanted math mode and fits the workspace limit.
std::optional<Choice> pick(const Call& c, const std::vector<Perf>& perfs, cudnnMathType_t want, bool deterministic) {
  for (const Perf& r : perfs) {
    if (r.status != CUDNN_STATUS_SUCCESS) continue;
    if (deterministic && (r.determinism != CUDNN_DETERMINISTIC || known_nondeterministic(c.dir, r.algo))) continue;
    // FMA (float32 without TF32) and default (float64) are requirements; under tensor-op math an
    // algorithm without tensor cores reports the default mode, which is then what it runs with.
    cudnnMathType_t math = (want == CUDNN_TENSOR_OP_MATH) ? r.math : want;
    if (math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (cudnnSetConvolutionMathType(c.d.conv, math) != CUDNN_STATUS_SUCCESS) continue;
    const std::optional<size_t> bytes = workspace_size(c, r.algo);
    if (!bytes || *bytes > kMaxWorkspaceBytes) continue;
    const bool det = r.determinism == CUDNN_DETERMINISTIC && !known_nondeterministic(c.dir, r.algo);
    return Choice{r.algo, math, *bytes, det};
  }
  return std::nullopt;
}

// The largest workspace any algorithm asks for under the wanted math mode, capped: what a search
// is given, so that it can time every algorithm that fits the cap.
size_t search_workspace_bytes(const Call& c) {
  size_t most = 0;
  for (int a = 0; a < algo_count(c.dir); ++a) {
    const std::optional<size_t> bytes = workspace_size(c, a);
    if (bytes && *bytes <= kMaxWorkspaceBytes) most = std::max(most, *bytes);
  }
  return most;
}

// What decides an algorithm: the device, direction, dtype, every size and stride, the layout, the
// convolution's parameters, the math mode and whether the choice came from a search.
using AlgoKey = std::array<int64_t, 30>;

AlgoKey algo_key(Direction dir, const Conv2dArgs& p, int64_t batch, int device, cudnnMathType_t math, bool search) {
  const Conv2dGeometry& g = p.geo;
  const Window2d& w = g.window;
  return {device,         static_cast<int64_t>(dir), static_cast<int64_t>(p.dtype), batch,         g.channels,
          g.in_h,         g.in_w,                    p.x_strides.n,                 p.x_strides.c, p.x_strides.h,
          p.x_strides.w,  p.out_channels,            g.out_h,                       g.out_w,       p.y_strides.n,
          p.y_strides.c,  p.y_strides.h,             p.y_strides.w,                 w.kernel_h,    w.kernel_w,
          w.stride_h,     w.stride_w,                w.pad_h,                       w.pad_w,       w.dilation_h,
          w.dilation_w,   p.groups,                  p.channels_last,               math,          search};
}

// Choices live for the process (leaked on purpose, like the handles).
struct AlgoCache {
  std::mutex mutex;
  std::map<AlgoKey, Choice> choices;
};

AlgoCache& algo_cache() {
  static AlgoCache* cache = new AlgoCache;
  return *cache;
}

// The algorithm for one chunk, cached per problem. `allow_search` is false where a search would
// overwrite results the output already holds (later chunks of the weight gradient).
Choice choose(const Call& c, const Conv2dArgs& p, int64_t batch, int device, bool allow_search,
              const KernelContext& ctx) {
  const Stream stream = ctx.stream;
  const char* op = op_name(c.dir);
  const cudnnMathType_t want = wanted_math(p);
  const bool search = p.benchmark && allow_search;
  const AlgoKey key = algo_key(c.dir, p, batch, device, want, search);
  AlgoCache& cache = algo_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.choices.find(key);
    if (it != cache.choices.end()) return it->second;
  }
  // Not under the lock: a search runs every algorithm. Two threads may both choose for one problem;
  // either choice is valid, and the first to reach the cache is kept.
  check(cudnnSetConvolutionMathType(c.d.conv, want), op, "cudnnSetConvolutionMathType");
  std::vector<Perf> perfs;
  if (search) {
    if (stream_capturing(stream, op)) {
      throw DeviceError(std::string(op) + ": cudnn_benchmark is on and this convolution (" + describe(p, batch) +
                        ") has not been searched yet; a search cannot run during CUDA graph capture: run the "
                        "captured work once before capturing (warm-up), or turn cudnn_benchmark off");
    }
    const size_t bytes = search_workspace_bytes(c);
    perfs = searched_perfs(c, ctx.workspace(bytes), bytes, op);
    KILN_LOG(Debug, std::string(op) + ": cuDNN timed search on cuda:" + std::to_string(device) + " for " +
                        describe(p, batch) + " (given a workspace of " + format_bytes(bytes) + "), fastest first: " +
                        candidates_str(c.dir, perfs, true));
  } else {
    perfs = heuristic_perfs(c, op);
    KILN_LOG(Debug, std::string(op) + ": cuDNN heuristics on cuda:" + std::to_string(device) + " for " +
                        describe(p, batch) + ", best first: " + candidates_str(c.dir, perfs, false));
  }
  // Deterministic first; when no deterministic algorithm supports the problem, the fastest other.
  const char* how = search ? "timed search" : "heuristics";
  std::optional<Choice> choice = pick(c, perfs, want, true);
  if (!choice && (choice = pick(c, all_perfs(c, want), want, true))) {
    how = "fallback to the first supported deterministic algorithm (no candidate was usable)";
  }
  if (!choice) choice = pick(c, perfs, want, false);
  if (!choice && (choice = pick(c, all_perfs(c, want), want, false))) {
    how = "fallback to the first supported algorithm (no candidate was usable)";
  }
  if (!choice) {
    throw DeviceError(std::string(op) + ": cuDNN has no algorithm for this convolution (" + describe(p, batch) + ")");
  }
  bool inserted = false;
  Choice chosen;
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto [it, fresh] = cache.choices.emplace(key, *choice);
    inserted = fresh;
    chosen = it->second;
  }
  // Once per problem: a thread that lost the race to fill the cache takes the winner's choice quietly.
  if (inserted) {
    KILN_LOG(Info, std::string(op) + ": cuDNN algorithm " + algo_name(c.dir, chosen.algo) + " by " + how +
                       " on cuda:" + std::to_string(device) + " for " + describe(p, batch) + "; " +
                       math_name(chosen.math) + ", workspace " + format_bytes(chosen.workspace) +
                       (chosen.deterministic ? ", deterministic" : ", nondeterministic (no deterministic algorithm "
                                                                   "supports this problem)"));
  }
  return chosen;
}

// Batch chunks keep every tensor of a call under 2^31 elements, which cuDNN's int descriptors
// address.
int64_t batch_chunk(const Conv2dArgs& p, const char* op) {
  const Conv2dGeometry& g = p.geo;
  const int64_t per_image = std::max<int64_t>({g.channels * g.in_h * g.in_w, p.out_channels * g.out_h * g.out_w, 1});
  if (per_image > INT_MAX) {
    throw ShapeError(std::string(op) + ": one image of " + describe(p, 1) +
                     " has more than 2^31 - 1 elements, more than cuDNN's legacy API addresses");
  }
  return std::clamp<int64_t>(INT_MAX / per_image, 1, std::max<int64_t>(g.batch, 1));
}

void run(Direction dir, const Conv2dArgs& p, void* out, const void* in0, const void* in1, const KernelContext& ctx) {
  const Stream stream = ctx.stream;
  const char* op = op_name(dir);
  (void)data_type(p.dtype, op);
  const Conv2dGeometry& g = p.geo;
  if (g.batch <= 0) return;
  if (p.groups <= 0 || g.channels <= 0 || p.out_channels <= 0 || g.channels % p.groups != 0 ||
      p.out_channels % p.groups != 0 || g.in_h <= 0 || g.in_w <= 0 || g.out_h <= 0 || g.out_w <= 0) {
    throw ShapeError(std::string(op) + ": cuDNN needs non-empty tensors and channels divisible by groups (" +
                     describe(p, g.batch) + ", output " + std::to_string(g.out_h) + "x" + std::to_string(g.out_w) +
                     ")");
  }
  const int device = current_device_checked(op);
  cudnnHandle_t handle = thread_handle<cudnnHandle_t, create_cudnn_handle>(device, stream, op);
  check(cudnnSetStream(handle, raw_stream(stream)), op, "cudnnSetStream");
  const int64_t chunk = batch_chunk(p, op);
  const auto es = static_cast<int64_t>(element_size(p.dtype));
  // Scaling factors are double for double data, float otherwise.
  const bool f64 = p.dtype == DType::Float64;
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const void* one = f64 ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* zero = f64 ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f);
  for (int64_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const int64_t count = std::min(chunk, g.batch - n0);
    Descriptors d;
    make_descriptors(d, p, count, op);
    // Per-chunk pointers: x-shaped and y-shaped tensors move by whole images; the filter stays.
    const int64_t x_off = n0 * p.x_strides.n * es, y_off = n0 * p.y_strides.n * es;
    const void* a = in0;
    const void* b = in1;
    void* o = out;
    switch (dir) {
      case Direction::Forward:  // in0 = x, in1 = w, out = y
        a = static_cast<const char*>(in0) + x_off;
        o = static_cast<char*>(out) + y_off;
        break;
      case Direction::BackwardData:  // in0 = w, in1 = dy, out = dx
        b = static_cast<const char*>(in1) + y_off;
        o = static_cast<char*>(out) + x_off;
        break;
      case Direction::BackwardFilter:  // in0 = x, in1 = dy, out = dw (summed over chunks)
        a = static_cast<const char*>(in0) + x_off;
        b = static_cast<const char*>(in1) + y_off;
        break;
    }
    const Call call{dir, handle, d, a, b, o};
    const bool first = n0 == 0;
    const Choice choice = choose(call, p, count, device, dir != Direction::BackwardFilter || first, ctx);
    check(cudnnSetConvolutionMathType(d.conv, choice.math), op, "cudnnSetConvolutionMathType");
    void* ws = ctx.workspace(choice.workspace);
    const void* beta = (dir == Direction::BackwardFilter && !first) ? one : zero;
    switch (dir) {
      case Direction::Forward:
        check(cudnnConvolutionForward(handle, one, d.x, a, d.w, b, d.conv,
                                      static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), ws, choice.workspace, beta,
                                      d.y, o),
              op, "cudnnConvolutionForward");
        break;
      case Direction::BackwardData:
        check(cudnnConvolutionBackwardData(handle, one, d.w, a, d.y, b, d.conv,
                                           static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algo), ws,
                                           choice.workspace, beta, d.x, o),
              op, "cudnnConvolutionBackwardData");
        break;
      case Direction::BackwardFilter:
        check(cudnnConvolutionBackwardFilter(handle, one, d.x, a, d.y, b, d.conv,
                                             static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice.algo), ws,
                                             choice.workspace, beta, d.w, o),
              op, "cudnnConvolutionBackwardFilter");
        break;
    }
    // Read back from the descriptor the call ran with: the hook reports cuDNN's view, not kiln's wish.
    cudnnMathType_t used = choice.math;
    check(cudnnGetConvolutionMathType(d.conv, &used), op, "cudnnGetConvolutionMathType");
    t_last_conv = {pass_of(dir), math_kind(wanted_math(p)), math_kind(used), static_cast<int>(used), choice.algo,
                   p.dtype};
  }
}

}  // namespace

ConvMathRecord last_conv_math_cuda() { return t_last_conv; }

void conv2d_forward_cuda(const Conv2dArgs& p, void* y, const void* x, const void* w, const void* bias,
                         const KernelContext& ctx) {
  const Conv2dGeometry& g = p.geo;
  const StridedArg out = image_arg(y, p.dtype, g.batch, p.out_channels, g.out_h, g.out_w, p.y_strides);
  if (out.numel() == 0) return;
  const StridedArg bias_arg = bias ? image_arg(bias, p.dtype, g.batch, p.out_channels, g.out_h, g.out_w,
                                               ImageStrides{0, 1, 0, 0})
                                   : StridedArg{};
  if (g.channels * g.in_h * g.in_w == 0) {  // no input channels or an all-padding image: empty sums
    Operand v;
    if (bias) {
      v.arg = bias_arg;
    } else {
      v.is_scalar = true;  // 0
    }
    unary_cuda(out, v, UnaryOp::Copy, compute_dtype_for(p.dtype), 0, 0, ctx);
    return;
  }
  run(Direction::Forward, p, y, x, w, ctx);
  if (bias) {  // y += bias, as a broadcast add in the compute type (the rounding of an add_)
    Operand self, b;
    self.arg = out;
    b.arg = bias_arg;
    binary_cuda(out, self, b, BinaryOp::Add, compute_dtype_for(p.dtype), 1.0, 0.0, ctx);
  }
}

void conv2d_backward_data_cuda(const Conv2dArgs& p, void* dx, const void* dy, const void* w,
                               const KernelContext& ctx) {
  const Conv2dGeometry& g = p.geo;
  const StridedArg gx = image_arg(dx, p.dtype, g.batch, g.channels, g.in_h, g.in_w, p.x_strides);
  if (gx.numel() == 0) return;
  if (p.out_channels * g.out_h * g.out_w == 0) return zero(gx, ctx);
  run(Direction::BackwardData, p, dx, w, dy, ctx);
}

void conv2d_backward_filter_cuda(const Conv2dArgs& p, void* dw, const void* x, const void* dy,
                                 const KernelContext& ctx) {
  const Conv2dGeometry& g = p.geo;
  const Window2d& win = g.window;
  const int64_t dw_numel = p.out_channels * (g.channels / std::max<int64_t>(p.groups, 1)) * win.kernel_h * win.kernel_w;
  if (dw_numel == 0) return;
  if (g.batch * g.channels * g.in_h * g.in_w == 0 || g.batch * p.out_channels * g.out_h * g.out_w == 0) {
    StridedArg a;
    a.data = dw;
    a.dtype = p.dtype;
    a.ndim = 1;
    a.sizes[0] = dw_numel;
    a.strides[0] = 1;
    return zero(a, ctx);
  }
  run(Direction::BackwardFilter, p, dw, x, dy, ctx);
}

}  // namespace kiln
