// Launches the flash-attention forward and backward on Hopper's wgmma
// (kernels/cuda/attention_wgmma_forward.cuh, attention_wgmma_backward.cuh, where the kernels and their
// description are). This file alone is compiled for sm_90a, the target whose code runs on devices of
// compute capability 9.0 only (kernels/CMakeLists.txt); attention_forward_tc (attention_tc.cu) and
// attention_backward_tc (attention_tc_backward.cu) call it there when AttentionArgs::wgmma asks.
#include <string>
#include <tuple>

#include "kernels/attention.h"
#include "kernels/cuda/attention_wgmma_backward.cuh"
#include "kernels/cuda/attention_wgmma_forward.cuh"

namespace kiln {
namespace {

// The warp-specialized forward with its tiles staged in kOrder (AttentionArgs::wgmma_swizzle).
template <wgmma::Order kOrder> struct WgmmaForward {
  template <typename T, int D> using Smem = attention_tc::WgmmaForwardSmem<T, D, kOrder>;
  template <typename T, int D, bool kDropout> static auto get() {
    return &attention_tc::attention_forward_wgmma_kernel<T, D, kDropout, kOrder>;
  }
  template <int D> static constexpr int threads() { return attention_tc::kWgmmaForwardThreads<D>; }
  template <int D> static constexpr int rows() { return attention_tc::kWgmmaForwardRows<D>; }
};

// The forward without its producer warpgroup (AttentionArgs::wgmma_producer false), for the A/B.
template <wgmma::Order kOrder> struct WgmmaSyncForward {
  template <typename T, int D> using Smem = attention_tc::WgmmaForwardSmem<T, D, kOrder>;
  template <typename T, int D, bool kDropout> static auto get() {
    return &attention_tc::attention_forward_wgmma_sync_kernel<T, D, kDropout, kOrder>;
  }
  template <int D> static constexpr int threads() { return attention_tc::kWgmmaSyncForwardThreads<D>; }
  template <int D> static constexpr int rows() { return attention_tc::kWgmmaForwardRows<D>; }
};

// Launches the forward with the tiles staged in kOrder; true when its producer copies with TMA.
template <wgmma::Order kOrder>
bool forward_in(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a,
                const KernelContext& ctx) {
  if (a.wgmma_producer) {
    using F = WgmmaForward<kOrder>;
    const attention_tc::WgmmaForwardMaps maps = attention_tc::make_forward_maps(
        attention_tc::make_tc_params(a, q, k, v), static_cast<int>(a.E), q, k, v, out, kOrder, a.wgmma_tma);
    attention_tc::launch_forward<F::template Smem, F>(out, lse, q, k, v, a, ctx, maps);
    return maps.on;
  }
  using F = WgmmaSyncForward<kOrder>;
  attention_tc::launch_forward<F::template Smem, F>(out, lse, q, k, v, a, ctx);
  return false;
}

struct WgmmaBackward {
  template <typename T, int D, bool kDropout> static auto dq() {
    return &attention_tc::attention_backward_dq_wgmma_kernel<T, D, kDropout>;
  }
  template <typename T, int D, bool kDropout> static auto dkv() {
    return &attention_tc::attention_backward_dkv_wgmma_kernel<T, D, kDropout>;
  }
  template <int D> static constexpr int dq_threads() { return attention_tc::kWgmmaDqThreads<D>; }
  template <int D> static constexpr int dq_rows() { return attention_tc::kWgmmaDqRows<D>; }
  template <int D> static constexpr int dkv_threads() { return attention_tc::kBlockThreads; }
  template <int D> static constexpr int dkv_rows() { return attention_tc::kBlockRows; }
  // The fused backward (AttentionArgs::fused_backward): blocks of kFusedKeys keys.
  template <typename T, int D, bool kDropout> static auto fused() {
    return &attention_tc::attention_backward_fused_wgmma_kernel<T, D, kDropout>;
  }
  template <int D> static constexpr int fused_threads() { return attention_tc::kFusedThreads<D>; }
  template <int D> static constexpr int fused_keys() { return attention_tc::kFusedKeys<D>; }
  // Its dQ added by tensor reductions where asked for and the map can be made (else atomics).
  template <int D>
  static std::tuple<attention_tc::WgmmaDqReduce> fused_extra(const AttentionArgs& a, const attention_tc::TcParams& p,
                                                             float* dq_acc) {
    return {attention_tc::make_dq_reduce<D>(p, dq_acc, a.wgmma_dq_reduce)};
  }
};

}  // namespace

bool attention_forward_wgmma(void* out, void* lse, const void* q, const void* k, const void* v,
                             const AttentionArgs& a, const KernelContext& ctx) {
  return a.wgmma_swizzle ? forward_in<wgmma::Order::kSwizzled>(out, lse, q, k, v, a, ctx)
                         : forward_in<wgmma::Order::kPieces>(out, lse, q, k, v, a, ctx);
}

bool attention_backward_wgmma(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                              const void* q, const void* k, const void* v, float* d_rows, const AttentionArgs& a,
                              const KernelContext& ctx) {
  if (a.fused_backward) {
    const auto extra = attention_tc::launch_fused_backward<attention_tc::WgmmaFusedSmem, WgmmaBackward>(
        dq, dk, dv, dout, out, lse, q, k, v, d_rows, a, ctx);
    return std::get<0>(extra).on;
  }
  attention_tc::launch_backward<attention_tc::WgmmaDqSmem, attention_tc::WgmmaDkvSmem, WgmmaBackward>(
      dq, dk, dv, dout, out, lse, q, k, v, d_rows, a, ctx);
  return false;
}

}  // namespace kiln
