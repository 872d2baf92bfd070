// Device helpers shared by kiln's CUDA kernels. Those that also compile for the host, so that a
// kernel using only them runs on the CPU's emulator, are in device_math.cuh (conversions to and
// from float, cast-on-load and store by a run-time dtype, warp and block reductions, grid-stride
// bounds, 16-byte vectors, the dense-pass split, the dynamic shared memory) and offset_calc.cuh
// (the offsets of strided operands), both included here. This file adds launch checking, the
// dynamic shared-memory opt-in, the dtypes' switch, the stream launcher, and the capture state
// and library handles.
// Plain CUDA C++: no fmt, spdlog, JSON or Catch2 here (nvcc 13 in C++20 mode rejects Debian's fmt).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/index.h"
#include "kernels/stream.h"
#include "kernels/strided.h"

namespace kiln::cuda_detail {

inline cudaStream_t raw_stream(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

// Throws kiln::DeviceError "<op>: <what> failed: <error name> (<description>)" unless err is cudaSuccess.
inline void check_cuda(cudaError_t err, const char* op, const char* what) {
  if (err != cudaSuccess) {
    throw DeviceError(std::string(op) + ": " + what + " failed: " + cudaGetErrorName(err) + " (" +
                      cudaGetErrorString(err) + ")");
  }
}

// Throws kiln::DeviceError naming `op` when the last launch failed.
inline void check_launch(const char* op) { check_cuda(cudaGetLastError(), op, "CUDA kernel launch"); }

// The current device, checked.
inline int current_device_checked(const char* op) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), op, "cudaGetDevice");
  return device;
}

// A kernel's static shared memory in bytes, asked of the runtime once per kernel (the first
// launch, which comes before any graph capture of it: a capture replays a warmed-up step).
inline size_t static_smem_bytes(const void* kernel, const char* op) {
  static std::mutex mutex;
  static std::unordered_map<const void*, size_t> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(kernel); it != known.end()) return it->second;
  cudaFuncAttributes attr{};
  check_cuda(cudaFuncGetAttributes(&attr, kernel), op, "querying the kernel's attributes");
  return known[kernel] = attr.sharedSizeBytes;
}

// Lets `kernel` launch with `bytes` of dynamic shared memory. The limits count the kernel's static
// shared memory too: up to 48 KB in all needs nothing; above that the kernel must opt in, up to the
// device's per-block limit. Throws kiln::Error naming `op` and `what` (the arguments that need that
// much) when the device has less.
// The opt-in is the function's, on one device, for every host thread: it is only ever raised (to the
// most any call has asked), so a thread that checked its size keeps it until its launch while
// another thread opts in for a smaller one.
template <typename K> void allow_dynamic_smem(K* kernel, size_t bytes, const char* op, const std::string& what) {
  constexpr size_t kDefault = 48 * 1024;
  if (bytes == 0) return;
  const void* fn = reinterpret_cast<const void*>(kernel);
  const size_t total = bytes + static_smem_bytes(fn, op);
  if (total <= kDefault) return;
  const int device = current_device_checked(op);
  int max_optin = 0;
  check_cuda(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), op,
             "querying the shared memory limit");
  if (total > static_cast<size_t>(max_optin)) {
    throw Error(std::string(op) + ": " + what + " need " + std::to_string(total) +
                " bytes of shared memory per block; this GPU has " + std::to_string(max_optin));
  }
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> opted;  // (kernel, device) -> bytes allowed
  std::lock_guard<std::mutex> lock(mutex);
  size_t& allowed = opted[{fn, device}];
  if (bytes <= allowed) return;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), op,
             "cudaFuncSetAttribute");
  allowed = bytes;
}

// --- row kernels (norm, loss, attention) ---------------------------------------------------------

