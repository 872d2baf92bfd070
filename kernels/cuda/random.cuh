// The CUDA kernels of random fills (the twins of random_cpu) and their launches, run by
// kernels/cuda/random.cu. Element i, in the output's logical order, reads the same Philox words as
// on the CPU, so integer draws are bit-identical. The affine maps use explicit round-to-nearest
// intrinsics because nvcc would otherwise fuse them into FMAs, which the x86 reference does not
// do; only logf/cosf and friends may then differ from the CPU, by an ulp or so.
//
// Host-compilable: the CPU tests run these kernels on the emulator of CUDA's threads
// (tests/kernels/test_factory_simt.cpp), where the math functions are the host's and every draw
// matches the CPU bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/philox.h"
#include "kernels/random.h"
#include "kernels/strided.h"

namespace kiln::random_device {

using cuda_detail::store_as;

__global__ void random_kernel(StridedArg out, int64_t n, RandomDist dist, RandomParams p, PhiloxState philox) {
  philox = philox_resolve(philox);  // a captured graph's seed and offset, read when the kernel runs
  const double a = p.a, b = p.b;
  const bool dbl = out.dtype == DType::Float64;
  const int digits = uniform_digits(out.dtype);
  const double cap = dist == RandomDist::Uniform ? uniform_cap(a, b, out.dtype) : 0.0;
  for (int64_t i = cuda_detail::global_thread(); i < n; i += cuda_detail::grid_threads()) {
    const int64_t off = cuda_detail::row_major_offset(out.sizes, out.strides, out.ndim, i);
    const Philox4 r = philox_block(philox.seed, philox.offset, static_cast<uint64_t>(i) >> 1);
    const uint32_t w0 = r.v[(i & 1) * 2], w1 = r.v[(i & 1) * 2 + 1];
    switch (dist) {
      case RandomDist::Uniform: {
        if (dbl) {
          const double u = philox_uniform_double(w0, w1);
          store_as<double>(out.data, out.dtype, off, ::fmin(__dadd_rn(a, __dmul_rn(b - a, u)), cap));
        } else {
          const float u = philox_uniform_digits(w0, digits);
          const float f = __fadd_rn(static_cast<float>(a), __fmul_rn(static_cast<float>(b - a), u));
          store_as<float>(out.data, out.dtype, off, ::fminf(f, static_cast<float>(cap)));
        }
        break;
      }
      case RandomDist::Normal: {
        if (dbl) {  // a whole block of its own: two 53-bit uniforms
          const Philox4 r4 = philox_block(philox.seed, philox.offset, static_cast<uint64_t>(i));
          const double u1 = 1.0 - philox_uniform_double(r4.v[0], r4.v[1]);
          const double u2 = philox_uniform_double(r4.v[2], r4.v[3]);
          const double z = __dmul_rn(::sqrt(__dmul_rn(-2.0, ::log(u1))), ::cos(__dmul_rn(6.283185307179586, u2)));
          store_as<double>(out.data, out.dtype, off, __dadd_rn(a, __dmul_rn(b, z)));
        } else {
          const float u1 = 1.0f - philox_uniform(w0);
          const float u2 = philox_uniform(w1);
          const float z =
              __fmul_rn(::sqrtf(__fmul_rn(-2.0f, ::logf(u1))), ::cosf(__fmul_rn(6.2831853071795865f, u2)));
          const float f = __fadd_rn(static_cast<float>(a), __fmul_rn(static_cast<float>(b), z));
          store_as<float>(out.data, out.dtype, off, f);
        }
        break;
      }
      case RandomDist::RandInt: {
        const uint64_t bits = (static_cast<uint64_t>(w0) << 32) | w1;
        store_as<int64_t>(out.data, out.dtype, off,
                          static_cast<int64_t>(static_cast<uint64_t>(p.low) + bits % p.range));
        break;
      }
    }
  }
}

// A kernel rather than a memcpy: its arguments travel with the launch, so no host buffer has to
// outlive the call (a captured graph replays it with the values of the capture).
__global__ void philox_base_store_kernel(uint64_t* base, uint64_t seed, uint64_t offset) {
  base[0] = seed;
  base[1] = offset;
}

// Fills `out` through `launch` (cuda_detail::StreamLaunch on a GPU): one grid-stride launch.
template <class Launch>
void random_launch(const StridedArg& out, RandomDist dist, const RandomParams& p, PhiloxState philox,
                   const Launch& launch) {
  const int64_t n = out.numel();
  if (n == 0) return;
  launch(random_kernel, cuda_detail::grid_for(n), cuda_detail::kThreads, out, n, dist, p, philox);
}

template <class Launch> void philox_base_store_launch(uint64_t* base, uint64_t seed, uint64_t offset,
                                                      const Launch& launch) {
  launch(philox_base_store_kernel, 1u, 1u, base, seed, offset);
}

}  // namespace kiln::random_device
