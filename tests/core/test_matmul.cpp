// Hand tests for the CPU GEMM and matmul: what the op table cannot say. Bitwise identity run to run
// and across thread counts (kiln's GEMM: each C element is one float sum in k order, which is also
// checked directly; OpenBLAS: kiln's shape-only blocks), how products are cut into blocks, the
// folding of a batch of rows against a matrix into one product, gemm_cpu's own contract (alpha,
// beta, leading dims, batch offsets that repeat, empty dims) and accuracy at a k long enough to
// cross many k blocks.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "core/kiln.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise_math.h"
#include "kernels/matmul.h"
#include "tests/bitwise.h"
#include "tests/hardware_half.h"
#include "tests/threads.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using kiln::test::ThreadCountGuard;
using kiln::test::worst_ratio;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  return std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0;
}

// The CPU GEMM backends the tests run on: kiln's own, and OpenBLAS where it loads (kernels/cpu/blas.h).
std::vector<cpu::GemmBackend> gemm_backends() {
  std::vector<cpu::GemmBackend> out{cpu::GemmBackend::Kiln};
  if (cpu::blas_available()) out.push_back(cpu::GemmBackend::Blas);
  return out;
}

size_t at(int64_t i) { return static_cast<size_t>(i); }

// Float64 C = alpha * op(A) op(B) + beta * C0 from row-major values with leading dimensions, and
// sum |alpha * a * b| + |beta * c0| per element (the scale a rounding error is measured against).
struct Reference {
  std::vector<double> value, scale;
};
Reference ref_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const std::vector<double>& a,
                   int64_t lda, const std::vector<double>& b, int64_t ldb, double beta, const std::vector<double>& c0,
                   int64_t ldc) {
  Reference r{std::vector<double>(at(m * n)), std::vector<double>(at(m * n))};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, sa = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[at(p * lda + i)] : a[at(i * lda + p)];
        const double bv = tb ? b[at(j * ldb + p)] : b[at(p * ldb + j)];
        s += av * bv;
        sa += std::fabs(av * bv);
      }
      const double cv = beta == 0 ? 0.0 : c0[at(i * ldc + j)];
      r.value[at(i * n + j)] = alpha * s + beta * cv;
      r.scale[at(i * n + j)] = std::fabs(alpha) * sa + std::fabs(beta * cv);
    }
  }
  return r;
}

// Relative rounding of one value of each dtype (what the output's final rounding may cost).
double unit_roundoff(DType t) {
  switch (t) {
    case DType::Float64: return 0x1p-53;
    case DType::Float32: return 0x1p-24;
    case DType::Float16: return 0x1p-11;
    default: return 0x1p-8;  // bfloat16
  }
}

}  // namespace

TEST_CASE("matmul: the same bits run to run, and kiln's GEMM also for 1, 2 and 3 threads, each a float sum in k order",
          "[linalg]") {
  const cpu::GemmBackend backend = GENERATE(from_range(gemm_backends()));
  INFO("backend " << cpu::gemm_backend_name(backend));
  cpu::GemmBackendScope use(backend);
  ThreadCountGuard guard;
  manual_seed(11);
  const int64_t m = 300, n = 257, k = 129;
  Tensor a = randn({m, k});
  Tensor b = randn({k, n});
  Tensor bt = randn({n, k}).t();  // reaches the GEMM transposed
  Tensor xa = randn({24, 40, 50}), xb = randn({24, 50, 30});  // small products: split by batch
  std::vector<Tensor> outs, outs_t, outs_b;
  for (int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    cpu::set_num_threads(threads);
    outs.push_back(matmul(a, b));
    outs_t.push_back(matmul(a, bt));
    outs_b.push_back(matmul(xa, xb));
    CHECK(same_bits(outs.back(), matmul(a, b)));
    CHECK(same_bits(outs_t.back(), matmul(a, bt)));
    CHECK(same_bits(outs_b.back(), matmul(xa, xb)));
  }
  // An OpenMP OpenBLAS gives a product kiln's thread count, and its results depend on it (the split
  // of C among its threads does): reproducible at a thread count only. A pthreads one runs kiln's
  // shape-only blocks (plan_blas_blocks) on one OpenBLAS thread each, a serial one whole products.
  if (backend == cpu::GemmBackend::Blas && cpu::blas_threaded() && !cpu::blas_concurrent()) return;
  for (size_t i = 1; i < outs.size(); ++i) {
    INFO("threads " << i + 1 << " against 1");
    CHECK(same_bits(outs[0], outs[i]));
    CHECK(same_bits(outs_t[0], outs_t[i]));
    CHECK(same_bits(outs_b[0], outs_b[i]));
  }
  // kiln's GEMM: the contract that makes this hold is one running float sum per element, in k
  // order (no FMA on x86-64 without -mfma, no reassociation). Blocks and tiles only decide where it
  // runs. A single-threaded OpenBLAS: one cblas call per product, whatever the thread count. Its FMA
  // sums are not kiln's, so the check stops here.
  if (backend == cpu::GemmBackend::Blas) return;
  std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>(), ov = outs[0].to_vector<float>();
  int64_t mismatches = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int64_t p = 0; p < k; ++p) s += av[at(i * k + p)] * bv[at(p * n + j)];
      if (std::memcmp(&s, &ov[at(i * n + j)], sizeof(float)) != 0) ++mismatches;
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("matmul: products issued from the pool's threads at once equal the same products one at a time",
          "[linalg]") {
  // A threaded OpenBLAS is called from kiln's pool without a lock (kernels/cpu/blas.h): the results
  // must be what one call at a time gives. Sizes from attention's small products to past OpenBLAS's
  // own threading threshold, float32 and float64, several rounds.
  const cpu::GemmBackend backend = GENERATE(from_range(gemm_backends()));
  INFO("backend " << cpu::gemm_backend_name(backend));
  cpu::GemmBackendScope use(backend);
  ThreadCountGuard guard;
  cpu::set_num_threads(4);
  manual_seed(14);
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {64, 64, 16}, {100, 37, 70}, {300, 257, 129}, {17, 500, 3}, {256, 256, 256}, {400, 384, 320}};
  const int64_t count = 48;
  std::vector<Tensor> as, bs, one_at_a_time(static_cast<size_t>(count)), together(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    auto [m, n, k] = shapes[static_cast<size_t>(i) % shapes.size()];
    const DType t = i % 2 ? DType::Float64 : DType::Float32;
    as.push_back(randn({m, k}).to(t));
    bs.push_back(i % 3 ? randn({k, n}).to(t) : randn({n, k}).to(t).t());
  }
  {
    cpu::SerialScope as_the_pool_threads_are;  // the same path into the GEMM, on this thread alone
    for (size_t i = 0; i < as.size(); ++i) one_at_a_time[i] = matmul(as[i], bs[i]);
  }
  for (int round = 0; round < 3; ++round) {
    cpu::parallel_for(count, 1, [&](int64_t, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) together[static_cast<size_t>(i)] = matmul(as[static_cast<size_t>(i)], bs[static_cast<size_t>(i)]);
    });
    int64_t differ = 0;
    for (size_t i = 0; i < as.size(); ++i) differ += together[i].to_vector_double() != one_at_a_time[i].to_vector_double();
    INFO("round " << round);
    CHECK(differ == 0);
  }
}

