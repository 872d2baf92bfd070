// CPU GEMM, cache-blocked in the GotoBLAS/BLIS manner: A and B are packed (converted to the
// accumulation type, zero-padded to whole tiles) into KC-deep micro-panels, and a fixed-size
// register tile (4x16 float, 4x8 double) is written as plain loops that GCC vectorizes with SSE2.
// Each C element is one sequential sum over k in k order, whatever the blocking, the tile's place
// or the thread count, so results are bitwise identical for any number of threads. float32 and
// float64 products go to OpenBLAS instead when it is the backend (kernels/cpu/blas.h), and float16
// and bfloat16 ones too, widened to float32: this GEMM is the reference twin the tests compare it
// with, and the fallback.
#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise_math.h"
#include "kernels/error.h"
#include "kernels/matmul.h"

namespace kiln {
namespace {

// Register tile (mr x nr) and cache blocks. kc: a B micro-panel (kc x nr) stays in L1 while the
// A micro-panels of a block stream past it; mc x kc of packed A stays in L2. mc/nc are upper
// bounds: small problems shrink them so that every thread gets a block (see plan_blocks).
template <typename Acc> struct Blocking;
template <> struct Blocking<float> {
  static constexpr int64_t mr = 4, nr = 16, kc = 256, mc = 128, nc = 256;
};
template <> struct Blocking<double> {
  static constexpr int64_t mr = 4, nr = 8, kc = 128, mc = 64, nc = 128;
};

// Below this many flops a product runs on the calling thread, and a task of a split product is
// never smaller: handing work to the pool costs a few microseconds.
constexpr int64_t kMinTaskFlops = int64_t{1} << 19;

template <typename T, typename Acc> inline Acc to_acc(T v) {
  if constexpr (std::is_same_v<T, Acc>) {
    return v;
  } else {
    return static_cast<Acc>(static_cast<float>(v));
  }
}

// acc (mr x nr, row-major) += the product of an A micro-panel (kc x mr, i fastest) and a B
// micro-panel (kc x nr, j fastest); acc starts from zero when `first`. The unroll pragmas make
// GCC (at -O2 as at -O3) flatten the i/j loops before vectorizing, so the tile becomes SSE
// registers; without them -O3 vectorizes across k instead, with shuffles, several times slower.
// No reassociation and no FMA (ISO C++ mode contracts nothing): every lane does mul-then-add in
// k order, exactly as the scalar loop reads.
template <typename Acc, int64_t MR, int64_t NR>
void micro_kernel(int64_t kc, const Acc* __restrict a, const Acc* __restrict b, Acc* __restrict tile, bool first) {
  Acc acc[MR][NR];
#pragma GCC unroll 16
  for (int64_t i = 0; i < MR; ++i) {
#pragma GCC unroll 16
    for (int64_t j = 0; j < NR; ++j) acc[i][j] = first ? Acc(0) : tile[i * NR + j];
  }
  for (int64_t p = 0; p < kc; ++p) {
    const Acc* ap = a + p * MR;
    const Acc* bp = b + p * NR;
#pragma GCC unroll 16
    for (int64_t i = 0; i < MR; ++i) {
#pragma GCC unroll 16
      for (int64_t j = 0; j < NR; ++j) acc[i][j] += ap[i] * bp[j];
    }
  }
#pragma GCC unroll 16
  for (int64_t i = 0; i < MR; ++i) {
#pragma GCC unroll 16
    for (int64_t j = 0; j < NR; ++j) tile[i * NR + j] = acc[i][j];
  }
}

// One matrix product's operands as the GEMM sees them (pointers already offset to the batch).
template <typename T, typename Acc> struct Problem {
  bool ta, tb;
  int64_t m, n, k;
  Acc alpha, beta;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T* c;
  int64_t ldc;
};

inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Packs rows [i0, i0 + mr) x k-range [p0, p0 + kl) of op(A) into dst (kl x mr, i fastest); rows past
// m are zeros, so an edge tile runs the same kernel as any other.
template <typename T, typename Acc>
void pack_a(const Problem<T, Acc>& pr, int64_t i0, int64_t p0, int64_t kl, Acc* dst) {
  constexpr int64_t MR = Blocking<Acc>::mr;
  const int64_t rows = std::min<int64_t>(MR, pr.m - i0);
  if (!pr.ta) {  // A(i, p) = a[i * lda + p]: rows are contiguous
    for (int64_t i = 0; i < MR; ++i) {
      if (i < rows) {
        const T* src = pr.a + (i0 + i) * pr.lda + p0;
        for (int64_t p = 0; p < kl; ++p) dst[p * MR + i] = to_acc<T, Acc>(src[p]);
      } else {
        for (int64_t p = 0; p < kl; ++p) dst[p * MR + i] = Acc(0);
      }
    }
  } else {  // A(i, p) = a[p * lda + i]: each k step is a contiguous run of rows
    for (int64_t p = 0; p < kl; ++p) {
      const T* src = pr.a + (p0 + p) * pr.lda + i0;
      Acc* d = dst + p * MR;
      for (int64_t i = 0; i < rows; ++i) d[i] = to_acc<T, Acc>(src[i]);
      for (int64_t i = rows; i < MR; ++i) d[i] = Acc(0);
    }
  }
}

// Packs k-range [p0, p0 + kl) x columns [j0, j0 + nr) of op(B) into dst (kl x nr, j fastest).
template <typename T, typename Acc>
void pack_b(const Problem<T, Acc>& pr, int64_t j0, int64_t p0, int64_t kl, Acc* dst) {
  constexpr int64_t NR = Blocking<Acc>::nr;
  const int64_t cols = std::min<int64_t>(NR, pr.n - j0);
  if (!pr.tb) {  // B(p, j) = b[p * ldb + j]
    for (int64_t p = 0; p < kl; ++p) {
      const T* src = pr.b + (p0 + p) * pr.ldb + j0;
      Acc* d = dst + p * NR;
      for (int64_t j = 0; j < cols; ++j) d[j] = to_acc<T, Acc>(src[j]);
      for (int64_t j = cols; j < NR; ++j) d[j] = Acc(0);
    }
  } else {  // B(p, j) = b[j * ldb + p]
    for (int64_t j = 0; j < NR; ++j) {
      if (j < cols) {
        const T* src = pr.b + (j0 + j) * pr.ldb + p0;
        for (int64_t p = 0; p < kl; ++p) dst[p * NR + j] = to_acc<T, Acc>(src[p]);
      } else {
        for (int64_t p = 0; p < kl; ++p) dst[p * NR + j] = Acc(0);
      }
    }
  }
}

// C block sizes (multiples of the tile) for an m x n product: the largest blocks up to mc x nc,
// halved while there are fewer blocks than ~4 per thread and a block stays above kMinTaskFlops.
// Only the work split depends on the thread count, never the arithmetic.
template <typename Acc> std::pair<int64_t, int64_t> plan_blocks(int64_t m, int64_t n, int64_t k, int threads) {
  using B = Blocking<Acc>;
  int64_t mb = std::min(B::mc, round_up(m, B::mr));
  int64_t nb = std::min(B::nc, round_up(n, B::nr));
  if (threads <= 1) return {mb, nb};
  auto blocks = [&](int64_t bm, int64_t bn) { return ((m + bm - 1) / bm) * ((n + bn - 1) / bn); };
  const int64_t target = 4 * static_cast<int64_t>(threads);
  while (blocks(mb, nb) < target) {
    const int64_t mb2 = round_up(mb / 2, B::mr), nb2 = round_up(nb / 2, B::nr);
    const bool can_m = mb2 < mb, can_n = nb2 < nb;
    if (!can_m && !can_n) break;
    // Split the side with more tiles: an A micro-panel is reused nb/nr times, a B one mb/mr times.
    const bool split_m = can_m && (!can_n || mb * B::nr >= nb * B::mr);
    const int64_t bm = split_m ? mb2 : mb, bn = split_m ? nb : nb2;
    if (2 * bm * bn * k < kMinTaskFlops) break;
    mb = bm;
    nb = bn;
  }
  return {mb, nb};
}

// Scratch reused across the products of one task: packed A and B (all of k) and a block's
// accumulators.
template <typename Acc> struct Workspace {
  std::vector<Acc> a, b, acc;
};

// C = alpha * op(A) op(B) + beta * C for one product. `threads` > 1 splits packing and the C block
// grid across the pool; 1 runs everything on the calling thread.
template <typename T, typename Acc> void gemm_one(const Problem<T, Acc>& pr, int threads, Workspace<Acc>& ws) {
  using B = Blocking<Acc>;
  constexpr int64_t MR = B::mr, NR = B::nr, KC = B::kc;
  const int64_t m = pr.m, n = pr.n, k = pr.k;
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // an empty sum: alpha * 0 + beta * C
    for (int64_t i = 0; i < m; ++i) {
      T* crow = pr.c + i * pr.ldc;
      for (int64_t j = 0; j < n; ++j) {
        crow[j] = static_cast<T>(pr.beta == Acc(0) ? Acc(0) : pr.beta * to_acc<T, Acc>(crow[j]));
      }
    }
    return;
  }
  const int64_t m_pad = round_up(m, MR), n_pad = round_up(n, NR);
  const int64_t m_panels = m_pad / MR, n_panels = n_pad / NR, k_blocks = (k + KC - 1) / KC;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (flops < 2.0 * static_cast<double>(kMinTaskFlops)) threads = 1;

