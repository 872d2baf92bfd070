// NVML loaded at run time and a sampling thread (core/gpu_monitor.h).
#include "core/gpu_monitor.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "core/cuda/runtime.h"
#include "kernels/error.h"
#include "kernels/log.h"

namespace kiln::monitor {

void Stat::add(double v) {
  if (std::isnan(v)) return;
  ++n;
  sum += v;
  min = std::min(min, v);
  max = std::max(max, v);
}

void Stat::merge(const Stat& other) {
  n += other.n;
  sum += other.sum;
  min = std::min(min, other.min);
  max = std::max(max, other.max);
}

double Stat::mean() const { return n > 0 ? sum / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN(); }

void GpuSummary::add(const GpuSample& s) {
  ++samples;
  utilization.add(s.utilization);
  memory_utilization.add(s.memory_utilization);
  memory_used_mb.add(s.memory_used_mb);
  power_w.add(s.power_w);
  sm_clock_mhz.add(s.sm_clock_mhz);
  if (!std::isnan(s.memory_total_mb)) memory_total_mb = s.memory_total_mb;
}

void GpuSummary::merge(const GpuSummary& other) {
  samples += other.samples;
  utilization.merge(other.utilization);
  memory_utilization.merge(other.memory_utilization);
  memory_used_mb.merge(other.memory_used_mb);
  power_w.merge(other.power_w);
  sm_clock_mhz.merge(other.sm_clock_mhz);
  if (!std::isnan(other.memory_total_mb)) memory_total_mb = other.memory_total_mb;
  if (!std::isnan(other.max_sm_clock_mhz)) max_sm_clock_mhz = other.max_sm_clock_mhz;
  if (!other.name.empty()) name = other.name;
}

std::string GpuSummary::str() const {
  if (samples == 0) return "no GPU samples";
  std::string out;
  char buf[128];
  auto append = [&](const char* text) {
    if (!out.empty()) out += ", ";
    out += text;
  };
  if (utilization.n > 0) {
    std::snprintf(buf, sizeof buf, "GPU util %.0f%% (min %.0f, max %.0f)", utilization.mean(), utilization.min,
                  utilization.max);
    append(buf);
  }
  if (memory_used_mb.n > 0) {
    std::snprintf(buf, sizeof buf, "memory %.0f of %.0f MiB", memory_used_mb.max, memory_total_mb);
    append(buf);
  }
  if (power_w.n > 0) {
    std::snprintf(buf, sizeof buf, "%.0f W", power_w.mean());
    append(buf);
  }
  if (sm_clock_mhz.n > 0) {
    std::snprintf(buf, sizeof buf, "SM %.0f MHz", sm_clock_mhz.mean());
    append(buf);
  }
  std::snprintf(buf, sizeof buf, "%lld samples", static_cast<long long>(samples));
  append(buf);
  return out;
}

// --- NVML ----------------------------------------------------------------------------------------
// The few declarations kiln needs, as NVML's API reference gives them: every call returns an int
// status (0: success), a device is an opaque pointer, and the structs below are laid out as NVML's.
namespace {

using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

const char* default_library() {
  const char* env = std::getenv("KILN_NVML_LIBRARY");
  return env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1";
}

}  // namespace

struct NvmlLibrary::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*by_index)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  // The structs travel as void*: a pointer to a function whose parameter is another TU's struct type
  // is, to the sanitizers' function-type check, a call through the wrong type.
  NvmlReturn (*utilization)(NvmlDevice, void*) = nullptr;  // nvmlUtilization_t*
  NvmlReturn (*memory)(NvmlDevice, void*) = nullptr;       // nvmlMemory_t*
  NvmlReturn (*power_mw)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*clock)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*max_clock)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;

  std::string error(NvmlReturn r) const {
    const char* text = error_string != nullptr ? error_string(r) : nullptr;
    return "NVML error " + std::to_string(r) + (text != nullptr ? std::string(" (") + text + ")" : std::string());
  }
};

NvmlLibrary::NvmlLibrary(std::string path) : path_(path.empty() ? default_library() : std::move(path)) {
  handle_ = ::dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* why = ::dlerror();
    reason_ = "cannot load " + path_ + (why != nullptr ? std::string(": ") + why : std::string());
    return;
  }
  api_ = std::make_unique<Api>();
  std::string missing;
  auto resolve = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle_, symbol));
    if (fn == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(symbol);
  };
  resolve(api_->init, "nvmlInit_v2");
  resolve(api_->shutdown, "nvmlShutdown");
  resolve(api_->error_string, "nvmlErrorString");
  resolve(api_->by_index, "nvmlDeviceGetHandleByIndex_v2");
  resolve(api_->by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
  resolve(api_->utilization, "nvmlDeviceGetUtilizationRates");
  resolve(api_->memory, "nvmlDeviceGetMemoryInfo");
  resolve(api_->power_mw, "nvmlDeviceGetPowerUsage");
  resolve(api_->clock, "nvmlDeviceGetClockInfo");
  resolve(api_->max_clock, "nvmlDeviceGetMaxClockInfo");
  resolve(api_->name, "nvmlDeviceGetName");
  if (!missing.empty()) {
    reason_ = path_ + " lacks " + missing;
    return;
  }
  const NvmlReturn r = api_->init();
  if (r != kNvmlSuccess) {
    reason_ = "nvmlInit_v2 failed: " + api_->error(r);
    return;
  }
  available_ = true;
}

