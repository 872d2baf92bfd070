// Portability macros shared by kiln's CPU and CUDA code.
// KILN_HD marks functions that must compile for both host and device (half types, Philox).
#pragma once

#if defined(__CUDACC__)
#define KILN_HD __host__ __device__ __forceinline__
#else
#define KILN_HD inline
#endif
