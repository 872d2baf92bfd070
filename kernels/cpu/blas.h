// The CPU's fast GEMM: OpenBLAS, loaded at run time (dlopen of libopenblas.so.0; Debian's
// libopenblas0-serial, which tools/setup.sh installs), so a build needs no BLAS package and a machine
// without one still runs, on kiln's own GEMM (kernels/cpu/matmul.cpp), which stays the reference twin
// the tests compare against. Non-obvious decisions:
// - The single-threaded OpenBLAS, one call at a time: Debian's serial build shares its packing
//   buffers between calls, and concurrent calls from kiln's pool corrupted results in the tests, so
//   calls hold a lock and a product is one call on one core. One call per product also keeps the
//   results bitwise identical for any KILN_NUM_THREADS, as with kiln's own GEMM. A threaded OpenBLAS
//   found instead is set to one thread, so that it never competes with kiln's pool for the cores.
//   Using every core needs a BLAS that may be called from several threads (future work).
// - KILN_CPU_GEMM=kiln selects kiln's GEMM for the whole process; =blas requires OpenBLAS (an Error
//   naming the library when it cannot be loaded); unset, OpenBLAS when it loads.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::cpu {

enum class GemmBackend { Blas, Kiln };

// The backend float32 and float64 products use (float16 and bfloat16 always use kiln's GEMM).
GemmBackend gemm_backend();
// Switches the backend for the process (tests compare the two); Blas without OpenBLAS is an Error.
void set_gemm_backend(GemmBackend backend);
const char* gemm_backend_name(GemmBackend backend);
// Whether OpenBLAS was loaded, and what it says of itself ("OpenBLAS 0.3.21 ..."), or why not.
bool blas_available();
std::string blas_description();

// Whether blas_gemm would take these arguments (BLAS loaded, every size and leading dimension within
// its int, no leading dimension below its row length, as broadcast views have).
bool blas_accepts(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc);

// One row-major product C = alpha op(A) op(B) + beta C through cblas_sgemm (f64: cblas_dgemm), on
// the calling thread. Returns false, doing nothing, when !blas_accepts(...): the caller then uses
// kiln's GEMM.
bool blas_gemm(bool f64, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
               int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc);

}  // namespace kiln::cpu
