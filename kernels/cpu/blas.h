// The CPU's fast GEMM: OpenBLAS, loaded at run time (dlopen of libopenblas.so.0; Debian's
// libopenblas0-pthread, which tools/setup.sh installs), so a build needs no BLAS package and a machine
// without one still runs, on kiln's own GEMM (kernels/cpu/matmul.cpp), which stays the reference twin
// the tests compare against. Non-obvious decisions:
// - Threads: kiln's pool is the one scheduler. A pthreads OpenBLAS (libopenblas0-pthread) is set to
//   one thread when it loads and never wakes its own: kiln cuts a product into blocks of C
//   (plan_blas_blocks) and runs each block as one single-threaded cblas call on its pool, or in
//   order on the calling thread inside a pool task (attention's products). That build takes calls
//   from several threads at once, so there is no lock. Letting OpenBLAS thread each product instead
//   put its threads and kiln's on the same cores: a tiny GPT's step spent a fifth of its time in
//   context switches, and two pool threads that each started OpenBLAS's threads made the char
//   GPT's attention several times slower. A serial build shares its packing buffers between calls
//   (concurrent calls corrupted results in the tests) and an OpenMP build is not known to take
//   concurrent calls: with either, each call holds a lock and runs whole, OpenMP on kiln's thread
//   count from outside the pool and on one thread inside it.
// - Bits: the blocks depend on the shape alone, so a pthreads or serial build gives the same bits
//   for any thread count, run to run. An OpenMP build's bits depend on its thread count (how it
//   splits C among its threads); kiln's own GEMM never depends on it.
// - KILN_CPU_GEMM=kiln selects kiln's GEMM for the whole process; =blas requires OpenBLAS (an Error
//   naming the library when it cannot be loaded); unset, OpenBLAS when it loads.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/matmul.h"

namespace kiln::cpu {

enum class GemmBackend { Blas, Kiln };

// The backend float32 and float64 products use, and float16 and bfloat16 ones widened to float32
// (kernels/cpu/matmul.cpp).
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
// The core whose kernels the loaded OpenBLAS runs (openblas_get_corename(): "Haswell", "SkylakeX",
// ...; "" when OpenBLAS is not loaded or does not say).
std::string blas_core();

// The core kiln asks a DYNAMIC_ARCH OpenBLAS for (OPENBLAS_CORETYPE) when the user set none and the
// core it detected (`detected`) has neither AVX2 nor AVX-512 kernels while the CPU has them: "SkylakeX"
// for AVX-512 (F, BW, VL, DQ, CD), "Haswell" for AVX2 with FMA; null to keep OpenBLAS's choice. An
// OpenBLAS older than the CPU does not know its model number and falls back to its oldest core:
// Debian 12's 0.3.21 runs a 5th-generation Xeon (model 207) on Prescott's SSE3 kernels, where a tiny
// GPT's step took nearly three times as long as on SkylakeX's (docs/cpu-performance.md).
struct BlasCpu {
  bool avx2_fma = false;
  bool avx512 = false;
};
const char* blas_core_upgrade(const std::string& detected, BlasCpu cpu);
// Whether the loaded OpenBLAS runs the core this rule gives: one that uses what the CPU has
// (blas_core_upgrade finds nothing better), or the user's OPENBLAS_CORETYPE; true when none loaded.
bool blas_core_matches_cpu();
// Whether the loaded OpenBLAS runs a product on several threads (libopenblas0-pthread or -openmp).
bool blas_threaded();
// Whether blas_gemm takes calls from several threads at once (a pthreads build, which kiln keeps at
// one OpenBLAS thread and feeds blocks of a product from its pool): the products' bits then do not
// depend on the thread count.
bool blas_concurrent();

// Whether blas_gemm would take these arguments (BLAS loaded, k > 0, every size and leading dimension
// within its int, no leading dimension below its row length, as broadcast views have). An empty sum
// (k == 0) stays kiln's: OpenBLAS fills C with beta's -0 for beta = -0, where kiln's GEMM and the
// CUDA twin write +0.
bool blas_accepts(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc);

// How a pthreads OpenBLAS's product is cut into blocks of C (mb x nb, grid_m x grid_n of them; the
// last row and column of blocks may be short). Depends on the shape alone.
struct BlasBlocks {
  int64_t mb, nb, grid_m, grid_n;
};
BlasBlocks plan_blas_blocks(int64_t m, int64_t n, int64_t k);

// Row-major products C_i = alpha op(A_i) op(B_i) + beta C_i through cblas_sgemm (f64: cblas_dgemm),
// for each entry of the batch (offsets in elements, as gemm_cpu's; the C blocks must not overlap):
// with a pthreads build every block of every product is one task on kiln's pool, else one call at a
// time (see above). Returns false, doing nothing, when !blas_accepts(...): the caller then uses
// kiln's GEMM. `blocks`: blocks of this size (mb x nb) instead of plan_blas_blocks(m, n, k)'s, for a
// tile of a larger product whose rows and columns start at multiples of that product's blocks: the
// tile's elements then come from the same calls, and so the same bits, as the whole product's (on
// some CPUs OpenBLAS's bits for an element depend on the shape of the call it is in).
bool blas_gemm(bool f64, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
               int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc,
               const GemmBatch& batch = GemmBatch{}, const BlasBlocks* blocks = nullptr);

}  // namespace kiln::cpu
