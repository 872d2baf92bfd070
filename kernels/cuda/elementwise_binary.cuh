// The CUDA binary elementwise kernels (arithmetic, comparisons, fused backward helpers), the twins of
// binary_cpu, and binary_dispatch, which picks and launches one for an op. As for unary ops, kernels
// exist per (op, compute type) and cast on load and store; only the vectorized fast paths are
// specialized by storage type: dense float32/float16/bfloat16 operands of one dtype, and add, sub
// and mul of a float32 output from float32/float16/bfloat16 operands of mixed dtypes (autocast's
// residual adds: a float32 stream plus a bfloat16 branch). Either operand may be a scalar broadcast
// everywhere.
//
// Host-compilable: binary_dispatch launches through a launcher (cuda_detail::StreamLaunch in
// kernels/cuda/elementwise_binary.cu), and the CPU tests run it on the emulator of CUDA's threads
// (tests/kernels/test_elementwise_simt.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/elementwise.h"
#include "kernels/elementwise_math.h"
#include "kernels/error.h"

namespace kiln::binary_device {

using namespace cuda_detail;

// Backward helpers take a gradient, which is always floating, and atan2 has no integer form (core
// promotes integers to float32): not instantiated for int64.
constexpr bool float_only(BinaryOp op) {
  switch (op) {
    case BinaryOp::Atan2:
    case BinaryOp::ReluBackward:
    case BinaryOp::GeluErfBackward:
    case BinaryOp::GeluTanhBackward:
    case BinaryOp::TanhBackward:
    case BinaryOp::SigmoidBackward:
    case BinaryOp::RsqrtBackward:
    case BinaryOp::SqrtBackward:
    case BinaryOp::PowScalarBackward:
    case BinaryOp::ClampBackward:
    case BinaryOp::AbsBackward:
    case BinaryOp::SiluBackward:
    case BinaryOp::LeakyReluBackward:
    case BinaryOp::SoftplusBackward: return true;
    default: return false;
  }
}

// Comparisons and logical ops always write bool, so their output never matches float inputs; atan2
// and the rounding divisions and remainders are uncommon in training (the generic kernel only).
constexpr bool has_vector_path(BinaryOp op) {
  switch (op) {
    case BinaryOp::Atan2:
    case BinaryOp::Fmod:
    case BinaryOp::Remainder:
    case BinaryOp::FloorDivide:
    case BinaryOp::TruncDivide:
    case BinaryOp::Eq:
    case BinaryOp::Ne:
    case BinaryOp::Lt:
    case BinaryOp::Le:
    case BinaryOp::Gt:
    case BinaryOp::Ge:
    case BinaryOp::LogicalAnd:
    case BinaryOp::LogicalOr: return false;
    default: return true;
  }
}

inline const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Pow: return "pow";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
    case BinaryOp::Eq: return "eq";
    case BinaryOp::Ne: return "ne";
    case BinaryOp::Lt: return "lt";
    case BinaryOp::Le: return "le";
    case BinaryOp::Gt: return "gt";
    case BinaryOp::Ge: return "ge";
    case BinaryOp::LogicalAnd: return "logical_and";
    case BinaryOp::LogicalOr: return "logical_or";
    case BinaryOp::Atan2: return "atan2";
    case BinaryOp::Fmod: return "fmod";
    case BinaryOp::Remainder: return "remainder";
    case BinaryOp::FloorDivide: return "floor_divide";
    case BinaryOp::TruncDivide: return "div(trunc)";
    case BinaryOp::ReluBackward: return "relu backward";
    case BinaryOp::GeluErfBackward: return "gelu backward";
    case BinaryOp::GeluTanhBackward: return "gelu(tanh) backward";
    case BinaryOp::TanhBackward: return "tanh backward";
    case BinaryOp::SigmoidBackward: return "sigmoid backward";
    case BinaryOp::RsqrtBackward: return "rsqrt backward";
    case BinaryOp::SqrtBackward: return "sqrt backward";
    case BinaryOp::PowScalarBackward: return "pow backward";
    case BinaryOp::ClampBackward: return "clamp backward";
    case BinaryOp::AbsBackward: return "abs backward";
    case BinaryOp::SiluBackward: return "silu backward";
    case BinaryOp::LeakyReluBackward: return "leaky_relu backward";
    case BinaryOp::SoftplusBackward: return "softplus backward";
  }
  return "binary";
}

