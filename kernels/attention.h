// Scaled dot-product attention kernels. The forward writes the output and the row log-sum-exp;
// the backward recomputes probabilities from the log-sum-exp (the flash-attention formulation), so
// a fused GPU kernel can match it without storing the L x S matrix.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/philox.h"
#include "kernels/stream.h"
#include "kernels/strided.h"

namespace kiln {

// One attention problem per batch entry b: Q_b [L, E], K_b [S, E], V_b [S, Ev], O_b [L, Ev].
// Rows are contiguous in their last dim; row strides and per-batch element offsets locate them.
// The optional mask is bool (true = attend) or of the q dtype (added to the scores), read as
// mask + mask_offsets[b] + i * mask_row_stride + j * mask_col_stride (strides may be 0).
struct AttentionArgs {
  DType dtype = DType::Float32;  // q, k, v, out (and their gradients)
  int64_t batch = 0, L = 0, S = 0, E = 0, Ev = 0;
  const int64_t* q_offsets = nullptr;
  const int64_t* k_offsets = nullptr;
  const int64_t* v_offsets = nullptr;
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0;
  // out, dout, dq, dk, dv and lse are contiguous: [batch, L, Ev], [batch, L, E], [batch, S, E], ...
  const void* mask = nullptr;
  DType mask_dtype = DType::Bool;
  const int64_t* mask_offsets = nullptr;
  int64_t mask_row_stride = 0, mask_col_stride = 0;
  bool causal = false;  // key j is visible to query i iff j <= i
  double scale = 1.0;
  double dropout_p = 0.0;  // element (b, i, j) kept iff philox_uniform(word of index (b*L+i)*S+j) >= p
  PhiloxState philox;
};

// lse: float32 [batch, L] (float64 for float64 inputs). A row with no visible key gives a zero
// output row and lse = -inf.
void attention_forward_cpu(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a);
// dq/dk/dv: contiguous [batch, L, E], [batch, S, E], [batch, S, Ev]; deterministic.
void attention_backward_cpu(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                            const void* q, const void* k, const void* v, const AttentionArgs& a);

#if defined(KILN_WITH_CUDA)
// The CUDA kernels cannot read AttentionArgs' host arrays (q/k/v/mask_offsets): they derive batch
// entry b's offsets on the device from the broadcast batch shape and each operand's strides over it
// (0 where the operand broadcasts), which keeps the launch free of host-to-device copies (and so
// capturable in a CUDA graph). The rest of AttentionArgs means what it means on the CPU.
struct AttentionBatchLayout {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t q[kMaxDims] = {}, k[kMaxDims] = {}, v[kMaxDims] = {}, mask[kMaxDims] = {};
};

// One fused node on the GPU (float32/float16/bfloat16; float64 is CPU-only), same semantics as the
// CPU: float scores, bool or additive mask, causal rule, dropout through attention_keep. lse is
// float32. Head dims are limited by shared memory (E = Ev = 256 needs about 100 KB); larger ones
// are a kiln::Error.
void attention_forward_cuda(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a,
                            const AttentionBatchLayout& batch, Stream stream);
// The backward in the flash formulation: dq per query row, dk/dv per key row, each a fixed-order
// sum, so gradients are deterministic. `workspace`: attention_backward_cuda_workspace_bytes(a).
size_t attention_backward_cuda_workspace_bytes(const AttentionArgs& a);
void attention_backward_cuda(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                             const void* q, const void* k, const void* v, const AttentionArgs& a,
                             const AttentionBatchLayout& batch, void* workspace, size_t workspace_bytes,
                             Stream stream);
#endif

// The dropout keep decision of element (b, i, j), shared by both devices.
KILN_HD bool attention_keep(const PhiloxState& st, uint64_t index, double p) {
  Philox4 blk = philox_block(st.seed, st.offset, index >> 1);
  return static_cast<double>(philox_uniform(blk.v[(index & 1) * 2])) >= p;
}

}  // namespace kiln
