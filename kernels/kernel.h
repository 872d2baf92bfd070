// What every kernel entry point shares: its last argument, a KernelContext (the stream, scratch
// memory and the device error record, supplied by the caller), and the pairing of a kernel's CPU and
// CUDA twins. A twin pair has ONE signature: KILN_KERNEL refuses to compile when the twins differ,
// so a test or a benchmark can call either side of any kernel with the same problem description.
#pragma once

#include <cstddef>

#include "kernels/stream.h"

namespace kiln {

struct DeviceErrorRecord;  // kernels/index.h

// True in a build with the CUDA backend.
#if defined(KILN_WITH_CUDA)
inline constexpr bool kBuiltWithCuda = true;
#else
inline constexpr bool kBuiltWithCuda = false;
#endif

// What a kernel gets from the layer that calls it besides its problem.
struct KernelContext {
  // Memory and records that only the caller can provide (core hands out caching-allocator blocks).
  class Services {
   public:
    virtual ~Services() = default;
    // At least `bytes` of scratch on the call's device, valid for all work the call enqueues: on
    // CUDA the block is stream-ordered on `stream` (reused only by later work on that stream), on
    // the CPU it lives until the call returns.
    virtual void* workspace(size_t bytes) = 0;
    // The device's error record, where CUDA index checks leave the first bad index (raised as an
    // IndexError at the next synchronizing call).
    virtual DeviceErrorRecord* error_record() = 0;
  };

  Stream stream = nullptr;       // CUDA: the stream to enqueue on; the CPU ignores it
  Services* services = nullptr;  // null: the kernel must not need scratch or an error record

  // nullptr for 0 bytes; a kiln::Error when the context has no services.
  void* workspace(size_t bytes) const;
  DeviceErrorRecord* error_record() const;
};

// A kernel's two twins. `cuda` is null in a build without the CUDA backend.
template <typename Fn> struct Kernel {
  const char* name;
  Fn* cpu;
  Fn* cuda;
};

// Declares kernels::NAME pairing NAME_cpu with NAME_cuda (which must have the same type); use
// inside `namespace kiln::kernels`, after both declarations.
#if defined(KILN_WITH_CUDA)
#define KILN_KERNEL(name)                                              \
  inline constexpr ::kiln::Kernel<decltype(::kiln::name##_cpu)> name { \
#name, &::kiln::name##_cpu, &::kiln::name##_cuda                   \
  }
#else
#define KILN_KERNEL(name) \
  inline constexpr ::kiln::Kernel<decltype(::kiln::name##_cpu)> name { #name, &::kiln::name##_cpu, nullptr }
#endif

}  // namespace kiln
