// The CUDA kernels that make tensors without reading float inputs, their real source, run on the
// CPU through the emulator of CUDA's threads (kernels/simt/simt.h) and launched by their own launch
// functions, as on a GPU: the random fills (kernels/cuda/random.cuh), arange
// (kernels/cuda/factory.cuh) and tril/triu (kernels/cuda/triangle.cuh). Each output is compared
// bit for bit with its CPU twin's: the same logical index must read the same Philox words, take
// the same rounding of the affine maps (and, on the host, the same log and cos), and land at the
// same strided offset. The outputs are dense, transposed and permuted views of guarded storage, in
// every dtype a kernel writes; each case runs in the grid the launch asks for and in a grid capped
// at 3 blocks, so that blocks loop.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "core/ops/helpers.h"
#include "kernels/cuda/factory.cuh"
#include "kernels/cuda/random.cuh"
#include "kernels/cuda/triangle.cuh"
#include "kernels/factory.h"
#include "kernels/random.h"
#include "kernels/simt/simt.h"
#include "kernels/triangle.h"
#include "tests/kernels/guarded.h"

using namespace kiln;
using namespace kiln::test;

namespace {

constexpr PhiloxState kPhilox{0x5eedULL, 12, nullptr};

// Output views: dense [n], dense [a, b], transposed [b, a] and a permuted 3-d view.
std::vector<std::pair<std::string, Tensor>> outputs(DType dtype) {
  const TensorOptions o(dtype);
  return {{"[1]", empty({1}, o)},
          {"[1001]", empty({1001}, o)},
          {"[19, 37]", empty({19, 37}, o)},
          {"[37, 19] transposed", empty({19, 37}, o).t()},
          {"[4, 5, 6] permuted", empty({6, 4, 5}, o).permute({1, 2, 0})}};
}

}  // namespace

TEST_CASE("emulated: the random fills' CUDA kernel draws the CPU's values, bit for bit", "[simt][random]") {
  namespace rd = kiln::random_device;
  // Uniform and normal take a and b; randint [a, b) as int64 bounds.
  const auto fill = [](RandomDist dist, double a, double b, PhiloxState ph = kPhilox) {
    RandomParams p{a, b, static_cast<int64_t>(a),
                   static_cast<uint64_t>(static_cast<int64_t>(b) - static_cast<int64_t>(a))};
    return std::pair{
        [=](const StridedArg& arg) { random_cpu(arg, dist, p, ph, KernelContext{}); },
        [=](const StridedArg& arg, const EmulatedLaunch& launch) { rd::random_launch(arg, dist, p, ph, launch); }};
  };
  SECTION("uniform and normal in every float dtype, any strides") {
    for (const DType dtype : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
      for (const auto& [name, out] : outputs(dtype)) {
        const std::string what = std::string(dtype_name(dtype)) + " " + name;
        const auto [cpu_u, emu_u] = fill(RandomDist::Uniform, -2.0, 3.0);
        check_storage_bits(what + ", uniform", out, cpu_u, emu_u);
        const auto [cpu_n, emu_n] = fill(RandomDist::Normal, 0.5, 2.0);
        check_storage_bits(what + ", normal", out, cpu_n, emu_n);
      }
    }
  }
  SECTION("integers in every dtype that holds them, and as floats") {
    for (const DType dtype : {DType::Int64, DType::Int32, DType::UInt8, DType::Float32}) {
      for (const auto& [name, out] : outputs(dtype)) {
        const auto [cpu, emu] = fill(RandomDist::RandInt, 3, 250);
        check_storage_bits(std::string(dtype_name(dtype)) + " " + name + ", randint", out, cpu, emu);
      }
    }
    // A range past 2^32: the 64-bit draw; bounds past 2^53, the whole int64 range.
    const Tensor big = empty({333}, TensorOptions(DType::Int64));
    const auto [cpu, emu] = fill(RandomDist::RandInt, -1e12, 1e15);
    check_storage_bits("int64 [333], randint over 2^32", big, cpu, emu);
    for (const RandomParams& p :
         {RandomParams{0, 0, (int64_t{1} << 60) + 100, 100}, RandomParams{0, 0, INT64_MIN, UINT64_MAX}}) {
      const auto cpu_exact = [=](const StridedArg& arg) {
        random_cpu(arg, RandomDist::RandInt, p, kPhilox, KernelContext{});
      };
      const auto emu_exact = [=](const StridedArg& arg, const EmulatedLaunch& launch) {
        rd::random_launch(arg, RandomDist::RandInt, p, kPhilox, launch);
      };
      check_storage_bits("int64 [333], randint with exact int64 bounds", big, cpu_exact, emu_exact);
    }
  }
  SECTION("a captured graph's Philox base is read when the kernel runs") {
    uint64_t base[2] = {0xbeefULL, 44};
    for (const RandomDist dist : {RandomDist::Uniform, RandomDist::Normal}) {
      const auto [cpu, emu] = fill(dist, 0.0, 1.0, PhiloxState{0, 3, base});
      check_storage_bits("float32 [1001], base", empty({1001}), cpu, emu);
    }
    // And the draws depend on it: another base, other values.
    Tensor a = empty({64}), b = empty({64});
    random_cpu(ops::make_arg("test", a), RandomDist::Uniform, RandomParams{}, PhiloxState{0, 3, base}, KernelContext{});
    base[1] = 45;
    random_cpu(ops::make_arg("test", b), RandomDist::Uniform, RandomParams{}, PhiloxState{0, 3, base}, KernelContext{});
    CHECK_FALSE(same_bits(a, b));
  }
  SECTION("the values are draws: in range, and not all alike") {
    const Tensor u = empty({1001});
    random_cpu(ops::make_arg("test", u), RandomDist::Uniform, RandomParams{-2.0, 3.0}, kPhilox, KernelContext{});
    const float lo = kiln::min(u).item<float>(), hi = kiln::max(u).item<float>();
    CHECK(lo >= -2.0f);
    CHECK(hi < 3.0f);
    CHECK(hi - lo > 4.0f);
  }
  SECTION("philox_base_store writes the seed and offset a replay reads") {
    Guarded<uint64_t> base(2);
    std::vector<const void*> kernels;
    rd::philox_base_store_launch(base.data(), 0x1234ULL, 99, EmulatedLaunch{simt::Schedule::Lowest, ~0u, &kernels});
    CHECK(kernels.size() == 1);
    CHECK(base.data()[0] == 0x1234ULL);
    CHECK(base.data()[1] == 99);
    CHECK(base.bands_intact());
  }
}