  // Packed layout: k block q (starting at p0 = q * KC, kl deep) of A holds m_panels micro-panels of
  // kl x MR from offset p0 * m_pad; likewise B with n_pad.
  ws.a.resize(static_cast<size_t>(m_pad * k));
  ws.b.resize(static_cast<size_t>(n_pad * k));
  Acc* apack = ws.a.data();
  Acc* bpack = ws.b.data();
  const int64_t a_items = k_blocks * m_panels, b_items = k_blocks * n_panels;
  auto pack_items = [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const bool is_a = t < a_items;
      const int64_t u = is_a ? t : t - a_items, panels = is_a ? m_panels : n_panels;
      const int64_t q = u / panels, panel = u % panels;
      const int64_t p0 = q * KC, kl = std::min(KC, k - p0);
      if (is_a) {
        pack_a(pr, panel * MR, p0, kl, apack + p0 * m_pad + panel * MR * kl);
      } else {
        pack_b(pr, panel * NR, p0, kl, bpack + p0 * n_pad + panel * NR * kl);
      }
    }
  };
  // A pack item is one micro-panel (~MR * KC elements); ~16 of them make a chunk worth a thread.
  if (threads > 1) {
    cpu::parallel_for(a_items + b_items, 16, pack_items);
  } else {
    pack_items(0, 0, a_items + b_items);
  }

