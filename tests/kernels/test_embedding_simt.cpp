// embedding's CUDA kernels (kernels/cuda/embedding.cuh), their real source, run on the CPU through
// the emulator of CUDA's threads (kernels/simt/simt.h) and launched by their own launch functions,
// as on a GPU, with a stable sort on the host in the place of CUB's radix sort (both order the
// (value, position) pairs by value and keep positions in order within a value, so the sorted
// arrays are the same). Outputs are compared bit for bit with the CPU twins: the lookup moves each
// element's bits (a signaling NaN stays one) from contiguous and transposed weights of every
// element size; the backward adds the same sums in the same order as embedding_backward_cpu, over
// index patterns that make every piece of kernels/embedding_plan.h (a value in one chunk, a value
// crossing chunks, a value covering whole chunks) and gradients wider than a block of columns, in
// the column grid asked for and in one capped at a block so that blocks loop over columns. A bad
// index gives a zero row (lookup) or is skipped (backward), and is recorded for the host.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "core/ops/helpers.h"
#include "kernels/cuda/embedding.cuh"
#include "kernels/embedding.h"
#include "kernels/embedding_plan.h"
#include "kernels/index.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"

using namespace kiln;
using namespace kiln::test;
namespace ed = kiln::embedding_device;

namespace {

std::vector<int64_t> random_indices(int64_t k, int64_t num, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> v(static_cast<size_t>(k));
  for (auto& x : v) x = static_cast<int64_t>(rng() % static_cast<uint64_t>(num));
  return v;
}

// The lookup of `indices` in `weight` ([num, dim], any strides) on the emulator, into guarded
// storage; the record it leaves in *err.
Guarded<unsigned char> emulated_lookup(const Tensor& weight, const std::vector<int64_t>& indices,
                                       DeviceErrorRecord* err, unsigned grid_cap) {
  const int64_t k = static_cast<int64_t>(indices.size());
  Guarded<unsigned char> out(k * weight.size(1) * static_cast<int64_t>(weight.element_size()));
  std::vector<const void*> kernels;
  ed::embedding_forward_launch(out.data(), ops::make_arg("test", weight), indices.data(), k, err,
                               EmulatedLaunch{simt::Schedule::Lowest, grid_cap, &kernels});
  CHECK(kernels.size() == 1);
  CHECK(out.bands_intact());
  return out;
}

void check_lookup(const std::string& what, const Tensor& weight, const std::vector<int64_t>& indices) {
  const int64_t k = static_cast<int64_t>(indices.size());
  const Tensor want = empty({k, weight.size(1)}, TensorOptions(weight.dtype()));
  embedding_forward_cpu(want.data_ptr(), ops::make_arg("test", weight), indices.data(), k, KernelContext{});
  for (const unsigned grid_cap : {~0u, 3u}) {
    INFO(what << ", " << k << " indices, grid cap " << grid_cap);
    DeviceErrorRecord err{};
    const Guarded<unsigned char> got = emulated_lookup(weight, indices, &err, grid_cap);
    CHECK(err.op == 0);
    CHECK(std::memcmp(got.data(), want.data_ptr(), static_cast<size_t>(want.numel()) * want.element_size()) == 0);
  }
}

// The host's stand-in for CUB's SortPairs: pairs ordered by key, stably. Keys must fit in end_bit
// bits, the only bits the radix sort looks at.
struct StableSort {
  int* calls;
  void operator()(const uint32_t* keys_in, uint32_t* keys, const uint32_t* rows_in, uint32_t* rows, int n,
                  int end_bit) const {
    ++*calls;
    std::vector<uint32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return keys_in[a] < keys_in[b]; });
    for (int i = 0; i < n; ++i) {
      CHECK(keys_in[i] >> end_bit == 0);
      keys[i] = keys_in[order[i]];
      rows[i] = rows_in[order[i]];
    }
  }
};

