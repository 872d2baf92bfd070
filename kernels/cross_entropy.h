// Fused cross-entropy kernels. One pass per row computes the log-sum-exp and the loss (with
// ignore_index and label smoothing); the backward rebuilds softmax from the saved log-sum-exp
// instead of saving probabilities, so a [rows, classes] tensor is never kept for backward.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel.h"

namespace kiln {

// Logits: contiguous [N, C, S] (class dim in the middle, S = product of the trailing dims; S = 1
// for [N, C]); target: contiguous int64 [N, S]. A row is one (n, s) pair.
struct CrossEntropyShape {
  int64_t n = 0, c = 0, s = 1;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};

// How the per-row losses are combined: none writes [N, S] losses (ignored rows are 0); sum and
// mean write one value (mean divides by the number of non-ignored rows; NaN when there is none,
// as 0/0 in PyTorch).
enum class LossReduce : uint8_t { None, Sum, Mean };

// out: [N*S] or one element, of out_dtype. stats: [N*S, 2] per row, of norm_stat_dtype(logits_dtype)
// (kernels/dtype.h): the row's max m and log(sum_j exp(x_j - m)), the log-sum-exp in two parts, so
// the backward's softmax exp((x - m) - log(sum)) keeps its precision where a log-sum-exp rounded to
// the spacing of large logits (|x| around 1e5) would not. valid_count: one int64, the non-ignored rows.
// A target outside [0, C) that is not ignore_index is an IndexError naming cross_entropy, the
// target and the number of classes; the first such row in row-major order is reported.
// Sum and mean add the row losses in fixed chunks merged in order (deterministic).
void cross_entropy_forward_cpu(void* out, DType out_dtype, void* stats, int64_t* valid_count, const void* logits,
                               DType logits_dtype, const int64_t* target, const CrossEntropyShape& shape,
                               LossReduce reduce, const KernelContext& ctx);
// dlogits (contiguous [N, C, S], logits_dtype) = dout_row * (softmax - (1 - eps) * onehot - eps / C),
// where dout_row is dout[row] (none), dout[0] (sum) or dout[0] / valid_count (mean); 0 on ignored rows.
void cross_entropy_backward_cpu(void* dlogits, const void* dout, DType dout_dtype, const void* logits,
                                DType logits_dtype, const void* stats, const int64_t* valid_count,
                                const int64_t* target, const CrossEntropyShape& shape, LossReduce reduce,
                                const KernelContext& ctx);

// The CUDA twins take device pointers throughout, valid_count and the scalar dout included, so
// nothing waits for the host. float32/float16/bfloat16 logits (float64 is CPU-only); stats are float32.
// A kernel cannot throw: a target outside [0, C) that is not ignore_index makes its row count as
// ignored (loss 0, gradient 0, not in valid_count) and the first one is recorded in the context's
// error record as IndexCheckOp::CrossEntropy (index = the target, size = C), raised as an
// IndexError by the host at its next synchronizing call. Sum and mean add the row losses (float,
// added in double) in a fixed order through scratch memory from the context.
void cross_entropy_forward_cuda(void* out, DType out_dtype, void* stats, int64_t* valid_count, const void* logits,
                                DType logits_dtype, const int64_t* target, const CrossEntropyShape& shape,
                                LossReduce reduce, const KernelContext& ctx);
void cross_entropy_backward_cuda(void* dlogits, const void* dout, DType dout_dtype, const void* logits,
                                 DType logits_dtype, const void* stats, const int64_t* valid_count,
                                 const int64_t* target, const CrossEntropyShape& shape, LossReduce reduce,
                                 const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(cross_entropy_forward);
KILN_KERNEL(cross_entropy_backward);
}  // namespace kernels

}  // namespace kiln
