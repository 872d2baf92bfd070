// Generators: explicit generators for every random op, thread safety, and the graph-capture draws
// (GeneratorCapture) that make a replayed CUDA graph draw new numbers. The capture mechanism is the
// same for every device, so its bookkeeping and the kernels' run-time reading of the seed and offset
// are checked here on the CPU; tests/cuda/test_graph_capture.cpp runs it inside real CUDA graphs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <thread>
#include <vector>

#include "core/kiln.h"
#include "core/ops/helpers.h"
#include "kernels/dropout.h"
#include "kernels/random.h"

using namespace kiln;

namespace {

std::vector<float> values_of(const Tensor& t) { return t.to_vector<float>(); }

// `draw` run against a fresh default generator seeded with `seed`, and against a fresh Generator
// of the same seed: the two must agree, and the default generator must not move in the second run.
template <typename Draw> void check_explicit_generator(const char* what, Draw draw) {
  INFO(what);
  manual_seed(77);
  const std::vector<float> with_default = values_of(draw(std::optional<Generator>()));
  manual_seed(5);
  const PhiloxState before = default_generator().state();
  Generator g(77);
  const std::vector<float> with_own = values_of(draw(std::optional<Generator>(g)));
  CHECK(with_default == with_own);
  CHECK(default_generator().state().offset == before.offset);
  CHECK(g.state().offset == 1);  // one op, one draw
}

}  // namespace

TEST_CASE("random ops take an optional generator and draw from it alone", "[random]") {
  const Tensor x = ones({6, 5});
  check_explicit_generator("rand", [](auto g) { return rand({7, 3}, {}, g); });
  check_explicit_generator("randn", [](auto g) { return randn({7, 3}, {}, g); });
  check_explicit_generator("randint", [](auto g) { return randint(0, 100, {9}, DType::Int64, g).to(DType::Float32); });
  check_explicit_generator("uniform_", [](auto g) { return empty({11}).uniform_(-1, 1, g); });
  check_explicit_generator("normal_", [](auto g) { return empty({11}).normal_(2, 3, g); });
  check_explicit_generator("dropout", [&](auto g) { return dropout(x, 0.5, true, g); });
  check_explicit_generator("multinomial", [](auto g) {
    return multinomial(tensor({0.1f, 0.2f, 0.3f, 0.4f}), 3, false, g).to(DType::Float32);
  });
  const Tensor q = randn({2, 4, 8}), k = randn({2, 4, 8}), v = randn({2, 4, 8});
  check_explicit_generator("scaled_dot_product_attention",
                           [&](auto g) { return scaled_dot_product_attention(q, k, v, Tensor(), 0.3, false, {}, g); });
}

TEST_CASE("a generator of another device is refused, naming the op", "[random]") {
  const Generator cuda_gen(1, Device::cuda(0));  // never touches CUDA: a generator is two integers
  const Tensor x = ones({4});
  CHECK_THROWS_WITH(rand({3}, {}, cuda_gen), Catch::Contains("rand") && Catch::Contains("cuda:0"));
  CHECK_THROWS_WITH(dropout(x, 0.5, true, cuda_gen), Catch::Contains("dropout") && Catch::Contains("cuda:0"));
  CHECK_THROWS_AS(multinomial(x, 1, false, cuda_gen), DeviceError);
  // Not training, or p == 0: nothing is drawn, so nothing is checked either (as for the default).
  CHECK(dropout(x, 0.5, false, cuda_gen).data_ptr() == x.data_ptr());
}

TEST_CASE("two threads drawing from their own generators get what one thread would", "[random]") {
  const int draws = 200;
  auto run = [&](uint64_t seed, std::vector<std::vector<float>>& out) {
    Generator g(seed);
    for (int i = 0; i < draws; ++i) out.push_back(values_of(rand({64}, {}, g)));
  };
  std::vector<std::vector<float>> one_a, one_b, two_a, two_b;
  run(1, one_a);
  run(2, one_b);
  std::thread ta([&] { run(1, two_a); });
  std::thread tb([&] { run(2, two_b); });
  ta.join();
  tb.join();
  CHECK(two_a == one_a);
  CHECK(two_b == one_b);
  CHECK(one_a != one_b);
}

