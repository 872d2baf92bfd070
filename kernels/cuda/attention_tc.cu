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

std::atomic<int64_t> g_launches{0}, g_wgmma_launches{0};

// Whether the wgmma forward can run: built (KILN_WITH_SM90A: kernels/CMakeLists.txt compiles it for
// sm_90a when the architectures include 90) and the current device of compute capability 9.0, the
// only one that runs sm_90a code.
bool wgmma_runs_here(const char* op) {
#if defined(KILN_WITH_SM90A)
  const int device = current_device_checked(op);
  int major = 0, minor = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), op,
             "querying the compute capability");
  check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), op,
             "querying the compute capability");
  return major == 9 && minor == 0;
#else
  (void)op;
  return false;
#endif
}

}  // namespace

int64_t attention_tc_launches() { return g_launches.load(); }
int64_t attention_wgmma_launches() { return g_wgmma_launches.load(); }
bool attention_wgmma_available() { return wgmma_runs_here("scaled_dot_product_attention"); }

void attention_forward_tc(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a,
                          const KernelContext& ctx) {
  g_launches.fetch_add(1);
#if defined(KILN_WITH_SM90A)
  if (a.wgmma && wgmma_runs_here("scaled_dot_product_attention")) {
    g_wgmma_launches.fetch_add(1);
    attention_forward_wgmma(out, lse, q, k, v, a, ctx);
    return;
  }
#endif
  launch_forward<ForwardSmem, MmaSyncForward>(out, lse, q, k, v, a, ctx);
}

}  // namespace kiln
