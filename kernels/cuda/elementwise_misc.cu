// CUDA where, fill, arange and tril/triu: the twins of where_cpu, fill_cpu, arange_cpu and
// triangle_cpu. tril/triu copy raw elements by size (1, 2, 4 or 8 bytes) since input and output
// share one dtype, so they need neither a compute type nor a kernel per dtype; a fill of zeros into
// dense memory is a memset.
#include <cmath>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"

namespace kiln {
namespace {

using namespace cuda_detail;

template <typename C>
__global__ void where_kernel(const __grid_constant__ OffsetCalc<4> calc, void* out, DType out_dtype, const void* cond,
                             DType cond_dtype, const InValue<C> x, const InValue<C> y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[4];
    calc.offsets(i, off);
    const bool c = load_as<int64_t>(cond, cond_dtype, off[1]) != 0;
    store_as<C>(out, out_dtype, off[0], c ? x.load(off[2]) : y.load(off[3]));
  }
}

template <typename C> InValue<C> in_value(const Operand& o) {
  InValue<C> v;
  v.data = o.is_scalar ? nullptr : o.arg.data;
  v.dtype = o.arg.dtype;
  v.is_scalar = o.is_scalar;
  v.scalar = static_cast<C>(o.scalar);
  return v;
}

template <typename C>
void launch_where(const StridedArg& out, const StridedArg& cond, const Operand& x, const Operand& y,
                  cudaStream_t stream) {
  const int64_t n = out.numel();
  const int64_t* strides[4] = {out.strides, cond.strides, x.is_scalar ? nullptr : x.arg.strides,
                               y.is_scalar ? nullptr : y.arg.strides};
  where_kernel<C><<<grid_for(n), kThreads, 0, stream>>>(make_offset_calc<4>(out, strides), out.data, out.dtype,
                                                        cond.data, cond.dtype, in_value<C>(x), in_value<C>(y), n);
}

// Integer outputs: int64 arithmetic, as arange_cpu.
__global__ void arange_int_kernel(const __grid_constant__ OffsetCalc<1> calc, void* out, DType out_dtype, int64_t n,
                                  int64_t start, int64_t step) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[1];
    calc.offsets(i, off);
    store_as<int64_t>(out, out_dtype, off[0], start + i * step);
  }
}

// Float outputs: start + i * step in double, rounded once per operation as on the CPU (no FMA).
__global__ void arange_float_kernel(const __grid_constant__ OffsetCalc<1> calc, void* out, DType out_dtype, int64_t n,
                                    double start, double step) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[1];
    calc.offsets(i, off);
    store_as<double>(out, out_dtype, off[0], __dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
  }
}

// Keeps element (r, c) of each matrix when c - r <= k (tril) or c - r >= k (triu), else writes 0
// (all-zero bits are zero in every dtype).
template <typename T>
__global__ void triangle_kernel(const __grid_constant__ OffsetCalc<2> calc, T* out, const T* in, int64_t n,
                                int64_t rows, int64_t cols, int64_t k, bool upper) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t r, c;
    if (calc.small) {
      const uint32_t q = static_cast<uint32_t>(i) / static_cast<uint32_t>(cols);
      c = static_cast<int64_t>(static_cast<uint32_t>(i) - q * static_cast<uint32_t>(cols));
      r = static_cast<int64_t>(q % static_cast<uint32_t>(rows));
    } else {
      c = i % cols;
      r = (i / cols) % rows;
    }
    int64_t off[2];
    calc.offsets(i, off);
    const bool keep = upper ? (c - r >= k) : (c - r <= k);
    out[off[0]] = keep ? in[off[1]] : T(0);
  }
}

template <typename T>
void launch_triangle(const StridedArg& out, const StridedArg& in, int64_t k, bool upper, cudaStream_t stream) {
  const int64_t n = out.numel();
  const int64_t* strides[2] = {out.strides, in.strides};
  triangle_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(make_offset_calc<2>(out, strides), static_cast<T*>(out.data),
                                                           static_cast<const T*>(in.data), n, out.sizes[out.ndim - 2],
                                                           out.sizes[out.ndim - 1], k, upper);
}

}  // namespace

void where_cuda(const StridedArg& out, const StridedArg& cond, const Operand& x, const Operand& y, DType compute,
                Stream stream) {
  if (out.numel() == 0) return;
  const cudaStream_t s = raw_stream(stream);
  switch (compute) {
    case DType::Float32: launch_where<float>(out, cond, x, y, s); break;
    case DType::Float64: launch_where<double>(out, cond, x, y, s); break;
    case DType::Int64: launch_where<int64_t>(out, cond, x, y, s); break;
    default: throw DTypeError(std::string("where: no CUDA kernel for compute dtype ") + dtype_name(compute));
  }
  check_launch("where");
}

void fill_cuda(const StridedArg& out, double value, Stream stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  if (value == 0 && !std::signbit(value) && dense_1d(out)) {
    const cudaError_t err =
        cudaMemsetAsync(out.data, 0, static_cast<size_t>(n) * element_size(out.dtype), raw_stream(stream));
    if (err != cudaSuccess) {
      throw DeviceError(std::string("fill: cudaMemsetAsync failed: ") + cudaGetErrorName(err) + " (" +
                        cudaGetErrorString(err) + ")");
    }
    return;
  }
  // Otherwise a copy of a scalar, exactly as fill_cpu: the unary kernels (vectorized when dense).
  Operand v;
  v.is_scalar = true;
  v.scalar = value;
  unary_cuda(out, v, UnaryOp::Copy, compute_dtype_for(out.dtype), 0, 0, stream);
}

void arange_cuda(const StridedArg& out, double start, double step, Stream stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t* strides[1] = {out.strides};
  const OffsetCalc<1> calc = make_offset_calc<1>(out, strides);
  const cudaStream_t s = raw_stream(stream);
  if (compute_dtype_for(out.dtype) == DType::Int64) {
    arange_int_kernel<<<grid_for(n), kThreads, 0, s>>>(calc, out.data, out.dtype, n, static_cast<int64_t>(start),
                                                       static_cast<int64_t>(step));
  } else {
    arange_float_kernel<<<grid_for(n), kThreads, 0, s>>>(calc, out.data, out.dtype, n, start, step);
  }
  check_launch("arange");
}

void triangle_cuda(const StridedArg& out, const StridedArg& in, int64_t k, bool upper, Stream stream) {
  const char* name = upper ? "triu" : "tril";
  if (out.numel() == 0) return;
  if (out.ndim < 2) throw ShapeError(std::string(name) + ": expects at least 2 dims");
  if (in.dtype != out.dtype) {
    throw DTypeError(std::string(name) + ": input " + dtype_name(in.dtype) + " and output " + dtype_name(out.dtype) +
                     " differ");
  }
  const cudaStream_t s = raw_stream(stream);
  switch (element_size(out.dtype)) {
    case 1: launch_triangle<uint8_t>(out, in, k, upper, s); break;
    case 2: launch_triangle<uint16_t>(out, in, k, upper, s); break;
    case 4: launch_triangle<uint32_t>(out, in, k, upper, s); break;
    default: launch_triangle<uint64_t>(out, in, k, upper, s); break;
  }
  check_launch(name);
}

}  // namespace kiln
