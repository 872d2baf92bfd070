// CUDA twin of random_cpu: the same Philox words per logical element index, so integer draws are
// bit-identical to the CPU. The affine maps use explicit round-to-nearest intrinsics because nvcc
// would otherwise fuse them into FMAs, which the x86 reference does not do; only logf/cosf and
// friends may then differ from the CPU, by an ulp or so.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/random.h"
#include "kernels/error.h"

namespace kiln {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

__global__ void random_kernel(StridedArg out, int64_t n, RandomDist dist, double a, double b, PhiloxState philox) {
  philox = philox_resolve(philox);  // a captured graph's seed and offset, read when the kernel runs
  const bool dbl = out.dtype == DType::Float64;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t off = cuda_detail::strided_offset(out, i);
    const Philox4 r = philox_block(philox.seed, philox.offset, static_cast<uint64_t>(i) >> 1);
    const uint32_t w0 = r.v[(i & 1) * 2], w1 = r.v[(i & 1) * 2 + 1];
    switch (dist) {
      case RandomDist::Uniform: {
        if (dbl) {
          const double u = philox_uniform_double(w0, w1);
          cuda_detail::store_as<double>(out.data, out.dtype, off, __dadd_rn(a, __dmul_rn(b - a, u)));
        } else {
          const float u = philox_uniform(w0);
          const float f = __fadd_rn(static_cast<float>(a), __fmul_rn(static_cast<float>(b - a), u));
          cuda_detail::store_as<float>(out.data, out.dtype, off, f);
        }
        break;
      }
      case RandomDist::Normal: {
        if (dbl) {
          const Philox4 r4 = philox_block(philox.seed, philox.offset, static_cast<uint64_t>(i));
          const double u1 = 1.0 - philox_uniform_double(r4.v[0], r4.v[1]);
          const double u2 = philox_uniform_double(r4.v[2], r4.v[3]);
          const double z = __dmul_rn(sqrt(__dmul_rn(-2.0, log(u1))), cos(__dmul_rn(6.283185307179586, u2)));
          cuda_detail::store_as<double>(out.data, out.dtype, off, __dadd_rn(a, __dmul_rn(b, z)));
        } else {
          const float u1 = 1.0f - philox_uniform(w0);
          const float u2 = philox_uniform(w1);
          const float z = __fmul_rn(sqrtf(__fmul_rn(-2.0f, logf(u1))), cosf(__fmul_rn(6.2831853071795865f, u2)));
          const float f = __fadd_rn(static_cast<float>(a), __fmul_rn(static_cast<float>(b), z));
          cuda_detail::store_as<float>(out.data, out.dtype, off, f);
        }
        break;
      }
      case RandomDist::RandInt: {
        const uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(b) - static_cast<int64_t>(a));
        const uint64_t bits = (static_cast<uint64_t>(w0) << 32) | w1;
        cuda_detail::store_as<int64_t>(out.data, out.dtype, off, static_cast<int64_t>(a) + static_cast<int64_t>(bits % range));
        break;
      }
    }
  }
}

__global__ void philox_base_store_kernel(uint64_t* base, uint64_t seed, uint64_t offset) {
  base[0] = seed;
  base[1] = offset;
}

}  // namespace

void random_cuda(const StridedArg& out, RandomDist dist, double a, double b, PhiloxState philox,
                 const KernelContext& ctx) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks);
  random_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(ctx.stream)>>>(out, n, dist, a,
                                                                                                       b, philox);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw DeviceError(std::string("random: CUDA kernel launch failed: ") + cudaGetErrorString(err));
  }
}

void philox_base_store_cuda(uint64_t* base, uint64_t seed, uint64_t offset, const KernelContext& ctx) {
  // A kernel rather than a memcpy: its arguments travel with the launch, so no host buffer has to
  // outlive the call.
  philox_base_store_kernel<<<1, 1, 0, static_cast<cudaStream_t>(ctx.stream)>>>(base, seed, offset);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw DeviceError(std::string("philox_base_store: CUDA kernel launch failed: ") + cudaGetErrorString(err));
  }
}

}  // namespace kiln
