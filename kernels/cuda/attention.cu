// Launches the CUDA twin's scaled dot-product attention: the tensor-core kernels where they fit
// (kernels/cuda/attention_tc.cu, attention_tc_backward.cu), else the float kernels of
// kernels/cuda/attention_scalar.cuh, where they and their design are described.
#include <algorithm>
#include <string>

#include "kernels/attention.h"
#include "kernels/cuda/attention_scalar.cuh"
#include "kernels/cuda/common.cuh"

namespace kiln {
namespace {

using namespace attention_scalar;
using cuda_detail::allow_dynamic_smem;
using cuda_detail::raw_stream;

// The head dims, for the shared-memory opt-in's error message.
std::string head_dims(const AttentionArgs& a) {
  return "head dims E = " + std::to_string(a.E) + ", Ev = " + std::to_string(a.Ev);
}

void check_layout(const AttentionArgs& a, const char* op) {
  const AttentionBatch& batch = a.layout;
  int64_t n = 1;
  for (int d = 0; d < batch.ndim; ++d) n *= batch.sizes[d];
  if (batch.ndim < 0 || batch.ndim > kMaxDims || n != a.batch) {
    throw Error(std::string(op) + ": batch layout of " + std::to_string(n) + " entries does not match batch " +
                std::to_string(a.batch));
  }
}

}  // namespace

void attention_forward_cuda(void* out, void* lse, const void* q, const void* k, const void* v,
                            const AttentionArgs& a, const KernelContext& ctx) {
  const char* op = "scaled_dot_product_attention";
  if (a.batch * a.L == 0) return;
  check_layout(a, op);
  if (a.S > 0 && attention_tc_fits(a, q, k, v)) return attention_forward_tc(out, lse, q, k, v, a, ctx);
  const Params p = make_params(a);
  const size_t smem = forward_smem(p);
  const cudaStream_t s = raw_stream(ctx.stream);
  KILN_CUDA_FLOAT_SWITCH(a.dtype, op, {
    allow_dynamic_smem(attention_forward_kernel<S>, smem, op, head_dims(a));
    attention_forward_kernel<S><<<grid_for_rows(a.batch, a.L), kThreads, smem, s>>>(
        static_cast<S*>(out), static_cast<float*>(lse), static_cast<const S*>(q), static_cast<const S*>(k),
        static_cast<const S*>(v), p);
  });
  cuda_detail::check_launch(op);
}

void attention_backward_cuda(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                             const void* q, const void* k, const void* v, const AttentionArgs& a,
                             const KernelContext& ctx) {
  const char* op = "scaled_dot_product_attention backward";
  if (a.batch * a.L == 0 || a.S == 0) return;
  check_layout(a, op);
  if (attention_tc_backward_fits(a, q, k, v, dout)) {
    return attention_backward_tc(dq, dk, dv, dout, out, lse, q, k, v, a, ctx);
  }
  const Params p = make_params(a);
  const size_t smem_q = backward_q_smem(p), smem_kv = backward_kv_smem(p);
  const cudaStream_t s = raw_stream(ctx.stream);
  // D_i = dO_i . O_i per query row, written by the dq kernel and read by the dk/dv kernel.
  float* d_rows = static_cast<float*>(ctx.workspace(static_cast<size_t>(a.batch * a.L) * sizeof(float)));
  KILN_CUDA_FLOAT_SWITCH(a.dtype, op, {
    allow_dynamic_smem(attention_backward_q_kernel<S>, smem_q, op, head_dims(a));
    allow_dynamic_smem(attention_backward_kv_kernel<S>, smem_kv, op, head_dims(a));
    attention_backward_q_kernel<S><<<grid_for_rows(a.batch, a.L), kThreads, smem_q, s>>>(
        static_cast<S*>(dq), d_rows, static_cast<const S*>(dout), static_cast<const S*>(out),
        static_cast<const float*>(lse), static_cast<const S*>(q), static_cast<const S*>(k), static_cast<const S*>(v),
        p);
    cuda_detail::check_launch(op);
    attention_backward_kv_kernel<S><<<grid_for_rows(a.batch, a.S), kThreads, smem_kv, s>>>(
        static_cast<S*>(dk), static_cast<S*>(dv), static_cast<const S*>(dout), static_cast<const float*>(lse), d_rows,
        static_cast<const S*>(q), static_cast<const S*>(k), static_cast<const S*>(v), p);
  });
  cuda_detail::check_launch(op);
}

}  // namespace kiln
