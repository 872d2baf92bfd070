// Scaled dot-product attention kernels. The forward writes the output and the row log-sum-exp;
// the backward recomputes probabilities from the log-sum-exp (the flash-attention formulation), so
// a fused GPU kernel can match it without storing the L x S matrix. Batch entries are located by
// strides over a broadcast batch shape, on both devices, so a launch needs no host arrays (and can
// be captured in a CUDA graph).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/philox.h"
#include "kernels/kernel.h"
#include "kernels/strided.h"

namespace kiln {

// One attention problem per batch entry b: Q_b [L, E], K_b [S, E], V_b [S, Ev], O_b [L, Ev]. The
// batch is a broadcast shape (up to kMaxDims dims); each operand has a stride over each batch dim,
// 0 where it broadcasts, so an expanded operand is read in place. Rows are contiguous in their last
// dim and located by row strides. The optional mask is bool (true = attend) or of the q dtype (added
// to the scores), read at mask offset + i * mask_row_stride + j * mask_col_stride (strides may be 0).
// The outputs have layouts of their own: out and dout share `o`, dq, dk and dv have theirs (none
// broadcast: distinct batch entries never share rows), so the op can write O as [B, L, H, Ev] in
// memory and dQ, dK and dV straight into one fused [B, S, 3, H, E] gradient (core/ops/attention.cpp).
struct AttentionBatch {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t q[kMaxDims] = {}, k[kMaxDims] = {}, v[kMaxDims] = {}, mask[kMaxDims] = {};
  int64_t o[kMaxDims] = {}, dq[kMaxDims] = {}, dk[kMaxDims] = {}, dv[kMaxDims] = {};
};

struct AttentionArgs {
  DType dtype = DType::Float32;  // q, k, v, out (and their gradients)
  int64_t batch = 0, L = 0, S = 0, E = 0, Ev = 0;
  AttentionBatch layout;  // its sizes multiply to `batch`
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0;
  // Row strides of out and dout, dq, dk and dv; their rows are contiguous. lse is contiguous
  // [batch, L]. attention_dense_outputs sets all of these to contiguous layouts.
  int64_t o_row_stride = 0, dq_row_stride = 0, dk_row_stride = 0, dv_row_stride = 0;
  const void* mask = nullptr;
  DType mask_dtype = DType::Bool;
  int64_t mask_row_stride = 0, mask_col_stride = 0;
  bool causal = false;  // key j is visible to query i iff j <= i
  double scale = 1.0;
  double dropout_p = 0.0;  // element (b, i, j) kept iff philox_uniform(word of index (b*L+i)*S+j) >= p
  PhiloxState philox;
  // CUDA: the forward and backward may take the tensor-core kernels where they fit (attention_tc_fits,
  // attention_tc_backward_fits), and with `wgmma` too the ones on Hopper's warpgroup mma where the
  // build and the device have them; with `wgmma_producer` the forward's warp-specialized kernel, whose
  // consumer warpgroups take turns issuing their products with `wgmma_pingpong`, and whose producer
  // loads with tensor copies (TMA) with `wgmma_tma` where the operands allow (else with cp.async), its
  // consumers storing the output with tensor stores where the tiles are swizzled (else their threads);
  // its tiles, and the forward without the producer's, are staged with the 128-byte swizzle with
  // `wgmma_swizzle`, else by pieces (kernels/wgmma_layout.h).
  bool tensor_cores = false;
  bool wgmma = false;
  bool wgmma_producer = true;
  bool wgmma_pingpong = true;
  bool wgmma_tma = true;
  bool wgmma_swizzle = true;
  // With `tensor_cores` (on mma.sync, or on wgmma with `wgmma`), the backward as one kernel that
  // computes dK, dV and dQ's share of each block of keys (five tile products where the two kernels take
  // seven), summing dQ in float32 with atomic adds, so its last bits vary between runs; false: the two
  // kernels, deterministic. On wgmma with `wgmma_dq_reduce`, the blocks add their shares of dQ with
  // tensor reductions (TMA) where the driver makes the map, else with atomics.
  bool fused_backward = false;
  bool wgmma_dq_reduce = true;
  // Under causal the tensor-core kernels take their blocks longest first (the forward and dq kernels
  // their last query rows first, the dk/dv kernels their first keys), or with false in order.
  bool longest_first = true;
  // Longest first, the blocks go in sections of this many batch entries: all the section's longest
  // blocks, then all its next longest, and so on, and then the next section (the kernels'
  // block_work). 0 or more than `batch`: the whole batch is one section; 1: each entry's blocks
  // together (the order before sections). attention_order_section() picks it from the L2's size.
  int64_t order_section = 0;
};

// The batch entries per section of the longest-first order (AttentionArgs::order_section) for a
// device whose L2 cache holds `l2_bytes`: as many as keep their K and V within half of it, so that
// the blocks running at once read K and V from the L2 and not from memory, and at least one.
inline int64_t attention_order_section(const AttentionArgs& a, int64_t l2_bytes) {
  const int64_t kv = a.S * (a.E + a.Ev) * static_cast<int64_t>(element_size(a.dtype));
  if (l2_bytes <= 0 || kv <= 0) return 0;
  return l2_bytes / 2 / kv > 1 ? l2_bytes / 2 / kv : 1;
}

// Sets out/dout, dq, dk and dv to contiguous [batch..., L, Ev], [batch..., L, E], [batch..., S, E]
// and [batch..., S, Ev] over the batch shape in `layout` (the layout an op gets when it asks for
// nothing else).
inline void attention_dense_outputs(AttentionArgs& a) {
  int64_t o = a.L * a.Ev, dq = a.L * a.E, dk = a.S * a.E, dv = a.S * a.Ev;
  for (int d = a.layout.ndim - 1; d >= 0; --d) {
    a.layout.o[d] = o;
    a.layout.dq[d] = dq;
    a.layout.dk[d] = dk;
    a.layout.dv[d] = dv;
    o *= a.layout.sizes[d];
    dq *= a.layout.sizes[d];
    dk *= a.layout.sizes[d];
    dv *= a.layout.sizes[d];
  }
  a.o_row_stride = a.Ev;
  a.dq_row_stride = a.dk_row_stride = a.E;
  a.dv_row_stride = a.Ev;
}

// Element offset of batch entry b (row-major over the batch shape) in one operand's layout:
// `strides` is one of layout's arrays. The tensor-core forward finds its output's offset with it
// where it writes, so that the offset is not held in registers through the key loop.
KILN_HD int64_t attention_batch_offset(const AttentionBatch& layout, const int64_t* strides, int64_t b) {
  int64_t off = 0;
  for (int d = layout.ndim - 1; d >= 0; --d) {
    const int64_t idx = b % layout.sizes[d];
    b /= layout.sizes[d];
    off += idx * strides[d];
  }
  return off;
}

// Element offsets of batch entry b's q, k, v, mask, out (and dout), dq, dk and dv. (No member
// initializers: CUDA kernels keep one in shared memory.)
struct AttentionOffsets {
  int64_t q, k, v, mask, o, dq, dk, dv;
};
KILN_HD AttentionOffsets attention_offsets(const AttentionBatch& layout, int64_t b) {
  return {attention_batch_offset(layout, layout.q, b),  attention_batch_offset(layout, layout.k, b),
          attention_batch_offset(layout, layout.v, b),  attention_batch_offset(layout, layout.mask, b),
          attention_batch_offset(layout, layout.o, b),  attention_batch_offset(layout, layout.dq, b),
          attention_batch_offset(layout, layout.dk, b), attention_batch_offset(layout, layout.dv, b)};
}

// lse: float32 [batch, L] (float64 for float64 inputs). A row with no visible key gives a zero
// output row and lse = -inf; a row with a NaN score among its visible ones gives NaN, on either
// device, even where every visible score is NaN (the running max skips NaN, so such a row would look
// like one that sees no key). The CUDA twin is one fused kernel (float32/float16/bfloat16; float64 is
// CPU-only) with float scores, the same mask, causal and dropout rules (attention_keep); head dims
// are limited by shared memory (E = Ev = 256 needs about 100 KB), larger ones are a kiln::Error.
void attention_forward_cpu(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a,
                           const KernelContext& ctx);
void attention_forward_cuda(void* out, void* lse, const void* q, const void* k, const void* v,
                            const AttentionArgs& a, const KernelContext& ctx);
// dq/dk/dv: [batch, L, E], [batch, S, E], [batch, S, Ev] in their layouts. The flash formulation
// (probabilities recomputed from lse): dq per query row, dk/dv per key row, each a fixed-order sum,
// so gradients are deterministic. The CUDA twin keeps per-row terms in scratch memory.
void attention_backward_cpu(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                            const void* q, const void* k, const void* v, const AttentionArgs& a,
                            const KernelContext& ctx);
void attention_backward_cuda(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                             const void* q, const void* k, const void* v, const AttentionArgs& a,
                             const KernelContext& ctx);

// The tensor-core kernels of the CUDA twin (kernels/cuda/attention_tc.cu, attention_tc_backward.cu):
// float16/bfloat16, E = Ev in {64, 128}, no mask (dropout is fine), even strides and 4-byte aligned
// operands (for the backward, dout too, and out's layout, which dout shares), a.tensor_cores set.
// Same outputs as attention_forward_cuda and attention_backward_cuda, the backward deterministic as
// well. Only CUDA builds define the kernels; the two `fits` are defined in every build
// (kernels/attention.cpp).
bool attention_tc_fits(const AttentionArgs& a, const void* q, const void* k, const void* v);
bool attention_tc_backward_fits(const AttentionArgs& a, const void* q, const void* k, const void* v,
                                const void* dout);
void attention_forward_tc(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a,
                          const KernelContext& ctx);
void attention_backward_tc(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                           const void* q, const void* k, const void* v, const AttentionArgs& a,
                           const KernelContext& ctx);
// The forward and backward on Hopper's wgmma (kernels/cuda/attention_wgmma.cu, built for sm_90a
// when the CUDA architectures include 90): the same calls as attention_forward_tc and
// attention_backward_tc (the backward given their scratch rows of D), which hand them over when
// a.wgmma is set and attention_wgmma_available() (the build has them, and the current device is of
// compute capability 9.0). Callers go through the _tc functions, which decide. The forward returns
// whether its producer loaded with tensor copies (TMA), the backward whether the fused kernel added
// dQ with tensor reductions.
bool attention_forward_wgmma(void* out, void* lse, const void* q, const void* k, const void* v,
                             const AttentionArgs& a, const KernelContext& ctx);
bool attention_backward_wgmma(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                              const void* q, const void* k, const void* v, float* d_rows, const AttentionArgs& a,
                              const KernelContext& ctx);
bool attention_wgmma_available();
// Launches of the tensor-core forward and backward in this process (both kinds; of these, the wgmma
// ones; of the wgmma forwards, those whose producer loaded with TMA; of the fused wgmma backwards,
// those that added dQ with tensor reductions), so a test can see that they ran (0 in a build without
// CUDA: kernels/twins.cpp).
int64_t attention_tc_launches();
int64_t attention_wgmma_launches();
int64_t attention_wgmma_tma_launches();
int64_t attention_tc_backward_launches();
int64_t attention_wgmma_backward_launches();
int64_t attention_fused_backward_launches();  // of the tensor-core backwards, the fused ones
int64_t attention_wgmma_dq_reduce_launches();

namespace kernels {
KILN_KERNEL(attention_forward);
KILN_KERNEL(attention_backward);
}  // namespace kernels

// The dropout keep decision of element (b, i, j), index (b * L + i) * S + j, shared by both devices;
// `st` resolved (philox_resolve). Two elements share a Philox block: words 0 and 2. The word is
// picked by a branch, not by indexing blk.v with a run-time value, which would put the block in
// local memory on the GPU (a store of four words and a load for every score). The CPU kernel reads
// the same words from cpu::PhiloxLanes, which computes each block once for both of its scores.
KILN_HD bool attention_keep_word(uint32_t word, double p) { return static_cast<double>(philox_uniform(word)) >= p; }
KILN_HD bool attention_keep(const PhiloxState& st, uint64_t index, double p) {
  const Philox4 blk = philox_block(st.seed, st.offset, index >> 1);
  return attention_keep_word((index & 1) ? blk.v[2] : blk.v[0], p);
}

}  // namespace kiln
