// Portability macros shared by kiln's CPU and CUDA code.
// KILN_HD marks functions that must compile for both host and device (half types, Philox).
#pragma once

#if defined(__CUDACC__)
#define KILN_HD __host__ __device__ __forceinline__
#else
#define KILN_HD inline
#endif

// KILN_HD_INLINE: KILN_HD, and always inlined on the host as well (it is on the device). For small
// functions called from the CPU kernels' vectorized loops, the half conversions above all: an
// out-of-line copy is compiled for the baseline target, so a call to it from the AVX2 clone of a
// loop (KILN_CPU_CLONES, kernels/cpu/loops.h) keeps that loop scalar.
#if defined(__CUDACC__)
#define KILN_HD_INLINE KILN_HD
#elif defined(__GNUC__)
#define KILN_HD_INLINE inline __attribute__((always_inline))
#else
#define KILN_HD_INLINE inline
#endif