// The backward on the emulator: grad ([k, dim]) summed by `indices` into a guarded copy of
// grad_weight ([num, dim]), in storage type S; the record it leaves in *err.
template <typename S>
Guarded<S> emulated_backward(const Tensor& grad_weight, const Tensor& grad, const std::vector<int64_t>& indices,
                             DeviceErrorRecord* err, unsigned grid_cap_y) {
  const int64_t k = static_cast<int64_t>(indices.size()), num = grad_weight.size(0), dim = grad_weight.size(1);
  Guarded<S> gw = Guarded<S>::copy_of(grad_weight);
  const int64_t parts = embedding_plan::chunk_count(k) * dim;
  Guarded<uint32_t> keys_in(k), keys(k), rows_in(k), rows(k);
  Guarded<float> head(parts), tail(parts);
  const ed::BackwardBuffers buf{keys_in.data(), keys.data(), rows_in.data(), rows.data(), head.data(), tail.data()};
  int sorts = 0;
  std::vector<const void*> kernels;
  EmulatedLaunch launch{simt::Schedule::Lowest, ~0u, &kernels};
  launch.grid_cap_y = grid_cap_y;
  ed::embedding_backward_launches(gw.data(), static_cast<const S*>(grad.data_ptr()), indices.data(), k, num, dim, buf,
                                  err, StableSort{&sorts}, launch);
  CHECK(sorts == 1);
  CHECK(kernels == std::vector<const void*>{kernel_address(&ed::embedding_keys_kernel),
                                            kernel_address(&ed::embedding_pieces_kernel<S>),
                                            kernel_address(&ed::embedding_carry_kernel<S>)});
  for (const auto* g : {&keys_in, &keys, &rows_in, &rows}) CHECK(g->bands_intact());
  CHECK(head.bands_intact());
  CHECK(tail.bands_intact());
  CHECK(gw.bands_intact());
  return gw;
}

void check_backward(const std::string& what, DType dtype, int64_t num, int64_t dim,
                    const std::vector<int64_t>& indices, uint64_t seed) {
  const int64_t k = static_cast<int64_t>(indices.size());
  manual_seed(seed);
  const Tensor grad = randn({k, dim}).to(dtype);
  const Tensor start = randn({num, dim}).to(dtype);  // the backward adds to what the gradient held
  const Tensor want = start.clone();
  embedding_backward_cpu(want.data_ptr(), grad.data_ptr(), dtype, indices.data(), k, num, dim, KernelContext{});
  CHECK_FALSE(same_bits(want, start));
  for (const unsigned cap_y : {~0u, 1u}) {
    INFO(what << ", " << dtype_name(dtype) << ", " << k << " positions, dim " << dim << ", column grid cap " << cap_y);
    with_float_storage(dtype, [&]<typename S>() {
      DeviceErrorRecord err{};
      const Guarded<S> got = emulated_backward<S>(start, grad, indices, &err, cap_y);
      CHECK(err.op == 0);
      CHECK(same_bits(got.tensor(dtype, {num, dim}), want));
    });
  }
}

}  // namespace

TEST_CASE("emulated: embedding's CUDA lookup moves the CPU's bits", "[simt][embedding]") {
  // A float32 signaling NaN must come through as itself, as on the CPU.
  Tensor w = randn({11, 37});
  const uint32_t snan = 0x7f800123u;
  std::memcpy(static_cast<float*>(w.data_ptr()) + 3 * 37 + 5, &snan, sizeof(snan));
  const std::vector<int64_t> idx = {3, 0, 10, 3, 7, 7, 1};
  check_lookup("float32 with a signaling NaN", w, idx);
  check_lookup("float32 transposed weight", randn({37, 11}).t(), random_indices(50, 11, 1));
  check_lookup("uint8", (rand({11, 37}) * 200).to(DType::UInt8), idx);
  check_lookup("bfloat16", w.to(DType::BFloat16), random_indices(300, 11, 2));
  check_lookup("float64 transposed weight", randn({5, 9}, TensorOptions(DType::Float64)).t(), random_indices(4, 9, 3));
  check_lookup("int64, one column", tensor(std::vector<int64_t>{int64_t{1} << 60, -5, 7}, {3, 1}), {2, 0, 1, 0});
  SECTION("a bad index gives a zero row and a record, and the other rows are looked up") {
    const Tensor x = randn({6, 9});
    const std::vector<int64_t> bad = {2, 6, 0, -1};
    DeviceErrorRecord err{};
    const Guarded<unsigned char> got = emulated_lookup(x, bad, &err, ~0u);
    CHECK(err.op == static_cast<int32_t>(IndexCheckOp::Embedding));
    CHECK((err.index == 6 || err.index == -1));
    CHECK(err.size == 6);
    const Tensor rows = empty({4, 9});
    std::memcpy(rows.data_ptr(), got.data(), 4 * 9 * sizeof(float));
    CHECK(same_bits(rows.select(0, 0).contiguous(), x.select(0, 2).contiguous()));
    CHECK(same_bits(rows.select(0, 2).contiguous(), x.select(0, 0).contiguous()));
    CHECK(kiln::max(abs(rows.select(0, 1))).item<float>() == 0.0f);
    CHECK(kiln::max(abs(rows.select(0, 3))).item<float>() == 0.0f);
  }
}

