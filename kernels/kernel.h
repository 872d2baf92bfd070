// What every kernel entry point shares: its last argument, a KernelContext (the stream, scratch
// memory and the device error record, supplied by the caller), and the pairing of a kernel's CPU and
// CUDA twins. A twin pair has ONE signature: KILN_KERNEL refuses to compile when the twins differ,
// so a test or a benchmark can call either side of any kernel with the same problem description.
#pragma once

#include <cstddef>

#include "kernels/stream.h"

namespace kiln {

struct DeviceErrorRecord;  // kernels/index.h

// True in a build with the CUDA backend (kernels/twins.cpp).
extern const bool kBuiltWithCuda;

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

// Declares kernels::NAME, the pair of NAME_cpu and NAME_cuda (which must have the same type); use
// inside `namespace kiln::kernels`, after both declarations. Every pair is defined in kernels/twins.cpp,
// which includes each kernel header with KILN_KERNEL meaning "define". That file is the only C++ of
// kiln's libraries that knows whether the CUDA backend is built (a few files in core/ that call the CUDA
// runtime aside), so every other object is the same in a CPU and a CUDA build, and a second build of
// the tree reuses the first one's objects from the compiler cache (docs/architecture.md section 8).
#ifndef KILN_KERNEL
#define KILN_KERNEL(name) extern const ::kiln::Kernel<decltype(::kiln::name##_cpu)> name
#endif

}  // namespace kiln
