// CUDA runtime wrappers. Everything is lazy: the first is_available() asks for the device count,
// and a failure there (no device, no driver: error 35, unknown error) means "no CUDA", not a crash.
// The CPU build compiles the bottom half of this file instead, where every call is a clear error.
// The outcome of that first query, and each device's allocator mode, are logged (kernels/log.h).
#include "core/cuda/runtime.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "kernels/error.h"
#include "kernels/log.h"

#if defined(KILN_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace kiln::cuda {

MathSwitches& math_switches() {
  static MathSwitches s = [] {
    MathSwitches m;
    const char* tc = std::getenv("KILN_ATTENTION_TENSOR_CORES");
    m.attention_tensor_cores = tc != nullptr && std::string(tc) == "1";
    const char* wg = std::getenv("KILN_ATTENTION_WGMMA");
    m.attention_wgmma = wg != nullptr && std::string(wg) == "1";
    const char* producer = std::getenv("KILN_ATTENTION_WGMMA_PRODUCER");
    m.attention_wgmma_producer = producer == nullptr || std::string(producer) != "0";
    const char* pingpong = std::getenv("KILN_ATTENTION_WGMMA_PINGPONG");
    m.attention_wgmma_pingpong = pingpong == nullptr || std::string(pingpong) != "0";
    const char* tma = std::getenv("KILN_ATTENTION_WGMMA_TMA");
    m.attention_wgmma_tma = tma == nullptr || std::string(tma) != "0";
    const char* swizzle = std::getenv("KILN_ATTENTION_WGMMA_SWIZZLE");
    m.attention_wgmma_swizzle = swizzle == nullptr || std::string(swizzle) != "0";
    const char* fused = std::getenv("KILN_ATTENTION_FUSED_BACKWARD");
    m.attention_fused_backward = fused != nullptr && std::string(fused) == "1";
    const char* dq_reduce = std::getenv("KILN_ATTENTION_WGMMA_DQ_REDUCE");
    m.attention_wgmma_dq_reduce = dq_reduce == nullptr || std::string(dq_reduce) != "0";
    const char* longest = std::getenv("KILN_ATTENTION_LONGEST_FIRST");
    m.attention_longest_first = longest == nullptr || std::string(longest) != "0";
    const char* section = std::getenv("KILN_ATTENTION_ORDER_SECTION");
    m.attention_order_section = section == nullptr ? 0 : std::max<int64_t>(0, std::atoll(section));
    return m;
  }();
  return s;
}

#if defined(KILN_WITH_CUDA)

namespace {

constexpr int kMaxDevices = 16;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw DeviceError(std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  }
}

cudaStream_t raw(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

struct InitState {
  std::once_flag once;
  int count = 0;
  std::string reason;
};

InitState& init_state() {
  static InitState s;
  std::call_once(s.once, [] {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      s.count = 0;
      s.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
      (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    } else if (n == 0) {
      s.reason = "no CUDA device";
    }
    s.count = err == cudaSuccess ? n : 0;
    if (s.count == 0) {
      KILN_LOG(Info, "cuda: not available (" + s.reason + "); only the CPU backend can be used");
    } else if (log_enabled(LogLevel::Info)) {
      std::string devices;
      for (int d = 0; d < s.count; ++d) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
          (void)cudaGetLastError();
          continue;
        }
        devices += std::string(devices.empty() ? "" : ", ") + "cuda:" + std::to_string(d) + " " + prop.name +
                   " (compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) + ", " +
                   std::to_string(prop.totalGlobalMem >> 20) + " MiB)";
      }
      log_message(LogLevel::Info, "cuda: " + std::to_string(s.count) + " device(s): " + devices);
    }
  });
  return s;
}

void require_device(int index) {
  InitState& s = init_state();
  if (s.count == 0) throw DeviceError("cuda: no usable CUDA device (" + s.reason + ")");
  if (index < 0 || index >= s.count) {
    throw DeviceError("cuda: device " + std::to_string(index) + " does not exist (" + std::to_string(s.count) +
                      " devices)");
  }
}

int resolve(int device) { return device < 0 ? current_device() : device; }