namespace {

// gemm_cpu with the product spelled out, as the GEMM's tests read best (no scratch needed).
void gemm(DType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, double beta, void* c, int64_t ldc, const GemmBatch& batch = {}) {
  gemm_cpu(gemm_args(t, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch), KernelContext{});
}

}  // namespace

TEST_CASE("gemm_cpu: alpha, beta, transposes and padded leading dimensions in every dtype", "[linalg]") {
  const cpu::GemmBackend backend = GENERATE(from_range(gemm_backends()));
  INFO("backend " << cpu::gemm_backend_name(backend));
  cpu::GemmBackendScope use(backend);
  manual_seed(12);
  const int64_t m = 19, n = 21, k = 37;
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (int mode = 0; mode < 4; ++mode) {
      const bool ta = mode & 1, tb = mode & 2;
      // Leading dimensions wider than the rows they hold: the padding must never be read.
      const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
      Tensor a = randn({ta ? k : m, lda}).to(t), b = randn({tb ? n : k, ldb}).to(t), c = randn({m, ldc}).to(t);
      for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, -2.0}, std::pair{-1.5, 1.0}}) {
        INFO(dtype_name(t) << " ta=" << ta << " tb=" << tb << " alpha=" << alpha << " beta=" << beta);
        Tensor out = c.clone();
        if (beta == 0.0) out.fill_(std::numeric_limits<double>::quiet_NaN());  // beta == 0 ignores C
        gemm(t, ta, tb, m, n, k, alpha, a.data_ptr(), lda, b.data_ptr(), ldb, beta, out.data_ptr(), ldc);
        Reference r = ref_gemm(ta, tb, m, n, k, alpha, a.to_vector_double(), lda, b.to_vector_double(), ldb, beta,
                               c.to_vector_double(), ldc);
        std::vector<double> ov = out.to_vector_double();
        // Sums in float (double for float64) over k = 37 terms, then one rounding to the dtype.
        const double acc_eps = t == DType::Float64 ? 0x1p-53 : 0x1p-24;
        int64_t bad = 0;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const double ref = r.value[at(i * n + j)];
            // (+ 2^-24: float16's subnormal spacing bounds the final rounding of a tiny result.)
            const double tol = 2 * (k + 2) * acc_eps * r.scale[at(i * n + j)] + unit_roundoff(t) * std::fabs(ref) +
                               (t == DType::Float16 ? 0x1p-24 : 0.0);
            if (!(std::fabs(ov[at(i * ldc + j)] - ref) <= tol)) ++bad;
          }
          // The columns past n belong to someone else: untouched.
          for (int64_t j = n; j < ldc; ++j) {
            const double before = c.to_vector_double()[at(i * ldc + j)];
            if (beta != 0.0 && ov[at(i * ldc + j)] != before) ++bad;
            if (beta == 0.0 && !std::isnan(ov[at(i * ldc + j)])) ++bad;
          }
        }
        CHECK(bad == 0);
      }
    }
  }
}

// The bias epilogues of linear's forward (Bias) and weight gradient (BiasGradA), against float64:
// C = P + bias with one rounding (the bias enters as C's starting value, so the error bound is the
// same as for beta = 1), and bias_grad = the sums of op(A)'s rows, for both layouts of A.
TEST_CASE("gemm_cpu: the bias epilogues add the bias once and sum op(A)'s rows", "[linalg]") {
  const cpu::GemmBackend backend = GENERATE(from_range(gemm_backends()));
  INFO("backend " << cpu::gemm_backend_name(backend));
  cpu::GemmBackendScope use(backend);
  manual_seed(13);
  const int64_t m = 19, n = 21, k = 37;
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (int mode = 0; mode < 4; ++mode) {
      const bool ta = mode & 1, tb = mode & 2;
      INFO(dtype_name(t) << " ta=" << ta << " tb=" << tb);
      const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
      Tensor a = randn({ta ? k : m, lda}).to(t), b = randn({tb ? n : k, ldb}).to(t);
      Tensor bias = randn({n}).to(t);
      const double acc_eps = t == DType::Float64 ? 0x1p-53 : 0x1p-24;
      const std::vector<double> av = a.to_vector_double(), bv = b.to_vector_double(), biasv = bias.to_vector_double();

      Tensor out = full({m, ldc}, std::numeric_limits<double>::quiet_NaN(), TensorOptions(t));
      GemmArgs g = gemm_args(t, ta, tb, m, n, k, 1.0, a.data_ptr(), lda, b.data_ptr(), ldb, 0.0, out.data_ptr(), ldc);
      g.epilogue = GemmEpilogue::Bias;
      g.bias = bias.data_ptr();
      gemm_cpu(g, KernelContext{});
      std::vector<double> c0(at(m * ldc));
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) c0[at(i * ldc + j)] = biasv[at(j)];
      }
      const Reference r = ref_gemm(ta, tb, m, n, k, 1.0, av, lda, bv, ldb, 1.0, c0, ldc);
      const std::vector<double> ov = out.to_vector_double();
      int64_t bad = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const double ref = r.value[at(i * n + j)];
          const double tol = 2 * (k + 2) * acc_eps * r.scale[at(i * n + j)] + unit_roundoff(t) * std::fabs(ref) +
                             (t == DType::Float16 ? 0x1p-24 : 0.0);
          if (!(std::fabs(ov[at(i * ldc + j)] - ref) <= tol)) ++bad;
        }
        for (int64_t j = n; j < ldc; ++j) bad += std::isnan(ov[at(i * ldc + j)]) ? 0 : 1;  // padding untouched
      }
      CHECK(bad == 0);

      Tensor grad_out = full({m, ldc}, std::numeric_limits<double>::quiet_NaN(), TensorOptions(t));
      Tensor bias_grad = full({m}, std::numeric_limits<double>::quiet_NaN(), TensorOptions(t));
      g.epilogue = GemmEpilogue::BiasGradA;
      g.bias = nullptr;
      g.bias_grad = bias_grad.data_ptr();
      g.c = grad_out.data_ptr();
      gemm_cpu(g, KernelContext{});
      const Reference p = ref_gemm(ta, tb, m, n, k, 1.0, av, lda, bv, ldb, 0.0, c0, ldc);
      const std::vector<double> pv = grad_out.to_vector_double(), dbv = bias_grad.to_vector_double();
      bad = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const double ref = p.value[at(i * n + j)];
          const double tol = 2 * (k + 2) * acc_eps * p.scale[at(i * n + j)] + unit_roundoff(t) * std::fabs(ref) +
                             (t == DType::Float16 ? 0x1p-24 : 0.0);
          if (!(std::fabs(pv[at(i * ldc + j)] - ref) <= tol)) ++bad;
        }
        double sum = 0, scale = 0;
        for (int64_t q = 0; q < k; ++q) {
          const double x = ta ? av[at(q * lda + i)] : av[at(i * lda + q)];
          sum += x;
          scale += std::fabs(x);
        }
        const double tol = 2 * (k + 2) * acc_eps * scale + unit_roundoff(t) * std::fabs(sum);
        if (!(std::fabs(dbv[at(i)] - sum) <= tol)) ++bad;
      }
      CHECK(bad == 0);
    }
  }
}