// Kernels over float activations are instantiated for the three storage types CUDA tensors use;
// float64 is CPU-only (kernels/dtype.h), so it is refused by name instead of instantiated.
[[noreturn]] inline void throw_no_cuda_float_kernel(const char* op, DType t) {
  throw DTypeError(std::string(op) + ": no CUDA kernel for dtype " + dtype_name(t) +
                   " (CUDA kernels take float32, float16 or bfloat16; float64 is CPU-only)");
}
// Runs the statements with `S` naming the storage type of float dtype `dtype`.
#define KILN_CUDA_FLOAT_SWITCH(dtype, op, ...)                                 \
  switch (dtype) {                                                             \
    case ::kiln::DType::Float32: {                                             \
      using S = float;                                                         \
      __VA_ARGS__;                                                             \
      break;                                                                   \
    }                                                                          \
    case ::kiln::DType::Float16: {                                             \
      using S = __half;                                                        \
      __VA_ARGS__;                                                             \
      break;                                                                   \
    }                                                                          \
    case ::kiln::DType::BFloat16: {                                            \
      using S = __nv_bfloat16;                                                 \
      __VA_ARGS__;                                                             \
      break;                                                                   \
    }                                                                          \
    default: ::kiln::cuda_detail::throw_no_cuda_float_kernel((op), (dtype));   \
  }

// A launcher for host code that plans its own launches and is compiled for the emulator too
// (kernels/cuda/sort.cuh, random_multinomial.cuh, elementwise_{binary,unary,where}.cuh):
// launch(kernel, grid, block, arguments...) runs kernel<<<grid, block, 0, stream>>>(arguments...)
// and checks the launch under the op's name. The CPU tests pass a launcher of their own that runs
// the emulator.
struct StreamLaunch {
  cudaStream_t stream;
  const char* op;
  template <class... Params, class... Args>
  void operator()(void (*kernel)(Params...), dim3 grid, unsigned block, const Args&... args) const {
    kernel<<<grid, block, 0, stream>>>(args...);
    check_launch(op);
  }
};

}  // namespace kiln::cuda_detail

// --- capture state and library handles (cuBLASLt, cuDNN) ----------------------------------------

#include <mutex>
#include <utility>
#include <vector>

namespace kiln::cuda_detail {

// Whether work enqueued on `stream` now would land in a CUDA graph capture. The legacy default
// stream answers cudaErrorStreamCaptureImplicit while a blocking stream of the device captures;
// that counts as capturing too (using it would break the capture), and the error is cleared.
inline bool stream_capturing(Stream stream, const char* op) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(raw_stream(stream), &status);
  if (err == cudaErrorStreamCaptureImplicit) {
    (void)cudaGetLastError();
    return true;
  }
  check_cuda(err, op, "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

// A library handle (H is a pointer type) per device and host thread, as the libraries recommend.
// Created on a thread's first call on a device; when the thread ends its handles are parked in a
// process-wide list that the next new thread takes from, and no handle is ever destroyed: at exit
// the libraries may already be unloaded when destructors run. Creating a handle may allocate
// device memory, so it is refused while `stream` is capturing: the warm-up step creates it.
template <typename H, H (*Create)()> H thread_handle(int device, Stream stream, const char* op) {
  struct Parked {
    std::mutex mutex;
    std::vector<std::pair<int, H>> handles;
  };
  static Parked* parked = new Parked;  // leaked on purpose (see above)
  struct Owned {
    std::vector<std::pair<int, H>> handles;
    ~Owned() {
      std::lock_guard<std::mutex> lock(parked->mutex);
      for (const auto& h : handles) parked->handles.push_back(h);
    }
  };
  thread_local Owned owned;
  for (const auto& h : owned.handles)
    if (h.first == device) return h.second;
  H handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(parked->mutex);
    for (auto it = parked->handles.begin(); it != parked->handles.end(); ++it) {
      if (it->first == device) {
        handle = it->second;
        parked->handles.erase(it);
        break;
      }
    }
  }
  if (handle == nullptr) {
    if (stream_capturing(stream, op)) {
      throw DeviceError(std::string(op) +
                        ": the library handle of this thread and device would be created during CUDA graph "
                        "capture, which cannot allocate; run the captured work once before capturing (warm-up)");
    }
    handle = Create();
  }
  owned.handles.emplace_back(device, handle);
  return handle;
}

}  // namespace kiln::cuda_detail
