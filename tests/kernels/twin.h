// Kernel twin tests: a kernel pair's CPU and CUDA twins called through the raw-pointer API on the
// same problem, outputs compared. Buffers are tensors with the same bytes on both devices (a Twin);
// a test builds its arguments per device from them, and run_twins calls each twin with the context
// of a KernelScope on that device, as core/ops does.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "tests/cuda/require_cuda.h"
#include "core/ops/dispatch.h"
#include "kernels/attention.h"
#include "kernels/kernel.h"

namespace kiln::test {

inline const Device kTwinCuda = Device::cuda(0);

// One buffer on both devices, with the same bytes.
struct Twin {
  Tensor cpu, cuda;
  const Tensor& on(Device d) const { return d.is_cpu() ? cpu : cuda; }
  void* ptr(Device d) const { return on(d).data_ptr(); }
  template <typename T> T* ptr(Device d) const { return static_cast<T*>(on(d).data_ptr()); }
};

// `t` (on the CPU) and a copy of it on the GPU.
inline Twin twin_of(const Tensor& t) { return Twin{t, t.to(kTwinCuda)}; }

// Random normal values (never zeros) of `dtype` and `shape`, the same on both devices.
inline Twin twin_randn(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0) {
  Generator g(seed);
  return twin_of((randn(shape, TensorOptions(DType::Float32), g) * scale).to(dtype));
}

// An output buffer filled with NaN (floats) or all-ones bytes on both devices: an element a twin
// forgot to write cannot pass for a result.
inline Twin twin_poisoned(const Shape& shape, DType dtype) {
  Tensor c = empty(shape, TensorOptions(dtype));
  if (is_floating(dtype)) {
    c.fill_(std::numeric_limits<double>::quiet_NaN());
  } else {
    c.fill_(-1);
  }
  return twin_of(c);
}

// Calls `kernel`'s twin for `device` with args_for(device) (a tuple) and a KernelScope's context
// there, then waits for it.
template <typename Fn, typename ArgsFor> void run_on(Device device, const Kernel<Fn>& kernel, ArgsFor&& args_for) {
  ops::KernelScope scope("twin test", device);
  std::apply([&](auto&&... a) { scope.run(kernel, a...); }, args_for(device));
  if (device.is_cuda()) cuda::synchronize();
}

template <typename Fn, typename ArgsFor> void run_twins(const Kernel<Fn>& kernel, ArgsFor&& args_for) {
  require_cuda();
  run_on(Device::cpu(), kernel, args_for);
  run_on(kTwinCuda, kernel, args_for);
}

// "" when the CUDA buffer matches the CPU one within atol + rtol * |cpu| (exactly when both are 0),
// NaN only against NaN; else the first mismatch and how many there are.
inline std::string compare_twin(const Twin& t, double atol = 0, double rtol = 0) {
  const std::vector<double> c = t.cpu.to_vector_double(), g = t.cuda.to_vector_double();
  if (c.size() != g.size()) return "sizes differ";
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < c.size(); ++i) {
    const bool ok = std::isnan(c[i]) ? std::isnan(g[i]) : std::fabs(g[i] - c[i]) <= atol + rtol * std::fabs(c[i]);
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os.precision(9);
  os << bad << " of " << c.size() << " elements differ; first " << first << ": cuda " << g[static_cast<size_t>(first)]
     << ", cpu " << c[static_cast<size_t>(first)];
  return os.str();
}

// A 1-d dense StridedArg over a buffer's data on `device`.
inline StridedArg flat_arg(const Twin& t, Device d) {
  StridedArg a;
  a.data = t.ptr(d);
  a.dtype = t.cpu.dtype();
  a.ndim = 1;
  a.sizes[0] = t.cpu.numel();
  a.strides[0] = 1;
  return a;
}

// Dense [B, L, E] / [B, S, E] attention arguments that the tensor-core kernels take (this file's
// twin tests and the emulated kernels of tests/kernels/test_attention_tc_simt.cpp).
inline AttentionArgs tensor_core_args(DType dtype, int64_t B, int64_t L, int64_t S, int64_t E, bool causal,
                                      double scale) {
  AttentionArgs a;
  a.dtype = dtype;
  a.batch = B;
  a.L = L;
  a.S = S;
  a.E = a.Ev = E;
  a.layout.ndim = 1;
  a.layout.sizes[0] = B;
  a.layout.q[0] = L * E;
  a.layout.k[0] = a.layout.v[0] = S * E;
  a.q_row_stride = a.k_row_stride = a.v_row_stride = E;
  attention_dense_outputs(a);
  a.causal = causal;
  a.scale = scale;
  a.tensor_cores = true;
  return a;
}

// The largest |element| of t (any device).
inline double max_abs(const Tensor& t) {
  double m = 0.0;
  for (double x : t.to_vector_double()) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace kiln::test