// The bias-gradient epilogues' column sums (kernels/cpu/matmul.cpp), against sums written out here:
// BiasGradA with a transposed A (op(A)'s row sums are the stored A's column sums) and DGeluBgrad
// (C = P * gelu_tanh'(aux), then C's column sums, in one pass) give each column one sum over the
// rows in order, in the accumulation type, rounded once; the threads cut the columns into strips
// (runs of at most 1024 columns), which must not change a bit; no columns at all write nothing. T's
// values are compared as bytes.
template <typename T, typename Acc> void check_column_sum_epilogues(int64_t cols, int threads) {
  const DType t = dtype_of<T>();
  INFO(dtype_name(t) << ", " << cols << " columns, " << threads << " threads");
  ThreadCountGuard guard;
  cpu::set_num_threads(threads);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto ptr = [](const Tensor& x) { return static_cast<const T*>(x.data_ptr()); };
  const auto same_bytes = [](const T* a, const T* b, int64_t n) {
    return n == 0 || std::memcmp(a, b, at(n) * sizeof(T)) == 0;  // an empty vector's data() may be null
  };
  const int64_t rows = 37, k = 5, ldc = cols + 3, ldaux = cols + 1;
  manual_seed(17);

  // DGeluBgrad: C = A B is rows x cols; the product alone (no epilogue) gives the P it starts from.
  const Tensor a = randn({rows, k}).to(t), b = randn({k, cols}).to(t), aux = randn({rows, ldaux}).to(t);
  const Tensor p = full({rows, ldc}, nan, TensorOptions(t)), c = full({rows, ldc}, nan, TensorOptions(t));
  const Tensor db = full({std::max<int64_t>(cols, 1)}, nan, TensorOptions(t));  // a pointer even for no columns
  GemmArgs g = gemm_args(t, false, false, rows, cols, k, 1.0, a.data_ptr(), k, b.data_ptr(), cols, 0.0, p.data_ptr(),
                         ldc);
  gemm_cpu(g, KernelContext{});
  g.c = c.data_ptr();
  g.epilogue = GemmEpilogue::DGeluBgrad;
  g.aux = aux.data_ptr();
  g.ldaux = ldaux;
  g.bias_grad = db.data_ptr();
  gemm_cpu(g, KernelContext{});
  std::vector<T> c_ref(at(rows * ldc)), db_ref(at(cols));
  for (int64_t j = 0; j < cols; ++j) {
    Acc sum = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const Acc pv = static_cast<Acc>(ptr(p)[at(i * ldc + j)]), hv = static_cast<Acc>(ptr(aux)[at(i * ldaux + j)]);
      c_ref[at(i * ldc + j)] = static_cast<T>(pv * ew::gelu_tanh_grad(hv));
      sum += static_cast<Acc>(c_ref[at(i * ldc + j)]);
    }
    db_ref[at(j)] = static_cast<T>(sum);
  }
  bool c_same = true;
  for (int64_t i = 0; i < rows; ++i) c_same = c_same && same_bytes(ptr(c) + i * ldc, c_ref.data() + i * ldc, cols);
  CHECK(c_same);
  CHECK(same_bytes(ptr(db), db_ref.data(), cols));
  const std::vector<double> cv = c.to_vector_double();
  int64_t padding_written = 0;  // C's columns past n stay as they were
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = cols; j < ldc; ++j) padding_written += std::isnan(cv[at(i * ldc + j)]) ? 0 : 1;
  }
  CHECK(padding_written == 0);

  // BiasGradA with op(A) = A^T for A stored [rows, cols + 2]: bias_grad[i] = the sum of A's column i.
  const int64_t lda = cols + 2, n = 4;
  const Tensor at_ = randn({rows, lda}).to(t), b2 = randn({rows, n}).to(t);
  const Tensor c2 = full({cols, n}, nan, TensorOptions(t));
  const Tensor db2 = full({std::max<int64_t>(cols, 1)}, nan, TensorOptions(t));
  GemmArgs g2 = gemm_args(t, true, false, cols, n, rows, 1.0, at_.data_ptr(), lda, b2.data_ptr(), n, 0.0,
                          c2.data_ptr(), n);
  g2.epilogue = GemmEpilogue::BiasGradA;
  g2.bias_grad = db2.data_ptr();
  gemm_cpu(g2, KernelContext{});
  std::vector<T> db2_ref(at(cols));
  for (int64_t j = 0; j < cols; ++j) {
    Acc sum = 0;
    for (int64_t i = 0; i < rows; ++i) sum += static_cast<Acc>(ptr(at_)[at(i * lda + j)]);
    db2_ref[at(j)] = static_cast<T>(sum);
  }
  CHECK(same_bytes(ptr(db2), db2_ref.data(), cols));
  if (cols == 0) {  // nothing written
    CHECK(std::isnan(db.to_vector_double()[0]));
    CHECK(std::isnan(db2.to_vector_double()[0]));
  }
}

