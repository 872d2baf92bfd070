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
  int parallel = 0;                  // openblas_get_parallel(): 0 serial, 1 pthreads, 2 OpenMP
  bool threaded = false;             // parallel != 0 and the thread count can be set
  std::string core;                  // openblas_get_corename(), "" when it has none
  bool user_core = false;            // OPENBLAS_CORETYPE was set before OpenBLAS loaded
  std::string description;  // or why it did not load
  bool loaded = false;
};

std::string core_name(void* h) {
  auto corename = reinterpret_cast<GetConfig>(dlsym(h, "openblas_get_corename"));
  const char* name = corename != nullptr ? corename() : nullptr;
  return name != nullptr ? name : "";
}

BlasCpu this_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // libgcc also asks the OS (XGETBV) whether it saves the AVX and AVX-512 registers.
  return BlasCpu{__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
                 __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                     __builtin_cpu_supports("avx512cd")};
#else
  return BlasCpu{};
#endif
}

const Blas& blas() {
  static const Blas b = [] {
    Blas out;
    void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = dlerror();
      out.description = std::string("libopenblas.so.0 could not be loaded (") + (why ? why : "?") +
                        "); install libopenblas0-pthread (tools/setup.sh does)";
      return out;
    }
    // A DYNAMIC_ARCH OpenBLAS reads OPENBLAS_CORETYPE when it loads, so a better core means loading
    // it again: only when the user set none and OpenBLAS took this CPU for one without AVX2.
    std::string chose;
    const std::string detected = core_name(h);
    out.user_core = std::getenv("OPENBLAS_CORETYPE") != nullptr;
    if (const char* better = blas_core_upgrade(detected, this_cpu()); better && !out.user_core) {
      dlclose(h);
      // Once, at the first product. A setenv races a getenv on another thread; kiln's own threads
      // read their variables when they start, and kiln sets no other one, so glibc copies the
      // start-up environment rather than freeing it. Kept for child processes: the same core.
      setenv("OPENBLAS_CORETYPE", better, 0);
      h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) {
        const char* why = dlerror();
        out.description = std::string("libopenblas.so.0 could not be loaded again with OPENBLAS_CORETYPE=") +
                          better + " (" + (why ? why : "?") + ")";
        return out;
      }
      chose = std::string("; kiln set OPENBLAS_CORETYPE=") + better + " (this OpenBLAS took the CPU for a " +
              detected + ")";
    }
    out.core = core_name(h);
    out.sgemm = reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm"));
    out.dgemm = reinterpret_cast<Dgemm>(dlsym(h, "cblas_dgemm"));
    if (out.sgemm == nullptr || out.dgemm == nullptr) {
      out.description = "libopenblas.so.0 has no cblas_sgemm/cblas_dgemm";
      return out;
    }
    auto parallel = reinterpret_cast<GetParallel>(dlsym(h, "openblas_get_parallel"));
    out.set_threads = reinterpret_cast<SetThreads>(dlsym(h, "openblas_set_num_threads"));
    out.parallel = parallel != nullptr ? parallel() : 0;
    out.threaded = out.parallel != 0 && out.set_threads != nullptr;
    // pthreads: one OpenBLAS thread per call for good; kiln's pool runs the blocks (blas.h).
    if (out.threaded && out.parallel == 1) out.set_threads(1);
    auto config = reinterpret_cast<GetConfig>(dlsym(h, "openblas_get_config"));
    out.description = (config != nullptr ? std::string("OpenBLAS (") + config() + ")" : "libopenblas.so.0") + chose;
    out.loaded = true;
    return out;  // the handle stays open for the process
  }();
  return b;
}

}  // namespace