  const std::pair<int64_t, int64_t> blocks = plan_blocks<Acc>(m, n, k, threads);
  const int64_t mb = blocks.first, nb = blocks.second;
  const int64_t grid_m = (m + mb - 1) / mb, grid_n = (n + nb - 1) / nb;
  auto run_block = [&](int64_t blk, std::vector<Acc>& acc_buf) {
    const int64_t i0 = (blk / grid_n) * mb, j0 = (blk % grid_n) * nb;
    const int64_t ir0 = i0 / MR, ir1 = std::min(i0 + mb, m_pad) / MR;
    const int64_t jr0 = j0 / NR, jr1 = std::min(j0 + nb, n_pad) / NR;
    const int64_t tiles_m = ir1 - ir0;
    acc_buf.resize(static_cast<size_t>(tiles_m * (jr1 - jr0) * MR * NR));
    Acc* accs = acc_buf.data();  // tile (ir, jr) at ((jr - jr0) * tiles_m + (ir - ir0)) * MR * NR
    // k blocks outermost and in order: each accumulator tile continues its one running sum.
    for (int64_t q = 0; q < k_blocks; ++q) {
      const int64_t p0 = q * KC, kl = std::min(KC, k - p0);
      const Acc* ablk = apack + p0 * m_pad;
      const Acc* bblk = bpack + p0 * n_pad;
      for (int64_t jr = jr0; jr < jr1; ++jr) {
        const Acc* bp = bblk + jr * NR * kl;  // stays in L1 across the ir loop
        Acc* acc_col = accs + (jr - jr0) * tiles_m * MR * NR;
        for (int64_t ir = ir0; ir < ir1; ++ir) {
          micro_kernel<Acc, MR, NR>(kl, ablk + ir * MR * kl, bp, acc_col + (ir - ir0) * MR * NR, q == 0);
        }
      }
    }
    // Epilogue: the valid part of each tile goes to C once, with alpha and beta.
    for (int64_t jr = jr0; jr < jr1; ++jr) {
      const int64_t cols = std::min(NR, n - jr * NR);
      for (int64_t ir = ir0; ir < ir1; ++ir) {
        const int64_t rows = std::min(MR, m - ir * MR);
        const Acc* t = accs + ((jr - jr0) * tiles_m + (ir - ir0)) * MR * NR;
        for (int64_t i = 0; i < rows; ++i) {
          T* crow = pr.c + (ir * MR + i) * pr.ldc + jr * NR;
          const Acc* trow = t + i * NR;
          if (pr.beta == Acc(0)) {
            for (int64_t j = 0; j < cols; ++j) crow[j] = static_cast<T>(pr.alpha * trow[j]);
          } else {
            for (int64_t j = 0; j < cols; ++j) {
              crow[j] = static_cast<T>(pr.alpha * trow[j] + pr.beta * to_acc<T, Acc>(crow[j]));
            }
          }
        }
      }
    }
  };
  const int64_t grid = grid_m * grid_n;
  if (threads > 1 && grid > 1) {
    cpu::parallel_for(grid, 1, [&](int64_t, int64_t begin, int64_t end) {
      std::vector<Acc> acc_buf;
      for (int64_t blk = begin; blk < end; ++blk) run_block(blk, acc_buf);
    });
  } else {
    for (int64_t blk = 0; blk < grid; ++blk) run_block(blk, ws.acc);
  }
}