TEST_CASE("gemm_cpu: the bias-gradient epilogues sum each column over the rows in order, on any thread count",
          "[linalg]") {
  cpu::GemmBackendScope use(kiln::test::thread_independent_gemm());
  const kiln::test::HardwareHalfGuard restore;
  for (int64_t cols : {int64_t{0}, int64_t{3}, int64_t{130}, int64_t{2500}}) {
    for (int threads : {1, 2, 3}) {
      check_column_sum_epilogues<float, float>(cols, threads);
      check_column_sum_epilogues<double, double>(cols, threads);
      check_column_sum_epilogues<BFloat16, float>(cols, threads);
      for (bool hardware : {true, false}) {  // float16 rows widened in bulk or read in place
        cpu::set_hardware_half(hardware);
        INFO("float16 conversions in hardware: " << cpu::hardware_half());
        check_column_sum_epilogues<Half, float>(cols, threads);
      }
    }
  }
}

TEST_CASE("gemm_cpu: an epilogue's missing operands and other products are errors naming them", "[linalg]") {
  const float a[4] = {1, 2, 3, 4}, bias[2] = {1, 1};
  float c[4] = {}, db[2] = {};
  auto args = [&](GemmEpilogue e) {
    GemmArgs g = gemm_args(DType::Float32, false, false, 2, 2, 2, 1.0, a, 2, a, 2, 0.0, c, 2);
    g.epilogue = e;
    g.bias = bias;
    g.bias_grad = db;
    return g;
  };
  GemmArgs g = args(GemmEpilogue::Bias);
  g.bias = nullptr;
  CHECK_THROWS_WITH(gemm_cpu(g, KernelContext{}), Catch::Contains("bias epilogues need a bias"));
  g = args(GemmEpilogue::BiasGradA);
  g.bias_grad = nullptr;
  CHECK_THROWS_WITH(gemm_cpu(g, KernelContext{}), Catch::Contains("need a bias gradient"));
  g = args(GemmEpilogue::BiasGeluAux);
  CHECK_THROWS_WITH(gemm_cpu(g, KernelContext{}), Catch::Contains("aux matrix"));
  g = args(GemmEpilogue::Bias);
  g.beta = 1.0;
  CHECK_THROWS_WITH(gemm_cpu(g, KernelContext{}), Catch::Contains("beta 1"));
  g = args(GemmEpilogue::BiasGradA);
  g.k = 0;
  CHECK_THROWS_WITH(gemm_cpu(g, KernelContext{}), Catch::Contains("k 0"));
  for (float v : c) CHECK(v == 0.0f);  // nothing ran
}

// linear with a bias is one node whose forward is the Bias epilogue and whose backward gives the
// bias gradient from the weight GEMM (BiasGradA); without a bias it is matmul's node. The fused
// path against matmul + bias, forward and gradients, and the node's name.
TEST_CASE("linear: the fused bias path is one node and equals matmul + bias", "[linalg]") {
  manual_seed(14);
  for (DType t : {DType::Float32, DType::Float64}) {
    INFO(dtype_name(t));
    Tensor x = randn({2, 5, 7}).to(t).set_requires_grad(true), w = randn({3, 7}).to(t).set_requires_grad(true);
    Tensor b = randn({3}).to(t).set_requires_grad(true);
    Tensor y = linear(x, w, b);
    REQUIRE(y.grad_fn());
    CHECK(y.grad_fn()->name() == "linear");
    Tensor dy = randn({2, 5, 3}).to(t);
    y.backward(dy);
    Tensor x2 = x.detach().set_requires_grad(true), w2 = w.detach().set_requires_grad(true);
    Tensor b2 = b.detach().set_requires_grad(true);
    Tensor y2 = matmul(x2, w2.t()) + b2;
    y2.backward(dy);
    const double tol = t == DType::Float64 ? 1e-12 : 1e-5;
    CHECK(worst_ratio(y.detach(), y2.detach(), tol, tol) <= 1.0);
    CHECK(worst_ratio(x.grad(), x2.grad(), tol, tol) <= 1.0);
    CHECK(worst_ratio(w.grad(), w2.grad(), tol, tol) <= 1.0);
    CHECK(worst_ratio(b.grad(), b2.grad(), tol, tol) <= 1.0);
  }
  // Only the bias needs a gradient, or only the weight: the fused weight GEMM is skipped.
  Tensor x = randn({4, 6}), w = randn({2, 6}), b = randn({2}).set_requires_grad(true);
  linear(x, w, b).sum().backward();
  CHECK(b.grad().to_vector_double() == std::vector<double>{4.0, 4.0});
  Tensor w3 = randn({2, 6}).set_requires_grad(true);
  linear(x, w3, randn({2})).sum().backward();
  CHECK(worst_ratio(w3.grad(), matmul(ones({2, 4}), x), 1e-5, 1e-5) <= 1.0);
  // No bias: linear's own node too (its weight gradient has the weight's layout: the next case).
  REQUIRE(linear(x, w3).grad_fn());
  CHECK(linear(x, w3).grad_fn()->name() == "linear");
}