// Vector i of p in float, or `value` K times when p is null (a scalar stays unrounded, as on the CPU).
template <typename S, int K>
__device__ __forceinline__ void load_or_splat(float (&v)[K], const S* p, int64_t i, float value) {
  if (p) {
    const Vec16<S> raw = reinterpret_cast<const Vec16<S>*>(p)[i];
#pragma unroll
    for (int j = 0; j < K; ++j) v[j] = to_f32(raw.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < K; ++j) v[j] = value;
  }
}

// One 16-byte vector of each operand per thread and step, then the tail one element per thread
// (everything when a pointer is not 16-byte aligned: n_vec == 0). A null x or y is a scalar. No
// __restrict__: in-place ops pass out == x, each element read and then written by one thread.
template <BinaryOp OP, typename S>
__global__ void binary_vec_kernel(S* out, const S* x, const S* y, float x_value, float y_value, int64_t n,
                                  int64_t n_vec, float alpha, float beta) {
  constexpr int K = Vec16<S>::kCount;
  const int64_t first = global_thread(), step = grid_threads();
  for (int64_t i = first; i < n_vec; i += step) {
    float a[K], b[K];
    load_or_splat(a, x, i, x_value);
    load_or_splat(b, y, i, y_value);
    Vec16<S> r;
#pragma unroll
    for (int j = 0; j < K; ++j) r.v[j] = from_f32<S>(ew::binary_fn<OP, float>(a[j], b[j], alpha, beta));
    reinterpret_cast<Vec16<S>*>(out)[i] = r;
  }
  for (int64_t i = n_vec * K + first; i < n; i += step) {
    const float a = x ? to_f32(x[i]) : x_value;
    const float b = y ? to_f32(y[i]) : y_value;
    out[i] = from_f32<S>(ew::binary_fn<OP, float>(a, b, alpha, beta));
  }
}

template <BinaryOp OP, typename C>
__global__ void binary_generic_kernel(const __grid_constant__ OffsetCalc<3> calc, void* out, DType out_dtype,
                                      const InValue<C> x, const InValue<C> y, int64_t n, C alpha, C beta) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[3];
    calc.offsets(i, off);
    store_as<C>(out, out_dtype, off[0], ew::binary_fn<OP, C>(x.load(off[1]), y.load(off[2]), alpha, beta));
  }
}

inline bool dense_as(const Operand& o, DType t) { return o.is_scalar || (dense_1d(o.arg) && o.arg.dtype == t); }

// --- mixed float operands, float32 output ---------------------------------------------------------

constexpr bool has_mixed_path(BinaryOp op) {
  return op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul;
}

// Eight elements of p from element 8 i on, as float (one 16-byte load of a 16-bit type, two of
// float32), or `value` eight times when p is null.
constexpr int kMixedCount = 8;
template <typename S>
__device__ __forceinline__ void load8_or_splat(float (&v)[kMixedCount], const S* p, int64_t i, float value) {
  constexpr int K = Vec16<S>::kCount, kLoads = kMixedCount / K;
  if (!p) {
#pragma unroll
    for (int j = 0; j < kMixedCount; ++j) v[j] = value;
    return;
  }
  const Vec16<S>* src = reinterpret_cast<const Vec16<S>*>(p) + i * kLoads;
#pragma unroll
  for (int h = 0; h < kLoads; ++h) {
    const Vec16<S> raw = src[h];
#pragma unroll
    for (int j = 0; j < K; ++j) v[h * K + j] = to_f32(raw.v[j]);
  }
}

