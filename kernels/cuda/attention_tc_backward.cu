// Launches the flash-attention backward on tensor cores (kernels/cuda/attention_tc_backward.cuh,
// where the two kernels and their description are). Which calls it takes:
// attention_tc_backward_fits (kernels/attention.cpp).
#include <atomic>
#include <string>

#include "kernels/attention.h"
#include "kernels/cuda/attention_tc_backward.cuh"
#include "kernels/cuda/common.cuh"

namespace kiln {
namespace {

using namespace cuda_detail;
using namespace attention_tc;

constexpr const char* kOp = "scaled_dot_product_attention backward";

// Both kernels; dropout is a template flag, so without it they hold none of its code or registers.
template <typename T, int D, bool kDropout>
void launch(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse, const void* q,
            const void* k, const void* v, float* d_rows, const TcParams& p, cudaStream_t s) {
  const std::string what = "head dim " + std::to_string(D);
  const size_t dq_bytes = smem_bytes<DqSmem<T, D>>(), dkv_bytes = smem_bytes<DkvSmem<T, D>>();
  allow_dynamic_smem(attention_backward_dq_tc_kernel<T, D, kDropout>, dq_bytes, kOp, what);
  allow_dynamic_smem(attention_backward_dkv_tc_kernel<T, D, kDropout>, dkv_bytes, kOp, what);
  const auto blocks = [&](int64_t rows) { return dim3(row_blocks(rows), static_cast<unsigned>(p.batch)); };
  attention_backward_dq_tc_kernel<T, D, kDropout><<<blocks(p.L), kBlockThreads, dq_bytes, s>>>(
      static_cast<T*>(dq), d_rows, static_cast<const T*>(dout), static_cast<const T*>(out),
      static_cast<const float*>(lse), static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), p);
  check_launch(kOp);
  attention_backward_dkv_tc_kernel<T, D, kDropout><<<blocks(p.S), kBlockThreads, dkv_bytes, s>>>(
      static_cast<T*>(dk), static_cast<T*>(dv), static_cast<const T*>(dout), static_cast<const float*>(lse), d_rows,
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), p);
  check_launch(kOp);
}

std::atomic<int64_t> g_launches{0};

}  // namespace

int64_t attention_tc_backward_launches() { return g_launches.load(); }

void attention_backward_tc(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                           const void* q, const void* k, const void* v, const AttentionArgs& a,
                           const KernelContext& ctx) {
  const TcParams p = make_tc_params(a);
  const cudaStream_t s = raw_stream(ctx.stream);
  // D_i = dO_i . O_i per query row, written by the dq kernel and read by the dk/dv kernel.
  float* d_rows = static_cast<float*>(ctx.workspace(static_cast<size_t>(a.batch * a.L) * sizeof(float)));
  g_launches.fetch_add(1);
  dispatch(a.dtype, a.E, [&]<typename T, int D>() {
    if (p.dropout) launch<T, D, true>(dq, dk, dv, dout, out, lse, q, k, v, d_rows, p, s);
    else launch<T, D, false>(dq, dk, dv, dout, out, lse, q, k, v, d_rows, p, s);
  });
}

}  // namespace kiln