// The GPT MLP's float16 epilogue rows (bias + GELU forward, dGELU and the bias gradient's column
// sums backward) go through float blocks where the CPU converts float16 in hardware, and read the
// rows in place otherwise (kernels/cpu/matmul.cpp): both must give the same bits. Hidden widths of
// 1104 (a block of 1024 and a tail) and of 40.
TEST_CASE("gelu_mlp in float16: the float blocks give the bits of the rows read in place", "[linalg]") {
  const kiln::test::HardwareHalfGuard restore;
  if (!kiln::test::use_hardware_half("the float16 epilogue rows")) return;
  for (int64_t hidden : {int64_t{1104}, int64_t{40}}) {
    INFO("hidden width " << hidden);
    manual_seed(15);
    const Tensor x0 = randn({6, 24}).to(DType::Float16);
    const Tensor w10 = (randn({hidden, 24}) * 0.3).to(DType::Float16), b10 = randn({hidden}).to(DType::Float16);
    const Tensor w20 = (randn({16, hidden}) * 0.05).to(DType::Float16), b20 = randn({16}).to(DType::Float16);
    const Tensor dy = randn({6, 16}).to(DType::Float16);
    const auto run = [&](bool hardware) {
      cpu::set_hardware_half(hardware);
      const Tensor x = x0.clone().set_requires_grad(true);
      const Tensor w1 = w10.clone().set_requires_grad(true), b1 = b10.clone().set_requires_grad(true);
      const Tensor w2 = w20.clone().set_requires_grad(true), b2 = b20.clone().set_requires_grad(true);
      const Tensor y = gelu_mlp(x, w1, b1, w2, b2);
      y.backward(dy);
      return std::vector<Tensor>{y, x.grad(), w1.grad(), b1.grad(), w2.grad(), b2.grad()};
    };
    const std::vector<Tensor> blocks = run(true), in_place = run(false);
    const char* names[] = {"y", "x grad", "w1 grad", "b1 grad", "w2 grad", "b2 grad"};
    for (size_t i = 0; i < blocks.size(); ++i) {
      INFO(names[i]);
      CHECK(kiln::test::bitwise_equal(blocks[i], in_place[i]));
    }
  }
}

