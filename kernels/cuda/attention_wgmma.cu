// Launches the flash-attention forward on Hopper's wgmma (kernels/cuda/attention_wgmma_forward.cuh,
// where the kernel and its description are). This file alone is compiled for sm_90a, the target
// whose code runs on devices of compute capability 9.0 only (kernels/CMakeLists.txt);
// attention_forward_tc (attention_tc.cu) calls it there when AttentionArgs::wgmma asks for it.
#include "kernels/attention.h"
#include "kernels/cuda/attention_wgmma_forward.cuh"

namespace kiln {
namespace {

struct WgmmaForward {
  template <typename T, int D, bool kDropout> static auto get() {
    return &attention_tc::attention_forward_wgmma_kernel<T, D, kDropout>;
  }
};

}  // namespace

void attention_forward_wgmma(void* out, void* lse, const void* q, const void* k, const void* v,
                             const AttentionArgs& a, const KernelContext& ctx) {
  attention_tc::launch_forward<attention_tc::WgmmaForwardSmem, WgmmaForward>(out, lse, q, k, v, a, ctx);
}

}  // namespace kiln
