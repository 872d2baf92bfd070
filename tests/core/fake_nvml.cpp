// A stand-in for the driver's libnvidia-ml.so.1, for core/gpu_monitor's tests on machines without a
// GPU: the NVML calls kiln resolves, answering fixed readings for one card. Environment switches:
// FAKE_NVML_FAIL_INIT=1 makes nvmlInit_v2 fail, FAKE_NVML_NO_POWER=1 makes power unsupported.
// fake_nvml_reads() counts utilization reads, so a test can match samples to calls.
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace {
std::atomic<int> g_reads{0};
int g_card = 0;  // the handle's target
bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}
constexpr int kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kUnknown = 999;
struct Utilization {
  unsigned int gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};
}  // namespace

extern "C" {
__attribute__((visibility("default"))) int fake_nvml_reads() { return g_reads.load(); }
__attribute__((visibility("default"))) int nvmlInit_v2() { return env_on("FAKE_NVML_FAIL_INIT") ? kUnknown : kSuccess; }
__attribute__((visibility("default"))) int nvmlShutdown() { return kSuccess; }
__attribute__((visibility("default"))) const char* nvmlErrorString(int r) {
  return r == kUnknown ? "Unknown Error" : r == kInvalidArgument ? "Invalid Argument" : "other";
}
__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index != 0) return kInvalidArgument;
  *device = &g_card;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  if (std::strcmp(bus_id, "00000000:65:00.0") != 0) return kInvalidArgument;
  *device = &g_card;
  return kSuccess;
}
// The struct outputs are void*, as kiln's function pointers declare them (core/gpu_monitor.cpp).
__attribute__((visibility("default"))) int nvmlDeviceGetUtilizationRates(void* device, void* out) {
  if (device != &g_card) return kInvalidArgument;
  g_reads.fetch_add(1);
  *static_cast<Utilization*>(out) = {37, 12};
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(void* device, void* out) {
  if (device != &g_card) return kInvalidArgument;
  const unsigned long long mib = 1024ull * 1024ull;
  *static_cast<Memory*>(out) = {81920 * mib, 79872 * mib, 2048 * mib};
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetPowerUsage(void* device, unsigned* mw) {
  if (device != &g_card) return kInvalidArgument;
  if (env_on("FAKE_NVML_NO_POWER")) return kNotSupported;
  *mw = 250500;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetClockInfo(void* device, int type, unsigned* mhz) {
  if (device != &g_card || type != 1) return kInvalidArgument;
  *mhz = 1755;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetMaxClockInfo(void* device, int type, unsigned* mhz) {
  if (device != &g_card || type != 1) return kInvalidArgument;
  *mhz = 1980;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  if (device != &g_card || length < 9) return kInvalidArgument;
  std::strcpy(name, "Fake GPU");
  return kSuccess;
}
}
