// Launches the flash-attention forward on tensor cores (kernels/cuda/attention_tc_forward.cuh, where
// the kernel and its description are), or hands it to the forward on Hopper's wgmma
// (attention_wgmma.cu) where the arguments ask for it, the build has it and the device runs it. Which
// calls come here: attention_tc_fits (kernels/attention.cpp).
#include <atomic>

#include "kernels/attention.h"
#include "kernels/cuda/attention_tc_forward.cuh"
#include "kernels/cuda/common.cuh"

namespace kiln {
namespace {

using namespace cuda_detail;
using namespace attention_tc;

struct MmaSyncForward {
  template <typename T, int D, bool kDropout> static auto get() { return &attention_forward_tc_kernel<T, D, kDropout>; }
  template <int D> static constexpr int threads() { return kBlockThreads; }
  template <int D> static constexpr int rows() { return kBlockRows; }
};

std::atomic<int64_t> g_launches{0}, g_wgmma_launches{0}, g_tma_launches{0};

// Whether the wgmma kernels run on `device`: built (KILN_WITH_SM90A: kernels/CMakeLists.txt compiles
// them for sm_90a when the architectures include 90) and the device of compute capability 9.0, the
// only one that runs sm_90a code. Asked of the runtime once per device, not at every attention call.
bool wgmma_runs_on(int device, const char* op) {
#if defined(KILN_WITH_SM90A)
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices] = {};  // 0 not asked yet, 1 no, 2 yes
  std::atomic<int>* slot = device >= 0 && device < kMaxDevices ? &known[device] : nullptr;
  if (slot != nullptr) {
    if (const int seen = slot->load(); seen != 0) return seen == 2;
  }
  int major = 0, minor = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), op,
             "querying the compute capability");
  check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), op,
             "querying the compute capability");
  const bool runs = major == 9 && minor == 0;
  if (slot != nullptr) slot->store(runs ? 2 : 1);
  return runs;
#else
  (void)device;
  (void)op;
  return false;
#endif
}

}  // namespace

int64_t attention_tc_launches() { return g_launches.load(); }
int64_t attention_wgmma_launches() { return g_wgmma_launches.load(); }
int64_t attention_wgmma_tma_launches() { return g_tma_launches.load(); }
bool attention_wgmma_available() {
  const char* op = "scaled_dot_product_attention";
  return wgmma_runs_on(current_device_checked(op), op);
}

void attention_forward_tc(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a,
                          const KernelContext& ctx) {
  g_launches.fetch_add(1);
#if defined(KILN_WITH_SM90A)
  if (a.wgmma && attention_wgmma_available()) {
    g_wgmma_launches.fetch_add(1);
    if (attention_forward_wgmma(out, lse, q, k, v, a, ctx)) g_tma_launches.fetch_add(1);
    return;
  }
#endif
  launch_forward<ForwardSmem, MmaSyncForward>(out, lse, q, k, v, a, ctx);
}

}  // namespace kiln