TEST_CASE("threads sharing one generator take distinct offsets", "[random]") {
  Generator shared(9);
  const int per_thread = 5000;
  std::vector<uint64_t> a, b;
  std::thread ta([&] {
    for (int i = 0; i < per_thread; ++i) a.push_back(shared.next().offset);
  });
  std::thread tb([&] {
    for (int i = 0; i < per_thread; ++i) b.push_back(shared.next().offset);
  });
  ta.join();
  tb.join();
  std::set<uint64_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  CHECK(all.size() == static_cast<size_t>(2 * per_thread));  // no offset handed out twice
  CHECK(*all.rbegin() == static_cast<uint64_t>(2 * per_thread - 1));
  CHECK(shared.state().offset == static_cast<uint64_t>(2 * per_thread));
}

TEST_CASE("a captured draw reads its seed and offset when the kernel runs", "[random]") {
  // The kernels resolve PhiloxState::base at run time: the same draw gives other numbers once the
  // base words change, and the numbers of the eager draw at that seed and offset.
  uint64_t base[2] = {123, 40};
  const PhiloxState captured{0, 2, base};
  std::vector<float> out(257), in(257, 1.0f);
  auto arg = [](std::vector<float>& v) {
    StridedArg a;
    a.data = v.data();
    a.ndim = 1;
    a.sizes[0] = static_cast<int64_t>(v.size());
    a.strides[0] = 1;
    return a;
  };
  auto mask = [&](const PhiloxState& s) {
    dropout_cpu(arg(out), arg(in), 0.5, s, KernelContext{});
    return out;
  };
  const std::vector<float> first = mask(captured);
  CHECK(first == mask(PhiloxState{123, 42}));
  base[1] = 41;
  const std::vector<float> second = mask(captured);
  CHECK(second == mask(PhiloxState{123, 43}));
  CHECK(first != second);
  base[0] = 124;
  CHECK(mask(captured) == mask(PhiloxState{124, 43}));
}

TEST_CASE("a generator capture hands out graph draws and replays advance the generator like eager steps",
          "[random]") {
  const Tensor x = ones({512});
  Generator g(2024);
  // Eager: three steps of two random ops each.
  std::vector<std::vector<float>> eager;
  {
    Generator e(2024);
    for (int step = 0; step < 3; ++step) {
      eager.push_back(values_of(dropout(x, 0.3, true, e)));
      eager.push_back(values_of(rand({33}, {}, e)));
    }
  }
  // "Capture" one step: the ops' draws are kept (on the CPU the kernels run at once, so the graph
  // is replayed here by running the kernels again on the kept draws).
  std::vector<PhiloxState> draws;
  GeneratorCapture capture(Device::cpu());
  draws.push_back(g.next());
  draws.push_back(g.next());
  capture.end();
  CHECK(g.state().offset == 0);  // capturing draws nothing from the generator
  REQUIRE(capture.generators() == 1);
  CHECK(capture.draws(0) == 2);
  CHECK(draws[0].base != nullptr);
  CHECK(draws[0].base == draws[1].base);
  CHECK(draws[1].offset == draws[0].offset + 1);
  CHECK(g.next().base == nullptr);  // after end(), draws are the generator's again
  g.set_state(PhiloxState{2024, 0});

  auto replay_step = [&] {
    capture.prepare_replay();
    Tensor a = empty({512}), b = empty({33});
    dropout_cpu(ops::make_arg("test", a), ops::make_arg("test", x), 0.3, draws[0], KernelContext{});
    random_cpu(ops::make_arg("test", b), RandomDist::Uniform, RandomParams{0.0, 1.0}, draws[1], KernelContext{});
    return std::vector<std::vector<float>>{values_of(a), values_of(b)};
  };
  for (int step = 0; step < 3; ++step) {
    INFO("replay " << step);
    const auto r = replay_step();
    CHECK(r[0] == eager[static_cast<size_t>(2 * step)]);
    CHECK(r[1] == eager[static_cast<size_t>(2 * step + 1)]);
  }
  CHECK(eager[0] != eager[2]);  // consecutive replays drew different masks
  CHECK(g.state().offset == 6);
}

