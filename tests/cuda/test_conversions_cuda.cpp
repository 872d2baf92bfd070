// CUDA-side changes whose CPU halves are tested elsewhere: the 16-bit stores of fills, arange and
// integer casts give the CPU's correctly rounded bits (tests/core/test_dtype.cpp); a NaN stored as
// float16 or bfloat16 keeps its sign as on the CPU; floats past an integer type's range, inf and
// NaN convert by the CPU's rule; topk orders int64 past 2^53 exactly; and the scalar attention
// kernels' shared-memory opt-in holds while another host thread runs a smaller head dim (it used to
// be lowered under it).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;
using kiln::test::require_cuda;

namespace {

const Device kCuda = Device::cuda(0);

std::vector<uint16_t> bits16(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<uint16_t> out(static_cast<size_t>(c.numel()));
  if (!out.empty()) std::memcpy(out.data(), c.data_ptr(), out.size() * sizeof(uint16_t));
  return out;
}

}  // namespace

TEST_CASE("cuda: 16-bit fills, arange and integer casts give the CPU's correctly rounded bits",
          "[cuda][dtype]") {
  require_cuda();
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(dt));
    // Just past a tie of each format (rounded to float32 first, they landed on the tie).
    const double near_tie = dt == DType::Float16 ? 1.0 + 0x1p-11 + 0x1p-40 : 1.0 + 0x1p-8 + 0x1p-40;
    for (double v : {near_tie, -near_tie, 65519.99999, 0x1p-25 + 0x1p-60, 1e300}) {
      INFO("value " << v);
      CHECK(bits16(full({3}, v, TensorOptions(dt, kCuda))) == bits16(full({3}, v, TensorOptions(dt))));
    }
    const int64_t big = (int64_t{1} << 25) + (int64_t{1} << 17) + 1;
    CHECK(bits16(full({2}, big, TensorOptions(dt, kCuda))) == bits16(full({2}, big, TensorOptions(dt))));
    const Tensor a_cpu = arange(near_tie, near_tie + 64.0, 0.25, TensorOptions(dt));
    const Tensor a_gpu = arange(near_tie, near_tie + 64.0, 0.25, TensorOptions(dt, kCuda));
    CHECK(bits16(a_gpu) == bits16(a_cpu));
    std::vector<int64_t> ints;
    for (int64_t k = 0; k < 64; ++k) ints.push_back(big + k * 65537 - (int64_t{1} << 62) * (k % 2));
    const Tensor i_cpu = tensor(ints);
    CHECK(bits16(i_cpu.to(kCuda).to(dt)) == bits16(i_cpu.to(dt)));
  }
}

TEST_CASE("cuda: floats past an integer type's range, inf and NaN convert as on the CPU", "[cuda][dtype]") {
  require_cuda();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DType from : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
    const Tensor x = tensor(std::vector<double>{nan, inf, -inf, 1e19, -1e19, 1e10, 300.7, -1.5, 65504.0}).to(from);
    for (DType to : {DType::Int64, DType::Int32, DType::UInt8}) {
      INFO(dtype_name(from) << " to " << dtype_name(to));
      CHECK(x.to(kCuda).to(to).to(Device::cpu()).to(DType::Int64).to_vector<int64_t>() ==
            x.to(to).to(DType::Int64).to_vector<int64_t>());
    }
  }
}

TEST_CASE("cuda: a NaN stored as float16 or bfloat16 keeps its sign, as on the CPU", "[cuda][dtype]") {
  require_cuda();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = tensor(std::vector<float>{nan, -nan, 1.5f, -0.0f});
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(dt));
    CHECK(bits16(x.to(kCuda).to(dt)) == bits16(x.to(dt)));
  }
}

TEST_CASE("cuda: topk orders int64 values past 2^53 as integers", "[cuda][topk]") {
  require_cuda();
  const int64_t big = int64_t{1} << 62;
  const Tensor x = tensor(std::vector<int64_t>{big + 1, big + 3, big + 2, -big, big + 2});
  const auto [values, indices] = topk(x.to(kCuda), 4);
  CHECK(values.to(Device::cpu()).to_vector<int64_t>() == std::vector<int64_t>{big + 3, big + 2, big + 2, big + 1});
  CHECK(indices.to(Device::cpu()).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 4, 0});
  const auto [low, low_at] = topk(x.to(kCuda), 2, -1, /*largest=*/false);
  CHECK(low_at.to(Device::cpu()).to_vector<int64_t>() == std::vector<int64_t>{3, 0});
}

TEST_CASE("cuda: attention's shared-memory opt-in holds while another thread runs a smaller head dim",
          "[cuda][attention]") {
  require_cuda();
  // float32 takes the scalar kernels, whose dynamic shared memory grows with the head dim: 512 and
  // 256 both need more than the default 48 KB. Each thread runs forward and backward in a loop.
  auto run = [](int64_t head_dim, std::exception_ptr* error) {
    try {
      for (int i = 0; i < 20; ++i) {
        Tensor q = randn({1, 2, 64, head_dim}, TensorOptions(DType::Float32, kCuda)).set_requires_grad(true);
        Tensor k = randn({1, 2, 64, head_dim}, TensorOptions(DType::Float32, kCuda));
        Tensor v = randn({1, 2, 64, head_dim}, TensorOptions(DType::Float32, kCuda));
        sum(scaled_dot_product_attention(q, k, v)).backward();
        cuda::synchronize();
      }
    } catch (...) {
      *error = std::current_exception();
    }
  };
  std::exception_ptr big_error, small_error;
  std::thread big(run, 512, &big_error), small(run, 256, &small_error);
  big.join();
  small.join();
  auto what = [](const std::exception_ptr& e) -> std::string {
    if (!e) return "";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return x.what();
    }
    return "an exception";
  };
  CHECK(what(big_error).empty());
  CHECK(what(small_error).empty());
}
