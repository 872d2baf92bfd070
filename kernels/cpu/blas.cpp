// OpenBLAS at run time (see blas.h). The cblas enums are fixed by the CBLAS standard (row-major 101,
// no-transpose 111, transpose 112), so no BLAS header is needed either.
#include "kernels/cpu/blas.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>

#include "kernels/cpu/parallel.h"
#include "kernels/error.h"

namespace kiln::cpu {
namespace {

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
using Dgemm = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double, double*,
                       int);
using SetThreads = void (*)(int);
using GetConfig = char* (*)();
using GetParallel = int (*)();

struct Blas {
  Sgemm sgemm = nullptr;
  Dgemm dgemm = nullptr;
  SetThreads set_threads = nullptr;  // null for a single-threaded build
  bool threaded = false;             // openblas_get_parallel(): 0 serial, 1 pthreads, 2 OpenMP
  std::string description;  // or why it did not load
  bool loaded = false;
};

const Blas& blas() {
  static const Blas b = [] {
    Blas out;
    // A threaded OpenBLAS's idle threads spin (calling sched_yield) for about 2^28 cycles after each
    // product before they sleep, while kiln's own pool runs the ops between products on the same
    // cores (a profile of a small CNN's step on two cores showed the yields near the top). 2^4
    // cycles (OpenBLAS's minimum) makes them sleep at once; a later threaded product wakes them,
    // which costs microseconds. Read when the library loads; a value the user set is kept.
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", /*overwrite=*/0);
    void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = dlerror();
      out.description = std::string("libopenblas.so.0 could not be loaded (") + (why ? why : "?") +
                        "); install libopenblas0-pthread (tools/setup.sh does)";
      return out;
    }
    out.sgemm = reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm"));
    out.dgemm = reinterpret_cast<Dgemm>(dlsym(h, "cblas_dgemm"));
    if (out.sgemm == nullptr || out.dgemm == nullptr) {
      out.description = "libopenblas.so.0 has no cblas_sgemm/cblas_dgemm";
      return out;
    }
    auto parallel = reinterpret_cast<GetParallel>(dlsym(h, "openblas_get_parallel"));
    out.set_threads = reinterpret_cast<SetThreads>(dlsym(h, "openblas_set_num_threads"));
    out.threaded = parallel != nullptr && parallel() != 0 && out.set_threads != nullptr;
    auto config = reinterpret_cast<GetConfig>(dlsym(h, "openblas_get_config"));
    out.description = config != nullptr ? std::string("OpenBLAS (") + config() + ")" : "libopenblas.so.0";
    out.loaded = true;
    return out;  // the handle stays open for the process
  }();
  return b;
}

GemmBackend initial_backend() {
  const char* v = std::getenv("KILN_CPU_GEMM");
  const std::string s = v != nullptr ? v : "";
  if (s == "kiln") return GemmBackend::Kiln;
  if (s == "blas") {
    if (!blas().loaded) throw Error("KILN_CPU_GEMM=blas: " + blas().description);
    return GemmBackend::Blas;
  }
  if (!s.empty()) throw Error("KILN_CPU_GEMM must be 'kiln' or 'blas', got '" + s + "'");
  return blas().loaded ? GemmBackend::Blas : GemmBackend::Kiln;
}

std::mutex g_call_mutex;  // see blas_gemm; also guards g_blas_threads
int g_blas_threads = -1;  // the thread count last given to a threaded OpenBLAS
// The backend: -1 until the first product reads KILN_CPU_GEMM, then a GemmBackend. Read on every
// product, so an atomic rather than a lock.
std::atomic<int> g_backend{-1};

bool fits(int64_t v) { return v >= 0 && v <= INT_MAX; }

// OpenBLAS runs a product of at most this many multiply-adds (m n k) on the calling thread whatever
// its thread count (interface/gemm.c: 65536 times GEMM_MULTITHREAD_THRESHOLD, 4 by default). Larger
// products from kiln's pool must not start OpenBLAS's threads: two pool threads each starting them
// on two cores made the char GPT's attention backward several times slower.
constexpr double kSingleThreadMNK = 65536.0 * 4.0;

}  // namespace

GemmBackend gemm_backend() {
  int b = g_backend.load(std::memory_order_acquire);
  if (b < 0) {
    int expected = -1;
    g_backend.compare_exchange_strong(expected, static_cast<int>(initial_backend()), std::memory_order_acq_rel);
    b = g_backend.load(std::memory_order_acquire);
  }
  return static_cast<GemmBackend>(b);
}

void set_gemm_backend(GemmBackend backend) {
  if (backend == GemmBackend::Blas && !blas().loaded) throw Error("set_gemm_backend(blas): " + blas().description);
  g_backend.store(static_cast<int>(backend), std::memory_order_release);
}

const char* gemm_backend_name(GemmBackend backend) { return backend == GemmBackend::Blas ? "blas" : "kiln"; }

bool blas_available() { return blas().loaded; }

std::string blas_description() { return blas().description; }

bool blas_threaded() { return blas().threaded; }

bool blas_accepts(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  if (!blas().loaded) return false;
  // Row-major: A is m x k (k x m transposed), so its rows hold k (m) elements; likewise B and C.
  const int64_t a_row = trans_a ? m : k, b_row = trans_b ? k : n;
  if (!fits(m) || !fits(n) || !fits(k) || !fits(lda) || !fits(ldb) || !fits(ldc)) return false;
  return lda >= std::max<int64_t>(1, a_row) && ldb >= std::max<int64_t>(1, b_row) && ldc >= std::max<int64_t>(1, n);
}

bool blas_gemm(bool f64, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
               int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc) {
  if (!blas_accepts(trans_a, trans_b, m, n, k, lda, ldb, ldc)) return false;
  const Blas& l = blas();
  const int ta = trans_a ? kTrans : kNoTrans, tb = trans_b ? kTrans : kNoTrans;
  // blas.h: a threaded build takes small products from kiln's pool without the lock (OpenBLAS runs
  // them on the calling thread). Every other call holds it, and a threaded build's thread count is
  // set under it: kiln's for a call from outside the pool, one for a call from inside.
  const bool in_pool = cpu::runs_inline();
  const bool small = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <= kSingleThreadMNK;
  std::unique_lock<std::mutex> lock(g_call_mutex, std::defer_lock);
  if (!l.threaded || !in_pool || !small) lock.lock();
  if (l.threaded && lock.owns_lock()) {
    const int want = in_pool ? 1 : cpu::num_threads();
    if (want != g_blas_threads) {
      l.set_threads(want);
      g_blas_threads = want;
    }
  }
  if (f64) {
    l.dgemm(kRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha,
            static_cast<const double*>(a), static_cast<int>(lda), static_cast<const double*>(b), static_cast<int>(ldb),
            beta, static_cast<double*>(c), static_cast<int>(ldc));
  } else {
    l.sgemm(kRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), static_cast<float>(alpha),
            static_cast<const float*>(a), static_cast<int>(lda), static_cast<const float*>(b), static_cast<int>(ldb),
            static_cast<float>(beta), static_cast<float*>(c), static_cast<int>(ldc));
  }
  return true;
}

}  // namespace kiln::cpu