TEST_CASE("linear without a bias: the weight's gradient comes in the weight's layout", "[linalg]") {
  // GPT's lm_head shares its weight with the token embedding. Through matmul(x, w.t()) the weight's
  // gradient arrived as w^T's gradient transposed, and the sum with the embedding's gradient (and
  // under autocast the cast before it) ran on strided tensors.
  manual_seed(15);
  Tensor x = randn({2, 5, 7}).set_requires_grad(true), w = randn({3, 7}).set_requires_grad(true);
  Tensor seen;
  w.register_hook([&seen](const Tensor& g) {
    seen = g;
    return Tensor();
  });
  Tensor dy = randn({2, 5, 3});
  linear(x, w).backward(dy);
  REQUIRE(seen.defined());
  CHECK(seen.is_contiguous());
  Tensor x2 = x.detach().set_requires_grad(true), w2 = w.detach().set_requires_grad(true);
  matmul(x2, w2.t()).backward(dy);
  CHECK(worst_ratio(w.grad(), w2.grad(), 1e-5, 1e-5) <= 1.0);
  CHECK(worst_ratio(x.grad(), x2.grad(), 1e-5, 1e-5) <= 1.0);
  CHECK(linear(x, w).to_vector<float>() == matmul(x, w.t()).to_vector<float>());
  // Tied with an embedding, as GPT's lm_head: one weight, both gradients summed.
  Tensor table = randn({3, 7}).set_requires_grad(true);
  const Tensor ids = tensor(std::vector<int64_t>{2, 0, 2}, {3}), dz = randn({3, 3});
  sum(linear(embedding(table, ids), table) * dz).backward();
  Tensor t2 = table.detach().set_requires_grad(true);
  sum(matmul(embedding(t2, ids), t2.t()) * dz).backward();
  CHECK(worst_ratio(table.grad(), t2.grad(), 1e-5, 1e-5) <= 1.0);
  // Degenerate shapes still go through matmul: no features in or out, or no rows.
  CHECK(linear(zeros({2, 0}), zeros({3, 0})).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(linear(zeros({0, 4}), zeros({3, 4})).sizes() == Shape{0, 3});
  CHECK(linear(zeros({2, 4}), zeros({0, 4})).sizes() == Shape{2, 0});
  // The output is a tensor of its own, not a view: in-place ops on it are fine under autograd.
  Tensor out = linear(randn({2, 7}), w);
  CHECK(!out.is_view());
  out.add_(1.0);
  sum(out).backward();
}

TEST_CASE("OpenBLAS core: kiln asks for AVX2 or AVX-512 kernels where OpenBLAS fell back to older ones",
          "[linalg]") {
  // The rule, on cores OpenBLAS names.
  const cpu::BlasCpu avx512{true, true}, avx2{true, false}, sse{false, false};
  CHECK(std::string(cpu::blas_core_upgrade("Prescott", avx512)) == "SkylakeX");
  CHECK(std::string(cpu::blas_core_upgrade("Prescott", avx2)) == "Haswell");
  CHECK(std::string(cpu::blas_core_upgrade("Nehalem", avx2)) == "Haswell");
  CHECK(std::string(cpu::blas_core_upgrade("SandyBridge", avx512)) == "SkylakeX");
  CHECK(cpu::blas_core_upgrade("Prescott", sse) == nullptr);  // what it has is all the CPU has
  for (const char* kept : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"}) {
    INFO(kept);
    CHECK(cpu::blas_core_upgrade(kept, avx512) == nullptr);
  }
  CHECK(cpu::blas_core_upgrade("", avx512) == nullptr);  // no name, nothing to judge
  // The loaded OpenBLAS: on this CPU it runs a core that uses what the CPU has, or the user's.
  if (!cpu::blas_available()) {
    WARN("OpenBLAS not loaded: " << cpu::blas_description());
    CHECK(cpu::blas_core().empty());
    return;
  }
  INFO(cpu::blas_description());
  CHECK(!cpu::blas_core().empty());
  CHECK(cpu::blas_core_matches_cpu());
}

TEST_CASE("gemm_cpu: OpenBLAS on tall and wide products, transposed and padded, matches float64", "[linalg]") {
  if (!cpu::blas_available()) {
    WARN("OpenBLAS not loaded: " << cpu::blas_description());
    CHECK(cpu::gemm_backend() == cpu::GemmBackend::Kiln);  // the fallback is what runs
    return;
  }
  cpu::GemmBackendScope use(cpu::GemmBackend::Blas);
  ThreadCountGuard threads;
  cpu::set_num_threads(2);
  manual_seed(13);
  // Taller than wide and wider than tall, past OpenBLAS's own blocking.
  // Cut into 2 blocks of rows, 2 of columns and a 4 x 4 grid with short last blocks (plan_blas_blocks,
  // checked in its own test).
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{600, 141, 67}, {70, 600, 90}, {1100, 1030, 16}}) {
    for (DType t : {DType::Float32, DType::Float64}) {
      for (int mode = 0; mode < 4; ++mode) {
        const bool ta = mode & 1, tb = mode & 2;
        const int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
        Tensor a = randn({ta ? k : m, lda}).to(t), b = randn({tb ? n : k, ldb}).to(t), c = randn({m, ldc}).to(t);
        INFO(dtype_name(t) << " m=" << m << " n=" << n << " ta=" << ta << " tb=" << tb);
        Tensor out = c.clone();
        gemm(t, ta, tb, m, n, k, 0.75, a.data_ptr(), lda, b.data_ptr(), ldb, -0.5, out.data_ptr(), ldc);
        Reference r = ref_gemm(ta, tb, m, n, k, 0.75, a.to_vector_double(), lda, b.to_vector_double(), ldb, -0.5,
                               c.to_vector_double(), ldc);
        const std::vector<double> ov = out.to_vector_double(), cv = c.to_vector_double();
        const double acc_eps = t == DType::Float64 ? 0x1p-53 : 0x1p-24;
        int64_t bad = 0;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const double ref = r.value[at(i * n + j)];
            const double tol = 2 * (k + 2) * acc_eps * r.scale[at(i * n + j)] + unit_roundoff(t) * std::fabs(ref);
            if (!(std::fabs(ov[at(i * ldc + j)] - ref) <= tol)) ++bad;
          }
          for (int64_t j = n; j < ldc; ++j) {
            if (ov[at(i * ldc + j)] != cv[at(i * ldc + j)]) ++bad;  // the padding is someone else's
          }
        }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("gemm_cpu: k = 4096 stays within float rounding of a float64 reference", "[linalg]") {
  const cpu::GemmBackend backend = GENERATE(from_range(gemm_backends()));
  INFO("backend " << cpu::gemm_backend_name(backend));
  cpu::GemmBackendScope use(backend);
  manual_seed(13);
  const int64_t m = 9, n = 18, k = 4096;  // sixteen float k blocks, thirty-two float64 ones
  for (DType t : {DType::Float32, DType::Float64}) {
    INFO(dtype_name(t));
    Tensor a = randn({m, k}).to(t), b = randn({k, n}).to(t);
    Tensor out = matmul(a, b);
    Reference r = ref_gemm(false, false, m, n, k, 1.0, a.to_vector_double(), k, b.to_vector_double(), n, 0.0, {}, n);
    std::vector<double> ov = out.to_vector_double();
    // A sequential sum of k terms errs by at most ~k*u*sum|a*b|, and by far less for random signs;
    // 4*sqrt(k)*u*sum|a*b| (~0.04 in float32 here) leaves a wide margin for a correct sum yet is
    // hundreds of times below what a k block dropped or added twice costs (~sqrt(256) = 16).
    const double u = t == DType::Float64 ? 0x1p-53 : 0x1p-24;
    double worst = 0;
    for (size_t i = 0; i < ov.size(); ++i) {
      worst = test::worse(worst, std::fabs(ov[i] - r.value[i]) / (4 * std::sqrt(double(k)) * u * r.scale[i]));
    }
    CHECK(worst <= 1.0);
  }
}

TEST_CASE("gemm_cpu: batch offsets may repeat (a broadcast operand is never copied)", "[linalg]") {
  const cpu::GemmBackend backend = GENERATE(from_range(gemm_backends()));
  INFO("backend " << cpu::gemm_backend_name(backend));
  cpu::GemmBackendScope use(backend);
  manual_seed(14);
  // Few large products (each split across threads) and many small ones (split by batch).
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> cases{{100, 90, 300, 3}, {20, 24, 40, 40}};
  for (auto [m, n, k, count] : cases) {
    INFO("m=" << m << " n=" << n << " k=" << k << " count=" << count);
    Tensor a = randn({2, m, k}), b = randn({k, n}), c = empty({count, m, n});
    std::vector<int64_t> ao, bo, co;
    for (int64_t i = 0; i < count; ++i) {
      ao.push_back((i % 3 == 1 ? 1 : 0) * m * k);  // batches 0, 1, 0, 0, 1, ...: A repeats
      bo.push_back(0);                             // B shared by all
      co.push_back(i * m * n);
    }
    GemmBatch batch{count, ao.data(), bo.data(), co.data()};
    gemm(DType::Float32, false, false, m, n, k, 1.0, a.data_ptr(), k, b.data_ptr(), n, 0.0, c.data_ptr(), n, batch);
    for (int64_t i = 0; i < count; ++i) {
      INFO("batch " << i);
      Tensor expect = matmul(a.select(0, i % 3 == 1 ? 1 : 0), b);
      CHECK(same_bits(c.select(0, i).contiguous(), expect));
    }
  }
}

// float16 and bfloat16 products on OpenBLAS (kernels/cpu/matmul.cpp): each is the float32 product of
// its operands widened (exact), rounded to the dtype once, so its bits are those of that float32
// product made by hand, whatever the layout: transposes, padded and broadcast (0) leading
// dimensions, a batch with a shared A, a repeated B and its own C, beta 0 over NaN and beta != 0;
// a batch too large for the scratch, which goes through in parts; and products too large for it,
// which go through in tiles of C (rows only, and columns too when op(B) is large).
TEST_CASE("gemm_cpu: float16 and bfloat16 products on OpenBLAS are the float32 product of the widened operands",
          "[linalg]") {
  if (!cpu::blas_available()) {
    WARN("OpenBLAS not loaded: " << cpu::blas_description());
    CHECK(cpu::gemm_backend() == cpu::GemmBackend::Kiln);  // half products run on kiln's GEMM
    return;
  }
  cpu::GemmBackendScope use(cpu::GemmBackend::Blas);
  ThreadCountGuard threads;
  manual_seed(15);
  struct Case {
    int64_t m, n, k, count, lda_pad, ldb_pad, ldc_pad;
    bool a_broadcast;  // A's rows all one (lda = 0), as an expanded view has
  };
  // The scratch holds 2^24 floats: the fourth case's batch needs 2100 x (64 x 64 B + 64 x 64 C),
  // the fifth's C 4200 x 4096, the sixth's op(B) 4096 x 4200.
  const std::vector<Case> cases{{19, 21, 37, 1, 3, 5, 2, false},     {33, 17, 70, 5, 0, 1, 0, false},
                                {8, 12, 16, 3, 0, 0, 1, true},       {64, 64, 64, 2100, 0, 0, 0, false},
                                {4200, 4096, 24, 1, 0, 0, 3, false}, {40, 4200, 4096, 1, 2, 0, 0, false}};
  for (DType t : {DType::BFloat16, DType::Float16}) {
    for (const Case& cs : cases) {
      const bool large = cs.count > 1000 || cs.m * cs.n * cs.k > 100'000'000;
      if (large && t == DType::Float16) continue;  // the parts and tiles once are enough
      for (int mode = 0; mode < 4; ++mode) {
        const bool ta = mode & 1, tb = mode & 2;
        if (cs.count > 1000 && mode != 1) continue;
        if (large && cs.count == 1 && mode != 0 && mode != 3) continue;  // each operand's two block forms
        const int64_t m = cs.m, n = cs.n, k = cs.k, count = cs.count;
        const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
        const int64_t lda = cs.a_broadcast ? 0 : a_cols + cs.lda_pad, ldb = b_cols + cs.ldb_pad, ldc = n + cs.ldc_pad;
        // A: one matrix for the batch; B: two, used alternately; C: one per product.
        Tensor a = (randn({cs.a_broadcast ? 1 : a_rows, std::max<int64_t>(lda, a_cols)}) * 2.0).to(t);
        Tensor b = (randn({std::min<int64_t>(count, 2), b_rows, ldb}) * 2.0).to(t);
        Tensor c0 = randn({count, m, ldc}).to(t);
        std::vector<int64_t> bo, co;
        for (int64_t i = 0; i < count; ++i) {
          bo.push_back(i % 2 * b_rows * ldb);
          co.push_back(i * m * ldc);
        }
        const GemmBatch batch{count, nullptr, bo.data(), co.data()};
        for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{-1.5, 0.5}}) {
          if (cs.count > 1000 && beta != 0.0) continue;
          if (large && cs.count == 1 && beta != 0.0 && cs.k > 1000) continue;
          INFO(dtype_name(t) << " m=" << m << " n=" << n << " k=" << k << " count=" << count << " ta=" << ta
                             << " tb=" << tb << " lda=" << lda << " alpha=" << alpha << " beta=" << beta);
          Tensor got = c0.clone();
          if (beta == 0.0) got.fill_(std::numeric_limits<double>::quiet_NaN());
          cpu::set_num_threads(2);
          gemm(t, ta, tb, m, n, k, alpha, a.data_ptr(), lda, b.data_ptr(), ldb, beta, got.data_ptr(), ldc, batch);
          // The same products one at a time in float32, from the operands widened by hand.
          // (A broadcast view is made dense first: OpenBLAS takes no leading dimension of 0.)
          const Tensor a32 = cs.a_broadcast ? a.to(DType::Float32).expand({a_rows, a_cols}).contiguous()
                                            : a.to(DType::Float32);
          const Tensor b32 = b.to(DType::Float32);
          Tensor want = c0.to(DType::Float32);
          for (int64_t i = 0; i < count; ++i) {
            gemm(DType::Float32, ta, tb, m, n, k, alpha, a32.data_ptr(), cs.a_broadcast ? a_cols : lda,
                 static_cast<const float*>(b32.data_ptr()) + bo[at(i)], ldb, beta,
                 static_cast<float*>(want.data_ptr()) + co[at(i)], ldc);
          }
          // The padding columns of C: NaN where beta was 0 (untouched), else C's own values.
          if (beta == 0.0 && cs.ldc_pad > 0) {
            want.narrow(2, n, cs.ldc_pad).fill_(std::numeric_limits<double>::quiet_NaN());
          }
          const Tensor want_t = want.to(t);
          const size_t bytes = static_cast<size_t>(got.numel()) * got.element_size();
          CHECK(std::memcmp(got.data_ptr(), want_t.data_ptr(), bytes) == 0);
          // And on one thread, the same bits.
          Tensor again = beta == 0.0 ? full_like(c0, std::numeric_limits<double>::quiet_NaN()) : c0.clone();
          cpu::set_num_threads(1);
          gemm(t, ta, tb, m, n, k, alpha, a.data_ptr(), lda, b.data_ptr(), ldb, beta, again.data_ptr(), ldc, batch);
          CHECK(std::memcmp(got.data_ptr(), again.data_ptr(), bytes) == 0);
        }
      }
    }
  }
}

