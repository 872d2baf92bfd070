// The TF32 switches (cuda::math_switches()) reach the libraries and change the math: with
// allow_tf32_matmul a float32 matmul runs under CUBLAS_COMPUTE_32F_FAST_TF32 and its error against a
// float64 reference grows to TF32's, without it the compute type is CUBLAS_COMPUTE_32F and the
// error is float32's; allow_tf32_cudnn does the same for conv2d through cuDNN's math type
// (CUDNN_TENSOR_OP_MATH vs CUDNN_FMA_MATH). The compute types are read through the kernels'
// debugging hooks (last_gemm_compute_cuda, last_conv_math_cuda).
//
// The error measure is componentwise: |c - ref| / sum_k |a_ik| |b_kj|, the quantity rounding-error
// bounds are stated in. Float32 with 576 or fewer terms stays below gamma_k = k 2^-24 < 4e-5 in the
// worst case and around 1e-7 in practice; TF32 rounds each input to 10 mantissa bits, which alone
// gives products errors of up to 2 * 2^-10 (truncation) and typically makes the measure ~1e-5.
#include <catch2/catch.hpp>

#include <cublasLt.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "kernels/conv.h"
#include "kernels/matmul.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;
using kiln::test::require_cuda;

namespace {

const Device kCuda = Device::cuda(0);

struct SwitchesGuard {
  cuda::MathSwitches saved = cuda::math_switches();
  ~SwitchesGuard() { cuda::math_switches() = saved; }
};

// Strict float32 stays under this (10x above what it reaches on these sizes, far below TF32's).
constexpr double kStrictFloat32 = 3e-6;
// TF32's worst case: both inputs truncated to 10 mantissa bits (2 * 2^-10) plus float32 accumulation.
constexpr double kTf32Bound = 2.0 * 0.0009765625 + 4e-5;

// max over elements of |got - ref| / scale (scale: sum_k |a| |b| for that element), on the CPU.
double componentwise_error(const Tensor& got, const Tensor& ref, const Tensor& scale) {
  const std::vector<double> g = got.to_vector_double(), r = ref.to_vector_double(), s = scale.to_vector_double();
  REQUIRE(g.size() == r.size());
  REQUIRE(g.size() == s.size());
  double worst = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    REQUIRE(std::isfinite(g[i]));
    worst = std::max(worst, std::abs(g[i] - r[i]) / std::max(s[i], 1e-30));
  }
  return worst;
}

}  // namespace

TEST_CASE("tf32: allow_tf32_matmul switches cuBLASLt's compute type and the accuracy of a 512x512 matmul",
          "[cuda][tf32]") {
  require_cuda();
  SwitchesGuard guard;
  manual_seed(41);
  const Tensor a = randn({512, 512}), b = randn({512, 512});
  const Tensor a64 = a.to(DType::Float64), b64 = b.to(DType::Float64);
  const Tensor ref = matmul(a64, b64);
  const Tensor scale = matmul(a64.abs(), b64.abs());
  const Tensor ag = a.to(kCuda), bg = b.to(kCuda);

  cuda::math_switches().allow_tf32_matmul = false;
  const Tensor strict = matmul(ag, bg);
  const GemmComputeRecord strict_rec = last_gemm_compute_cuda();
  const double strict_err = componentwise_error(strict, ref, scale);

  cuda::math_switches().allow_tf32_matmul = true;
  const Tensor fast = matmul(ag, bg);
  const GemmComputeRecord fast_rec = last_gemm_compute_cuda();
  const double fast_err = componentwise_error(fast, ref, scale);

  INFO("componentwise error: strict float32 " << strict_err << ", tf32 " << fast_err);
  CHECK(strict_rec.compute == GemmComputeType::Float32);
  CHECK(strict_rec.cublas_compute_type == static_cast<int>(CUBLAS_COMPUTE_32F));
  CHECK(strict_rec.dtype == DType::Float32);
  CHECK(fast_rec.compute == GemmComputeType::Float32FastTF32);
  CHECK(fast_rec.cublas_compute_type == static_cast<int>(CUBLAS_COMPUTE_32F_FAST_TF32));
  CHECK(strict_err < kStrictFloat32);
  CHECK(fast_err > kStrictFloat32);       // the inputs really were rounded to TF32
  CHECK(fast_err > 10.0 * strict_err);
  CHECK(fast_err < kTf32Bound);           // and nothing worse than that happened

  // Other dtypes never take the TF32 compute type, whatever the switch says.
  const Tensor h = matmul(ag.to(DType::BFloat16), bg.to(DType::BFloat16));
  (void)h;
  CHECK(last_gemm_compute_cuda().compute == GemmComputeType::Float32);
  CHECK(last_gemm_compute_cuda().dtype == DType::BFloat16);

  // Switched off again, the next matmul is strict again: the flag is read at each call.
  cuda::math_switches().allow_tf32_matmul = false;
  const Tensor again = matmul(ag, bg);
  CHECK(last_gemm_compute_cuda().compute == GemmComputeType::Float32);
  CHECK(componentwise_error(again, ref, scale) < kStrictFloat32);
}