TEST_CASE("a capture keeps only its own thread's draws", "[random]") {
  // CUDA graphs capture in thread-local mode: a data loader's thread may draw meanwhile (its own
  // augmentation), and its draws must neither come from the capture's buffer nor count as the graph's.
  Generator g(7, Device::cpu());
  GeneratorCapture capture(Device::cpu());
  const PhiloxState mine = g.next();
  PhiloxState theirs{};
  std::thread loader([&] { theirs = g.next(); });
  loader.join();
  capture.end();
  CHECK(mine.base != nullptr);
  CHECK(theirs.base == nullptr);  // an ordinary draw: the generator's own offset
  CHECK(theirs.offset == 0);
  CHECK(g.state().offset == 1);
  REQUIRE(capture.generators() == 1);
  CHECK(capture.draws(0) == 1);
}

TEST_CASE("one capture per device at a time", "[random]") {
  GeneratorCapture first(Device::cpu());
  CHECK_THROWS_AS(GeneratorCapture(Device::cpu()), Error);
  first.end();
  GeneratorCapture second(Device::cpu());  // the device is free again
  CHECK(second.generators() == 0);
}

TEST_CASE("a generator's position rewinds its host offset, or a capture's draw count", "[random]") {
  Generator g(99);
  g.next();
  g.next();
  CHECK(g.position() == 2);
  const PhiloxState third = g.next();
  g.set_position(2);
  CHECK(g.next().offset == third.offset);  // the same draw again
  CHECK(g.state().seed == 99);

  // Inside a capture the position is the capture's count k of this generator's draws.
  g.set_state(PhiloxState{99, 10});
  GeneratorCapture capture(Device::cpu());
  CHECK(g.position() == 0);
  const PhiloxState k0 = g.next();
  const PhiloxState k1 = g.next();
  CHECK(g.position() == 2);
  g.set_position(1);                        // rewind: what a recompute does
  CHECK(g.next().offset == k1.offset);      // the draw forward made, again
  CHECK(g.position() == 2);
  g.set_position(0);
  CHECK(g.next().offset == k0.offset);
  g.set_position(2);                        // put back
  capture.end();
  CHECK(g.state().offset == 10);            // the host state never moved
  REQUIRE(capture.generators() == 1);
  CHECK(capture.draws(0) == 2);             // a replay takes the draws of the most the capture reached
  capture.prepare_replay();
  CHECK(g.state().offset == 12);
}