TEST_CASE("gemm_cpu and matmul: empty dims", "[linalg]") {
  const cpu::GemmBackend backend = GENERATE(from_range(gemm_backends()));
  INFO("backend " << cpu::gemm_backend_name(backend));
  cpu::GemmBackendScope use(backend);
  float sentinel[4] = {7, 7, 7, 7};
  const float a[4] = {1, 2, 3, 4};
  // m = 0 or n = 0: nothing to write; C is not touched.
  gemm(DType::Float32, false, false, 0, 2, 2, 1.0, a, 2, a, 2, 0.0, sentinel, 2);
  gemm(DType::Float32, false, false, 2, 0, 2, 1.0, a, 2, a, 2, 0.0, sentinel, 2);
  for (float v : sentinel) CHECK(v == 7.0f);
  // k = 0: an empty sum, so C = beta * C (zeros when beta == 0, whatever C held).
  float c[4] = {std::numeric_limits<float>::quiet_NaN(), 1, 2, 3};
  gemm(DType::Float32, false, false, 2, 2, 0, 1.0, a, 1, a, 2, 0.0, c, 2);
  for (float v : c) CHECK(v == 0.0f);
  // beta -0 is zero too: +0 over everything, as the CUDA twin writes (OpenBLAS alone would write -0).
  float cz[4] = {std::numeric_limits<float>::quiet_NaN(), -2, std::numeric_limits<float>::infinity(), -0.0f};
  gemm(DType::Float32, false, false, 2, 2, 0, -1.0, a, 1, a, 2, -0.0, cz, 2);
  for (float v : cz) CHECK((v == 0.0f && !std::signbit(v)));
  float c2[4] = {1, 2, 3, 4};
  gemm(DType::Float32, true, true, 2, 2, 0, 1.0, a, 2, a, 1, 2.0, c2, 2);
  CHECK(c2[0] == 2.0f);
  CHECK(c2[3] == 8.0f);
  // Through matmul.
  Tensor z = matmul(zeros({3, 0}), zeros({0, 4}));
  CHECK(z.sizes() == Shape{3, 4});
  for (double v : z.to_vector_double()) CHECK(v == 0.0);
  CHECK(matmul(zeros({0, 5}), zeros({5, 4})).sizes() == Shape{0, 4});
  CHECK(matmul(zeros({2, 0, 5}), zeros({5, 4})).sizes() == Shape{2, 0, 4});
  CHECK(matmul(zeros({3, 5}), zeros({5, 0})).sizes() == Shape{3, 0});
  CHECK(matmul(zeros({0}), zeros({0})).sizes() == Shape{});
  CHECK(matmul(zeros({0}), zeros({0})).item<float>() == 0.0f);
}