// binary_vec_kernel for float32 out from operands of other storage types: eight elements per
// thread and step, all loaded before any is stored (out may be x or y), then the tail. The
// arithmetic is the generic kernel's: both operands as float, one binary_fn, a float32 result.
template <BinaryOp OP, typename SX, typename SY>
__global__ void binary_mixed_kernel(float* out, const SX* x, const SY* y, float x_value, float y_value, int64_t n,
                                    int64_t n_vec, float alpha, float beta) {
  const int64_t first = global_thread(), step = grid_threads();
  for (int64_t i = first; i < n_vec; i += step) {
    float a[kMixedCount], b[kMixedCount];
    load8_or_splat(a, x, i, x_value);
    load8_or_splat(b, y, i, y_value);
    Vec16<float> r[2];
#pragma unroll
    for (int j = 0; j < kMixedCount; ++j) r[j / 4].v[j % 4] = ew::binary_fn<OP, float>(a[j], b[j], alpha, beta);
    Vec16<float>* dst = reinterpret_cast<Vec16<float>*>(out) + 2 * i;
    dst[0] = r[0];
    dst[1] = r[1];
  }
  for (int64_t i = n_vec * kMixedCount + first; i < n; i += step) {
    const float a = x ? to_f32(x[i]) : x_value;
    const float b = y ? to_f32(y[i]) : y_value;
    out[i] = ew::binary_fn<OP, float>(a, b, alpha, beta);
  }
}

// A dense float32, float16 or bfloat16 operand (or a scalar, which reads as float32 and is never loaded).
inline bool mixed_operand(const Operand& o) {
  if (o.is_scalar) return true;
  const DType t = o.arg.dtype;
  return dense_1d(o.arg) && (t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16);
}

// Calls f(SX{}, SY{}) with x's and y's storage types (float for a scalar).
template <typename F> void with_storage_types(const Operand& x, const Operand& y, F&& f) {
  auto second = [&](auto sx) {
    switch (y.is_scalar ? DType::Float32 : y.arg.dtype) {
      case DType::Float16: f(sx, Float16Storage{}); return;
      case DType::BFloat16: f(sx, BFloat16Storage{}); return;
      default: f(sx, float{}); return;
    }
  };
  switch (x.is_scalar ? DType::Float32 : x.arg.dtype) {
    case DType::Float16: second(Float16Storage{}); return;
    case DType::BFloat16: second(BFloat16Storage{}); return;
    default: second(float{}); return;
  }
}

template <BinaryOp OP, class Launch>
void launch_mixed(const StridedArg& out, const Operand& x, const Operand& y, float alpha, float beta,
                  const Launch& launch) {
  with_storage_types(x, y, [&](auto sx, auto sy) {
    using SX = decltype(sx);
    using SY = decltype(sy);
    if constexpr (std::is_same_v<SX, float> && std::is_same_v<SY, float>) {
      // No kernel for this pair: launch_typed's same-dtype path takes float32 operands first.
      throw Error(std::string(binary_name(OP)) + ": the mixed-dtype path was given float32 operands only");
    } else {
      const int64_t n = out.numel();
      float* o = static_cast<float*>(out.data);
      const SX* xp = x.is_scalar ? nullptr : static_cast<const SX*>(x.arg.data);
      const SY* yp = y.is_scalar ? nullptr : static_cast<const SY*>(y.arg.data);
      const bool aligned = aligned16(o) && (xp == nullptr || aligned16(xp)) && (yp == nullptr || aligned16(yp));
      const VecSplit v = vec_split(n, kMixedCount, aligned);
      launch(binary_mixed_kernel<OP, SX, SY>, grid_for(v.items), unsigned{kThreads}, o, xp, yp, scalar_as<float>(x),
             scalar_as<float>(y), n, v.n_vec, alpha, beta);
    }
  });
}

