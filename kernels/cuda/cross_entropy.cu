// The CUDA twins of kernels/cpu/cross_entropy.cpp: the launches of the kernels in
// kernels/cuda/cross_entropy.cuh.
#include <string>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cross_entropy.cuh"

namespace kiln {
namespace {

using cuda_detail::raw_stream;
using namespace cross_entropy_cuda;

// Scratch for the row losses that sum and mean add in order.
size_t row_loss_bytes(const CrossEntropyShape& shape, LossReduce reduce) {
  if (reduce == LossReduce::None) return 0;
  return static_cast<size_t>(shape.n * shape.s) * sizeof(float);
}

}  // namespace

void cross_entropy_forward_cuda(void* out, DType out_dtype, void* stats, int64_t* valid_count, const void* logits,
                                DType logits_dtype, const int64_t* target, const CrossEntropyShape& shape,
                                LossReduce reduce, const KernelContext& ctx) {
  const char* op = "cross_entropy";
  if (shape.c > INT32_MAX) throw Error("cross_entropy: more than 2^31 - 1 classes (" + std::to_string(shape.c) + ")");
  void* workspace = ctx.workspace(row_loss_bytes(shape, reduce));
  DeviceErrorRecord* err = ctx.error_record();
  const cudaStream_t s = raw_stream(ctx.stream);
  const int64_t rows = shape.n * shape.s;
  CeArgs a{};
  a.out = out;
  a.out_dtype = out_dtype;
  a.stats = static_cast<float*>(stats);
  a.row_loss = static_cast<float*>(workspace);
  a.target = target;
  a.c = shape.c;
  a.inner = shape.s;
  a.ignore_index = shape.ignore_index;
  a.keep_target = static_cast<float>(1.0 - shape.label_smoothing);
  a.smooth = static_cast<float>(shape.label_smoothing);
  a.reduce = reduce;
  a.err = err;
  if (rows > 0) {
    KILN_CUDA_FLOAT_SWITCH(logits_dtype, op, {
      const S* x = static_cast<const S*>(logits);
      if (shape.s == 1) {
        const RowLaunch rl = row_launch(rows, shape.c);
        if (rl.block_row) {
          ce_forward_rows_kernel<S, true><<<rl.grid, rl.threads, 0, s>>>(x, rows, a);
        } else {
          ce_forward_rows_kernel<S, false><<<rl.grid, rl.threads, 0, s>>>(x, rows, a);
        }
      } else {
        ce_forward_cols_kernel<S><<<cuda_detail::grid_for(rows), cuda_detail::kThreads, 0, s>>>(x, rows, a);
      }
    });
    cuda_detail::check_launch(op);
  } else if (logits_dtype != DType::Float32 && logits_dtype != DType::Float16 && logits_dtype != DType::BFloat16) {
    cuda_detail::throw_no_cuda_float_kernel(op, logits_dtype);
  }
  // Runs for zero rows too: valid_count = 0, and a mean of nothing is NaN.
  ce_finish_kernel<<<1, kFinishThreads, 0, s>>>(out, out_dtype, valid_count, a.row_loss, target, rows, shape.c,
                                                shape.ignore_index, reduce);
  cuda_detail::check_launch(op);
}

void cross_entropy_backward_cuda(void* dlogits, const void* dout, DType dout_dtype, const void* logits,
                                 DType logits_dtype, const void* stats, const int64_t* valid_count,
                                 const int64_t* target, const CrossEntropyShape& shape, LossReduce reduce,
                                 const KernelContext& ctx) {
  const char* op = "cross_entropy backward";
  const int64_t numel = shape.n * shape.c * shape.s;
  if (numel == 0) return;
  const double eps = shape.label_smoothing;
  const float off_target = static_cast<float>(eps / static_cast<double>(shape.c));
  const float on_target = static_cast<float>(1.0 - eps) + off_target;
  const cudaStream_t st = raw_stream(ctx.stream);
  const bool by_rows = shape.s == 1 && shape.c >= kRowBackwardMinClasses;
  KILN_CUDA_FLOAT_SWITCH(logits_dtype, op, {
    if (by_rows) {
      ce_backward_rows_kernel<S><<<grid_of(shape.n), kRowBackwardThreads, 0, st>>>(
          static_cast<S*>(dlogits), dout, dout_dtype, static_cast<const S*>(logits), static_cast<const float*>(stats),
          valid_count, target, shape.n, shape.c, shape.ignore_index, reduce, on_target, off_target);
    } else {
      ce_backward_kernel<S><<<cuda_detail::grid_for(numel), cuda_detail::kThreads, 0, st>>>(
          static_cast<S*>(dlogits), dout, dout_dtype, static_cast<const S*>(logits), static_cast<const float*>(stats),
          valid_count, target, shape.n, shape.c, shape.s, shape.ignore_index, reduce, on_target, off_target);
    }
  });
  cuda_detail::check_launch(op);
}

}  // namespace kiln