TEST_CASE("matmul: gradients of a broadcast batch sum over the broadcast dims", "[linalg]") {
  manual_seed(15);
  Tensor a = randn({2, 1, 3, 4}).set_requires_grad(true);
  Tensor b = randn({5, 4, 2}).set_requires_grad(true);
  Tensor y = matmul(a, b);
  CHECK(y.sizes() == Shape{2, 5, 3, 2});
  y.sum().backward();
  CHECK(a.grad().sizes() == a.sizes());
  CHECK(b.grad().sizes() == b.sizes());
  // d(sum)/da[i, 0, r, p] = sum over the 5 broadcast batches and the 2 columns of b[., p, .].
  std::vector<double> bv = b.to_vector_double(), ga = a.grad().to_vector_double();
  for (int64_t p = 0; p < 4; ++p) {
    double s = 0;
    for (int64_t q = 0; q < 5; ++q)
      for (int64_t j = 0; j < 2; ++j) s += bv[at((q * 4 + p) * 2 + j)];
    CHECK(ga[at(p)] == Approx(s).epsilon(1e-5));
  }
}

TEST_CASE("plan_blas_blocks: blocks tile C exactly, aligned, big enough, at most 64", "[linalg]") {
  for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1, 1}, {64, 64, 16}, {600, 141, 67}, {1100, 1030, 16}, {1024, 1024, 1024}, {4096, 4096, 4096},
           {200704, 32, 9}, {50176, 64, 288}, {1024, 192, 64}, {7, 100000, 3},
           {256, 64, 1024}, {192, 64, 1024}, {65, 64, 1024}}) {
    INFO("m=" << m << " n=" << n << " k=" << k);
    const cpu::BlasBlocks p = cpu::plan_blas_blocks(m, n, k);
    CHECK(p.grid_m == (m + p.mb - 1) / p.mb);
    CHECK(p.grid_n == (n + p.nb - 1) / p.nb);
    CHECK(p.grid_m * p.grid_n <= 64);
    // A side is either whole or cut in multiples of 16, of at least 256, or (a skinny block) at
    // least as long as the other side with at least 8 MFLOP a block.
    auto cut_ok = [](int64_t side, int64_t whole, int64_t other, int64_t depth) {
      return side == whole ||
             (side % 16 == 0 && (side >= 256 || (side >= other && 2.0 * side * other * depth >= 8.0 * 1024 * 1024)));
    };
    CHECK(cut_ok(p.mb, m, p.nb, k));
    CHECK(cut_ok(p.nb, n, p.mb, k));
    // A cut product's blocks hold at least 2 MFLOP (the last row or column of blocks may be short).
    if (p.grid_m * p.grid_n > 1) CHECK(2.0 * p.mb * p.nb * k >= 2.0 * 1024 * 1024);
    const cpu::BlasBlocks again = cpu::plan_blas_blocks(m, n, k);  // the shape alone decides
    CHECK((again.mb == p.mb && again.nb == p.nb));
  }
  // Large products are cut on both sides; small ones not at all. The OpenBLAS accuracy test's shapes
  // cut as it says.
  auto grid = [](int64_t m, int64_t n, int64_t k) {
    const cpu::BlasBlocks p = cpu::plan_blas_blocks(m, n, k);
    return std::pair<int64_t, int64_t>{p.grid_m, p.grid_n};
  };
  CHECK(grid(1024, 1024, 1024) == std::pair<int64_t, int64_t>{4, 4});
  CHECK(grid(64, 64, 16) == std::pair<int64_t, int64_t>{1, 1});
  CHECK(grid(1024, 192, 64) == std::pair<int64_t, int64_t>{4, 1});  // the tiny GPT's QKV projection
  // The tiny GPT's weight gradients (k = B * T = 1024): skinny, cut below 256 rows into square-ish
  // blocks of at least 8 MFLOP; the [64, 64] one (8 MFLOP in all) stays whole.
  CHECK(grid(256, 64, 1024) == std::pair<int64_t, int64_t>{4, 1});
  CHECK(grid(64, 256, 1024) == std::pair<int64_t, int64_t>{1, 4});
  CHECK(grid(192, 64, 1024) == std::pair<int64_t, int64_t>{2, 1});
  CHECK(grid(64, 64, 1024) == std::pair<int64_t, int64_t>{1, 1});
  CHECK(grid(600, 141, 67) == std::pair<int64_t, int64_t>{2, 1});
  CHECK(grid(70, 600, 90) == std::pair<int64_t, int64_t>{1, 2});
  CHECK(grid(1100, 1030, 16) == std::pair<int64_t, int64_t>{4, 4});
}

TEST_CASE("matmul: a batch of rows against a matrix is one product, forward and backward", "[linalg]") {
  // kiln's GEMM (one float sum in k order per element): folded, b's gradient is one sum over all
  // B * T rows; B products added afterwards would round differently.
  cpu::GemmBackendScope kiln_gemm(cpu::GemmBackend::Kiln);
  manual_seed(16);
  Tensor a = randn({4, 33, 24}).set_requires_grad(true);
  Tensor b = randn({24, 10}).set_requires_grad(true);
  Tensor g = randn({4, 33, 10});
  Tensor y = matmul(a, b);
  y.backward(g);
  Tensor a2 = a.detach().reshape({132, 24}), g2 = g.reshape({132, 10});
  CHECK(same_bits(y, matmul(a2, b.detach()).reshape({4, 33, 10})));
  CHECK(same_bits(b.grad(), matmul(a2.t(), g2)));
  CHECK(same_bits(a.grad(), matmul(g2, b.detach().t()).reshape({4, 33, 24})));
  // An a whose rows would need a copy to fold runs as a batch, with the same values.
  Tensor at = randn({4, 24, 33}).transpose(1, 2);
  CHECK(!can_view(at, {132, 24}));
  Tensor yt = matmul(at, b.detach());
  CHECK(yt.sizes() == Shape{4, 33, 10});
  std::vector<double> got = yt.to_vector_double(), want = matmul(at.contiguous(), b.detach()).to_vector_double();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-5));
}
