// The CUDA runtime as kiln uses it: lazy initialization, device selection, the current stream per
// device and thread, events, guards, the caching and pinned allocators, and the math switches.
// No CUDA header here: a CPU build compiles and links the same API, where is_available() is false
// and everything that needs a device is a DeviceError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/allocator.h"
#include "core/cuda/caching_allocator.h"
#include "kernels/index.h"
#include "kernels/stream.h"

namespace kiln::cuda {

// True when a usable CUDA device exists. False, without throwing, on "no device", "insufficient
// driver" (error 35: a toolkit without a driver) and "unknown error", and in CPU builds. The first
// call initializes CUDA; nothing touches CUDA before it.
bool is_available();
int device_count();
// Why is_available() is false ("" when it is true), for messages.
std::string unavailable_reason();

int current_device();
// The device's PCI address as "domain:bus:device.function" (what NVML and nvidia-smi name it by), and
// its memory in bytes: both let a monitor find the same card whatever CUDA_VISIBLE_DEVICES renumbered.
std::string pci_bus_id(int device);
int64_t total_memory(int device);
// The device's L2 cache in bytes (asked once per device, then remembered).
int64_t l2_cache_bytes(int device);
void set_device(int index);

// The guards', streams' and events' fields are [[maybe_unused]]: a build without CUDA defines every
// member as a DeviceError and never reads them (clang's -Wunused-private-field).

// Makes `index` current for the scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  [[maybe_unused]] int prev_;
};

// The stream ops of this thread run on for `device` (-1: the current device). Default: the
// device's legacy default stream (nullptr).
Stream current_stream(int device = -1);
void set_current_stream(Stream stream, int device = -1);

class StreamGuard {
 public:
  explicit StreamGuard(Stream stream, int device = -1);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  [[maybe_unused]] int device_;
  [[maybe_unused]] Stream prev_;
};

// An owned, non-blocking stream.
class CudaStream {
 public:
  explicit CudaStream(int device = -1, bool high_priority = false);
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  Stream get() const { return stream_; }
  int device() const { return device_; }
  void synchronize() const;

 private:
  Stream stream_ = nullptr;
  int device_ = 0;
};

class Event {
 public:
  explicit Event(bool enable_timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(Stream stream);
  void wait(Stream stream) const;  // `stream` waits for this event, without blocking the host
  void synchronize() const;
  bool query() const;
  float elapsed_ms(const Event& end) const;

 private:
  [[maybe_unused]] void* event_ = nullptr;
  [[maybe_unused]] int device_ = 0;
};

void synchronize(int device = -1);
void stream_synchronize(Stream stream);

// Raises a DeviceError naming `op` when the last launch failed (kernels check through this too).
void check_last_launch(const char* op);

// The per-device caching allocator (created on first use) and its statistics.
CachingAllocator& caching_allocator(int device = -1);
MemoryStats memory_stats(int device = -1);
void reset_peak_memory_stats(int device = -1);
void empty_cache();

// Host memory for fast, asynchronous copies: a caching allocator of page-locked blocks. A block
// freed while a copy on some stream may still read it is reused only after that stream passes.
Allocator* pinned_allocator();
// What the pinned allocator has taken from CUDA: page-locked allocations made (cudaHostAlloc calls,
// which a warmed-up loader stops making) and the bytes they hold. Zeros in a CPU build.
struct PinnedStats {
  int64_t host_allocations = 0;
  int64_t reserved_bytes = 0;
};
PinnedStats pinned_memory_stats();

// Copies `nbytes` between host and device (either direction, or device to device) on `stream`.
// Blocking unless non_blocking and the host side is pinned.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes, Stream stream,
                bool non_blocking);

// The device's error record for kernels' index checks (a zeroed device buffer, created on first
// use), and the check that turns a recorded error into an IndexError: it synchronizes the device,
// so it runs where the host waits anyway (item(), copies to the host, synchronize()).
DeviceErrorRecord* device_error_record(int device = -1);
void raise_device_errors(int device = -1);

// Debugging aid for parity tests: fill every new block with 0xFF bytes (NaN for floats), so an
// output element a kernel forgot to write cannot pass. Also on with KILN_CUDA_POISON=1.
void set_poison_allocations(bool enabled);

