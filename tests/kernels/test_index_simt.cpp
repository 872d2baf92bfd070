// The indexing kernels of kernels/cuda/index.cuh (index_select, gather, scatter_add), their real
// source, run on the CPU through the emulator of CUDA's threads (kernels/simt/simt.h), launched as
// kernels/cuda/index.cu launches them, and compared bit for bit with the CPU kernels: every element
// size (the bits move unchanged, a signaling NaN's payload too), every dim of a 3-d tensor, transposed inputs, indices with
// repeats, 0-d operands, and scatter_add's duplicate targets added in index order, in float and in
// int64. An index out of range must land in the device's error record (op, index, size) with a 0
// in its place (scatter_add: nothing added), the other elements as on the CPU. Each case runs in
// index.cu's grid and in a grid capped at 3 blocks; outputs lie between guard bands.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "core/ops/helpers.h"
#include "kernels/cuda/index.cuh"
#include "kernels/index.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"

using namespace kiln;
using namespace kiln::test;
namespace id = kiln::index_device;

namespace {

enum class Op { IndexSelect, Gather, ScatterAdd };

const char* op_name(Op op) {
  switch (op) {
    case Op::IndexSelect: return "index_select";
    case Op::Gather: return "gather";
    case Op::ScatterAdd: return "scatter_add";
  }
  return "?";
}

// The emulated launch of index.cu for `op` into out (its data a buffer of the test's).
DeviceErrorRecord emulated(Op op, const StridedArg& out_arg, const StridedArg& in_arg, int dim,
                           const StridedArg& index_arg, unsigned grid_cap) {
  const StridedArg out = at_least_1d(out_arg), in = at_least_1d(in_arg), index = at_least_1d(index_arg);
  DeviceErrorRecord err{};
  simt::LaunchConfig config;
  config.block.x = cuda_detail::kThreads;
  if (op == Op::ScatterAdd) {
    const int64_t outer = id::scatter_outer(index, dim);
    if (outer == 0 || index.sizes[dim] == 0) return err;
    config.grid.x = std::min(cuda_detail::grid_for(outer), grid_cap);
    simt::launch(config, [&] {
      if (is_floating(out.dtype)) {
        id::scatter_add_kernel<double>(out, dim, index, in, outer, &err);
      } else {
        id::scatter_add_kernel<int64_t>(out, dim, index, in, outer, &err);
      }
    });
    return err;
  }
  const int64_t n = out.numel();
  if (n == 0) return err;
  config.grid.x = std::min(cuda_detail::grid_for(n), grid_cap);
  simt::launch(config, [&] {
    if (op == Op::IndexSelect) {
      id::index_select_kernel(out, in, dim, index, n, &err);
    } else {
      id::gather_kernel(out, in, dim, index, n, &err);
    }
  });
  return err;
}

void on_cpu(Op op, const StridedArg& out, const StridedArg& in, int dim, const StridedArg& index) {
  const KernelContext cpu{};
  switch (op) {
    case Op::IndexSelect: index_select_cpu(out, in, dim, index, cpu); return;
    case Op::Gather: gather_cpu(out, in, dim, index, cpu); return;
    case Op::ScatterAdd: scatter_add_cpu(out, dim, index, in, cpu); return;
  }
}

// Runs op on the CPU and on the emulator (out starts as `out_start`'s values in both, for
// scatter_add) and compares the output's bytes; `in` is scatter_add's src.
void check(const std::string& what, Op op, const Tensor& out_start, const Tensor& in, int dim, const Tensor& index) {
  const size_t bytes = static_cast<size_t>(out_start.numel()) * out_start.element_size();
  REQUIRE(out_start.is_contiguous());
  std::vector<unsigned char> want(bytes);
  std::memcpy(want.data(), out_start.data_ptr(), bytes);
  StridedArg out_arg = ops::make_arg("test", out_start);
  out_arg.data = want.data();
  on_cpu(op, out_arg, ops::make_arg("test", in), dim, ops::make_arg("test", index));
  for (const unsigned grid_cap : {~0u, 3u}) {
    INFO(op_name(op) << ", " << what << ", grid cap " << grid_cap);
    Guarded<unsigned char> got(static_cast<int64_t>(bytes));
    std::memcpy(got.data(), out_start.data_ptr(), bytes);
    out_arg.data = got.data();
    const DeviceErrorRecord err =
        emulated(op, out_arg, ops::make_arg("test", in), dim, ops::make_arg("test", index), grid_cap);
    CHECK(err.op == 0);
    CHECK(got.bands_intact());
    CHECK(std::memcmp(got.data(), want.data(), bytes) == 0);
  }
}

Tensor values(const Shape& shape, DType dtype, uint64_t seed) {
  manual_seed(seed);
  return (randn(shape) * 50.0).to(dtype);
}

}  // namespace

