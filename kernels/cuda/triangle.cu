// CUDA tril/triu: the twin of triangle_cpu. Elements are copied as raw bits of their size (1, 2, 4 or
// 8 bytes) since input and output share one dtype, so there is neither a compute type nor a kernel
// per dtype; all-zero bits are zero in every dtype.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/triangle.h"

namespace kiln {
namespace {

using namespace cuda_detail;

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

void triangle_cuda(const StridedArg& out, const StridedArg& in, int64_t k, bool upper, const KernelContext& ctx) {
  const char* name = upper ? "triu" : "tril";
  if (out.numel() == 0) return;
  if (out.ndim < 2) throw ShapeError(std::string(name) + ": expects at least 2 dims");
  if (in.dtype != out.dtype) {
    throw DTypeError(std::string(name) + ": input " + dtype_name(in.dtype) + " and output " + dtype_name(out.dtype) +
                     " differ");
  }
  const cudaStream_t s = raw_stream(ctx.stream);
  switch (element_size(out.dtype)) {
    case 1: launch_triangle<uint8_t>(out, in, k, upper, s); break;
    case 2: launch_triangle<uint16_t>(out, in, k, upper, s); break;
    case 4: launch_triangle<uint32_t>(out, in, k, upper, s); break;
    default: launch_triangle<uint64_t>(out, in, k, upper, s); break;
  }
  check_launch(name);
}

}  // namespace kiln