thread_local Stream t_current_streams[kMaxDevices] = {};

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  void* raw_alloc(size_t n) override {
    DeviceGuard g(device_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, n);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    check(err, "cudaMalloc");
    return p;
  }
  void raw_free(void* p) override {
    DeviceGuard g(device_);
    check(cudaFree(p), "cudaFree");
  }
  EventHandle record_event(Stream s) override {
    DeviceGuard g(device_);
    cudaEvent_t e;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(e, raw(s)), "cudaEventRecord");
    return e;
  }
  bool event_done(EventHandle e) override {
    cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    check(err, "cudaEventQuery");
    return true;
  }
  void destroy_event(EventHandle e) override { check(cudaEventDestroy(static_cast<cudaEvent_t>(e)), "cudaEventDestroy"); }
  bool is_capturing(Stream s) override {
    cudaStreamCaptureStatus st;
    check(cudaStreamIsCapturing(raw(s), &st), "cudaStreamIsCapturing");
    return st != cudaStreamCaptureStatusNone;
  }
  void synchronize() override {
    DeviceGuard g(device_);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  Stream current_stream() override { return cuda::current_stream(device_); }
  void fill(void* ptr, size_t n, int byte, Stream s) override {
    check(cudaMemsetAsync(ptr, byte, n, raw(s)), "cudaMemsetAsync");
  }
  size_t free_memory() override {
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return free_b;
  }

 private:
  int device_;
};

// Page-locked host blocks cached by power-of-two size; reuse waits for recorded streams.
class PinnedAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, 0, Device::cpu(), this);
    if (nbytes > SIZE_MAX / 4) {  // its power of two could wrap (no machine pins that much)
      throw OutOfMemoryError("pinned allocator: cannot allocate " + std::to_string(nbytes) + " bytes");
    }
    size_t size = 512;
    while (size < nbytes) size <<= 1;
    std::lock_guard<std::mutex> lk(mutex_);
    auto& list = free_[size];
    for (size_t i = 0; i < list.size(); ++i) {
      if (ready(list[i])) {
        void* p = list[i].ptr;
        list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
        sizes_[p] = size;
        return DataPtr(p, nbytes, Device::cpu(), this);
      }
    }
    require_device(0);
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, size, cudaHostAllocDefault);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      throw OutOfMemoryError("pinned allocator: cudaHostAlloc of " + std::to_string(size) + " bytes failed (" +
                             cudaGetErrorString(err) + ")");
    }
    sizes_[p] = size;
    ++stats_.host_allocations;
    stats_.reserved_bytes += static_cast<int64_t>(size);
    return DataPtr(p, nbytes, Device::cpu(), this);
  }
  PinnedStats stats() {
    std::lock_guard<std::mutex> lk(mutex_);
    return stats_;
  }
  void record_stream(void* ptr, Stream stream) override {
    std::lock_guard<std::mutex> lk(mutex_);
    auto& streams = uses_[ptr];
    if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
  }
  // See CachingAllocator::forget_stream: the stream's work is done, nothing need wait for it.
  void forget_stream(Stream stream) {
    std::lock_guard<std::mutex> lk(mutex_);
    for (auto& [ptr, streams] : uses_) streams.erase(std::remove(streams.begin(), streams.end(), stream), streams.end());
  }
  const char* name() const override { return "cuda-pinned"; }

 protected:
  // Runs in a storage's destructor, so it never throws: should an event not be recorded, the
  // block is kept back for good (a leak of one pinned block) rather than reused too early.
  void deallocate(void* ptr, size_t) override {
    std::lock_guard<std::mutex> lk(mutex_);
    Entry e{ptr, {}};
    bool recorded = true;
    for (Stream s : uses_[ptr]) {
      cudaEvent_t ev;
      if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
        recorded = false;
        break;
      }
      e.events.push_back(ev);
      if (cudaEventRecord(ev, raw(s)) != cudaSuccess) {
        recorded = false;
        break;
      }
    }
    uses_.erase(ptr);
    if (!recorded) {
      (void)cudaGetLastError();
      for (cudaEvent_t ev : e.events) cudaEventDestroy(ev);
      return;
    }
    free_[sizes_[ptr]].push_back(std::move(e));
  }

 private:
  struct Entry {
    void* ptr;
    std::vector<cudaEvent_t> events;
  };
  // Reusable once every recorded use is done. An event that cannot be queried (during another
  // thread's graph capture in global mode, or after a device error) counts as not done: reusing the
  // block could overwrite a batch still being copied. The error is cleared, or the next launch
  // check on this thread would report it as its own.
  bool ready(Entry& e) {
    for (cudaEvent_t ev : e.events) {
      const cudaError_t err = cudaEventQuery(ev);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
    }
    for (cudaEvent_t ev : e.events) cudaEventDestroy(ev);
    e.events.clear();
    return true;
  }
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<Entry>> free_;
  std::unordered_map<void*, size_t> sizes_;
  std::unordered_map<void*, std::vector<Stream>> uses_;
  PinnedStats stats_;
};

