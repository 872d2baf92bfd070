// The CUDA multi-tensor ("foreach") kernels' launches: one launch per table of chunks
// (kernels/cuda/foreach.cuh holds the kernels and the tables), per (param, state) dtype pair.
#include <cstdint>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/foreach.cuh"
#include "kernels/foreach.h"

namespace kiln {
namespace {

using namespace cuda_detail;
using namespace foreach_cuda;

[[noreturn]] void no_kernel_for(const char* op, DType t) {
  throw DTypeError(std::string(op) + ": no CUDA kernel for " + dtype_name(t) +
                   " tensors (float32, float16 and bfloat16 only)");
}

template <typename P, typename S>
void launch_sgd(const ForeachTensor* params, const ForeachTensor* grads, const ForeachTensor* bufs,
                const ForeachTensor* steps, int64_t n, const SgdHyper& h, const ForeachScalars& s,
                cudaStream_t stream) {
  const bool use_buf = h.momentum != 0.0 && bufs != nullptr;
  // Without a buffer list the table's third column repeats the params (never dereferenced).
  const ForeachTensor* lists[4] = {params, grads, use_buf ? bufs : params, steps};
  launch_chunks<4>(lists, n, [&](const ChunkTable<4>& table, int blocks, int64_t) {
    sgd_kernel<P, S><<<blocks, kBlock, 0, stream>>>(table, h, s, use_buf);
    check_launch("foreach_sgd_");
  });
}

template <typename P, typename S>
void launch_adam(const ForeachTensor* params, const ForeachTensor* grads, const ForeachTensor* exp_avgs,
                 const ForeachTensor* exp_avg_sqs, const ForeachTensor* max_exp_avg_sqs, const ForeachTensor* steps,
                 int64_t n, const AdamHyper& h, const ForeachScalars& s, cudaStream_t stream) {
  AdamHyper hk = h;
  hk.amsgrad = h.amsgrad && max_exp_avg_sqs != nullptr;
  // Without amsgrad the table's fifth column repeats the second moments (never dereferenced).
  const ForeachTensor* lists[6] = {params, grads, exp_avgs, exp_avg_sqs, hk.amsgrad ? max_exp_avg_sqs : exp_avg_sqs,
                                   steps};
  launch_chunks<6>(lists, n, [&](const ChunkTable<6>& table, int blocks, int64_t) {
    adam_kernel<P, S><<<blocks, kBlock, 0, stream>>>(table, hk, s);
    check_launch("foreach_adam_");
  });
}

// The (param, state) dtype pairs with a kernel: state float32, or state in the param dtype.
enum class PairKind { F32, F16_F32, F16_F16, BF16_F32, BF16_BF16 };
PairKind pair_kind(DType param, DType state, const char* op) {
  if (state != param && state != DType::Float32) {
    throw DTypeError(std::string(op) + ": optimizer state must be float32 or the parameter dtype " +
                     dtype_name(param) + ", got " + dtype_name(state));
  }
  switch (param) {
    case DType::Float32: return PairKind::F32;
    case DType::Float16: return state == DType::Float32 ? PairKind::F16_F32 : PairKind::F16_F16;
    case DType::BFloat16: return state == DType::Float32 ? PairKind::BF16_F32 : PairKind::BF16_BF16;
    default: no_kernel_for(op, param);
  }
}

template <typename T>
void launch_norm_partials(double* partials, const ForeachTensor* tensors, int64_t n, NormMode mode, double p,
                          cudaStream_t stream) {
  const ForeachTensor* lists[1] = {tensors};
  launch_chunks<1>(lists, n, [&](const ChunkTable<1>& table, int blocks, int64_t first_chunk) {
    norm_partials_kernel<T><<<blocks, kBlock, 0, stream>>>(table, partials, first_chunk, mode, static_cast<float>(p));
    check_launch("foreach_norm");
  });
}

template <typename T>
void launch_mul_scalar(const ForeachTensor* tensors, int64_t n, const void* scalar, bool scalar_f64,
                       cudaStream_t stream) {
  const ForeachTensor* lists[1] = {tensors};
  launch_chunks<1>(lists, n, [&](const ChunkTable<1>& table, int blocks, int64_t) {
    mul_scalar_kernel<T><<<blocks, kBlock, 0, stream>>>(table, scalar, scalar_f64);
    check_launch("foreach_mul_");
  });
}

template <typename T>
void launch_add_scalar(const ForeachTensor* tensors, int64_t n, double value, const float* found_inf,
                       cudaStream_t stream) {
  const ForeachTensor* lists[1] = {tensors};
  launch_chunks<1>(lists, n, [&](const ChunkTable<1>& table, int blocks, int64_t) {
    add_scalar_kernel<T><<<blocks, kBlock, 0, stream>>>(table, static_cast<float>(value), found_inf);
    check_launch("foreach_add_scalar_");
  });
}

template <typename U> void launch_zero(const ForeachTensor* tensors, int64_t n, cudaStream_t stream) {
  const ForeachTensor* lists[1] = {tensors};
  launch_chunks<1>(lists, n, [&](const ChunkTable<1>& table, int blocks, int64_t) {
    zero_kernel<U><<<blocks, kBlock, 0, stream>>>(table);
    check_launch("foreach_zero_");
  });
}

template <typename T>
void launch_check_unscale(const ForeachTensor* tensors, int64_t n, float* found_inf, const float* inv_scale,
                          cudaStream_t stream) {
  const ForeachTensor* lists[1] = {tensors};
  launch_chunks<1>(lists, n, [&](const ChunkTable<1>& table, int blocks, int64_t) {
    check_unscale_kernel<T><<<blocks, kBlock, 0, stream>>>(table, found_inf, inv_scale);
    check_launch("foreach_non_finite_check_and_unscale_");
  });
}

}  // namespace

void sgd_step_cuda(const ForeachTensor* params, const ForeachTensor* grads, const ForeachTensor* bufs,
                   const ForeachTensor* steps, int64_t n, DType param_dtype, DType state_dtype, const SgdHyper& h,
                   const ForeachScalars& s, const KernelContext& ctx) {
  const PairKind kind = pair_kind(param_dtype, state_dtype, "foreach_sgd_");
  if (n == 0) return;
  const cudaStream_t st = raw_stream(ctx.stream);
  switch (kind) {
    case PairKind::F32: launch_sgd<float, float>(params, grads, bufs, steps, n, h, s, st); break;
    case PairKind::F16_F32: launch_sgd<__half, float>(params, grads, bufs, steps, n, h, s, st); break;
    case PairKind::F16_F16: launch_sgd<__half, __half>(params, grads, bufs, steps, n, h, s, st); break;
    case PairKind::BF16_F32: launch_sgd<__nv_bfloat16, float>(params, grads, bufs, steps, n, h, s, st); break;
    case PairKind::BF16_BF16:
      launch_sgd<__nv_bfloat16, __nv_bfloat16>(params, grads, bufs, steps, n, h, s, st);
      break;
  }
}

void adam_step_cuda(const ForeachTensor* params, const ForeachTensor* grads, const ForeachTensor* exp_avgs,
                    const ForeachTensor* exp_avg_sqs, const ForeachTensor* max_exp_avg_sqs, const ForeachTensor* steps,
                    int64_t n, DType param_dtype, DType state_dtype, const AdamHyper& h, const ForeachScalars& s,
                    const KernelContext& ctx) {
  const PairKind kind = pair_kind(param_dtype, state_dtype, "foreach_adam_");
  if (n == 0) return;
  const cudaStream_t st = raw_stream(ctx.stream);
  const ForeachTensor* vm = max_exp_avg_sqs;
  switch (kind) {
    case PairKind::F32: launch_adam<float, float>(params, grads, exp_avgs, exp_avg_sqs, vm, steps, n, h, s, st); break;
    case PairKind::F16_F32:
      launch_adam<__half, float>(params, grads, exp_avgs, exp_avg_sqs, vm, steps, n, h, s, st);
      break;
    case PairKind::F16_F16:
      launch_adam<__half, __half>(params, grads, exp_avgs, exp_avg_sqs, vm, steps, n, h, s, st);
      break;
    case PairKind::BF16_F32:
      launch_adam<__nv_bfloat16, float>(params, grads, exp_avgs, exp_avg_sqs, vm, steps, n, h, s, st);
      break;
    case PairKind::BF16_BF16:
      launch_adam<__nv_bfloat16, __nv_bfloat16>(params, grads, exp_avgs, exp_avg_sqs, vm, steps, n, h, s, st);
      break;
  }
}

void foreach_norm_partials_cuda(double* partials, const ForeachTensor* tensors, int64_t n, DType dtype, double p,
                                const KernelContext& ctx) {
  const NormMode mode = norm_mode(p);
  const cudaStream_t st = raw_stream(ctx.stream);
  switch (dtype) {
    case DType::Float32: launch_norm_partials<float>(partials, tensors, n, mode, p, st); break;
    case DType::Float16: launch_norm_partials<__half>(partials, tensors, n, mode, p, st); break;
    case DType::BFloat16: launch_norm_partials<__nv_bfloat16>(partials, tensors, n, mode, p, st); break;
    default: no_kernel_for("foreach_norm", dtype);
  }
}

void foreach_norm_finish_cuda(void* out, DType out_dtype, const double* partials, int64_t count, double p,
                              const KernelContext& ctx) {
  norm_finish_kernel<<<1, kBlock, 0, raw_stream(ctx.stream)>>>(out, out_dtype == DType::Float64, partials, count,
                                                               norm_mode(p), p);
  check_launch("foreach_norm");
}

void foreach_mul_scalar_cuda(const ForeachTensor* tensors, int64_t n, DType dtype, const void* scalar,
                             DType scalar_dtype, const KernelContext& ctx) {
  const cudaStream_t st = raw_stream(ctx.stream);
  const bool f64 = scalar_dtype == DType::Float64;
  switch (dtype) {
    case DType::Float32: launch_mul_scalar<float>(tensors, n, scalar, f64, st); break;
    case DType::Float16: launch_mul_scalar<__half>(tensors, n, scalar, f64, st); break;
    case DType::BFloat16: launch_mul_scalar<__nv_bfloat16>(tensors, n, scalar, f64, st); break;
    default: no_kernel_for("foreach_mul_", dtype);
  }
}

void foreach_add_scalar_cuda(const ForeachTensor* tensors, int64_t n, DType dtype, double value, const float* found_inf,
                             const KernelContext& ctx) {
  const cudaStream_t st = raw_stream(ctx.stream);
  switch (dtype) {
    case DType::Float32: launch_add_scalar<float>(tensors, n, value, found_inf, st); break;
    case DType::Float16: launch_add_scalar<__half>(tensors, n, value, found_inf, st); break;
    case DType::BFloat16: launch_add_scalar<__nv_bfloat16>(tensors, n, value, found_inf, st); break;
    default: no_kernel_for("foreach_add_scalar_", dtype);
  }
}

void foreach_zero_cuda(const ForeachTensor* tensors, int64_t n, size_t element_size, const KernelContext& ctx) {
  const cudaStream_t st = raw_stream(ctx.stream);
  switch (element_size) {
    case 1: launch_zero<uint8_t>(tensors, n, st); break;
    case 2: launch_zero<uint16_t>(tensors, n, st); break;
    case 4: launch_zero<uint32_t>(tensors, n, st); break;
    case 8: launch_zero<uint64_t>(tensors, n, st); break;
    default: throw DTypeError("foreach_zero_: unsupported element size " + std::to_string(element_size));
  }
}

void foreach_non_finite_check_and_unscale_cuda(const ForeachTensor* tensors, int64_t n, DType dtype, float* found_inf,
                                               const float* inv_scale, const KernelContext& ctx) {
  const cudaStream_t st = raw_stream(ctx.stream);
  switch (dtype) {
    case DType::Float32: launch_check_unscale<float>(tensors, n, found_inf, inv_scale, st); break;
    case DType::Float16: launch_check_unscale<__half>(tensors, n, found_inf, inv_scale, st); break;
    case DType::BFloat16: launch_check_unscale<__nv_bfloat16>(tensors, n, found_inf, inv_scale, st); break;
    case DType::Float64: launch_check_unscale<double>(tensors, n, found_inf, inv_scale, st); break;
    default:
      throw DTypeError(std::string("foreach_non_finite_check_and_unscale_: expected floating tensors, got ") +
                       dtype_name(dtype));
  }
}

void amp_update_scale_cuda(float* scale, int32_t* growth_tracker, const float* found_inf, double growth_factor,
                           double backoff_factor, int32_t growth_interval, const KernelContext& ctx) {
  amp_update_scale_kernel<<<1, 1, 0, raw_stream(ctx.stream)>>>(scale, growth_tracker, found_inf, growth_factor,
                                                                backoff_factor, growth_interval);
  check_launch("amp_update_scale_");
}

}  // namespace kiln