TEST_CASE("tf32: FullFloat32MatmulGuard keeps float32 products strict under allow_tf32_matmul, and the FFT with it",
          "[cuda][tf32][fft]") {
  require_cuda();
  SwitchesGuard guard;
  cuda::math_switches().allow_tf32_matmul = true;
  manual_seed(43);
  const Tensor a = randn({256, 256}), b = randn({256, 256});
  const Tensor ag = a.to(kCuda), bg = b.to(kCuda);
  {
    FullFloat32MatmulGuard full;
    { FullFloat32MatmulGuard nested; }
    (void)matmul(ag, bg);
    CHECK(last_gemm_compute_cuda().compute == GemmComputeType::Float32);  // the nested exit kept it
  }
  (void)matmul(ag, bg);
  CHECK(last_gemm_compute_cuda().compute == GemmComputeType::Float32FastTF32);  // restored on exit

  // A float32 transform on the GPU keeps float32's accuracy with TF32 on: its products (four-step
  // 1024 = 32 x 32, Bluestein 1021) run under the guard. TF32 would put the error near 1e-3.
  for (int64_t n : {1024, 1021}) {
    const Tensor z = randn({8, n, 2});
    const Tensor ref = fft(z.to(DType::Float64));
    const Tensor got = fft(z.to(kCuda)).to(Device::cpu()).to(DType::Float64);
    CHECK(last_gemm_compute_cuda().compute == GemmComputeType::Float32);
    const double err = max(abs(got - ref)).item<double>() / max(abs(ref)).item<double>();
    INFO("n " << n << ": max error over max |X| " << err);
    CHECK(err < 1e-5);
  }
}

TEST_CASE("tf32: allow_tf32_cudnn switches cuDNN's math type and the accuracy of conv2d", "[cuda][tf32]") {
  require_cuda();
  SwitchesGuard guard;
  cuda::math_switches().cudnn_benchmark = false;
  manual_seed(42);
  // 64 channels x 3x3 taps: 576 products per output, the depth of a ResNet stage's convolution.
  const Tensor x = randn({4, 64, 16, 16}), w = randn({64, 64, 3, 3});
  const Tensor x64 = x.to(DType::Float64), w64 = w.to(DType::Float64);
  const Tensor ref = conv2d(x64, w64, Tensor(), {1, 1}, {1, 1});
  const Tensor scale = conv2d(x64.abs(), w64.abs(), Tensor(), {1, 1}, {1, 1});
  const Tensor xg = x.to(kCuda), wg = w.to(kCuda);

  cuda::math_switches().allow_tf32_cudnn = false;
  const Tensor strict = conv2d(xg, wg, Tensor(), {1, 1}, {1, 1});
  const ConvMathRecord strict_rec = last_conv_math_cuda();
  const double strict_err = componentwise_error(strict, ref, scale);

  cuda::math_switches().allow_tf32_cudnn = true;
  const Tensor fast = conv2d(xg, wg, Tensor(), {1, 1}, {1, 1});
  const ConvMathRecord fast_rec = last_conv_math_cuda();
  const double fast_err = componentwise_error(fast, ref, scale);

  INFO("componentwise error: strict float32 " << strict_err << ", tf32 allowed " << fast_err << "; cuDNN math "
                                               << fast_rec.cudnn_math_type << ", algorithm " << fast_rec.algo);
  CHECK(strict_rec.pass == ConvPass::Forward);
  CHECK(strict_rec.requested == ConvMathType::Fma);
  CHECK(strict_rec.used == ConvMathType::Fma);
  CHECK(strict_rec.cudnn_math_type == static_cast<int>(CUDNN_FMA_MATH));
  CHECK(strict_err < kStrictFloat32);
  CHECK(fast_rec.requested == ConvMathType::TensorOp);
  // Under tensor-op math an algorithm without tensor cores runs with the default math type; with
  // tensor cores it computes in TF32, and the error shows it.
  CHECK((fast_rec.used == ConvMathType::TensorOp || fast_rec.used == ConvMathType::Default));
  CHECK(fast_err < kTf32Bound);
  if (fast_rec.used == ConvMathType::TensorOp) {
    CHECK(fast_err > kStrictFloat32);
    CHECK(fast_err > 10.0 * strict_err);
  }

  // The backward passes follow the switch as well.
  cuda::math_switches().allow_tf32_cudnn = false;
  Tensor xr = xg.detach().set_requires_grad(true), wr = wg.detach().set_requires_grad(true);
  conv2d(xr, wr, Tensor(), {1, 1}, {1, 1}).sum().backward();
  const ConvMathRecord back = last_conv_math_cuda();
  CHECK(back.pass == ConvPass::BackwardFilter);  // the data gradient runs first, then the weight's
  CHECK(back.requested == ConvMathType::Fma);
  CHECK(back.used == ConvMathType::Fma);
}
