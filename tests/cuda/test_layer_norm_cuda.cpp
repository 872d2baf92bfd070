// layer_norm's CUDA kernels (kernels/cuda/layer_norm.cu) against the CPU in float64, forward and
// backward, at the widths that pick each kernel: rows kept in registers (RowCache: widths that are
// a multiple of 16 bytes, 16-byte aligned, at most 16384 values; a warp per row up to 1024, a block
// above) and the plain kernels (other widths, a misaligned view, wider rows). The op table's
// layer_norm rows only reach the cached kernels in float32, at width 20.
#include <catch2/catch.hpp>

#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using kiln::test::worst_ratio;

namespace {

enum class Params { Float32, InputDType, None };

}  // namespace

TEST_CASE("layer_norm on CUDA matches the CPU in float64 at widths for each kernel", "[cuda][layer_norm]") {
  REQUIRE(cuda::is_available());
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16, DType::Float16);
  // 8, 24, 1024: a warp per row, cached. 1004: cached in float32 only (not a multiple of 8). 1032,
  // 4096, 16384: a block per row, cached. 16392 and 777: plain.
  const int64_t n = GENERATE(int64_t{8}, int64_t{24}, int64_t{1004}, int64_t{1024}, int64_t{1032}, int64_t{4096},
                             int64_t{16384}, int64_t{16392}, int64_t{777});
  const Params params = GENERATE(Params::Float32, Params::InputDType, Params::None);
  const bool misaligned = GENERATE(false, true);
  INFO(dtype_name(dtype) << " n " << n << " params " << static_cast<int>(params) << (misaligned ? " misaligned" : ""));
  const int64_t rows = 6;
  manual_seed(static_cast<uint64_t>(n * 13 + static_cast<int64_t>(params)));
  // Rounded to the dtype first: the CPU reference sees exactly the GPU's inputs. An offset mean, so
  // that a variance that loses the spread to cancellation fails.
  const Tensor x = (randn({rows, n}) * 2.0 + 3.0).to(dtype);
  const Tensor dout = randn({rows, n}).to(dtype);
  const DType pdt = params == Params::InputDType ? dtype : DType::Float32;
  const Tensor w = (randn({n}) * 0.5 + 1.0).to(pdt), b = randn({n}).to(pdt);

  auto run = [&](Device d, DType t) {
    Tensor xd = x.to(t).to(d);
    if (misaligned) {
      // One element into a larger buffer: contiguous rows whose start is not 16-byte aligned.
      Tensor buf = zeros({rows * n + 1}, TensorOptions(t, d));
      buf.narrow(0, 1, rows * n).copy_(xd.reshape({rows * n}));
      xd = buf.narrow(0, 1, rows * n).view({rows, n});
    }
    xd = xd.detach().set_requires_grad(true);
    const DType pt = t == DType::Float64 ? t : pdt;
    Tensor wd = w.to(pt).to(d).set_requires_grad(true), bd = b.to(pt).to(d).set_requires_grad(true);
    Tensor out = params == Params::None ? layer_norm(xd, {n}) : layer_norm(xd, {n}, wd, bd);
    out.backward(dout.to(t).to(d));
    std::vector<Tensor> r{out.detach(), xd.grad()};
    if (params != Params::None) {
      r.push_back(wd.grad());
      r.push_back(bd.grad());
    }
    return r;
  };
  const std::vector<Tensor> gpu = run(Device::cuda(), dtype);
  const std::vector<Tensor> ref = run(Device::cpu(), DType::Float64);
  // One rounding of each output to the dtype, after float math; float32 leaves room for the
  // GPU's other order of summation over up to 16392 values.
  const double tol = dtype == DType::BFloat16 ? 2e-2 : dtype == DType::Float16 ? 3e-3 : 1e-4;
  const char* names[] = {"out", "dx", "dweight", "dbias"};
  REQUIRE(gpu.size() == ref.size());
  for (size_t i = 0; i < gpu.size(); ++i) {
    INFO(names[i]);
    CHECK(gpu[i].dtype() == (i < 2 ? dtype : pdt));
    const double t = i == 0 ? tol : 4 * tol;
    CHECK(worst_ratio(gpu[i], ref[i], t, t) <= 1.0);
  }
}
