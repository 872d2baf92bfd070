// dropout's CUDA kernels (kernels/cuda/dropout.cuh), their real source, run on the CPU through the
// emulator of CUDA's threads (kernels/simt/simt.h), planned and launched by dropout_launch as on a
// GPU (merge_dims, then the dense kernel or the strided one), and compared bit for bit with the CPU
// kernel: the same logical indices must pick the same Philox words and keep the same elements, and
// the kept ones must be scaled with the same rounding. The cases reach both kernels: dense runs of
// float32, float16 and bfloat16 with odd lengths (the last pair has one element), p from 0 to 1, and
// strided operands (transposed, broadcast, size-1 dims that merge, mixed dtypes, float64). A case
// with a captured graph's Philox base checks that the kernels read the seed and offset from it.
// Each case runs in the grid dropout.cu asks for and in a grid capped at 3 blocks; outputs lie
// between guard bands.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "core/ops/helpers.h"
#include "kernels/cuda/dropout.cuh"
#include "kernels/dropout.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"

using namespace kiln;
using namespace kiln::test;
namespace dc = kiln::dropout_device;

namespace {

// Runs dropout of `in` into `out` (a view over dense storage of out.numel() elements) on the CPU and
// on the emulator, and compares the storage bytes. `dense`: which kernel dropout.cu must take.
void check(const std::string& what, const Tensor& in, const Tensor& out, double p, bool dense,
           PhiloxState philox = {0x1234abcdULL, 7, nullptr}) {
  const StridedArg out_arg = ops::make_arg("test", out), in_arg = ops::make_arg("test", in);
  CHECK(dc::takes_dense_path(dc::merge_dims(out_arg, in_arg), out.dtype(), in.dtype()) == dense);
  check_storage_bits(
      what + ", p " + std::to_string(p), out,
      [&](const StridedArg& arg) { dropout_cpu(arg, in_arg, p, philox, KernelContext{}); },
      [&](const StridedArg& arg, const EmulatedLaunch& launch) { dc::dropout_launch(arg, in_arg, p, philox, launch); });
  if (p > 0 && p < 1 && out.numel() > 100) {  // the mask is not all or nothing
    const Tensor kept = ne(out.to(DType::Float64), 0.0).to(DType::Float64).mean();
    CHECK(kept.item<double>() > 0);
    CHECK(kept.item<double>() < 1);
  }
}

Tensor inputs(const Shape& shape, DType dtype, uint64_t seed) {
  manual_seed(seed);
  return (randn(shape) + 0.25).to(dtype);  // no element is 0, so a kept one is never 0
}

}  // namespace

TEST_CASE("emulated: dropout's CUDA kernels keep and scale the CPU's elements, bit for bit", "[simt][dropout]") {
  SECTION("dense runs of one float dtype: the typed kernel") {
    for (const DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
      for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{1001}, int64_t{4099}}) {
        for (const double p : {0.0, 0.1, 0.5, 1.0}) {
          const Tensor x = inputs({n}, dtype, static_cast<uint64_t>(n));
          check(std::string(dtype_name(dtype)) + " [" + std::to_string(n) + "]", x, empty_like(x), p, true);
        }
      }
    }
    // Size-1 dims merge away: still one dense run.
    const Tensor x = inputs({3, 1, 333}, DType::BFloat16, 5);
    check("bfloat16 [3, 1, 333]", x, empty_like(x), 0.3, true);
  }
  SECTION("everything else: the strided kernel through the merged shape") {
    // A transposed input into a contiguous output: element i is the output's row-major i.
    const Tensor xt = inputs({19, 37}, DType::Float32, 1).t();
    check("float32 transposed in", xt, empty({37, 19}), 0.25, false);
    // A contiguous input into a transposed output.
    const Tensor x = inputs({37, 19}, DType::Float16, 2);
    check("float16 transposed out", x, empty({19, 37}, TensorOptions(DType::Float16)).t(), 0.5, false);
    // A broadcast input (stride 0).
    const Tensor row = inputs({1, 129}, DType::Float32, 3).expand({7, 129});
    check("float32 broadcast in", row, empty({7, 129}), 0.4, false);
    // Mixed dtypes, dense: computed in float, cast on load and store.
    const Tensor h = inputs({2, 3, 101}, DType::BFloat16, 4);
    check("bfloat16 in, float32 out", h, empty({2, 3, 101}), 0.2, false);
    check("bfloat16 in, float16 out", h, empty({2, 3, 101}, TensorOptions(DType::Float16)), 0.2, false);
    // float64, dense and transposed: computed in double.
    const Tensor d = inputs({33, 17}, DType::Float64, 5);
    check("float64", d, empty_like(d), 0.3, false);
    check("float64 transposed in", d.t(), empty({17, 33}, TensorOptions(DType::Float64)), 0.3, false);
    // A permuted 3-d view with a size-1 dim between: only the dims that keep row-major order merge.
    const Tensor v = inputs({4, 1, 6, 5}, DType::Float32, 6).permute({0, 1, 3, 2});
    check("float32 permuted [4, 1, 5, 6]", v, empty({4, 1, 5, 6}), 0.6, false);
  }
  SECTION("a captured graph's Philox base is read when the kernel runs") {
    uint64_t base[2] = {0xfeedULL, 40};
    const Tensor x = inputs({2001}, DType::Float32, 7);
    check("float32, base", x, empty_like(x), 0.5, true, PhiloxState{0, 3, base});
    const Tensor xt = inputs({41, 23}, DType::Float32, 8).t();
    check("float32 transposed, base", xt, empty({23, 41}), 0.5, false, PhiloxState{0, 3, base});
  }
}

TEST_CASE("emulated: dropout's dim merge keeps row-major order", "[simt][dropout]") {
  // [2, 3, 4] contiguous on both sides merges to one dim; a transposed input keeps two.
  const Tensor a = empty({2, 3, 4});
  dc::Merged m = dc::merge_dims(ops::make_arg("test", a), ops::make_arg("test", a));
  CHECK(m.shape.ndim == 1);
  CHECK(m.shape.sizes[0] == 24);
  const Tensor t = empty({4, 6}).t();
  m = dc::merge_dims(ops::make_arg("test", empty({6, 4})), ops::make_arg("test", t));
  REQUIRE(m.shape.ndim == 2);
  CHECK(m.shape.sizes[0] == 6);
  CHECK(m.shape.sizes[1] == 4);
  CHECK(m.in_strides[0] == 1);
  CHECK(m.in_strides[1] == 6);
  // Size-1 dims are dropped; one element is one dim of size 1.
  m = dc::merge_dims(ops::make_arg("test", empty({1, 5, 1})), ops::make_arg("test", empty({1, 5, 1})));
  CHECK(m.shape.ndim == 1);
  CHECK(m.shape.sizes[0] == 5);
  m = dc::merge_dims(ops::make_arg("test", empty({1, 1})), ops::make_arg("test", empty({1, 1})));
  CHECK(m.shape.ndim == 1);
  CHECK(m.shape.sizes[0] == 1);
  CHECK(dc::keep_scale<float>(1.0) == 0.f);
  CHECK(dc::keep_scale<double>(0.5) == 2.0);
}