template <BinaryOp OP, typename S, class Launch>
void launch_vec(const StridedArg& out, const Operand& x, const Operand& y, float alpha, float beta,
                const Launch& launch) {
  constexpr int K = Vec16<S>::kCount;
  const int64_t n = out.numel();
  S* o = static_cast<S*>(out.data);
  const S* xp = x.is_scalar ? nullptr : static_cast<const S*>(x.arg.data);
  const S* yp = y.is_scalar ? nullptr : static_cast<const S*>(y.arg.data);
  const bool aligned = aligned16(o) && (xp == nullptr || aligned16(xp)) && (yp == nullptr || aligned16(yp));
  const VecSplit v = vec_split(n, K, aligned);
  launch(binary_vec_kernel<OP, S>, grid_for(v.items), unsigned{kThreads}, o, xp, yp, scalar_as<float>(x),
         scalar_as<float>(y), n, v.n_vec, alpha, beta);
}

template <BinaryOp OP, typename C, class Launch>
void launch_typed(const StridedArg& out, const Operand& x, const Operand& y, C alpha, C beta, const Launch& launch) {
  if constexpr (std::is_same_v<C, float> && has_vector_path(OP)) {
    if (dense_1d(out) && dense_as(x, out.dtype) && dense_as(y, out.dtype)) {
      switch (out.dtype) {
        case DType::Float32: launch_vec<OP, float>(out, x, y, alpha, beta, launch); return;
        case DType::Float16: launch_vec<OP, Float16Storage>(out, x, y, alpha, beta, launch); return;
        case DType::BFloat16: launch_vec<OP, BFloat16Storage>(out, x, y, alpha, beta, launch); return;
        default: break;
      }
    }
  }
  if constexpr (std::is_same_v<C, float> && has_mixed_path(OP)) {
    if (dense_1d(out) && out.dtype == DType::Float32 && mixed_operand(x) && mixed_operand(y)) {
      launch_mixed<OP>(out, x, y, alpha, beta, launch);
      return;
    }
  }
  const int64_t n = out.numel();
  const int64_t* strides[3] = {out.strides, x.is_scalar ? nullptr : x.arg.strides,
                               y.is_scalar ? nullptr : y.arg.strides};
  launch(binary_generic_kernel<OP, C>, grid_for(n), unsigned{kThreads}, make_offset_calc<3>(out, strides), out.data,
         out.dtype, in_value<C>(x), in_value<C>(y), n, alpha, beta);
}

// binary_cuda's launch for one op: the vector kernel for dense operands of the output's float dtype,
// the mixed kernel for a float32 output of add, sub or mul from dense 16-bit operands, the generic
// one through offsets otherwise. Each launch is a call launch(kernel, grid, block, arguments...)
// (cuda_detail::StreamLaunch on a GPU).
template <BinaryOp OP, class Launch>
void binary_dispatch(const StridedArg& out, const Operand& x, const Operand& y, DType compute, double alpha,
                     double beta, const Launch& launch) {
  switch (compute) {
    case DType::Float32:
      launch_typed<OP, float>(out, x, y, static_cast<float>(alpha), static_cast<float>(beta), launch);
      return;
    case DType::Float64: launch_typed<OP, double>(out, x, y, alpha, beta, launch); return;
    case DType::Int64:
      if constexpr (!float_only(OP)) {
        // As binary_cpu: saturated, and NaN parameters (no clamp bound) have no integer form and become 0.
        launch_typed<OP, int64_t>(out, x, y, ew::to_compute<int64_t>(alpha), ew::to_compute<int64_t>(beta), launch);
        return;
      }
      break;
    default: break;
  }
  throw DTypeError(std::string(binary_name(OP)) + ": no CUDA kernel for compute dtype " + dtype_name(compute));
}

}  // namespace kiln::binary_device
