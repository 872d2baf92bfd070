// matmul's one hand-written CUDA kernel, its real source (kernels/cuda/matmul.cuh), run on the CPU
// through the emulator of CUDA's threads and launched by its own launch function, as on a GPU: a
// product with k == 0 is an empty sum, so each C of the batch becomes beta * C. Its storage is
// compared bit for bit with gemm_cpu's for the same call: every dtype the GEMM takes, beta 0 over
// NaN, infinities and signed zeros, betas that round, C's leading dimension wider than its rows and
// batches whose C offsets do not step evenly. Each case runs in the grid the launch asks for and in
// one capped at 3 blocks, so that blocks loop.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/kiln.h"
#include "kernels/cuda/matmul.cuh"
#include "kernels/matmul.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("emulated: matmul's k = 0 kernel scales C by beta as the CPU does, bit for bit", "[simt][matmul]") {
  namespace md = kiln::matmul_device;
  constexpr int64_t m = 7, n = 5, ldc = 9;
  // Three products whose C blocks start at uneven offsets, with storage between and after them.
  const std::vector<int64_t> c_offsets = {130, 3, 70};
  const int64_t storage = 200;
  for (const DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    manual_seed(7);
    Tensor values = randn({storage}, TensorOptions(DType::Float64)) * 3.0;
    auto* v = static_cast<double*>(values.data_ptr());
    v[3] = std::numeric_limits<double>::quiet_NaN();
    v[4] = std::numeric_limits<double>::infinity();
    v[5] = -std::numeric_limits<double>::infinity();
    v[6] = -0.0;
    v[70] = 1e-40;   // subnormal in float32, zero in float16 and bfloat16 after rounding
    v[71] = 6.0e4;   // beta * this overflows float16 for |beta| > 1.09
    const Tensor original = values.to(dtype);
    for (const double beta : {0.0, 1.0, -2.5, 0.1, -0.0}) {
      for (const int64_t count : {int64_t{1}, int64_t{3}}) {
        INFO(dtype_name(dtype) << ", beta " << beta << ", " << count << " products");
        const GemmBatch batch{count, nullptr, nullptr, c_offsets.data()};
        const float operand = 0.0f;  // never read: k == 0
        Tensor cpu = original.clone();
        // The same call on both twins, the emulated one over a guarded copy of C's storage.
        check_storage_bits(
            "scale_outputs", cpu,
            [&](const StridedArg& arg) {
              gemm_cpu(gemm_args(dtype, false, false, m, n, 0, 1.5, &operand, 1, &operand, n, beta, arg.data, ldc,
                                 batch),
                       KernelContext{});
            },
            [&](const StridedArg& arg, const EmulatedLaunch& launch) {
              md::scale_outputs(dtype, m, n, beta, arg.data, ldc, batch, launch);
            },
            static_cast<size_t>(count), /*keep=*/true);
        // The CPU twin leaves everything outside the m x n blocks alone.
        std::vector<bool> inside(static_cast<size_t>(storage), false);
        for (int64_t p = 0; p < count; ++p) {
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) inside[static_cast<size_t>(c_offsets[p] + i * ldc + j)] = true;
          }
        }
        const size_t es = original.element_size();
        const auto* before = static_cast<const unsigned char*>(original.data_ptr());
        const auto* after = static_cast<const unsigned char*>(cpu.data_ptr());
        for (int64_t e = 0; e < storage; ++e) {
          const bool same = std::memcmp(before + e * es, after + e * es, es) == 0;
          if (!inside[static_cast<size_t>(e)]) CHECK(same);
        }
        if (beta == 0.0) {  // zeros over NaN and infinities too
          const Tensor z = cpu.to(DType::Float64);
          for (int64_t p = 0; p < count; ++p) CHECK(z.data_ptr<double>()[c_offsets[p]] == 0.0);
        }
      }
    }
  }
}
