// Launches the flash-attention forward and backward on Hopper's wgmma
// (kernels/cuda/attention_wgmma_forward.cuh, attention_wgmma_backward.cuh, where the kernels and their
// description are). This file alone is compiled for sm_90a, the target whose code runs on devices of
// compute capability 9.0 only (kernels/CMakeLists.txt); attention_forward_tc (attention_tc.cu) and
// attention_backward_tc (attention_tc_backward.cu) call it there when AttentionArgs::wgmma asks.
#include <string>

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
        attention_tc::make_tc_params(a, q, k, v), static_cast<int>(a.E), q, k, v, kOrder, a.wgmma_tma);
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
};

// The fused backward (attention_backward_fused_wgmma_kernel): D and the zeroed float32 dQ accumulator
// per query row, the kernel over blocks of keys, then dQ rounded from the accumulator.
void backward_fused(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse, const void* q,
                    const void* k, const void* v, float* d_rows, const AttentionArgs& a, const KernelContext& ctx) {
  using namespace attention_tc;
  const TcParams p = make_tc_params(a, q, k, v, dout);
  const cudaStream_t s = cuda_detail::raw_stream(ctx.stream);
  const char* op = "scaled_dot_product_attention backward";
  auto* dq_acc = static_cast<float*>(ctx.workspace(static_cast<size_t>(a.batch * a.L * a.E) * sizeof(float)));
  const auto row_blocks = static_cast<unsigned>((a.batch * a.L + kRowWarps - 1) / kRowWarps);
  constexpr int kRowThreads = kRowWarps * tile::kWarp;
  dispatch(a.dtype, a.E, [&]<typename T, int D>() {
    attention_backward_rows_kernel<T, D><<<row_blocks, kRowThreads, 0, s>>>(
        d_rows, dq_acc, static_cast<const T*>(dout), static_cast<const T*>(out), p);
    cuda_detail::check_launch(op);
    const auto go = [&]<bool kDropout>() {
      const auto kernel = &attention_backward_fused_wgmma_kernel<T, D, kDropout>;
      const size_t bytes = smem_bytes<WgmmaFusedSmem<T, D>>();
      cuda_detail::allow_dynamic_smem(kernel, bytes, op, "head dim " + std::to_string(D));
      const TcGrid g = tc_grid(p, p.S, kFusedKeys<D>);
      kernel<<<dim3(g.x, g.y, g.z), kFusedThreads<D>, bytes, s>>>(
          static_cast<T*>(dk), static_cast<T*>(dv), dq_acc, static_cast<const T*>(dout),
          static_cast<const float*>(lse), d_rows, static_cast<const T*>(q), static_cast<const T*>(k),
          static_cast<const T*>(v), p);
      cuda_detail::check_launch(op);
    };
    if (p.dropout) go.template operator()<true>();
    else go.template operator()<false>();
    attention_backward_dq_finish_kernel<T, D><<<row_blocks, kRowThreads, 0, s>>>(static_cast<T*>(dq), dq_acc, p);
    cuda_detail::check_launch(op);
  });
}

}  // namespace

bool attention_forward_wgmma(void* out, void* lse, const void* q, const void* k, const void* v,
                             const AttentionArgs& a, const KernelContext& ctx) {
  return a.wgmma_swizzle ? forward_in<wgmma::Order::kSwizzled>(out, lse, q, k, v, a, ctx)
                         : forward_in<wgmma::Order::kPieces>(out, lse, q, k, v, a, ctx);
}

void attention_backward_wgmma(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                              const void* q, const void* k, const void* v, float* d_rows, const AttentionArgs& a,
                              const KernelContext& ctx) {
  if (a.fused_backward) return backward_fused(dq, dk, dv, dout, out, lse, q, k, v, d_rows, a, ctx);
  attention_tc::launch_backward<attention_tc::WgmmaDqSmem, attention_tc::WgmmaDkvSmem, WgmmaBackward>(
      dq, dk, dv, dout, out, lse, q, k, v, d_rows, a, ctx);
}

}  // namespace kiln
