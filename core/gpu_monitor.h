// What the GPU did while a run trained: utilization, memory, power and SM clock, sampled through
// NVML on a thread of its own.
//
// NVML (the driver's management library, the one nvidia-smi reads) is loaded at run time from
// `libnvidia-ml.so.1` with dlopen, so kiln's build needs no NVML package and a machine without a
// driver simply has no monitor: NvmlLibrary and GpuSampler then report why and sample nothing.
// KILN_NVML_LIBRARY names another library file (the tests load a fake one).
//
// Reading the numbers: "utilization" is NVML's share of its last sample period (1/6 s to 1 s,
// depending on the card) in which at least one kernel was running. It says the GPU was busy, not
// that it was busy well: one small kernel at a time counts as 100%. Memory is the card's used
// memory, every process's and the CUDA context's included, so it is above kiln's allocator peak.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/device.h"

namespace kiln::monitor {

// One reading. A quantity the card does not report (power on some boards) is NaN.
struct GpuSample {
  double utilization = std::numeric_limits<double>::quiet_NaN();         // %, kernels running
  double memory_utilization = std::numeric_limits<double>::quiet_NaN();  // %, device memory busy
  double memory_used_mb = std::numeric_limits<double>::quiet_NaN();
  double memory_total_mb = std::numeric_limits<double>::quiet_NaN();
  double power_w = std::numeric_limits<double>::quiet_NaN();
  double sm_clock_mhz = std::numeric_limits<double>::quiet_NaN();
};

// Count, sum, least and greatest of one quantity's readings; NaN readings are left out.
struct Stat {
  int64_t n = 0;
  double sum = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  void add(double v);
  void merge(const Stat& other);
  double mean() const;  // NaN without readings
};

// The readings of a window of samples.
struct GpuSummary {
  int64_t samples = 0;
  Stat utilization, memory_utilization, memory_used_mb, power_w, sm_clock_mhz;
  double memory_total_mb = std::numeric_limits<double>::quiet_NaN();
  double max_sm_clock_mhz = std::numeric_limits<double>::quiet_NaN();  // the card's, from NVML
  std::string name;                                                    // the card's
  void add(const GpuSample& s);
  void merge(const GpuSummary& other);  // both windows' samples
  // "GPU util 87% (min 12, max 100), memory 41.2 of 81559 MiB, 412 W, SM 1980 MHz, 120 samples";
  // "no GPU samples" when there are none.
  std::string str() const;
};

// The NVML functions kiln calls, resolved from the library file. Never throws: a missing file, a
// missing symbol or a failed nvmlInit leaves it unavailable with the reason.
class NvmlLibrary {
 public:
  // `path` empty: KILN_NVML_LIBRARY, else libnvidia-ml.so.1.
  explicit NvmlLibrary(std::string path = {});
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  bool available() const { return available_; }
  const std::string& reason() const { return reason_; }  // why not available
  const std::string& path() const { return path_; }

  // A card by its PCI address (cuda::pci_bus_id) or by NVML's index; nullptr with `why` set when
  // there is none.
  void* device_by_pci_bus_id(const std::string& bus_id, std::string& why) const;
  void* device_by_index(unsigned index, std::string& why) const;
  GpuSample read(void* device) const;
  std::string name(void* device) const;
  double max_sm_clock_mhz(void* device) const;  // NaN when not reported

 private:
  struct Api;
  std::string path_;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  bool available_ = false;
  std::string reason_;
};

// Samples one card every `interval_ms` on a background thread, from construction to destruction.
// Inactive (no thread, no samples, the reason in reason()) for a CPU device, in a build without
// CUDA, or without NVML or the card.
class GpuSampler {
 public:
  static constexpr double kDefaultIntervalMs = 100;
  // The card of a CUDA device, found by its PCI address.
  explicit GpuSampler(Device device, double interval_ms = kDefaultIntervalMs);
  // NVML's card `index` of `library` (tests; tools that pick the card themselves).
  GpuSampler(std::shared_ptr<NvmlLibrary> library, unsigned index, double interval_ms = kDefaultIntervalMs);
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  bool active() const { return device_ != nullptr; }
  const std::string& reason() const { return reason_; }
  // The samples since the start or the last take(); take() starts a new window.
  GpuSummary summary() const;
  GpuSummary take();

 private:
  void begin_sampling(double interval_ms);  // after device_ is found
  void run(double interval_ms);

  std::shared_ptr<NvmlLibrary> library_;
  void* device_ = nullptr;
  std::string reason_;
  std::string name_;
  double max_clock_ = std::numeric_limits<double>::quiet_NaN();
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  GpuSummary window_;
  std::thread thread_;
};

}  // namespace kiln::monitor