// --- float16 and bfloat16 products through OpenBLAS ---------------------------------------------
// Debian's OpenBLAS 0.3.21 has no half-precision product (neither sbgemm, the bfloat16 one it can
// be built with, nor a float16 one). A half product here is the float32 product of its operands
// widened, which is exact (every float16 and bfloat16 value is a float32), with C rounded back to T
// once at the end: the arithmetic of kiln's GEMM for these types (exact products, float32 sums, one
// rounding at the store), in OpenBLAS's order. The copies cost O(mk + kn + mn) against the
// product's O(mnk); docs/cpu-performance.md measures what kiln's GEMM cost a bfloat16 autocast step
// instead.

// One operand of a batch of half products: rows x cols at leading dimension ld from base, product
// i's at base + offsets[i] (offsets null: every product shares the one matrix). P is const T* for A
// and B, T* for C.
template <typename P> struct HalfMatrices {
  P base;
  const int64_t* offsets;
  int64_t rows, cols, ld;
  int64_t size() const { return rows * cols; }
  int64_t copies(int64_t count) const { return offsets ? count : 1; }
  P at(int64_t i, int64_t row) const { return base + gemm_batch_offset(offsets, i) + row * ld; }
  // Rows [r0, r0 + nr) and columns [c0, c0 + nc) of every product's matrix.
  HalfMatrices block(int64_t r0, int64_t nr, int64_t c0, int64_t nc) const {
    return {base + r0 * ld + c0, offsets, nr, nc, ld};
  }
};

// Copies products [p0, p0 + count) of x (their own matrices, or the shared one) densely into dst,
// one matrix after another (rows x cols, leading dimension cols), rows spread over the pool; and
// back, rounding, from such a dense float32 copy into x.
template <typename T> void widen_operand(float* dst, const HalfMatrices<const T*>& x, int64_t p0, int64_t count) {
  cpu::parallel_for(x.copies(count) * x.rows, cpu::grain_for(x.cols), [&](int64_t, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      cpu::widen_to_float(dst + r * x.cols, x.at(p0 + r / x.rows, r % x.rows), dtype_of<T>(), x.cols);
    }
  });
}
template <typename T> void narrow_operand(const HalfMatrices<T*>& x, const float* src, int64_t p0, int64_t count) {
  cpu::parallel_for(count * x.rows, cpu::grain_for(x.cols), [&](int64_t, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      cpu::narrow_from_float(x.at(p0 + r / x.rows, r % x.rows), dtype_of<T>(), src + r * x.cols, x.cols);
    }
  });
}

// The float32 scratch of the widened products, at most this many floats at once (64 MiB): a batch
// that needs more goes through in parts, and a product that needs more in tiles of C.
constexpr int64_t kWideFloats = int64_t{1} << 24;

// One float32 pass over products [p0, p0 + count) (all m x n, k deep; blocks of larger matrices
// when tiled, cut by the whole product's `blocks`): the operands widened into wa and wb (unless
// they are there from the pass before), C into wc when beta reads it, one OpenBLAS call for the
// batch, and C rounded back.
template <typename T>
void widened_pass(const GemmArgs& g, const HalfMatrices<const T*>& a, const HalfMatrices<const T*>& b,
                  const HalfMatrices<T*>& c, int64_t p0, int64_t count, float* wa, float* wb, float* wc, bool widen_a,
                  bool widen_b, const cpu::BlasBlocks* blocks = nullptr) {
  if (widen_a) widen_operand(wa, a, p0, count);
  if (widen_b) widen_operand(wb, b, p0, count);
  if (g.beta != 0.0) widen_operand(wc, HalfMatrices<const T*>{c.base, c.offsets, c.rows, c.cols, c.ld}, p0, count);
  std::vector<int64_t> a_off(static_cast<size_t>(count)), b_off(a_off.size()), c_off(a_off.size());
  for (int64_t i = 0; i < count; ++i) {
    a_off[static_cast<size_t>(i)] = a.offsets ? i * a.size() : 0;
    b_off[static_cast<size_t>(i)] = b.offsets ? i * b.size() : 0;
    c_off[static_cast<size_t>(i)] = i * c.size();
  }
  const GemmBatch batch{count, a_off.data(), b_off.data(), c_off.data()};
  cpu::blas_gemm(false, g.trans_a, g.trans_b, c.rows, c.cols, g.k, g.alpha, wa, a.cols, wb, b.cols, g.beta, wc,
                 c.cols, batch, blocks);
  narrow_operand(c, wc, p0, count);
}

