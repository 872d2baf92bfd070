// The CUDA unary elementwise kernels, the twins of unary_cpu with the math of elementwise_math.h,
// and unary_dispatch, which picks and launches one for an op. Kernels are instantiated per (op,
// compute type) only; operands of any dtype are cast on load and store. The specializations by
// storage type are the vectorized fast paths (16-byte accesses) for dense float32/float16/bfloat16
// operands of one dtype, and for casts among those three, which is where training spends its time.
//
// Host-compilable: unary_dispatch launches through a launcher (cuda_detail::StreamLaunch in
// kernels/cuda/elementwise_unary.cu), and the CPU tests run it on the emulator of CUDA's threads
// (tests/kernels/test_elementwise_simt.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/elementwise.h"
#include "kernels/elementwise_math.h"
#include "kernels/error.h"

namespace kiln::unary_device {

using namespace cuda_detail;

// The less common math (rounding, the inverse and hyperbolic trigonometric functions, erf and
// erfc, the base-2 and base-10 logarithms and exp2): UnaryOp's last block, from Floor on. They get
// the generic kernel only (a dense float16 input is converted on load there too), which keeps
// their instantiations, and this file's compile time, at two per op.
constexpr bool is_uncommon(UnaryOp op) { return op >= UnaryOp::Floor; }

// Ops that only make sense on floats: core promotes integer inputs of these to float first (and
// copies integers for the rounding ops), so they are not instantiated for int64 (the CPU twin
// compiles them as the identity).
constexpr bool float_only(UnaryOp op) {
  if (is_uncommon(op)) return true;
  switch (op) {
    case UnaryOp::Exp:
    case UnaryOp::Log:
    case UnaryOp::Sqrt:
    case UnaryOp::Rsqrt:
    case UnaryOp::Tanh:
    case UnaryOp::Sigmoid:
    case UnaryOp::GeluErf:
    case UnaryOp::GeluTanh:
    case UnaryOp::Silu:
    case UnaryOp::LeakyRelu:
    case UnaryOp::Softplus:
    case UnaryOp::Sin:
    case UnaryOp::Cos:
    case UnaryOp::Log1p:
    case UnaryOp::Expm1: return true;
    default: return false;
  }
}

// logical_not always writes bool, so its output never matches a float input: no vector kernel.
constexpr bool has_vector_path(UnaryOp op) { return op != UnaryOp::LogicalNot && !is_uncommon(op); }

inline const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Copy: return "copy";
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::GeluErf: return "gelu";
    case UnaryOp::GeluTanh: return "gelu(tanh)";
    case UnaryOp::Sign: return "sign";
    case UnaryOp::PowScalar: return "pow";
    case UnaryOp::RPowScalar: return "pow(scalar base)";
    case UnaryOp::Clamp: return "clamp";
    case UnaryOp::LogicalNot: return "logical_not";
    case UnaryOp::Silu: return "silu";
    case UnaryOp::LeakyRelu: return "leaky_relu";
    case UnaryOp::Softplus: return "softplus";
    case UnaryOp::Sin: return "sin";
    case UnaryOp::Cos: return "cos";
    case UnaryOp::Log1p: return "log1p";
    case UnaryOp::Expm1: return "expm1";
    case UnaryOp::Floor: return "floor";
    case UnaryOp::Ceil: return "ceil";
    case UnaryOp::Round: return "round";
    case UnaryOp::Trunc: return "trunc";
    case UnaryOp::Tan: return "tan";
    case UnaryOp::Asin: return "asin";
    case UnaryOp::Acos: return "acos";
    case UnaryOp::Atan: return "atan";
    case UnaryOp::Sinh: return "sinh";
    case UnaryOp::Cosh: return "cosh";
    case UnaryOp::Asinh: return "asinh";
    case UnaryOp::Acosh: return "acosh";
    case UnaryOp::Atanh: return "atanh";
    case UnaryOp::Erf: return "erf";
    case UnaryOp::Erfc: return "erfc";
    case UnaryOp::Log2: return "log2";
    case UnaryOp::Log10: return "log10";
    case UnaryOp::Exp2: return "exp2";
  }
  return "unary";
}