TEST_CASE("emulated: arange's CUDA kernels give the CPU's sequence, bit for bit", "[simt][arange]") {
  namespace fd = kiln::factory_device;
  const auto check = [](const std::string& what, const Tensor& out, double start, double step) {
    check_storage_bits(
        what, out, [&](const StridedArg& arg) { arange_cpu(arg, start, step, KernelContext{}); },
        [&](const StridedArg& arg, const EmulatedLaunch& launch) { fd::arange_launch(arg, start, step, launch); });
  };
  for (const DType dtype : {DType::Int64, DType::Int32, DType::UInt8, DType::Float32, DType::Float16,
                            DType::BFloat16, DType::Float64}) {
    for (const auto& [name, out] : outputs(dtype)) {
      const std::string what = std::string(dtype_name(dtype)) + " " + name;
      check(what + ", from 0 by 1", out, 0, 1);
      check(what + ", from 7 by -3", out, 7, -3);
      if (!is_integral(dtype, true)) check(what + ", from -1.25 by 0.1", out, -1.25, 0.1);
    }
  }
  // The float kernel rounds each operation once, without FMA, as the CPU does: over a long run
  // of fractional steps, a fused multiply-add would round some elements differently.
  check("float64 [4099], from 0.3 by 0.1", empty({4099}, TensorOptions(DType::Float64)), 0.3, 0.1);
}

TEST_CASE("emulated: tril's and triu's CUDA kernel keeps the CPU's elements, bit for bit", "[simt][triangle]") {
  namespace td = kiln::triangle_device;
  const auto check = [](const std::string& what, const Tensor& out, const Tensor& in, int64_t k, bool upper) {
    const StridedArg in_arg = ops::make_arg("test", in);
    check_storage_bits(
        what + (upper ? ", triu " : ", tril ") + std::to_string(k), out,
        [&](const StridedArg& arg) { triangle_cpu(arg, in_arg, k, upper, KernelContext{}); },
        [&](const StridedArg& arg, const EmulatedLaunch& launch) {
          td::triangle_launch(arg, in_arg, k, upper, launch);
        });
  };
  manual_seed(3);
  // One dtype of each element size: 1, 2, 4 and 8 bytes.
  for (const DType dtype : {DType::UInt8, DType::Float16, DType::Float32, DType::Int64}) {
    const Tensor x = (rand({3, 19, 23}) * 200).to(dtype);  // from 0 to 200: exact in uint8
    const std::string d = dtype_name(dtype);
    for (const int64_t k : {int64_t{-30}, int64_t{-2}, int64_t{0}, int64_t{1}, int64_t{5}, int64_t{30}}) {
      for (const bool upper : {false, true}) {
        check(d + " [3, 19, 23]", empty_like(x), x, k, upper);
        check(d + " transposed in", empty({3, 23, 19}, TensorOptions(dtype)), x.transpose(1, 2), k, upper);
        check(d + " transposed out", empty({3, 23, 19}, TensorOptions(dtype)).transpose(1, 2), x, k, upper);
      }
    }
  }
  // A bigger matrix: more than a block's elements per row band.
  const Tensor big = randn({130, 70});
  check("float32 [130, 70]", empty_like(big), big, 3, false);
  check("float32 [130, 70]", empty_like(big), big, -3, true);
  SECTION("bad operands are refused by name, before any launch") {
    const Tensor v = randn({5});
    const Tensor m = randn({4, 4});
    const Tensor m16 = empty({4, 4}, TensorOptions(DType::Float16));
    std::vector<const void*> kernels;
    const EmulatedLaunch launch{simt::Schedule::Lowest, ~0u, &kernels};
    CHECK_THROWS_AS(td::triangle_launch(ops::make_arg("test", v), ops::make_arg("test", v), 0, false, launch),
                    ShapeError);
    CHECK_THROWS_WITH(td::triangle_launch(ops::make_arg("test", v), ops::make_arg("test", v), 0, true, launch),
                      "triu: expects at least 2 dims");
    CHECK_THROWS_WITH(td::triangle_launch(ops::make_arg("test", m16), ops::make_arg("test", m), 0, false, launch),
                      "tril: input float32 and output float16 differ");
    CHECK(kernels.empty());
  }
}