// Runs g's half products (all of its batch) as float32 products through OpenBLAS; false, doing
// nothing, when OpenBLAS is not the backend or does not take the sizes (then kiln's GEMM runs).
template <typename T> bool widened_blas_gemm(const GemmArgs& g) {
  const bool ta = g.trans_a, tb = g.trans_b;
  const int64_t m = g.m, n = g.n, k = g.k, count = g.batch.count;
  const HalfMatrices<const T*> a{static_cast<const T*>(g.a), g.batch.a_offsets, ta ? k : m, ta ? m : k, g.lda};
  const HalfMatrices<const T*> b{static_cast<const T*>(g.b), g.batch.b_offsets, tb ? n : k, tb ? k : n, g.ldb};
  const HalfMatrices<T*> c{static_cast<T*>(g.c), g.batch.c_offsets, m, n, g.ldc};
  // The widened copies are dense, so a broadcast view's leading dimension (below its row length)
  // no longer matters; BLAS must still take the sizes.
  if (cpu::gemm_backend() != cpu::GemmBackend::Blas || !cpu::blas_accepts(ta, tb, m, n, k, a.cols, b.cols, n)) {
    return false;
  }
  const int64_t per_product = (a.offsets ? a.size() : 0) + (b.offsets ? b.size() : 0) + c.size();
  const int64_t shared = (a.offsets ? 0 : a.size()) + (b.offsets ? 0 : b.size());
  if (shared + per_product <= kWideFloats) {
    // Whole products, as many at once as fit; a shared operand is widened once.
    const int64_t part = std::clamp<int64_t>((kWideFloats - shared) / per_product, 1, count);
    // Not zeroed: every float is written before it is read (C only when beta != 0; OpenBLAS ignores
    // C's old contents for beta == 0).
    const auto wide = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(shared + part * per_product));
    float* wa = wide.get();
    float* wb = wa + a.copies(part) * a.size();
    float* wc = wb + b.copies(part) * b.size();
    for (int64_t p0 = 0; p0 < count; p0 += part) {
      widened_pass(g, a, b, c, p0, std::min(part, count - p0), wa, wb, wc, a.offsets || p0 == 0,
                   b.offsets || p0 == 0);
    }
    return true;
  }
  // A product too large for the scratch (a language model's logits): tiles of C, each over the
  // whole k, one product at a time. A tile takes all n columns when a k x n panel of op(B) fills at
  // most half the scratch, else as many as do; then as many rows as fit beside them (at least 64
  // columns and 16 rows: a tile that small is still a product OpenBLAS runs well). Each is rounded
  // down to whole blocks of the float32 product's plan (plan_blas_blocks of m x n) and cut by them,
  // so every element comes from the same OpenBLAS call as in the float32 product, and has its bits
  // (on a CPU where OpenBLAS's bits depend on the call's shape, a tile planned on its own did not).
  const cpu::BlasBlocks whole = cpu::plan_blas_blocks(m, n, k);
  const auto whole_blocks = [](int64_t size, int64_t side, int64_t block) {
    return size >= side || size < block ? size : size / block * block;
  };
  const int64_t cols = whole_blocks(std::min(n, std::max<int64_t>(64, kWideFloats / 2 / k)), n, whole.nb);
  const int64_t rows = whole_blocks(std::min(m, std::max<int64_t>(16, (kWideFloats - k * cols) / (k + cols))), m,
                                    whole.mb);
  // Tiles smaller than a block (a product of more than about 64 scratches) are planned on their own.
  const bool aligned = (cols == n || cols % whole.nb == 0) && (rows == m || rows % whole.mb == 0);
  const auto wide = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(rows * k + k * cols + rows * cols));
  float* wa = wide.get();
  float* wb = wa + rows * k;
  float* wc = wb + k * cols;
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t c0 = 0; c0 < n; c0 += cols) {
      const int64_t nc = std::min(cols, n - c0);
      const auto bt = tb ? b.block(c0, nc, 0, k) : b.block(0, k, c0, nc);
      for (int64_t r0 = 0; r0 < m; r0 += rows) {
        const int64_t nr = std::min(rows, m - r0);
        const auto at = ta ? a.block(0, k, r0, nr) : a.block(r0, nr, 0, k);
        widened_pass(g, at, bt, c.block(r0, nr, c0, nc), i, 1, wa, wb, wc, true, r0 == 0, aligned ? &whole : nullptr);
      }
    }
  }
  return true;
}

