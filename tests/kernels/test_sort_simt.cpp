// The row selection of kernels/cuda/sort.cuh (what topk and multinomial without replacement run on a
// GPU), its real source, run on the CPU through the emulator of CUDA's threads (kernels/simt/simt.h)
// and launched by smallest_k itself, through a launcher that records each launch. Each case asks for
// the k smallest (key, index) pairs of each row in order and compares them with std::sort. The row
// lengths reach the three paths: a whole row sorted in shared memory (up to 2048 entries), a radix
// selection of the k-th key (longer rows, k up to 2048), and the sort in global memory (k > 2048),
// with lengths on both sides of each power of two. The keys bring the cases a selection can get
// wrong: ties that only the index breaks, keys that differ in the last byte only (every radix
// pass), the largest key (the padding's), all keys equal, and rows in reverse order. Rows the source
// calls invalid get zeros. Each case runs under both schedules, and with the grid capped at 3
// blocks so that blocks loop over rows and tiles and reuse their shared memory; all three must give
// the same indices. Outputs and the workspace lie between guard bands. Last, topk's own launches
// (kernels/cuda/topk.cuh: float values as order keys, complemented for the largest, a batch of rows
// at a time) are compared bit for bit with topk_cpu, values and indices.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/sort.cuh"
#include "kernels/cuda/topk.cuh"
#include "kernels/simt/simt.h"
#include "kernels/topk.h"
#include "tests/kernels/guarded.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Keys from a table, rows marked valid or not.
struct TableKeys {
  const uint64_t* keys;
  const unsigned char* row_valid;
  int64_t n;
  bool valid(int64_t row) const { return row_valid[row] != 0; }
  uint64_t key(int64_t row, int64_t j) const { return keys[row * n + j]; }
};

struct IndexSink {
  uint32_t* out;
  int64_t k;
  void write(int64_t row, int64_t s, uint32_t j) const { out[row * k + s] = j; }
};

enum class Keys { Random, FewValues, LastByte, WithMax, AllEqual, Descending };

const char* keys_name(Keys keys) {
  switch (keys) {
    case Keys::Random: return "random";
    case Keys::FewValues: return "four values";
    case Keys::LastByte: return "last byte";
    case Keys::WithMax: return "with the largest key";
    case Keys::AllEqual: return "all equal";
    case Keys::Descending: return "descending";
  }
  return "?";
}

std::vector<uint64_t> make_keys(Keys kind, int64_t rows, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(static_cast<size_t>(rows * n));
  for (int64_t i = 0; i < rows * n; ++i) {
    const uint64_t r = rng();
    const int64_t j = i % n;
    switch (kind) {
      case Keys::Random: keys[i] = r; break;
      case Keys::FewValues: keys[i] = r % 4; break;
      case Keys::LastByte: keys[i] = 0x8123456789abcd00ull | (r % 200); break;
      case Keys::WithMax: keys[i] = r % 3 == 0 ? ~uint64_t{0} : r; break;
      case Keys::AllEqual: keys[i] = 0x7ff0000000000000ull; break;
      case Keys::Descending: keys[i] = static_cast<uint64_t>(n - j) << 20; break;
    }
  }
  return keys;
}

// The k smallest (key, index) pairs of each valid row, by std::sort; zeros for the others.
std::vector<uint32_t> expected(const std::vector<uint64_t>& keys, const std::vector<unsigned char>& valid,
                               int64_t rows, int64_t n, int64_t k) {
  std::vector<uint32_t> out(static_cast<size_t>(rows * k), 0);
  std::vector<uint32_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    if (!valid[r]) continue;
    std::iota(order.begin(), order.end(), 0u);
    const uint64_t* row = keys.data() + r * n;
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return row[a] < row[b]; });
    std::copy(order.begin(), order.begin() + k, out.begin() + r * k);
  }
  return out;
}

// The launches smallest_k must make for n and k (each a kernel's address).
std::vector<const void*> planned_kernels(int64_t n, int64_t k) {
  using Src = TableKeys;
  using Sink = IndexSink;
  if (n <= kSortMax) return {kernel_address(&sort_rows_kernel<Src, Sink>)};
  if (k <= kSortMax) return {kernel_address(&select_rows_kernel<Src, Sink>)};
  std::vector<const void*> kernels{kernel_address(&tile_sort_kernel<Src>)};
  int64_t P = 1;
  while (P < n) P *= 2;
  for (int64_t size = 2 * kSortMax; size <= P; size *= 2) {
    for (int64_t stride = size / 2; stride >= kSortMax; stride /= 2) {
      kernels.push_back(kernel_address(&global_step_kernel));
    }
    kernels.push_back(kernel_address(&tile_merge_kernel));
  }
  kernels.push_back(kernel_address(&write_sorted_kernel<Src, Sink>));
  return kernels;
}