const char* blas_core_upgrade(const std::string& detected, BlasCpu cpu) {
  // The x86 cores of OpenBLAS (0.3.21 and later) whose kernels use AVX2 and FMA or AVX-512.
  static const char* const kVectorCores[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
  if (detected.empty()) return nullptr;  // an OpenBLAS that does not name its core: nothing to judge
  for (const char* c : kVectorCores) {
    if (detected == c) return nullptr;
  }
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2_fma) return "Haswell";
  return nullptr;
}

std::string blas_core() { return blas().core; }

bool blas_core_matches_cpu() {
  const Blas& b = blas();
  return !b.loaded || b.user_core || blas_core_upgrade(b.core, this_cpu()) == nullptr;
}

namespace {

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

// How blas_gemm cuts one product's C into blocks, each one single-threaded cblas call: halve the
// longer side (in multiples of kBlockAlign rows or columns, OpenBLAS's float tile height) while the
// halves stay at least kMinSide long and kMinBlockFlops of work, up to kMaxBlocks blocks.
// kMinBlockFlops is some 20 microseconds on one core, several times a pool round trip. A kMinSide
// of 128 instead made square products from 512 to 2048 and a tiny GPT's step slower on two cores
// (more, smaller blocks repack the operands more often). A block packs k (rows + columns) elements
// for k rows x columns products, so its shorter side sets that cost: a skinny C with a long k, such
// as a weight gradient [256, 64] with k = 1024, is also cut below kMinSide, down to halves as long
// as the other side, while they stay kMinSkinnyFlops of work. Left whole, the tiny GPT's weight
// gradients ran on one core, a quarter of its step. (The per-image products of a convolution, a
// few MFLOP each, stay whole: they run inside pool tasks, where more blocks only cost packing.)
// The plan depends only on the shape, so the bits do not depend on the thread count.
constexpr int64_t kBlockAlign = 16, kMinSide = 256, kMaxBlocks = 64;
constexpr double kMinBlockFlops = 2.0 * 1024 * 1024, kMinSkinnyFlops = 8.0 * 1024 * 1024;

int64_t half_of(int64_t side) { return (side / 2 + kBlockAlign - 1) / kBlockAlign * kBlockAlign; }

}  // namespace

BlasBlocks plan_blas_blocks(int64_t m, int64_t n, int64_t k) {
  BlasBlocks p{m, n, 1, 1};
  auto flops = [k](int64_t bm, int64_t bn) {
    return 2.0 * static_cast<double>(bm) * static_cast<double>(bn) * static_cast<double>(std::max<int64_t>(k, 1));
  };
  auto splits = [&](int64_t side, int64_t other) {
    const int64_t h = half_of(side);
    if (h >= side || flops(h, other) < kMinBlockFlops) return false;
    return h >= kMinSide || (h >= other && flops(h, other) >= kMinSkinnyFlops);
  };
  for (;;) {
    const bool m_ok = splits(p.mb, p.nb), n_ok = splits(p.nb, p.mb);
    if (!m_ok && !n_ok) break;
    BlasBlocks q = p;
    if (m_ok && (!n_ok || p.mb >= p.nb)) {
      q.mb = half_of(p.mb);
      q.grid_m = (m + q.mb - 1) / q.mb;
    } else {
      q.nb = half_of(p.nb);
      q.grid_n = (n + q.nb - 1) / q.nb;
    }
    if (q.grid_m * q.grid_n > kMaxBlocks) break;
    p = q;
  }
  return p;
}

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

bool blas_concurrent() { return blas().threaded && blas().parallel == 1; }

bool blas_accepts(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  if (!blas().loaded || k <= 0) return false;
  // Row-major: A is m x k (k x m transposed), so its rows hold k (m) elements; likewise B and C.
  const int64_t a_row = trans_a ? m : k, b_row = trans_b ? k : n;
  if (!fits(m) || !fits(n) || !fits(k) || !fits(lda) || !fits(ldb) || !fits(ldc)) return false;
  return lda >= std::max<int64_t>(1, a_row) && ldb >= std::max<int64_t>(1, b_row) && ldc >= std::max<int64_t>(1, n);
}