std::mutex g_alloc_mutex;
std::unique_ptr<CachingAllocator> g_allocators[kMaxDevices];
DeviceErrorRecord* g_error_records[kMaxDevices] = {};
PinnedAllocator& pinned_allocator_impl() {
  static PinnedAllocator* a = new PinnedAllocator();  // outlives every pinned storage
  return *a;
}
bool g_poison = [] {
  const char* p = std::getenv("KILN_CUDA_POISON");
  return p && std::string(p) == "1";
}();

}  // namespace

bool is_available() { return init_state().count > 0; }
int device_count() { return init_state().count; }
std::string unavailable_reason() { return init_state().reason; }

int current_device() {
  require_device(0);
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

std::string pci_bus_id(int device) {
  require_device(device);
  char id[32] = {};
  check(cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof id), device), "cudaDeviceGetPCIBusId");
  return id;
}

int64_t total_memory(int device) {
  require_device(device);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return static_cast<int64_t>(prop.totalGlobalMem);
}

int64_t l2_cache_bytes(int device) {
  require_device(device);
  static std::mutex mutex;
  static std::unordered_map<int, int64_t> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = known.find(device); it != known.end()) return it->second;
  int bytes = 0;
  check(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device), "cudaDeviceGetAttribute(L2 cache size)");
  return known[device] = bytes;
}

void set_device(int index) {
  require_device(index);
  check(cudaSetDevice(index), "cudaSetDevice");
}

DeviceGuard::DeviceGuard(int index) : prev_(current_device()) {
  if (index != prev_) set_device(index);
}
DeviceGuard::~DeviceGuard() {
  int cur = 0;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != prev_) cudaSetDevice(prev_);
}

Stream current_stream(int device) {
  int d = resolve(device);
  require_device(d);
  return t_current_streams[d];
}

void set_current_stream(Stream stream, int device) {
  int d = resolve(device);
  require_device(d);
  t_current_streams[d] = stream;
}

StreamGuard::StreamGuard(Stream stream, int device) : device_(resolve(device)), prev_(current_stream(device_)) {
  set_current_stream(stream, device_);
}
StreamGuard::~StreamGuard() { t_current_streams[device_] = prev_; }

CudaStream::CudaStream(int device, bool high_priority) : device_(resolve(device)) {
  DeviceGuard g(device_);
  int lo = 0, hi = 0;
  check(cudaDeviceGetStreamPriorityRange(&lo, &hi), "cudaDeviceGetStreamPriorityRange");
  cudaStream_t s;
  check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high_priority ? hi : lo), "cudaStreamCreate");
  stream_ = reinterpret_cast<Stream>(s);
}
CudaStream::~CudaStream() {
  if (!stream_) return;
  // Wait for the stream's work, then let the allocators forget it: a block recorded on this stream
  // and freed later must neither record an event into a destroyed stream nor wait for one. A
  // destructor must not throw: should the device be gone (process teardown), there is nothing
  // left to wait for.
  try {
    DeviceGuard g(device_);
    (void)cudaStreamSynchronize(raw(stream_));
    std::unique_lock<std::mutex> lk(g_alloc_mutex);
    CachingAllocator* a = g_allocators[device_].get();
    lk.unlock();
    if (a) a->forget_stream(stream_);
    pinned_allocator_impl().forget_stream(stream_);
  } catch (const std::exception&) {
    (void)cudaGetLastError();
  }
  cudaStreamDestroy(raw(stream_));
}
void CudaStream::synchronize() const { stream_synchronize(stream_); }