template <typename T, typename Acc> void gemm_typed(const GemmArgs& g) {
  const bool ta = g.trans_a, tb = g.trans_b;
  const int64_t m = g.m, n = g.n, k = g.k, lda = g.lda, ldb = g.ldb, ldc = g.ldc;
  const double alpha = g.alpha, beta = g.beta;
  const void *a = g.a, *b = g.b;
  void* c = g.c;
  const GemmBatch& batch = g.batch;
  if (batch.count <= 0 || m <= 0 || n <= 0) return;
  auto problem = [&](int64_t i) {
    const int64_t ao = gemm_batch_offset(batch.a_offsets, i);
    const int64_t bo = gemm_batch_offset(batch.b_offsets, i);
    const int64_t co = gemm_batch_offset(batch.c_offsets, i);
    return Problem<T, Acc>{ta,
                           tb,
                           m,
                           n,
                           k,
                           static_cast<Acc>(alpha),
                           static_cast<Acc>(beta),
                           static_cast<const T*>(a) + ao,
                           lda,
                           static_cast<const T*>(b) + bo,
                           ldb,
                           static_cast<T*>(c) + co,
                           ldc};
  };
  // float32 and float64 go to OpenBLAS (kernels/cpu/blas.h) when it is the backend and takes the
  // arguments, the whole batch at once, float16 and bfloat16 widened to float32 (above); the rest to
  // kiln's GEMM.
  if constexpr (std::is_same_v<T, Acc>) {
    if (cpu::gemm_backend() == cpu::GemmBackend::Blas &&
        cpu::blas_gemm(std::is_same_v<T, double>, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch)) {
      return;
    }
  } else {
    if (widened_blas_gemm<T>(g)) return;
  }
  const int threads = cpu::num_threads();
  const int64_t flops = 2 * m * n * std::max<int64_t>(k, 1);
  // Many small products: one product per thread at a time beats splitting each one (two pool
  // round trips per product). Their C blocks must not overlap, as in any batched BLAS.
  if (batch.count > 1 && threads > 1 && flops < 8 * kMinTaskFlops) {
    const int64_t grain = std::max<int64_t>(1, kMinTaskFlops / flops);
    cpu::parallel_for(batch.count, grain, [&](int64_t, int64_t begin, int64_t end) {
      Workspace<Acc> ws;
      for (int64_t i = begin; i < end; ++i) gemm_one<T, Acc>(problem(i), 1, ws);
    });
    return;
  }
  Workspace<Acc> ws;
  for (int64_t i = 0; i < batch.count; ++i) gemm_one<T, Acc>(problem(i), threads, ws);
}

// The epilogues' loops over one row, in clones for the CPU's vector width (KILN_CPU_CLONES,
// kernels/cpu/loops.h; both clones give the same bits). Baseline code runs GELU's exp one value at
// a time, which made a CPU GPT step's fused MLP slower than the unfused ops' cloned loops. A
// float16 row goes through float blocks where the CPU converts float16 in hardware
// (cpu::in_float_blocks, kernels/cpu/convert.h), as batch norm's planes do: each block widened in
// bulk, the float loop on it, the results narrowed back. The same bits: the float loop computes
// what the float16 one does on the widened values (the sum that GELU reads is the unrounded one in
// both), and the stores round once either way.
template <typename T, typename Acc>
KILN_CPU_CLONES void accumulate_row(Acc* __restrict__ sums, const T* __restrict__ row, int64_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    if (cpu::in_float_blocks<T>()) {
      float rb[cpu::kFloatBlock];
      cpu::for_float_blocks(n, [&](int64_t i, int64_t m) {
        accumulate_row<float, Acc>(sums + i, cpu::widen_block(row, i, m, rb), m);
      });
      return;
    }
  }
  for (int64_t j = 0; j < n; ++j) sums[j] += static_cast<Acc>(row[j]);
}
template <typename T, typename Acc>
KILN_CPU_CLONES void bias_gelu_row(T* __restrict__ h, T* __restrict__ y, const T* __restrict__ bias, int64_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    if (cpu::in_float_blocks<T>()) {
      float hb[cpu::kFloatBlock], yb[cpu::kFloatBlock], bb[cpu::kFloatBlock];
      cpu::for_float_blocks(n, [&](int64_t i, int64_t m) {
        cpu::widen_block(h, i, m, hb);
        bias_gelu_row<float, Acc>(hb, yb, cpu::widen_block(bias, i, m, bb), m);
        cpu::narrow_from_float(h + i, dtype_of<T>(), hb, m);
        cpu::narrow_from_float(y + i, dtype_of<T>(), yb, m);
      });
      return;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    const Acc v = static_cast<Acc>(h[j]) + static_cast<Acc>(bias[j]);
    h[j] = static_cast<T>(v);
    y[j] = static_cast<T>(ew::gelu_tanh_fn(v));
  }
}
template <typename T, typename Acc>
KILN_CPU_CLONES void dgelu_row(T* __restrict__ y, const T* __restrict__ h, int64_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    if (cpu::in_float_blocks<T>()) {
      float yb[cpu::kFloatBlock], hb[cpu::kFloatBlock];
      cpu::for_float_blocks(n, [&](int64_t i, int64_t m) {
        cpu::widen_block(y, i, m, yb);
        dgelu_row<float, Acc>(yb, cpu::widen_block(h, i, m, hb), m);
        cpu::narrow_from_float(y + i, dtype_of<T>(), yb, m);
      });
      return;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    y[j] = static_cast<T>(static_cast<Acc>(y[j]) * ew::gelu_tanh_grad(static_cast<Acc>(h[j])));
  }
}
template <typename T, typename Acc> KILN_CPU_CLONES Acc row_sum(const T* row, int64_t n) {
  return cpu::lane_sum<Acc>(n, [&](int64_t j) { return static_cast<Acc>(row[j]); });
}

