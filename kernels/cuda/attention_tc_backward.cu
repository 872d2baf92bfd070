// Launches the flash-attention backward on tensor cores (kernels/cuda/attention_tc_backward.cuh,
// where the two kernels and their description are), or hands it to the backward on Hopper's wgmma
// (attention_wgmma.cu) where the arguments ask for it, the build has it and the device runs it. Which
// calls come here: attention_tc_backward_fits (kernels/attention.cpp).
#include <atomic>
#include <tuple>

#include "kernels/attention.h"
#include "kernels/cuda/attention_tc_backward.cuh"
#include "kernels/cuda/common.cuh"

namespace kiln {
namespace {

using namespace cuda_detail;
using namespace attention_tc;

struct MmaSyncBackward {
  template <typename T, int D, bool kDropout> static auto dq() {
    return &attention_backward_dq_tc_kernel<T, D, kDropout>;
  }
  template <typename T, int D, bool kDropout> static auto dkv() {
    return &attention_backward_dkv_tc_kernel<T, D, kDropout>;
  }
  template <int D> static constexpr int dq_threads() { return kBlockThreads; }
  template <int D> static constexpr int dq_rows() { return kBlockRows; }
  template <int D> static constexpr int dkv_threads() { return kBlockThreads; }
  template <int D> static constexpr int dkv_rows() { return kBlockRows; }
  // The fused backward (AttentionArgs::fused_backward): the dk/dv kernel's blocks.
  template <typename T, int D, bool kDropout> static auto fused() {
    return &attention_backward_fused_tc_kernel<T, D, kDropout>;
  }
  template <int D> static constexpr int fused_threads() { return kBlockThreads; }
  template <int D> static constexpr int fused_keys() { return kBlockRows; }
  template <int D> static std::tuple<> fused_extra(const AttentionArgs&, const TcParams&, float*) { return {}; }
};

std::atomic<int64_t> g_launches{0}, g_wgmma_launches{0}, g_fused_launches{0}, g_dq_reduce_launches{0};

}  // namespace

int64_t attention_tc_backward_launches() { return g_launches.load(); }
int64_t attention_wgmma_backward_launches() { return g_wgmma_launches.load(); }
int64_t attention_fused_backward_launches() { return g_fused_launches.load(); }
int64_t attention_wgmma_dq_reduce_launches() { return g_dq_reduce_launches.load(); }

void attention_backward_tc(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                           const void* q, const void* k, const void* v, const AttentionArgs& a,
                           const KernelContext& ctx) {
  // D_i = dO_i . O_i per query row, written by the dq kernel and read by the dk/dv kernel.
  float* d_rows = static_cast<float*>(ctx.workspace(static_cast<size_t>(a.batch * a.L) * sizeof(float)));
  g_launches.fetch_add(1);
  if (a.fused_backward) g_fused_launches.fetch_add(1);
#if defined(KILN_WITH_SM90A)
  if (a.wgmma && attention_wgmma_available()) {
    g_wgmma_launches.fetch_add(1);
    if (attention_backward_wgmma(dq, dk, dv, dout, out, lse, q, k, v, d_rows, a, ctx)) {
      g_dq_reduce_launches.fetch_add(1);
    }
    return;
  }
#endif
  if (a.fused_backward) {
    launch_fused_backward<FusedSmem, MmaSyncBackward>(dq, dk, dv, dout, out, lse, q, k, v, d_rows, a, ctx);
    return;
  }
  launch_backward<DqSmem, DkvSmem, MmaSyncBackward>(dq, dk, dv, dout, out, lse, q, k, v, d_rows, a, ctx);
}

}  // namespace kiln