struct Case {
  int64_t rows, n, k;
  std::vector<Keys> keys;
};

// Runs one case on the emulator under both schedules and with the grid capped at 3 blocks, and
// checks the indices against std::stable_sort's, the kernels smallest_k launched, and the guards.
void check_case(const Case& c, Keys kind, uint64_t seed) {
  INFO(c.rows << " rows of " << c.n << ", k " << c.k << ", keys " << keys_name(kind));
  const std::vector<uint64_t> keys = make_keys(kind, c.rows, c.n, seed);
  std::vector<unsigned char> valid(static_cast<size_t>(c.rows), 1);
  if (c.rows > 2) valid[1] = 0;  // the middle row is invalid: zeros
  const std::vector<uint32_t> want = expected(keys, valid, c.rows, c.n, c.k);
  const size_t workspace_bytes = static_cast<size_t>(c.rows) * sort_workspace_per_row(c.n, c.k);
  CHECK((workspace_bytes != 0) == (c.n > kSortMax && c.k > kSortMax));
  std::vector<uint32_t> first;
  const std::pair<simt::Schedule, unsigned> runs[] = {
      {simt::Schedule::Lowest, ~0u}, {simt::Schedule::Highest, ~0u}, {simt::Schedule::Highest, 3u}};
  for (const auto& [schedule, cap] : runs) {
    INFO((schedule == simt::Schedule::Lowest ? "lowest" : "highest") << " first, grid cap " << cap);
    Guarded<uint32_t> out(c.rows * c.k);
    Guarded<uint64_t> workspace(static_cast<int64_t>(workspace_bytes / sizeof(uint64_t)));
    std::vector<const void*> kernels;
    smallest_k(TableKeys{keys.data(), valid.data(), c.n}, IndexSink{out.data(), c.k}, c.rows, c.n, c.k,
               workspace_bytes ? workspace.data() : nullptr, EmulatedLaunch{schedule, cap, &kernels});
    CHECK(kernels == planned_kernels(c.n, c.k));
    CHECK(out.bands_intact());
    CHECK(workspace.bands_intact());
    const std::vector<uint32_t> got(out.data(), out.data() + c.rows * c.k);
    int64_t wrong = 0;
    for (size_t i = 0; i < want.size(); ++i) wrong += got[i] != want[i];
    CHECK(wrong == 0);
    if (first.empty()) {
      first = got;
    } else {
      CHECK(got == first);
    }
  }
}

}  // namespace

TEST_CASE("simt: the row selection of topk and multinomial takes each of its three paths", "[simt][sort]") {
  check_case({3, 1000, 10, {}}, Keys::FewValues, 1);  // the whole row in shared memory
  check_case({3, 5000, 100, {}}, Keys::LastByte, 2);  // the radix selection
  check_case({3, 2049, 2049, {}}, Keys::WithMax, 3);  // the sort in global memory
}

// Every key kind at lengths on both sides of each path's bounds. The sanitized build leaves this
// sweep out (tools/sanitize.sh): it launches the same instantiations as the test above.
TEST_CASE("simt: the row selection of topk and multinomial gives the k smallest keys in order, a sweep",
          "[simt][sort]") {
  const std::vector<Keys> all{Keys::Random, Keys::FewValues, Keys::LastByte,
                              Keys::WithMax, Keys::AllEqual, Keys::Descending};
  const std::vector<Case> cases{
      // Whole rows in shared memory.
      {3, 1, 1, {Keys::Random}},
      {3, 2, 1, {Keys::Random, Keys::AllEqual}},
      {4, 5, 5, all},
      {3, 33, 7, all},
      {3, 64, 64, {Keys::Random, Keys::FewValues}},
      {3, 1000, 10, all},
      {2, 2048, 2048, {Keys::FewValues, Keys::WithMax}},
      // The radix selection.
      {3, 2049, 1, all},
      {2, 2049, 2048, {Keys::FewValues, Keys::LastByte, Keys::Descending}},
      {3, 5000, 100, all},
      {2, 20000, 2000, {Keys::Random, Keys::LastByte, Keys::AllEqual}},
      // The sort in global memory.
      {3, 2049, 2049, {Keys::Random, Keys::FewValues}},
      {2, 5000, 3000, {Keys::LastByte, Keys::WithMax, Keys::Descending}},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    for (const Keys kind : c.keys) check_case(c, kind, seed++);
  }
}