// One 16-byte vector per thread and step; the last n - n_vec * K elements (all of them when a
// pointer is not 16-byte aligned, then n_vec == 0) one per thread. No __restrict__: in-place ops
// pass out == in (each element is read and then written by the same thread, which is safe).
template <UnaryOp OP, typename S>
__global__ void unary_vec_kernel(S* out, const S* in, float in_value, int64_t n, int64_t n_vec, float a, float b) {
  constexpr int K = Vec16<S>::kCount;
  const int64_t first = global_thread(), step = grid_threads();
  if (in == nullptr) {  // a scalar input (fill): the value once, then stores only
    const S v = from_f32<S>(ew::unary_fn<OP, float>(in_value, a, b));
    Vec16<S> r;
#pragma unroll
    for (int j = 0; j < K; ++j) r.v[j] = v;
    for (int64_t i = first; i < n_vec; i += step) reinterpret_cast<Vec16<S>*>(out)[i] = r;
    for (int64_t i = n_vec * K + first; i < n; i += step) out[i] = v;
    return;
  }
  for (int64_t i = first; i < n_vec; i += step) {
    const Vec16<S> x = reinterpret_cast<const Vec16<S>*>(in)[i];
    Vec16<S> r;
#pragma unroll
    for (int j = 0; j < K; ++j) r.v[j] = from_f32<S>(ew::unary_fn<OP, float>(to_f32(x.v[j]), a, b));
    reinterpret_cast<Vec16<S>*>(out)[i] = r;
  }
  for (int64_t i = n_vec * K + first; i < n; i += step) {
    out[i] = from_f32<S>(ew::unary_fn<OP, float>(to_f32(in[i]), a, b));
  }
}

// Casts between dense float32, float16 and bfloat16 operands (the casts autocast makes): 8 elements
// per thread and step, read and written as 16-byte vectors (a float32 side as two), all 8 loaded
// before any is stored. The tail, and everything when a pointer is not 16-byte aligned (n_vec == 0),
// goes one element per thread. The conversions are the generic kernel's (round to nearest even).
template <typename I, typename O> __global__ void cast_vec_kernel(O* out, const I* in, int64_t n, int64_t n_vec) {
  constexpr int K = 8, KI = Vec16<I>::kCount, KO = Vec16<O>::kCount;
  for (int64_t i = global_thread(); i < n_vec; i += grid_threads()) {
    float x[K];
#pragma unroll
    for (int v = 0; v < K / KI; ++v) {
      const Vec16<I> p = reinterpret_cast<const Vec16<I>*>(in)[i * (K / KI) + v];
#pragma unroll
      for (int j = 0; j < KI; ++j) x[v * KI + j] = to_f32(p.v[j]);
    }
#pragma unroll
    for (int v = 0; v < K / KO; ++v) {
      Vec16<O> q;
#pragma unroll
      for (int j = 0; j < KO; ++j) q.v[j] = from_f32<O>(x[v * KO + j]);
      reinterpret_cast<Vec16<O>*>(out)[i * (K / KO) + v] = q;
    }
  }
  for (int64_t i = n_vec * K + global_thread(); i < n; i += grid_threads()) out[i] = from_f32<O>(to_f32(in[i]));
}

template <typename I, typename O, class Launch>
bool launch_cast(const StridedArg& out, const StridedArg& in, const Launch& launch) {
  if constexpr (std::is_same_v<I, O>) {
    return false;  // not a cast: no kernel is instantiated for it
  } else {
    const int64_t n = out.numel();
    O* o = static_cast<O*>(out.data);
    const I* x = static_cast<const I*>(in.data);
    const VecSplit v = vec_split(n, 8, aligned16(o) && aligned16(x));
    launch(cast_vec_kernel<I, O>, grid_for(v.items), unsigned{kThreads}, o, x, n, v.n_vec);
    return true;
  }
}

// The cast fast path's pairs: two different dtypes among float32, float16 and bfloat16.
template <typename I, class Launch>
bool launch_cast_from(const StridedArg& out, const StridedArg& in, const Launch& launch) {
  switch (out.dtype) {
    case DType::Float32: return launch_cast<I, float>(out, in, launch);
    case DType::Float16: return launch_cast<I, Float16Storage>(out, in, launch);
    case DType::BFloat16: return launch_cast<I, BFloat16Storage>(out, in, launch);
    default: return false;
  }
}
template <class Launch> bool launch_dense_cast(const StridedArg& out, const StridedArg& in, const Launch& launch) {
  if (in.dtype == out.dtype || !dense_1d(out) || !dense_1d(in)) return false;
  switch (in.dtype) {
    case DType::Float32: return launch_cast_from<float>(out, in, launch);
    case DType::Float16: return launch_cast_from<Float16Storage>(out, in, launch);
    case DType::BFloat16: return launch_cast_from<BFloat16Storage>(out, in, launch);
    default: return false;
  }
}