TEST_CASE("emulated: index_select, gather and scatter_add give the CPU's bits", "[simt][index]") {
  const Tensor idx = tensor(std::vector<int64_t>{2, 0, 2, 1, 4, 4, 3}, {7});
  for (const DType dtype : {DType::Float64, DType::Float32, DType::BFloat16, DType::UInt8, DType::Int64}) {
    const std::string name = dtype_name(dtype);
    const Tensor x = values({5, 6, 5}, dtype, 1);
    if (dtype == DType::Float32) {
      // A signaling NaN with a payload: a copy through double would quiet it.
      const uint32_t snan = 0x7f800123u;
      std::memcpy(static_cast<float*>(x.data_ptr()) + 7, &snan, sizeof snan);
    }
    for (int dim = 0; dim < 3; ++dim) {
      Shape shape = x.sizes();
      shape[static_cast<size_t>(dim)] = 7;
      check(name + ", dim " + std::to_string(dim), Op::IndexSelect, empty(shape, TensorOptions(dtype)), x, dim, idx);
    }
    // A transposed input.
    check(name + ", transposed", Op::IndexSelect, empty({7, 5, 6}, TensorOptions(dtype)), x.transpose(1, 2), 0, idx);
  }
  // 0-d: index_select of a scalar with a one-element index.
  check("0-d", Op::IndexSelect, empty({1}), scalar_tensor(2.5), 0, tensor(std::vector<int64_t>{0}, {1}));

  manual_seed(2);
  const Tensor x = values({4, 9, 3}, DType::Float32, 3);
  for (int dim = 0; dim < 3; ++dim) {
    Shape shape{4, 6, 3};
    const Tensor gi = randint(0, x.size(dim), shape);
    check("float32, dim " + std::to_string(dim), Op::Gather, empty(shape), x, dim, gi);
  }
  check("bfloat16, transposed", Op::Gather, empty({3, 9, 2}, TensorOptions(DType::BFloat16)),
        values({3, 4, 9}, DType::BFloat16, 4).transpose(1, 2), 2, randint(0, 4, {3, 9, 2}));

  // scatter_add: duplicate targets add in index order (float bits as on the CPU), int64 exactly.
  for (int dim = 0; dim < 3; ++dim) {
    const Tensor src = values({4, 6, 3}, DType::Float32, 5);
    const Tensor si = randint(0, 3, {4, 6, 3});
    Shape shape{4, 6, 3};
    shape[static_cast<size_t>(dim)] = 3;
    check("float32, dim " + std::to_string(dim), Op::ScatterAdd, values(shape, DType::Float32, 6), src, dim, si);
  }
  check("bfloat16 into float16", Op::ScatterAdd, values({5, 8}, DType::Float16, 7), values({5, 20}, DType::BFloat16, 8),
        1, randint(0, 8, {5, 20}));
  check("int64", Op::ScatterAdd, randint(-9, 9, {3, 40}), randint(-100, 100, {3, 40}), 1, randint(0, 40, {3, 40}));
}

TEST_CASE("emulated: an index out of range is recorded and leaves a 0", "[simt][index]") {
  const Tensor x = values({5, 4}, DType::Float32, 9);
  const Tensor bad = tensor(std::vector<int64_t>{1, 5, 0}, {3});  // 5 is past the 5 rows
  const Tensor good = tensor(std::vector<int64_t>{1, 0, 0}, {3});
  for (const unsigned grid_cap : {~0u, 3u}) {
    // index_select: row 1 of the output is zeros, the others the CPU's.
    std::vector<float> want(12);
    StridedArg out_arg = ops::make_arg("test", empty({3, 4}));
    out_arg.data = want.data();
    index_select_cpu(out_arg, ops::make_arg("test", x), 0, ops::make_arg("test", good), KernelContext{});
    for (int j = 4; j < 8; ++j) want[static_cast<size_t>(j)] = 0.f;
    Guarded<float> got(12);
    out_arg.data = got.data();
    DeviceErrorRecord err =
        emulated(Op::IndexSelect, out_arg, ops::make_arg("test", x), 0, ops::make_arg("test", bad), grid_cap);
    CHECK(err.op == static_cast<int32_t>(IndexCheckOp::IndexSelect));
    CHECK(err.index == 5);
    CHECK(err.size == 5);
    CHECK(std::memcmp(got.data(), want.data(), 12 * sizeof(float)) == 0);
    CHECK_THROWS_AS(index_select_cpu(out_arg, ops::make_arg("test", x), 0, ops::make_arg("test", bad), KernelContext{}),
                    Error);

    // gather: the bad element is 0; scatter_add: the bad element adds nothing.
    const Tensor gi = tensor(std::vector<int64_t>{0, 3, -1, 2}, {1, 4});
    Guarded<float> g(4);
    out_arg = ops::make_arg("test", empty({1, 4}));
    out_arg.data = g.data();
    err = emulated(Op::Gather, out_arg, ops::make_arg("test", x), 1, ops::make_arg("test", gi), grid_cap);
    CHECK(err.op == static_cast<int32_t>(IndexCheckOp::Gather));
    CHECK(err.index == -1);
    CHECK(err.size == 4);
    const std::vector<float> xv = x.to_vector<float>();
    CHECK(g.data()[0] == xv[0]);
    CHECK(g.data()[1] == xv[3]);
    CHECK(g.data()[2] == 0.f);
    CHECK(g.data()[3] == xv[2]);
    std::vector<float> acc{1.f, 2.f, 3.f};
    out_arg = ops::make_arg("test", empty({3}));
    out_arg.data = acc.data();
    const Tensor src = tensor(std::vector<float>{10.f, 20.f, 40.f}, {3});
    const Tensor si = tensor(std::vector<int64_t>{2, 3, 2}, {3});
    err = emulated(Op::ScatterAdd, out_arg, ops::make_arg("test", src), 0, ops::make_arg("test", si), grid_cap);
    CHECK(err.op == static_cast<int32_t>(IndexCheckOp::ScatterAdd));
    CHECK(err.index == 3);
    CHECK(err.size == 3);
    CHECK(acc == std::vector<float>{1.f, 2.f, 53.f});
  }
}