TEST_CASE("simt: the block scans of the row selection give a fixed-order scan of the block", "[simt][sort]") {
  const simt::Schedule schedule = GENERATE(simt::Schedule::Lowest, simt::Schedule::Highest);
  const unsigned threads = GENERATE(32u, 256u, 1024u);
  INFO(threads << " threads");
  std::vector<long long> values(threads);
  std::mt19937_64 rng(threads);
  for (auto& v : values) v = static_cast<long long>(rng() % 2001) - 1000;
  std::vector<long long> incl_sum(threads), excl_max(threads), incl_min(threads);
  std::vector<long long> totals(3 * threads);
  simt::LaunchConfig config;
  config.block.x = threads;
  config.schedule = schedule;
  simt::launch(config, [&] {
    KILN_SHARED(long long, buf, [32]);
    const unsigned t = threadIdx.x;
    long long total = 0;
    incl_sum[t] = block_inclusive_scan(values[t], SumOp<long long>{}, 0LL, buf, total);
    totals[t] = total;
    excl_max[t] = block_exclusive_scan(values[t], MaxOp<long long>{}, std::numeric_limits<long long>::min(), buf,
                                       total);
    totals[threads + t] = total;
    incl_min[t] = block_inclusive_scan(values[t], MinOp<long long>{}, std::numeric_limits<long long>::max(), buf,
                                       total);
    totals[2 * threads + t] = total;
  });
  long long sum = 0, max = std::numeric_limits<long long>::min(), min = std::numeric_limits<long long>::max();
  for (unsigned t = 0; t < threads; ++t) {
    CHECK(excl_max[t] == max);  // the values before t
    sum += values[t];
    max = std::max(max, values[t]);
    min = std::min(min, values[t]);
    CHECK(incl_sum[t] == sum);
    CHECK(incl_min[t] == min);
  }
  for (unsigned t = 0; t < threads; ++t) {
    CHECK(totals[t] == sum);
    CHECK(totals[threads + t] == max);
    CHECK(totals[2 * threads + t] == min);
  }
}

TEST_CASE("simt: order_key orders doubles as the CPU's topk does, NaN above infinity", "[simt][sort]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double tiny = std::numeric_limits<double>::denorm_min();
  // Ascending, with equal neighbours marked.
  const std::vector<double> ascending{-inf, -1e308, -1.5, -tiny, -0.0, 0.0,
                                      tiny, 1.0,     std::nextafter(1.0, 2.0), 1e308, inf};
  for (size_t i = 0; i + 1 < ascending.size(); ++i) {
    INFO(ascending[i] << " before " << ascending[i + 1]);
    if (ascending[i] == ascending[i + 1]) {
      CHECK(order_key(ascending[i]) == order_key(ascending[i + 1]));  // -0 and +0
    } else {
      CHECK(order_key(ascending[i]) < order_key(ascending[i + 1]));
    }
  }
  CHECK(order_key(inf) < order_key(nan));
  CHECK(order_key(nan) == kMaxKey);
  CHECK(order_key(-nan) == kMaxKey);
}

TEST_CASE("simt: the row selection's workspace is sized and batched, and refused when too small", "[simt][sort]") {
  CHECK(sort_workspace_per_row(2048, 2048) == 0);
  CHECK(sort_workspace_per_row(100000, 2048) == 0);
  CHECK(sort_workspace_per_row(2049, 2049) == 4096 * 12);
  const size_t per_row = sort_workspace_per_row(3000000, 3000);  // 4 Mi entries of 12 bytes
  CHECK(per_row == (size_t{1} << 22) * 12);
  // The cap (256 MiB) holds 5 such rows; at least one row is always asked for.
  CHECK(capped(100, per_row) == 5 * per_row);
  CHECK(capped(3, per_row) == 3 * per_row);
  CHECK(capped(1, size_t{1} << 30) == size_t{1} << 30);
  CHECK(capped(100, 0) == 0);
  char byte = 0;
  CHECK(batch_rows("topk", 100, per_row, &byte, 5 * per_row) == 5);
  CHECK(batch_rows("topk", 100, 0, nullptr, 0) == 100);
  CHECK_THROWS_WITH(batch_rows("topk", 100, per_row, nullptr, 0),
                    "topk: the CUDA workspace has 0 bytes, a row needs " + std::to_string(per_row));
  CHECK_THROWS_WITH(check_row_length("multinomial", int64_t{1} << 32),
                    Catch::Contains("multinomial: rows of 4294967296 elements are too long"));
  CHECK_NOTHROW(check_row_length("multinomial", 4294967294));
}