TEST_CASE("uniform draws stay below high in every floating dtype, exactly as each dtype holds them", "[random]") {
  // float16 and bfloat16 keep 11 and 8 significant bits: a float32 draw near 1 rounds up to 1 there
  // unless the draw takes only the bits the dtype holds.
  manual_seed(3);
  for (const auto& [dtype, digits] : {std::pair{DType::Float16, 11}, std::pair{DType::BFloat16, 8},
                                      std::pair{DType::Float32, 24}, std::pair{DType::Float64, 53}}) {
    INFO(dtype_name(dtype));
    const std::vector<double> v = rand({1 << 18}, TensorOptions(dtype)).to_vector_double();
    const double grid = std::ldexp(1.0, digits);
    bool below_one = true, on_grid = true;
    double top = 0.0;
    for (const double x : v) {
      below_one = below_one && x >= 0.0 && x < 1.0;
      on_grid = on_grid && std::floor(x * grid) == x * grid;
      top = std::max(top, x);
    }
    CHECK(below_one);
    CHECK(on_grid);
    if (digits <= 11) CHECK(top == 1.0 - 1.0 / grid);  // 2^18 draws reach the last step of the grid
  }
  // A range narrow against the spacing of the values near high: the sum a + (b - a) u rounds to b
  // for u near 1 unless capped at the largest value below b.
  const struct {
    DType dtype;
    double low, high, cap;
  } narrow[] = {{DType::Float32, 1000.0, 1001.0, 1001.0 - 1.0 / 16384}, {DType::Float16, 1000.0, 1001.0, 1000.5},
                {DType::BFloat16, 1000.0, 1004.0, 1000.0}, {DType::BFloat16, -1004.0, -1000.0, -1004.0},
                {DType::Float64, 1e16, 1e16 + 4.0, 1e16 + 2.0}};
  for (const auto& c : narrow) {
    INFO(dtype_name(c.dtype) << " [" << c.low << ", " << c.high << ")");
    CHECK(uniform_cap(c.low, c.high, c.dtype) == c.cap);
    Tensor t = empty({1 << 18}, TensorOptions(c.dtype));
    t.uniform_(c.low, c.high);
    const std::vector<double> v = t.to_vector_double();
    CHECK(*std::min_element(v.begin(), v.end()) >= c.low);
    CHECK(*std::max_element(v.begin(), v.end()) == c.cap);
  }
  // low == high: every value is low.
  Tensor same = empty({64}, TensorOptions(DType::BFloat16));
  same.uniform_(2.5, 2.5);
  CHECK(same.to_vector_double() == std::vector<double>(64, 2.5));
  CHECK(uniform_cap(0.0, 1.0, DType::BFloat16) == 1.0 - 1.0 / 256);
  CHECK(uniform_cap(-1.0, 0.0, DType::Float16) == -std::ldexp(1.0, -24));  // below zero: the smallest negative
  // float64's step down, done on the bits (std::nextafter is host code only), at each sign and zero.
  for (double high : {1.0, -1.0, 0.0, 1e-310, -1e300, 3.0e300}) {
    INFO("high " << high);
    CHECK(uniform_cap(high - 1e300 - 1.0, high, DType::Float64) == std::nextafter(high, -INFINITY));
  }
}

TEST_CASE("randint takes its int64 bounds exactly, past 2^53 and across the whole int64 range", "[random]") {
  manual_seed(11);
  const int64_t base = int64_t{1} << 60;
  // Through double, [2^60 + 100, 2^60 + 200) was [2^60, 2^60 + 256), and [2^62, 2^62 + 10) a range of
  // 0 (a division by zero).
  for (const auto& [low, high] :
       {std::pair{base + 100, base + 200}, std::pair{base * 4, base * 4 + 10},
        std::pair{std::numeric_limits<int64_t>::max() - 3, std::numeric_limits<int64_t>::max()}}) {
    INFO("[" << low << ", " << high << ")");
    const std::vector<int64_t> v = randint(low, high, {4096}, DType::Int64).to_vector<int64_t>();
    CHECK(*std::min_element(v.begin(), v.end()) == low);  // 4096 draws reach both ends of a small range
    CHECK(*std::max_element(v.begin(), v.end()) == high - 1);
  }
  const std::vector<int64_t> all =
      randint(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), {4096}, DType::Int64)
          .to_vector<int64_t>();
  const auto negative = std::count_if(all.begin(), all.end(), [](int64_t x) { return x < 0; });
  CHECK(negative > 1800);  // about half
  CHECK(negative < 2300);
}

TEST_CASE("uniform_ refuses a range its dtype cannot hold, which would make every draw high", "[random]") {
  Tensor f = empty({8});
  CHECK_THROWS_WITH(f.uniform_(-3e38, 3e38), Catch::Contains("uniform_") && Catch::Contains("float32"));
  Tensor d = empty({8}, DType::Float64);
  CHECK_THROWS_WITH(d.uniform_(-1.7e308, 1.7e308), Catch::Contains("uniform_") && Catch::Contains("float64"));
  Tensor h = empty({8}, DType::Float16);
  CHECK_THROWS_WITH(h.uniform_(-1e5, 1.0), Catch::Contains("uniform_") && Catch::Contains("float16"));
  // The widest ranges that fit still draw both signs.
  f.uniform_(-1.5e38, 1.5e38);
  d.uniform_(-8e307, 8e307);
  h.uniform_(-65504.0, 65504.0);
  for (const Tensor& t : {f, d, h}) {
    const std::vector<double> v = t.to_vector_double();
    CHECK(*std::min_element(v.begin(), v.end()) < 0.0);
    CHECK(*std::max_element(v.begin(), v.end()) > 0.0);
  }
}
