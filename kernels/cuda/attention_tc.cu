// Launches the flash-attention forward on tensor cores (kernels/cuda/attention_tc_forward.cuh, where
// the kernel and its description are). Which calls it takes: attention_tc_fits (kernels/attention.cpp).
#include <atomic>
#include <string>

#include "kernels/attention.h"
#include "kernels/cuda/attention_tc_forward.cuh"
#include "kernels/cuda/common.cuh"

namespace kiln {
namespace {

using namespace cuda_detail;
using namespace attention_tc;

// Dropout is a template flag: without it the kernel holds none of its code or registers.
template <typename T, int D, bool kDropout>
void launch(void* out, void* lse, const void* q, const void* k, const void* v, const TcParams& p, cudaStream_t s) {
  const size_t bytes = smem_bytes<ForwardSmem<T, D>>();
  const char* op = "scaled_dot_product_attention";
  allow_dynamic_smem(attention_forward_tc_kernel<T, D, kDropout>, bytes, op, "head dim " + std::to_string(D));
  const dim3 grid(row_blocks(p.L), static_cast<unsigned>(p.batch));
  attention_forward_tc_kernel<T, D, kDropout><<<grid, kBlockThreads, bytes, s>>>(
      static_cast<T*>(out), static_cast<float*>(lse), static_cast<const T*>(q), static_cast<const T*>(k),
      static_cast<const T*>(v), p);
  check_launch(op);
}

std::atomic<int64_t> g_launches{0};

}  // namespace

int64_t attention_tc_launches() { return g_launches.load(); }

void attention_forward_tc(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a,
                          const KernelContext& ctx) {
  const TcParams p = make_tc_params(a);
  const cudaStream_t s = raw_stream(ctx.stream);
  g_launches.fetch_add(1);
  dispatch(a.dtype, a.E, [&]<typename T, int D>() {
    if (p.dropout) launch<T, D, true>(out, lse, q, k, v, p, s);
    else launch<T, D, false>(out, lse, q, k, v, p, s);
  });
}

}  // namespace kiln