namespace {

// topk of `in` ([rows, n], contiguous) through topk_launches on the emulator (grid capped at 3
// blocks), its workspace capped at `cap` bytes, against topk_cpu: values and indices bit for bit.
// `with_values` false: indices only, as argsort-like callers ask. Returns the launches made.
size_t check_topk(const std::string& what, const Tensor& in, int64_t k, bool largest, size_t cap = kWorkspaceCap,
                  bool with_values = true) {
  INFO(what << ", k " << k << (largest ? ", largest" : ", smallest"));
  const int64_t rows = in.size(0), n = in.size(1);
  const Tensor want_values = empty({rows, k}, TensorOptions(in.dtype()));
  const Tensor want_indices = empty({rows, k}, TensorOptions(DType::Int64));
  topk_cpu(want_values.data_ptr(), in.dtype(), want_indices.data_ptr<int64_t>(), in.data_ptr(), in.dtype(), rows, n, k,
           largest, KernelContext{});
  Guarded<unsigned char> values(rows * k * static_cast<int64_t>(in.element_size()));
  Guarded<int64_t> indices(rows * k);
  std::vector<Guarded<uint64_t>> scratch;
  scratch.reserve(1);
  size_t asked = 0;
  const auto workspace = [&](size_t bytes) -> void* {
    asked = bytes;
    scratch.emplace_back(static_cast<int64_t>(bytes / sizeof(uint64_t)));
    return bytes ? scratch.back().data() : nullptr;
  };
  std::vector<const void*> kernels;
  topk_launches(with_values ? values.data() : nullptr, in.dtype(), indices.data(), in.data_ptr(), in.dtype(), rows, n,
                k, largest, workspace, EmulatedLaunch{simt::Schedule::Lowest, 3u, &kernels}, cap);
  CHECK(scratch.size() == 1);
  CHECK(asked == capped(rows, sort_workspace_per_row(n, k), cap));
  CHECK(values.bands_intact());
  CHECK(indices.bands_intact());
  CHECK(scratch.back().bands_intact());
  CHECK(std::memcmp(indices.data(), want_indices.data_ptr(), static_cast<size_t>(rows * k) * sizeof(int64_t)) == 0);
  if (with_values) {
    CHECK(std::memcmp(values.data(), want_values.data_ptr(), static_cast<size_t>(rows * k) * in.element_size()) == 0);
  }
  return kernels.size();
}

// Values with what topk must order: ties, NaN (the largest), both infinities, -0 and +0.
Tensor awkward_floats(int64_t rows, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(static_cast<size_t>(rows * n));
  const float specials[] = {std::nanf(""), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -0.0f, 0.0f, 1.5f};
  for (auto& x : v) {
    const uint64_t r = rng();
    x = r % 5 == 0 ? specials[(r >> 8) % 6] : static_cast<float>(static_cast<int64_t>((r >> 16) % 2001) - 1000) / 8;
  }
  return tensor(v, {rows, n});
}

}  // namespace