// Column strips for sums down the columns of a rows x cols matrix: one strip per thread (at least
// kMinStrip columns wide, a multiple of it), each walked row by row, so a task reads one long
// contiguous run of every row. Narrow strips of 64 columns would read 128 to 256 bytes of each row,
// kilobytes apart, which the hardware prefetcher follows poorly. Each column is summed over the rows
// in order, so the split (and with it the thread count) does not change the bits.
struct ColumnStrips {
  static constexpr int64_t kMinStrip = 64, kRun = 1024;  // kRun: the widest run summed at once
  int64_t cols, width, count;
  explicit ColumnStrips(int64_t n) : cols(n) {
    const int64_t tasks = std::clamp<int64_t>(cols / kMinStrip, 1, cpu::num_threads());
    width = ((cols + tasks - 1) / tasks + kMinStrip - 1) / kMinStrip * kMinStrip;
    count = (cols + width - 1) / width;
  }
  // Calls run(j0, j1) for the runs of at most kRun columns of strip s, in order.
  template <typename F> void runs(int64_t s, F&& run) const {
    const int64_t end = std::min(cols, (s + 1) * width);
    for (int64_t j0 = s * width; j0 < end; j0 += kRun) run(j0, std::min(end, j0 + kRun));
  }
};

// dst[j] = the sum of column j of a rows x cols matrix (leading dimension ld), over the rows in
// order. row(i, j0, j1) runs on columns [j0, j1) of row i first (an epilogue that writes them in
// place, or nothing), so an epilogue and the sums of its results take one pass over the matrix.
template <typename T, typename Acc, typename RowFn>
void column_sums(const T* src, int64_t rows, int64_t cols, int64_t ld, T* dst, RowFn&& row) {
  if (cols <= 0) return;
  const ColumnStrips strips(cols);
  cpu::parallel_for(strips.count, 1, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      strips.runs(s, [&](int64_t j0, int64_t j1) {
        Acc sums[ColumnStrips::kRun] = {};
        for (int64_t i = 0; i < rows; ++i) {
          row(i, j0, j1);
          accumulate_row<T, Acc>(sums, src + i * ld + j0, j1 - j0);
        }
        for (int64_t j = j0; j < j1; ++j) dst[j] = static_cast<T>(sums[j - j0]);
      });
    }
  });
}

// Rows in parallel, at least about 16384 elements a task.
template <typename F> void for_rows(int64_t rows, int64_t width, F&& body) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(width, 1));
  cpu::parallel_for(rows, grain, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) body(i);
  });
}

// BiasGeluAux after the product was stored in aux: H = aux + bias, C = gelu_tanh(H). GELU reads H
// before it is rounded to T, as cuBLASLt's epilogue does.
template <typename T, typename Acc> void bias_gelu_aux(const GemmArgs& g) {
  auto* aux = static_cast<T*>(g.aux);
  auto* c = static_cast<T*>(g.c);
  const auto* bias = static_cast<const T*>(g.bias);
  for_rows(g.m, g.n, [&](int64_t i) { bias_gelu_row<T, Acc>(aux + i * g.ldaux, c + i * g.ldc, bias, g.n); });
}