// Math switches, named as in PyTorch; they take effect in the cuBLAS/cuDNN paths.
struct MathSwitches {
  bool allow_tf32_matmul = false;  // torch.backends.cuda.matmul.allow_tf32
  bool allow_tf32_cudnn = true;    // torch.backends.cudnn.allow_tf32
  bool cudnn_benchmark = false;    // torch.backends.cudnn.benchmark
  bool cudnn_enabled = true;       // torch.backends.cudnn.enabled
  // scaled_dot_product_attention's tensor-core forward and backward (kernels/cuda/attention_tc.cu,
  // attention_tc_backward.cu) for float16 and bfloat16 with head dims 64 or 128 and no mask (dropout
  // is fine). Off until a GPU run has checked them against the CPU; KILN_ATTENTION_TENSOR_CORES=1 in
  // the environment turns them on at start.
  bool attention_tensor_cores = false;
  // With attention_tensor_cores, the forward and backward on Hopper's warpgroup mma (wgmma) instead of
  // mma.sync, on devices of compute capability 9.0 in builds for sm_90 (elsewhere the mma.sync kernels
  // run). Off until a GPU run has checked them; KILN_ATTENTION_WGMMA=1 turns it on at start.
  bool attention_wgmma = false;
  // With attention_wgmma, the forward's warp-specialized kernel (a producer warpgroup loads the tiles
  // for two consumer warpgroups; kernels/cuda/attention_wgmma_forward.cuh). False: the same forward
  // with the whole block loading, to measure what warp specialization is worth;
  // KILN_ATTENTION_WGMMA_PRODUCER=0 turns it off at start.
  bool attention_wgmma_producer = true;
  // With attention_wgmma_producer, the warp-specialized forward's two consumer warpgroups take turns
  // issuing their products (FlashAttention-3's ping-pong), so that one's tensor-core work overlaps the
  // other's softmax. False: they issue when ready, to measure what the turns are worth;
  // KILN_ATTENTION_WGMMA_PINGPONG=0 turns it off at start.
  bool attention_wgmma_pingpong = true;
  // With attention_wgmma_producer, the producer loads the tiles with tensor copies (TMA: one thread
  // issues a tile's copy, which completes on the consumers' barrier) where the operands' rows are
  // 16-byte aligned and the driver encodes the maps; elsewhere, or with false, with cp.async (every
  // producer thread copies 16-byte pieces). The consumers store the output with tensor stores where
  // the tiles are swizzled and the driver encodes the output's map; else their threads store it.
  // KILN_ATTENTION_WGMMA_TMA=0 turns both off at start.
  bool attention_wgmma_tma = true;
  // With attention_wgmma, the forward stages its tiles in shared memory with the 128-byte swizzle
  // (the tensor copies write them so, wgmma reads them in its swizzle mode); false: by pieces, the
  // layout without a swizzle, to measure what it is worth. KILN_ATTENTION_WGMMA_SWIZZLE=0 turns it
  // off at start.
  bool attention_wgmma_swizzle = true;
  // With attention_tensor_cores, the backward as one fused kernel (AttentionArgs::fused_backward; on
  // mma.sync, or on wgmma with attention_wgmma): dK, dV and dQ from each block of keys, dQ summed with
  // float32 atomic adds, so not bit-for-bit deterministic; false: the two deterministic kernels. Off
  // until a GPU run has measured it; KILN_ATTENTION_FUSED_BACKWARD=1 turns it on at start.
  bool attention_fused_backward = false;
  // With attention_fused_backward on wgmma, the blocks add their shares of dQ with tensor reductions
  // (TMA: a block stages its share of a query tile in shared memory, one thread hands it to the copy
  // engine) where the driver makes the map; false: with atomic adds, to measure what the reductions
  // are worth. KILN_ATTENTION_WGMMA_DQ_REDUCE=0 turns it off at start.
  bool attention_wgmma_dq_reduce = true;
  // With attention_tensor_cores and causal, the kernels start their blocks longest first (the forward
  // and dq kernels their last query rows, which see the most keys; the dk/dv kernels their first keys);
  // false: in order, to measure what the order is worth. KILN_ATTENTION_LONGEST_FIRST=0 turns it off
  // at start.
  bool attention_longest_first = true;
  // Longest first, the batch entries per section of the order (AttentionArgs::order_section): 0 picks
  // it from the device's L2 (attention_order_section), 1 takes each entry's blocks together, as before
  // sections. KILN_ATTENTION_ORDER_SECTION=N sets it at start.
  int64_t attention_order_section = 0;
};
MathSwitches& math_switches();

}  // namespace kiln::cuda
