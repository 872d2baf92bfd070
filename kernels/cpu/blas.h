// The CPU's fast GEMM: OpenBLAS, loaded at run time (dlopen of libopenblas.so.0; Debian's
// libopenblas0-pthread, which tools/setup.sh installs), so a build needs no BLAS package and a machine
// without one still runs, on kiln's own GEMM (kernels/cpu/matmul.cpp), which stays the reference twin
// the tests compare against. Non-obvious decisions:
// - Threads. Debian's threaded OpenBLAS (libopenblas0-pthread) is built with its own locking, so it
//   may be called from several threads at once; its single-threaded build shares its packing
//   buffers between calls, and concurrent calls from kiln's pool corrupted results in the tests, so
//   with that build every call holds a lock (and runs on one core). A call from outside kiln's pool
//   gives a threaded OpenBLAS kiln's thread count (cpu::num_threads()), so one large product uses
//   every core. Small products from inside the pool (cpu::runs_inline(): many side by side, as
//   attention makes), which OpenBLAS runs on the calling thread, go straight in without the lock;
//   larger ones from the pool take the lock and set one OpenBLAS thread, so that two pool threads
//   never each start OpenBLAS's threads on the same cores. kiln never splits one product across its
//   pool for BLAS.
// - Bits. Results are the same run to run, but they depend on the thread count (OpenBLAS 0.3.21 gave
//   other bits at 1 and 2 threads; how it splits C among its threads changes with the count). kiln's
//   GEMM gives the same bits for any thread count; tests that need that select it
//   (GemmBackendScope). With a single-threaded OpenBLAS, results do not depend on KILN_NUM_THREADS.
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
// Sets the backend while it lives and restores the previous one after (tests, and code that wants
// results that do not depend on the thread count).
class GemmBackendScope {
 public:
  explicit GemmBackendScope(GemmBackend backend) : saved_(gemm_backend()) { set_gemm_backend(backend); }
  ~GemmBackendScope() { set_gemm_backend(saved_); }
  GemmBackendScope(const GemmBackendScope&) = delete;
  GemmBackendScope& operator=(const GemmBackendScope&) = delete;

 private:
  GemmBackend saved_;
};
// Whether OpenBLAS was loaded, and what it says of itself ("OpenBLAS 0.3.21 ..."), or why not.
bool blas_available();
std::string blas_description();
// Whether the loaded OpenBLAS runs a product on several threads (libopenblas0-pthread or -openmp).
bool blas_threaded();

// Whether blas_gemm would take these arguments (BLAS loaded, every size and leading dimension within
// its int, no leading dimension below its row length, as broadcast views have).
bool blas_accepts(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc);

// One row-major product C = alpha op(A) op(B) + beta C through cblas_sgemm (f64: cblas_dgemm), on
// kiln's thread count (see above). Returns false, doing nothing, when !blas_accepts(...): the caller then uses
// kiln's GEMM.
bool blas_gemm(bool f64, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
               int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc);

}  // namespace kiln::cpu