// DGeluBgrad after the product was stored in C: C = C * gelu_tanh'(aux), and the column sums of
// that C into bias_grad, each over the rows in order (the same bits for any thread count), in one
// pass: each row's run of C is summed right after dGELU wrote it.
template <typename T, typename Acc> void dgelu_bgrad(const GemmArgs& g) {
  const auto* aux = static_cast<const T*>(g.aux);
  auto* c = static_cast<T*>(g.c);
  column_sums<T, Acc>(c, g.m, g.n, g.ldc, static_cast<T*>(g.bias_grad), [&](int64_t i, int64_t j0, int64_t j1) {
    dgelu_row<T, Acc>(c + i * g.ldc + j0, aux + i * g.ldaux + j0, j1 - j0);
  });
}

// BiasGradA after the product: bias_grad[i] = the sum of op(A)'s row i over k (a fixed order that
// depends only on k). With trans_a that row is a column of the stored k x m matrix.
template <typename T, typename Acc> void bias_grad_a(const GemmArgs& g) {
  const auto* a = static_cast<const T*>(g.a);
  auto* db = static_cast<T*>(g.bias_grad);
  if (g.trans_a) return column_sums<T, Acc>(a, g.k, g.m, g.lda, db, [](int64_t, int64_t, int64_t) {});
  for_rows(g.m, g.k, [&](int64_t i) { db[i] = static_cast<T>(row_sum<T, Acc>(a + i * g.lda, g.k)); });
}

template <typename T, typename Acc> void gemm_with_epilogue(const GemmArgs& g) {
  GemmArgs product = g;  // the product alone: into aux (BiasGeluAux) or C
  product.epilogue = GemmEpilogue::None;
  switch (g.epilogue) {
    case GemmEpilogue::None: return gemm_typed<T, Acc>(g);
    case GemmEpilogue::Bias: {
      // C starts as the bias in every row and the product adds into it: P + bias, rounded once.
      auto* c = static_cast<T*>(g.c);
      const auto* bias = static_cast<const T*>(g.bias);
      for (int64_t i = 0; i < g.m; ++i) std::copy(bias, bias + g.n, c + i * g.ldc);
      product.beta = 1.0;
      return gemm_typed<T, Acc>(product);
    }
    case GemmEpilogue::BiasGradA:
      gemm_typed<T, Acc>(product);
      return bias_grad_a<T, Acc>(g);
    case GemmEpilogue::BiasGeluAux:
      product.c = g.aux;
      product.ldc = g.ldaux;
      gemm_typed<T, Acc>(product);
      return bias_gelu_aux<T, Acc>(g);
    case GemmEpilogue::DGeluBgrad:
      gemm_typed<T, Acc>(product);
      return dgelu_bgrad<T, Acc>(g);
  }
}

}  // namespace

void check_gemm_epilogue(const GemmArgs& g) {
  if (g.epilogue == GemmEpilogue::None) return;
  if (g.batch.count != 1 || g.alpha != 1.0 || g.beta != 0.0 || g.k <= 0) {
    throw Error("gemm: an epilogue takes one product with alpha 1, beta 0 and k > 0, got " +
                std::to_string(g.batch.count) + " products, alpha " + num_str(g.alpha) + ", beta " + num_str(g.beta) +
                ", k " + std::to_string(g.k));
  }
  const bool reads_bias = g.epilogue == GemmEpilogue::Bias || g.epilogue == GemmEpilogue::BiasGeluAux;
  if (reads_bias ? !g.bias : !g.bias_grad) {
    throw Error(std::string("gemm: the ") + (reads_bias ? "bias epilogues need a bias" : "bias-gradient epilogues "
                "need a bias gradient to write") + " (m " + std::to_string(g.m) + ", n " + std::to_string(g.n) + ")");
  }
  if (gemm_epilogue_has_aux(g.epilogue) && (!g.aux || g.ldaux < g.n)) {
    throw Error("gemm: the GELU epilogues need an aux matrix and ldaux >= n (n " + std::to_string(g.n) + ", ldaux " +
                std::to_string(g.ldaux) + ")");
  }
}

void gemm_cpu(const GemmArgs& g, const KernelContext&) {
  check_gemm_epilogue(g);
  switch (g.dtype) {
    case DType::Float32: return gemm_with_epilogue<float, float>(g);
    case DType::Float64: return gemm_with_epilogue<double, double>(g);
    case DType::Float16: return gemm_with_epilogue<Half, float>(g);
    case DType::BFloat16: return gemm_with_epilogue<BFloat16, float>(g);
    default: throw DTypeError(std::string("gemm: unsupported dtype ") + dtype_name(g.dtype));
  }
}

}  // namespace kiln