bool blas_gemm(bool f64, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
               int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc, const GemmBatch& batch,
               const BlasBlocks* blocks) {
  if (!blas_accepts(trans_a, trans_b, m, n, k, lda, ldb, ldc)) return false;
  if (batch.count <= 0 || m <= 0 || n <= 0) return true;
  const Blas& l = blas();
  const int ta = trans_a ? kTrans : kNoTrans, tb = trans_b ? kTrans : kNoTrans;
  const int64_t es = f64 ? int64_t{sizeof(double)} : int64_t{sizeof(float)};
  // Rows i0.. of op(A_i), columns j0.. of op(B_i) and block (i0, j0) of C_i, rows x cols, as one call.
  auto call = [&](int64_t i, int64_t i0, int64_t j0, int64_t rows, int64_t cols) {
    const int64_t ao = gemm_batch_offset(batch.a_offsets, i), bo = gemm_batch_offset(batch.b_offsets, i);
    const int64_t co = gemm_batch_offset(batch.c_offsets, i);
    const char* ab = static_cast<const char*>(a) + (ao + (trans_a ? i0 : i0 * lda)) * es;
    const char* bb = static_cast<const char*>(b) + (bo + (trans_b ? j0 * ldb : j0)) * es;
    char* cb = static_cast<char*>(c) + (co + i0 * ldc + j0) * es;
    if (f64) {
      l.dgemm(kRowMajor, ta, tb, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(k), alpha,
              reinterpret_cast<const double*>(ab), static_cast<int>(lda), reinterpret_cast<const double*>(bb),
              static_cast<int>(ldb), beta, reinterpret_cast<double*>(cb), static_cast<int>(ldc));
    } else {
      l.sgemm(kRowMajor, ta, tb, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(k),
              static_cast<float>(alpha), reinterpret_cast<const float*>(ab), static_cast<int>(lda),
              reinterpret_cast<const float*>(bb), static_cast<int>(ldb), static_cast<float>(beta),
              reinterpret_cast<float*>(cb), static_cast<int>(ldc));
    }
  };
  if (blas_concurrent()) {
    // One OpenBLAS thread, no lock (blas.h): every (product, block) pair is a task on kiln's pool,
    // a chunk of them about kMinBlockFlops of work; inside a pool task they run in order here.
    BlasBlocks p = plan_blas_blocks(m, n, k);
    if (blocks != nullptr) p = BlasBlocks{blocks->mb, blocks->nb, (m + blocks->mb - 1) / blocks->mb,
                                          (n + blocks->nb - 1) / blocks->nb};
    const int64_t count = p.grid_m * p.grid_n;
    const double block_flops = 2.0 * static_cast<double>(std::min(p.mb, m)) *
                               static_cast<double>(std::min(p.nb, n)) * static_cast<double>(std::max<int64_t>(k, 1));
    const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(kMinBlockFlops / block_flops));
    cpu::parallel_for(batch.count * count, grain, [&](int64_t, int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t blk = t % count, i0 = blk / p.grid_n * p.mb, j0 = blk % p.grid_n * p.nb;
        call(t / count, i0, j0, std::min(p.mb, m - i0), std::min(p.nb, n - j0));
      }
    });
    return true;
  }
  // A serial build shares its buffers between calls, an OpenMP one is not known to take calls from
  // several threads at once: one whole product at a time, OpenMP on kiln's thread count from outside
  // the pool and on one thread inside it.
  std::lock_guard<std::mutex> lock(g_call_mutex);
  if (l.threaded) {
    const int want = cpu::runs_inline() ? 1 : cpu::num_threads();
    if (want != g_blas_threads) {
      l.set_threads(want);
      g_blas_threads = want;
    }
  }
  for (int64_t i = 0; i < batch.count; ++i) call(i, 0, 0, m, n);
  return true;
}

}  // namespace kiln::cpu
