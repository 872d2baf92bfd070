// CPU GEMM: a straightforward threaded reference (rows of C split across the pool, each row an
// axpy over k with float accumulation). A cache-blocked, packed version replaces it.
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/error.h"
#include "kernels/matmul.h"

namespace kiln {
namespace {

template <typename T, typename Acc>
void gemm_one(bool ta, bool tb, int64_t m, int64_t n, int64_t k, Acc alpha, const T* a, int64_t lda, const T* b,
              int64_t ldb, Acc beta, T* c, int64_t ldc) {
  cpu::parallel_for(m, cpu::grain_for(n * k), [&](int64_t, int64_t r0, int64_t r1) {
    std::vector<Acc> row(static_cast<size_t>(n));
    for (int64_t i = r0; i < r1; ++i) {
      std::fill(row.begin(), row.end(), Acc(0));
      for (int64_t p = 0; p < k; ++p) {
        Acc av = static_cast<Acc>(static_cast<float>(ta ? a[p * lda + i] : a[i * lda + p]));
        if constexpr (std::is_same_v<T, double>) av = ta ? a[p * lda + i] : a[i * lda + p];
        if (av == Acc(0)) continue;
        if (!tb) {
          const T* brow = b + p * ldb;
          for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] += av * static_cast<Acc>(brow[j]);
        } else {
          for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] += av * static_cast<Acc>(b[j * ldb + p]);
        }
      }
      T* crow = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) {
        Acc v = alpha * row[static_cast<size_t>(j)];
        if (beta != Acc(0)) v += beta * static_cast<Acc>(crow[j]);
        crow[j] = static_cast<T>(v);
      }
    }
  });
}

}  // namespace

void gemm_cpu(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
              int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc, const GemmBatch& batch) {
  for (int64_t i = 0; i < batch.count; ++i) {
    int64_t ao = batch.a_offsets ? batch.a_offsets[i] : 0;
    int64_t bo = batch.b_offsets ? batch.b_offsets[i] : 0;
    int64_t co = batch.c_offsets ? batch.c_offsets[i] : 0;
    switch (dtype) {
      case DType::Float32:
        gemm_one<float, float>(trans_a, trans_b, m, n, k, static_cast<float>(alpha), static_cast<const float*>(a) + ao,
                               lda, static_cast<const float*>(b) + bo, ldb, static_cast<float>(beta),
                               static_cast<float*>(c) + co, ldc);
        break;
      case DType::Float64:
        gemm_one<double, double>(trans_a, trans_b, m, n, k, alpha, static_cast<const double*>(a) + ao, lda,
                                 static_cast<const double*>(b) + bo, ldb, beta, static_cast<double*>(c) + co, ldc);
        break;
      case DType::Float16:
        gemm_one<Half, float>(trans_a, trans_b, m, n, k, static_cast<float>(alpha), static_cast<const Half*>(a) + ao,
                              lda, static_cast<const Half*>(b) + bo, ldb, static_cast<float>(beta),
                              static_cast<Half*>(c) + co, ldc);
        break;
      case DType::BFloat16:
        gemm_one<BFloat16, float>(trans_a, trans_b, m, n, k, static_cast<float>(alpha),
                                  static_cast<const BFloat16*>(a) + ao, lda, static_cast<const BFloat16*>(b) + bo, ldb,
                                  static_cast<float>(beta), static_cast<BFloat16*>(c) + co, ldc);
        break;
      default: throw DTypeError(std::string("gemm: unsupported dtype ") + dtype_name(dtype));
    }
  }
}

}  // namespace kiln