NvmlLibrary::~NvmlLibrary() {
  if (available_) (void)api_->shutdown();
  if (handle_ != nullptr) ::dlclose(handle_);
}

void* NvmlLibrary::device_by_pci_bus_id(const std::string& bus_id, std::string& why) const {
  if (!available_) {
    why = reason_;
    return nullptr;
  }
  NvmlDevice d = nullptr;
  const NvmlReturn r = api_->by_pci_bus_id(bus_id.c_str(), &d);
  if (r != kNvmlSuccess) why = "no NVML device at PCI " + bus_id + ": " + api_->error(r);
  return r == kNvmlSuccess ? d : nullptr;
}

void* NvmlLibrary::device_by_index(unsigned index, std::string& why) const {
  if (!available_) {
    why = reason_;
    return nullptr;
  }
  NvmlDevice d = nullptr;
  const NvmlReturn r = api_->by_index(index, &d);
  if (r != kNvmlSuccess) why = "no NVML device " + std::to_string(index) + ": " + api_->error(r);
  return r == kNvmlSuccess ? d : nullptr;
}

GpuSample NvmlLibrary::read(void* device) const {
  GpuSample s;
  if (!available_ || device == nullptr) return s;
  NvmlUtilization u{};
  if (api_->utilization(device, &u) == kNvmlSuccess) {
    s.utilization = u.gpu;
    s.memory_utilization = u.memory;
  }
  NvmlMemory m{};
  if (api_->memory(device, &m) == kNvmlSuccess) {
    s.memory_used_mb = static_cast<double>(m.used) / (1024.0 * 1024.0);
    s.memory_total_mb = static_cast<double>(m.total) / (1024.0 * 1024.0);
  }
  unsigned value = 0;
  if (api_->power_mw(device, &value) == kNvmlSuccess) s.power_w = value / 1000.0;
  if (api_->clock(device, kNvmlClockSm, &value) == kNvmlSuccess) s.sm_clock_mhz = value;
  return s;
}

std::string NvmlLibrary::name(void* device) const {
  char buf[96] = {};
  if (!available_ || device == nullptr || api_->name(device, buf, sizeof buf) != kNvmlSuccess) return "unknown GPU";
  return buf;
}

double NvmlLibrary::max_sm_clock_mhz(void* device) const {
  unsigned value = 0;
  if (!available_ || device == nullptr || api_->max_clock(device, kNvmlClockSm, &value) != kNvmlSuccess) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return value;
}

// --- the sampler -----------------------------------------------------------------------------------

GpuSampler::GpuSampler(Device device, double interval_ms) {
  if (!device.is_cuda()) {
    reason_ = "the run is on the CPU";
    return;
  }
  if (!cuda::is_available()) {
    reason_ = "no CUDA device: " + cuda::unavailable_reason();
    return;
  }
  library_ = std::make_shared<NvmlLibrary>();
  device_ = library_->device_by_pci_bus_id(cuda::pci_bus_id(device.index), reason_);
  begin_sampling(interval_ms);
}

GpuSampler::GpuSampler(std::shared_ptr<NvmlLibrary> library, unsigned index, double interval_ms)
    : library_(std::move(library)) {
  if (!library_) throw Error("GpuSampler: no NVML library given");
  device_ = library_->device_by_index(index, reason_);
  begin_sampling(interval_ms);
}

void GpuSampler::begin_sampling(double interval_ms) {
  if (!(interval_ms > 0) || interval_ms > 3.6e6) {
    throw Error("GpuSampler: the interval must be in (0, 3600000] ms, got " + std::to_string(interval_ms));
  }
  if (device_ == nullptr) {
    KILN_LOG(Info, "GPU monitor off: " + reason_);
    return;
  }
  name_ = library_->name(device_);
  max_clock_ = library_->max_sm_clock_mhz(device_);
  window_.name = name_;
  window_.max_sm_clock_mhz = max_clock_;
  thread_ = std::thread([this, interval_ms] { run(interval_ms); });
}

GpuSampler::~GpuSampler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GpuSampler::run(double interval_ms) {
  const auto interval = std::chrono::duration<double, std::milli>(interval_ms);
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    const GpuSample s = library_->read(device_);  // NVML calls outside the lock
    lock.lock();
    window_.add(s);
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval);
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;  // a read slower than the interval: sample again at once, never in bursts
    wake_.wait_until(lock, next, [this] { return stop_; });
  }
}

GpuSummary GpuSampler::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return window_;
}

GpuSummary GpuSampler::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  GpuSummary out = window_;
  window_ = GpuSummary{};
  window_.name = name_;
  window_.max_sm_clock_mhz = max_clock_;
  return out;
}

}  // namespace kiln::monitor
