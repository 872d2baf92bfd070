// The CPU thread pool: every chunk runs once, exceptions reach the caller, and reductions give the
// same bits whatever the number of threads.
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <stdexcept>
#include <vector>

#include "core/kiln.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "tests/threads.h"

using namespace kiln;

TEST_CASE("parallel_for runs every chunk exactly once with fixed boundaries", "[parallel]") {
  for (int64_t n : {0, 1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::vector<std::pair<int64_t, int64_t>> bounds(static_cast<size_t>(cpu::num_chunks(n, 1000)));
    cpu::parallel_for(n, 1000, [&](int64_t c, int64_t b, int64_t e) {
      bounds[static_cast<size_t>(c)] = {b, e};
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) CHECK(h.load() == 1);
    for (size_t c = 0; c < bounds.size(); ++c) {
      CHECK(bounds[c].first == static_cast<int64_t>(c) * 1000);
      CHECK(bounds[c].second == std::min<int64_t>(n, static_cast<int64_t>(c + 1) * 1000));
    }
  }
}

TEST_CASE("parallel_for rethrows a worker's exception on the caller", "[parallel]") {
  CHECK_THROWS_WITH(cpu::parallel_for(100, 1,
                                      [](int64_t c, int64_t, int64_t) {
                                        if (c == 57) throw std::runtime_error("chunk 57 failed");
                                      }),
                    "chunk 57 failed");
  // The pool still works afterwards.
  std::atomic<int64_t> sum{0};
  cpu::parallel_for(100, 1, [&](int64_t c, int64_t, int64_t) { sum += c; });
  CHECK(sum.load() == 4950);
}

TEST_CASE("nested parallel_for runs inline instead of deadlocking", "[parallel]") {
  std::atomic<int64_t> count{0};
  cpu::parallel_for(8, 1, [&](int64_t, int64_t, int64_t) {
    cpu::parallel_for(100, 10, [&](int64_t, int64_t b, int64_t e) { count += e - b; });
  });
  CHECK(count.load() == 800);
}

TEST_CASE("parallel_for: regions complete whether the workers poll, sleep at once, or fall asleep between", "[parallel]") {
  const int64_t saved_spin = cpu::spin_microseconds();
  test::ThreadCountGuard threads;
  cpu::set_num_threads(3);
  for (int64_t spin : {int64_t{0}, int64_t{50}, int64_t{100000}}) {
    INFO("spin " << spin << " us");
    cpu::set_spin_microseconds(spin);
    CHECK(cpu::spin_microseconds() == spin);
    for (int round = 0; round < 200; ++round) {
      std::atomic<int64_t> sum{0};
      cpu::parallel_for(64, 1, [&](int64_t c, int64_t, int64_t) { sum += c; });
      REQUIRE(sum.load() == 2016);
      // Now and then a pause past a short spin: the next region must wake sleeping workers.
      if (round % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  }
  cpu::set_spin_microseconds(-5);  // clamped
  CHECK(cpu::spin_microseconds() == 0);
  cpu::set_spin_microseconds(int64_t{1} << 40);
  CHECK(cpu::spin_microseconds() == 100000);
  cpu::set_spin_microseconds(saved_spin);
}

// Run only by the CTest tests cpu_spin_env_*, each a process of its own: KILN_CPU_SPIN_US is read
// once, when the kernels library loads. The warning for a bad value is checked on the output.
TEST_CASE("parallel_for: KILN_CPU_SPIN_US sets how long idle threads poll", "[.cpu_spin_env]") {
  const char* expected = std::getenv("KILN_TEST_EXPECTED_SPIN_US");
  REQUIRE(expected != nullptr);
  CHECK(cpu::spin_microseconds() == std::stoll(expected));
}

TEST_CASE("reductions give identical bits for any thread count", "[parallel]") {
  manual_seed(11);
  Tensor x = randn({3, 300001});
  Tensor big = randn({1000003});
  int threads = cpu::num_threads();
  std::vector<std::vector<float>> results;
  for (int t : {1, 2, 3, 5}) {
    cpu::set_num_threads(t);
    results.push_back(sum(big).to_vector<float>());
    std::vector<float> rows = sum(x, {1}).to_vector<float>();
    std::vector<float> v = var(big).to_vector<float>();
    results.back().insert(results.back().end(), rows.begin(), rows.end());
    results.back().insert(results.back().end(), v.begin(), v.end());
  }
  cpu::set_num_threads(threads);
  for (size_t i = 1; i < results.size(); ++i) CHECK(results[i] == results[0]);
}

TEST_CASE("nd_rows visits the offsets nd_loop visits, a run of the innermost dim at a time", "[parallel]") {
  // Shapes with transposed, broadcast (stride 0) and padded strides; every [begin, end) split.
  const int64_t sizes[3] = {3, 4, 5};
  const int64_t out_strides[3] = {20, 5, 1}, a_strides[3] = {1, 3, 12}, b_strides[3] = {0, 7, 0};
  const int64_t* strides[3] = {out_strides, a_strides, b_strides};
  for (int ndim : {0, 1, 2, 3}) {
    const int64_t* sz = sizes + (3 - ndim);
    const int64_t* st[3] = {strides[0] + (3 - ndim), strides[1] + (3 - ndim), strides[2] + (3 - ndim)};
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= sz[d];
    for (int64_t begin = 0; begin <= n; begin += 3) {
      for (int64_t end = begin; end <= n; end += 7) {
        INFO("ndim " << ndim << " [" << begin << ", " << end << ")");
        std::vector<std::array<int64_t, 3>> expect, got;
        cpu::nd_loop<3>(ndim, sz, st, begin, end, [&](const int64_t* off) { expect.push_back({off[0], off[1], off[2]}); });
        cpu::nd_rows<3>(ndim, sz, st, begin, end, [&](const int64_t* off, int64_t count, const int64_t* inner) {
          for (int64_t i = 0; i < count; ++i) {
            got.push_back({off[0] + i * inner[0], off[1] + i * inner[1], off[2] + i * inner[2]});
          }
        });
        CHECK(got == expect);
      }
    }
  }
}

TEST_CASE("sum and mean over the leading dims add each output's values in order, in double", "[parallel]") {
  // Outputs contiguous in the input take the row-at-a-time path (kernels/cpu/reduce.cpp); it must
  // give the bits of one sequential double sum per output. Widths past 256 cut the row into blocks.
  manual_seed(12);
  struct Case {
    std::vector<int64_t> shape;
    std::vector<int64_t> dims;
    bool keepdim;
    DType dtype;
  };
  const std::vector<Case> cases = {
      {{1000, 300}, {0}, false, DType::Float32}, {{7, 9, 520}, {0, 1}, false, DType::Float32},
      {{40, 1, 33}, {0}, true, DType::Float32},  {{6, 11, 20}, {1}, false, DType::Float64},
      {{64, 24}, {0}, false, DType::Float16},    {{5, 600, 3}, {1}, false, DType::Float32},
  };
  for (const Case& c : cases) {
    for (bool mean : {false, true}) {
      INFO("shape " << c.shape[0] << "x" << c.shape[1] << " dtype " << dtype_name(c.dtype) << " mean " << mean);
      Tensor x = randn(c.shape).to(c.dtype);
      Tensor got = mean ? kiln::mean(x, c.dims, c.keepdim) : kiln::sum(x, c.dims, c.keepdim);
      // The reference: each output's values in row-major order of the reduced dims, summed in double.
      Tensor xd = x.to(DType::Float64);
      std::vector<double> v = xd.to_vector_double();
      const int64_t d0 = c.shape[0], d1 = c.shape[1], d2 = c.shape.size() > 2 ? c.shape[2] : 1;
      auto at = [&](int64_t i, int64_t j, int64_t k) { return v[static_cast<size_t>((i * d1 + j) * d2 + k)]; };
      std::vector<double> expect;
      if (c.dims == std::vector<int64_t>{0}) {
        for (int64_t j = 0; j < d1; ++j) {
          for (int64_t k = 0; k < d2; ++k) {
            double s = 0;
            for (int64_t i = 0; i < d0; ++i) s += at(i, j, k);
            expect.push_back(mean ? s / static_cast<double>(d0) : s);
          }
        }
      } else if (c.dims == std::vector<int64_t>{1}) {
        for (int64_t i = 0; i < d0; ++i) {
          for (int64_t k = 0; k < d2; ++k) {
            double s = 0;
            for (int64_t j = 0; j < d1; ++j) s += at(i, j, k);
            expect.push_back(mean ? s / static_cast<double>(d1) : s);
          }
        }
      } else {  // {0, 1}
        for (int64_t k = 0; k < d2; ++k) {
          double s = 0;
          for (int64_t i = 0; i < d0; ++i) {
            for (int64_t j = 0; j < d1; ++j) s += at(i, j, k);
          }
          expect.push_back(mean ? s / static_cast<double>(d0 * d1) : s);
        }
      }
      // Rounded once to the dtype, as the kernel stores it.
      CHECK(got.to_vector_double() == tensor(expect).to(c.dtype).to_vector_double());
    }
  }
}