TEST_CASE("emulated: embedding's CUDA backward adds the CPU's sums, bit for bit", "[simt][embedding]") {
  const int64_t chunk = embedding_plan::kChunkRows;
  for (const DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
    // Values within one chunk (Whole pieces only), at the chunk boundaries.
    check_backward("random over 50", dtype, 50, 7, random_indices(chunk - 1, 50, 1), 1);
    check_backward("random over 50", dtype, 50, 7, random_indices(chunk + 1, 50, 2), 2);
    // Few values over many chunks: values cross chunks (Head, Tail, carry).
    check_backward("random over 3", dtype, 3, 5, random_indices(7 * chunk + 5, 3, 3), 3);
    // One value throughout: its Head is the first chunk's, every later chunk a Tail.
    check_backward("one value", dtype, 4, 3, std::vector<int64_t>(5 * chunk, 2), 4);
    // Each value once, in reverse, and a single position.
    std::vector<int64_t> reverse(70);
    std::iota(reverse.rbegin(), reverse.rend(), 0);
    check_backward("each value once, reversed", dtype, 70, 4, reverse, 5);
    check_backward("one position", dtype, 9, 3, {8}, 6);
  }
  // Wider than a block of columns (128): two column blocks, or one looping.
  check_backward("random over 6, wide", DType::Float32, 6, 300, random_indices(3 * chunk, 6, 7), 7);
  // One embedding (every key 0, sorted on one bit).
  check_backward("one embedding", DType::BFloat16, 1, 2, std::vector<int64_t>(40, 0), 8);
  SECTION("a bad index's row is skipped and recorded; the rest sum as without it") {
    const int64_t num = 5, dim = 6;
    std::vector<int64_t> idx = random_indices(3 * chunk, num, 9);
    idx[10] = 5;  // past the 5 embeddings
    idx[40] = -2;
    manual_seed(10);
    const Tensor grad = randn({static_cast<int64_t>(idx.size()), dim});
    const Tensor start = randn({num, dim});
    // The CPU refuses bad indices: its reference is the run without those positions, which
    // sort last on the GPU and so leave every chunk of the good positions as it was.
    std::vector<int64_t> good;
    std::vector<Tensor> good_rows;
    for (size_t i = 0; i < idx.size(); ++i) {
      if (idx[i] < 0 || idx[i] >= num) continue;
      good.push_back(idx[i]);
      good_rows.push_back(grad.select(0, static_cast<int64_t>(i)).unsqueeze(0));
    }
    const Tensor good_grad = cat(good_rows, 0).contiguous();
    const Tensor want = start.clone();
    embedding_backward_cpu(want.data_ptr(), good_grad.data_ptr(), DType::Float32, good.data(),
                           static_cast<int64_t>(good.size()), num, dim, KernelContext{});
    DeviceErrorRecord err{};
    const Guarded<float> got = emulated_backward<float>(start, grad, idx, &err, ~0u);
    CHECK(err.op == static_cast<int32_t>(IndexCheckOp::Embedding));
    CHECK((err.index == 5 || err.index == -2));
    CHECK(err.size == num);
    CHECK(same_bits(got.tensor(DType::Float32, {num, dim}), want));
  }
  SECTION("the sort's key bits cover the bad-index key") {
    CHECK(ed::key_bits(0) == 1);
    CHECK(ed::key_bits(1) == 1);
    CHECK(ed::key_bits(2) == 2);
    CHECK(ed::key_bits(255) == 8);
    CHECK(ed::key_bits(256) == 9);
  }
}