Event::Event(bool enable_timing) : device_(current_device()) {
  cudaEvent_t e;
  check(cudaEventCreateWithFlags(&e, enable_timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
  event_ = e;
}
Event::~Event() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}
void Event::record(Stream stream) { check(cudaEventRecord(static_cast<cudaEvent_t>(event_), raw(stream)), "cudaEventRecord"); }
void Event::wait(Stream stream) const {
  check(cudaStreamWaitEvent(raw(stream), static_cast<cudaEvent_t>(event_), 0), "cudaStreamWaitEvent");
}
void Event::synchronize() const {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "cudaEventSynchronize");
  raise_deferred_free_errors();
}
bool Event::query() const {
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  check(err, "cudaEventQuery");
  return true;
}
float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(event_), static_cast<cudaEvent_t>(end.event_)),
        "cudaEventElapsedTime");
  return ms;
}

void synchronize(int device) {
  DeviceGuard g(resolve(device));
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  raise_device_errors(resolve(device));
}

void stream_synchronize(Stream stream) {
  check(cudaStreamSynchronize(raw(stream)), "cudaStreamSynchronize");
  raise_deferred_free_errors();
}

void check_last_launch(const char* op) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw DeviceError(std::string(op) + ": kernel launch failed: " + cudaGetErrorName(err) + " (" +
                      cudaGetErrorString(err) + ")");
  }
}

CachingAllocator& caching_allocator(int device) {
  int d = resolve(device);
  require_device(d);
  std::lock_guard<std::mutex> lk(g_alloc_mutex);
  if (!g_allocators[d]) {
    const char* mode = std::getenv("KILN_CUDA_ALLOC");
    bool direct = mode && std::string(mode) == "direct";
    g_allocators[d] = std::make_unique<CachingAllocator>(Device::cuda(d), std::make_unique<CudaBackend>(d), direct);
    g_allocators[d]->set_poison(g_poison);
    if (direct) {
      KILN_LOG(Info, "cuda:" + std::to_string(d) +
                         ": KILN_CUDA_ALLOC=direct, the caching allocator is bypassed (every tensor is its own "
                         "cudaMalloc)");
    }
  }
  return *g_allocators[d];
}

MemoryStats memory_stats(int device) { return caching_allocator(device).memory_stats(); }

void set_poison_allocations(bool enabled) {
  std::lock_guard<std::mutex> lk(g_alloc_mutex);
  g_poison = enabled;
  for (auto& a : g_allocators)
    if (a) a->set_poison(enabled);
}

DeviceErrorRecord* device_error_record(int device) {
  int d = resolve(device);
  require_device(d);
  std::lock_guard<std::mutex> lk(g_alloc_mutex);
  if (!g_error_records[d]) {
    DeviceGuard g(d);
    void* p = nullptr;
    check(cudaMalloc(&p, sizeof(DeviceErrorRecord)), "cudaMalloc");
    check(cudaMemset(p, 0, sizeof(DeviceErrorRecord)), "cudaMemset");
    g_error_records[d] = static_cast<DeviceErrorRecord*>(p);
  }
  return g_error_records[d];
}