TEST_CASE("emulated: topk's CUDA launches give the CPU's values and indices, bit for bit", "[simt][sort][topk]") {
  SECTION("short rows sorted in shared memory, every float dtype") {
    const Tensor x = awkward_floats(3, 37, 1);
    for (const bool largest : {true, false}) {
      CHECK(check_topk("float32 [3, 37]", x, 5, largest) == 1);
      CHECK(check_topk("float16 [3, 37]", x.to(DType::Float16), 37, largest) == 1);
      CHECK(check_topk("bfloat16 [3, 37]", x.to(DType::BFloat16), 1, largest) == 1);
      CHECK(check_topk("float64 [3, 37]", x.to(DType::Float64), 12, largest) == 1);
    }
    CHECK(check_topk("float32 [3, 37], indices only", x, 6, true, kWorkspaceCap, false) == 1);
  }
  SECTION("integers copy exactly, beyond float64's 53 bits") {
    std::vector<int64_t> v(2 * 50);
    for (size_t i = 0; i < v.size(); ++i) v[i] = (int64_t{1} << 62) + static_cast<int64_t>((i * 7919) % 23) - 11;
    const Tensor x = tensor(v, {2, 50});
    CHECK(check_topk("int64 [2, 50]", x, 7, true) == 1);
    CHECK(check_topk("int64 [2, 50]", x, 7, false) == 1);
    CHECK(check_topk("int32 [2, 50]", sub(x, int64_t{1} << 62).to(DType::Int32), 9, true) == 1);
    // Ordered as integers, not through double (where all three are 2^62, ties by index).
    const int64_t big = int64_t{1} << 62;
    const auto [top, at] = topk(tensor(std::vector<int64_t>{big + 1, big + 3, big + 2}), 3);
    CHECK(top.to_vector<int64_t>() == std::vector<int64_t>{big + 3, big + 2, big + 1});
    CHECK(at.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 0});
    const auto [low, low_at] = topk(tensor(std::vector<int64_t>{big + 1, big + 3, big + 2}), 2, -1, /*largest=*/false);
    CHECK(low_at.to_vector<int64_t>() == std::vector<int64_t>{0, 2});
    // A 0-d input: k = 1 is the element, k = 0 gives empty [0] results (was a reshape error).
    const Tensor one = scalar_tensor(4.0).set_requires_grad(true);
    const auto [v1, i1] = topk(one, 1);
    CHECK((v1.dim() == 0 && v1.item<float>() == 4.0f && i1.item<int64_t>() == 0));
    const auto [v0, i0] = topk(one, 0);
    CHECK((v0.sizes() == Shape{0} && i0.sizes() == Shape{0}));
    sum(v0 * 1.0).backward();
    CHECK(one.grad().item<float>() == 0.0f);
    CHECK(check_topk("int64 [1, 3], 2^62 apart by 1", tensor(std::vector<int64_t>{big + 1, big + 3, big + 2}, {1, 3}),
                     3, true) == 1);
  }
  SECTION("long rows: the radix selection of the k-th") {
    const Tensor x = awkward_floats(2, 3001, 2);
    CHECK(check_topk("float32 [2, 3001]", x, 100, true) == 1);
    CHECK(check_topk("bfloat16 [2, 3001]", x.to(DType::BFloat16), 2048, false) == 1);
  }
  SECTION("k past 2048: the global sort, in batches of the rows the workspace holds") {
    const Tensor x = awkward_floats(3, 2500, 3);
    const size_t per_row = sort_workspace_per_row(2500, 2100);
    const size_t one_batch = check_topk("float32 [3, 2500]", x, 2100, true);
    // Capped at two rows: a batch of 2, then a batch of 1, each making the same launches.
    CHECK(check_topk("float32 [3, 2500], two rows a batch", x, 2100, true, 2 * per_row) == 2 * one_batch);
    CHECK(check_topk("float32 [3, 2500], a row a batch", x, 2100, false, per_row) == 3 * one_batch);
  }
  SECTION("bad k and rows too long are refused before any launch") {
    const auto no_workspace = [](size_t) -> void* {
      FAIL("asked for a workspace");
      return nullptr;
    };
    const auto no_launch = EmulatedLaunch{};
    int64_t idx = 0;
    const float v = 1;
    CHECK_THROWS_WITH(topk_launches(nullptr, DType::Float32, &idx, &v, DType::Float32, 1, 1, 2, true, no_workspace,
                                    no_launch),
                      "topk: k = 2 is larger than the row size 1");
    CHECK_THROWS_WITH(topk_launches(nullptr, DType::Float32, &idx, &v, DType::Float32, 1, int64_t{1} << 32, 1, true,
                                    no_workspace, no_launch),
                      Catch::Contains("topk: rows of 4294967296 elements are too long"));
    CHECK_NOTHROW(topk_launches(nullptr, DType::Float32, &idx, &v, DType::Float32, 0, 1, 1, true, no_workspace,
                                no_launch));
  }
}