// Everything else: one thread per output element, any strides and dtypes.
template <UnaryOp OP, typename C>
__global__ void unary_generic_kernel(const __grid_constant__ OffsetCalc<2> calc, void* out, DType out_dtype,
                                     const InValue<C> in, int64_t n, C a, C b) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[2];
    calc.offsets(i, off);
    store_as<C>(out, out_dtype, off[0], ew::unary_fn<OP, C>(in.load(off[1]), a, b));
  }
}

template <UnaryOp OP, typename S, class Launch>
void launch_vec(const StridedArg& out, const Operand& in, float a, float b, const Launch& launch) {
  constexpr int K = Vec16<S>::kCount;
  const int64_t n = out.numel();
  S* o = static_cast<S*>(out.data);
  const S* x = in.is_scalar ? nullptr : static_cast<const S*>(in.arg.data);
  const VecSplit v = vec_split(n, K, aligned16(o) && (x == nullptr || aligned16(x)));
  launch(unary_vec_kernel<OP, S>, grid_for(v.items), unsigned{kThreads}, o, x, scalar_as<float>(in), n, v.n_vec, a, b);
}

template <UnaryOp OP, typename C, class Launch>
void launch_typed(const StridedArg& out, const Operand& in, C a, C b, const Launch& launch) {
  if constexpr (std::is_same_v<C, float> && has_vector_path(OP)) {
    if (dense_1d(out) && (in.is_scalar || (dense_1d(in.arg) && in.arg.dtype == out.dtype))) {
      switch (out.dtype) {
        case DType::Float32: launch_vec<OP, float>(out, in, a, b, launch); return;
        case DType::Float16: launch_vec<OP, Float16Storage>(out, in, a, b, launch); return;
        case DType::BFloat16: launch_vec<OP, BFloat16Storage>(out, in, a, b, launch); return;
        default: break;
      }
    }
    if constexpr (OP == UnaryOp::Copy) {
      if (!in.is_scalar && launch_dense_cast(out, in.arg, launch)) return;
    }
  }
  const int64_t n = out.numel();
  const int64_t* strides[2] = {out.strides, in.is_scalar ? nullptr : in.arg.strides};
  launch(unary_generic_kernel<OP, C>, grid_for(n), unsigned{kThreads}, make_offset_calc<2>(out, strides), out.data,
         out.dtype, in_value<C>(in), n, a, b);
}

// unary_cuda's launch for one op: the vector kernel for a dense operand (or a scalar) of the
// output's float dtype, the cast kernel for a copy between two of float32, float16 and bfloat16,
// the generic one through offsets otherwise. Each launch is a call launch(kernel, grid, block,
// arguments...) (cuda_detail::StreamLaunch on a GPU). a and b as unary_params leaves them.
template <UnaryOp OP, class Launch>
void unary_dispatch(const StridedArg& out, const Operand& in, DType compute, double a, double b,
                    const Launch& launch) {
  switch (compute) {
    case DType::Float32:
      launch_typed<OP, float>(out, in, ew::to_compute<float>(a), ew::to_compute<float>(b), launch);
      return;
    case DType::Float64: launch_typed<OP, double>(out, in, a, b, launch); return;
    case DType::Int64:
      if constexpr (!float_only(OP)) {
        launch_typed<OP, int64_t>(out, in, ew::to_compute<int64_t>(a), ew::to_compute<int64_t>(b), launch);
        return;
      }
      break;
    default: break;
  }
  throw DTypeError(std::string(unary_name(OP)) + ": no CUDA kernel for compute dtype " + dtype_name(compute));
}

// An integer clamp's bounds: NaN means "no bound", as in unary_cpu, so it becomes the widest one.
inline void unary_params(UnaryOp op, DType compute, double& a, double& b) {
  if (is_integral(compute, true) && op == UnaryOp::Clamp) {
    if (std::isnan(a)) a = static_cast<double>(std::numeric_limits<int64_t>::lowest());
    if (std::isnan(b)) b = static_cast<double>(std::numeric_limits<int64_t>::max());
  }
}

}  // namespace kiln::unary_device