void raise_device_errors(int device) {
  raise_deferred_free_errors();
  int d = resolve(device);
  DeviceErrorRecord* rec = nullptr;
  {
    std::lock_guard<std::mutex> lk(g_alloc_mutex);
    rec = g_error_records[d];
  }
  if (!rec) return;
  DeviceGuard g(d);
  DeviceErrorRecord host{};
  check(cudaMemcpy(&host, rec, sizeof host, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (host.op == 0) return;
  check(cudaMemset(rec, 0, sizeof host), "cudaMemset");
  const std::string where = " (detected on cuda:" + std::to_string(d) + ")";
  if (static_cast<IndexCheckOp>(host.op) == IndexCheckOp::Multinomial) {
    static const char* const reasons[] = {"?", "has an inf or NaN weight", "has a negative weight", "sums to zero",
                                          "sums to inf", "has fewer non-zero weights than samples drawn without "
                                          "replacement"};
    const int64_t r = host.size >= 1 && host.size <= 5 ? host.size : 0;
    throw Error("multinomial: row " + std::to_string(host.index) + " " + reasons[r] + where);
  }
  throw IndexError(std::string(index_check_op_name(static_cast<IndexCheckOp>(host.op))) + ": index " +
                   std::to_string(host.index) + " is out of range for size " + std::to_string(host.size) + where);
}
void reset_peak_memory_stats(int device) { caching_allocator(device).reset_peak_stats(); }
void empty_cache() {
  for (int d = 0; d < device_count(); ++d) {
    std::unique_lock<std::mutex> lk(g_alloc_mutex);
    CachingAllocator* a = g_allocators[d].get();
    lk.unlock();
    if (a) a->empty_cache();
  }
}

Allocator* pinned_allocator() { return &pinned_allocator_impl(); }
PinnedStats pinned_memory_stats() { return pinned_allocator_impl().stats(); }

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes, Stream stream,
                bool non_blocking) {
  if (nbytes == 0) return;
  cudaMemcpyKind kind = dst_device.is_cuda() ? (src_device.is_cuda() ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                             : (src_device.is_cuda() ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  DeviceGuard g(dst_device.is_cuda() ? dst_device.index : src_device.index);
  check(cudaMemcpyAsync(dst, src, nbytes, kind, raw(stream)), "cudaMemcpyAsync");
  if (!non_blocking) {
    stream_synchronize(stream);
    if (src_device.is_cuda() && !dst_device.is_cuda()) raise_device_errors(src_device.index);
  }
}

#else  // CPU build: the same API, no device.

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw DeviceError(std::string(what) + ": this build of kiln has no CUDA backend (configure with KILN_CUDA=ON)");
}
}  // namespace

bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return "built without CUDA"; }
int current_device() { no_cuda("cuda::current_device"); }
std::string pci_bus_id(int) { no_cuda("cuda::pci_bus_id"); }
int64_t total_memory(int) { no_cuda("cuda::total_memory"); }
int64_t l2_cache_bytes(int) { no_cuda("cuda::l2_cache_bytes"); }
void set_device(int) { no_cuda("cuda::set_device"); }
DeviceGuard::DeviceGuard(int) : prev_(0) { no_cuda("cuda::DeviceGuard"); }
DeviceGuard::~DeviceGuard() = default;
Stream current_stream(int) { no_cuda("cuda::current_stream"); }
void set_current_stream(Stream, int) { no_cuda("cuda::set_current_stream"); }
StreamGuard::StreamGuard(Stream, int) : device_(0), prev_(nullptr) { no_cuda("cuda::StreamGuard"); }
StreamGuard::~StreamGuard() = default;
CudaStream::CudaStream(int, bool) { no_cuda("cuda::CudaStream"); }
CudaStream::~CudaStream() = default;
void CudaStream::synchronize() const { no_cuda("cuda::CudaStream::synchronize"); }
Event::Event(bool) { no_cuda("cuda::Event"); }
Event::~Event() = default;
void Event::record(Stream) { no_cuda("cuda::Event::record"); }
void Event::wait(Stream) const { no_cuda("cuda::Event::wait"); }
void Event::synchronize() const { no_cuda("cuda::Event::synchronize"); }
bool Event::query() const { no_cuda("cuda::Event::query"); }
float Event::elapsed_ms(const Event&) const { no_cuda("cuda::Event::elapsed_ms"); }
void synchronize(int) { no_cuda("cuda::synchronize"); }
void stream_synchronize(Stream) { no_cuda("cuda::stream_synchronize"); }
void check_last_launch(const char*) {}
CachingAllocator& caching_allocator(int) { no_cuda("cuda::caching_allocator"); }
MemoryStats memory_stats(int) { no_cuda("cuda::memory_stats"); }
void reset_peak_memory_stats(int) { no_cuda("cuda::reset_peak_memory_stats"); }
void empty_cache() {}
Allocator* pinned_allocator() { no_cuda("cuda::pinned_allocator"); }
PinnedStats pinned_memory_stats() { return {}; }
void copy_bytes(void*, Device, const void*, Device, size_t, Stream, bool) { no_cuda("cuda::copy_bytes"); }
DeviceErrorRecord* device_error_record(int) { no_cuda("cuda::device_error_record"); }
void raise_device_errors(int) {}
void set_poison_allocations(bool) {}

#endif

}  // namespace kiln::cuda
