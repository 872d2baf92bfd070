// The DataLoader: sampler order whatever the workers do, batches independent of num_workers and
// prefetch, exact resume from a saved position, errors and timeouts that name the sample, and
// shutdown (end of epoch, break, destruction mid-epoch, an exception in the loop) without a hang.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "data/loader.h"
#include "data/prefetcher.h"
#include "data/sampler.h"

using namespace kiln;
using namespace kiln::data;

namespace {

// Sample i: data [i, a random draw of i's generator] (float64), target i. Samples may be slow or
// fail on request.
class ProbeDataset final : public Dataset {
 public:
  explicit ProbeDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override {
    check_index("ProbeDataset", index, n_);
    ++calls;
    if (index == fail_at) throw IOError("probe: cannot read sample file " + std::to_string(index));
    if (index == autograd_fail_at) throw AutogradError("probe: a transform's backward failed");
    if (index == slow_at) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
    // Jitter the workers' finishing order so ordering bugs would show.
    if (jitter && index % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200 * (index % 5)));
    const PhiloxState s = sample_generator().next();
    const double draw = static_cast<double>(philox_block(s.seed, s.offset, 0).v[0]);
    std::vector<double> data{static_cast<double>(index), draw};
    if (index == longer_at) data.push_back(0.0);  // one value more than the others
    return {tensor(data, {static_cast<int64_t>(data.size())}, TensorOptions(DType::Float64)),
            scalar_tensor(index, TensorOptions(DType::Int64))};
  }
  int64_t n_;
  int64_t fail_at = -1, autograd_fail_at = -1, slow_at = -1, slow_ms = 0, longer_at = -1;
  bool jitter = false;
  mutable std::atomic<int64_t> calls{0};
};

// Every batch of the rest of the current epoch, as flat vectors of (data, target) values.
std::vector<std::vector<double>> drain(DataLoader& loader) {
  std::vector<std::vector<double>> out;
  for (Example& b : loader) {
    std::vector<double> v = b.data.to_vector<double>();
    for (int64_t t : b.target.to_vector<int64_t>()) v.push_back(static_cast<double>(t));
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<int64_t> first_indices(const std::vector<std::vector<double>>& batches) {
  std::vector<int64_t> idx;
  for (const auto& b : batches) {
    const size_t rows = b.size() / 3;  // each row: 2 data values, then the targets
    for (size_t k = 0; k < rows; ++k) idx.push_back(static_cast<int64_t>(b[2 * k]));
  }
  return idx;
}

DataLoaderOptions opts(int64_t batch, int64_t workers, bool shuffle = false, uint64_t seed = 7) {
  DataLoaderOptions o;
  o.batch_size = batch;
  o.num_workers = workers;
  o.shuffle = shuffle;
  o.seed = seed;
  return o;
}

}  // namespace

TEST_CASE("DataLoader: sequential and shuffled orders, batch sizes and drop_last", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(23);
  for (int64_t workers : {0, 2}) {
    DataLoader seq(ds, opts(5, workers));
    CHECK(seq.size() == 5);
    auto batches = drain(seq);
    REQUIRE(batches.size() == 5);
    CHECK(batches.back().size() == 3 * 3);  // 3 samples: 2 data values and a target each
    std::vector<int64_t> expect(23);
    for (int64_t i = 0; i < 23; ++i) expect[static_cast<size_t>(i)] = i;
    CHECK(first_indices(batches) == expect);
    CHECK(seq.position().epoch == 1);
    CHECK(seq.position().batch == 0);

    DataLoaderOptions o = opts(5, workers, /*shuffle=*/true);
    o.drop_last = true;
    DataLoader shuf(ds, o);
    CHECK(shuf.size() == 4);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      auto b = drain(shuf);
      REQUIRE(b.size() == 4);
      std::vector<int64_t> perm = epoch_permutation(23, 7, epoch);
      perm.resize(20);
      CHECK(first_indices(b) == perm);
    }
  }
}

TEST_CASE("DataLoader: batches do not depend on num_workers, prefetch or thread timing", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(61);
  ds->jitter = true;
  std::vector<std::vector<double>> reference;
  for (int64_t workers : {0, 1, 3, 4}) {
    for (int64_t prefetch : {1, 3}) {
      DataLoaderOptions o = opts(4, workers, /*shuffle=*/true, /*seed=*/99);
      o.prefetch_factor = prefetch;
      DataLoader loader(ds, o);
      auto e0 = drain(loader);
      auto e1 = drain(loader);
      e0.insert(e0.end(), e1.begin(), e1.end());
      if (reference.empty()) {
        reference = e0;
        continue;
      }
      INFO("workers " << workers << ", prefetch " << prefetch);
      CHECK(e0 == reference);  // bit for bit: the draws are per sample, keyed by (seed, epoch, index)
    }
  }
  // A different seed draws differently, and the same sample draws differently in another epoch.
  DataLoader other(ds, opts(4, 2, true, 100));
  CHECK(drain(other) != std::vector<std::vector<double>>(reference.begin(), reference.begin() + 16));
  DataLoader seq(ds, opts(61, 0));
  auto a = drain(seq), b = drain(seq);
  CHECK(a[0][1] != b[0][1]);
  CHECK(a[0][0] == b[0][0]);
}

TEST_CASE("DataLoader: a saved position resumes bit for bit", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(40);
  DataLoaderOptions o = opts(6, 2, /*shuffle=*/true, /*seed=*/5);
  DataLoader whole(ds, o);
  auto e0 = drain(whole), e1 = drain(whole);
  std::vector<std::vector<double>> all = e0;
  all.insert(all.end(), e1.begin(), e1.end());

  DataLoader first(ds, o);
  std::vector<std::vector<double>> got;
  for (int k = 0; k < 3; ++k) {
    Example b = *first.next();
    std::vector<double> v = b.data.to_vector<double>();
    for (int64_t t : b.target.to_vector<int64_t>()) v.push_back(static_cast<double>(t));
    got.push_back(v);
  }
  const auto state = first.state();
  CHECK(state.at("loader_epoch") == 0);
  CHECK(state.at("loader_batch") == 3);

  o.num_workers = 3;  // a resumed run may use another number of workers
  DataLoader resumed(ds, o);
  resumed.load_state(state);
  auto rest = drain(resumed), next_epoch = drain(resumed);
  got.insert(got.end(), rest.begin(), rest.end());
  got.insert(got.end(), next_epoch.begin(), next_epoch.end());
  CHECK(got == all);

  // A state of another seed, batch size or dataset is refused, naming what differs.
  DataLoader wrong_seed(ds, opts(6, 0, true, 6));
  CHECK_THROWS_WITH(wrong_seed.load_state(state), Catch::Contains("seed 5, this one 6"));
  DataLoader wrong_batch(ds, opts(7, 0, true, 5));
  CHECK_THROWS_WITH(wrong_batch.load_state(state), Catch::Contains("batch size 6, this one 7"));
  // A loader that cuts the epoch into other batches (here a distributed sampler's share).
  DataLoaderOptions shard = opts(6, 0, false, 5);
  shard.sampler = std::make_shared<DistributedSampler>(40, 2, 0, /*shuffle=*/true, /*seed=*/5);
  DataLoader other_sampler(ds, shard);
  CHECK_THROWS_WITH(other_sampler.load_state(state), Catch::Contains("batches per epoch 7, this one 4"));
  auto bad = state;
  bad["loader_batch"] = 99;
  CHECK_THROWS_AS(resumed.load_state(bad), IndexError);
  bad.erase("loader_epoch");
  CHECK_THROWS_WITH(resumed.load_state(bad), Catch::Contains("no 'loader_epoch'"));
}

TEST_CASE("DataLoader: a failing sample is an error of its kind naming the sample", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(30);
  ds->fail_at = 17;
  for (int64_t workers : {0, 2}) {
    DataLoader loader(ds, opts(4, workers));
    int delivered = 0;
    try {
      for (Example& b : loader) {
        (void)b;
        ++delivered;
      }
      FAIL("no error");
    } catch (const IOError& e) {
      const std::string what = e.what();
      CHECK_THAT(what, Catch::Contains("sample 17 (batch 4 of epoch 0)"));
      CHECK_THAT(what, Catch::Contains("probe: cannot read sample file 17"));
    }
    CHECK(delivered == 4);
    CHECK(loader.position().batch == 4);  // the failed batch is next again
    CHECK_THROWS_AS(loader.next(), IOError);
    loader.set_position({0, 5});  // skipping it, the rest of the epoch reads
    CHECK(drain(loader).size() == 3);
  }
  // Every kind keeps its class (an AutogradError once came back as a plain Error).
  auto autograd = std::make_shared<ProbeDataset>(8);
  autograd->autograd_fail_at = 5;
  for (int64_t workers : {0, 2}) {
    DataLoader loader(autograd, opts(4, workers));
    CHECK(loader.next().has_value());
    CHECK_THROWS_AS(loader.next(), AutogradError);
  }
  // A sample of another shape: the collate error names it by its place in the batch, and the
  // context says which dataset samples those places hold.
  auto longer = std::make_shared<ProbeDataset>(8);
  longer->longer_at = 4;
  for (int64_t workers : {0, 2}) {
    DataLoader loader(longer, opts(3, workers));
    CHECK(loader.next().has_value());
    CHECK_THROWS_WITH(loader.next(), Catch::Contains("collating batch 1 of epoch 0 (its samples 0.. are dataset "
                                                     "samples 3, 4, 5)") &&
                                         Catch::Contains("data of sample 1 is [3] but that of sample 0 is [2]"));
  }
}

TEST_CASE("DataLoader: a stuck worker becomes an error after the timeout", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(16);
  ds->slow_at = 9;
  ds->slow_ms = 600;
  DataLoaderOptions o = opts(2, 2);
  o.timeout = 0.1;
  const auto t0 = std::chrono::steady_clock::now();
  {
    DataLoader loader(ds, o);
    CHECK(loader.next().has_value());
    CHECK(loader.next().has_value());
    CHECK(loader.next().has_value());
    CHECK(loader.next().has_value());
    CHECK_THROWS_WITH(loader.next(), Catch::Contains("batch 4 of epoch 0 was not ready after the timeout"));
  }  // the destructor waits for the stuck get() to return, then joins
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s < 5.0);
}

// The error does not wait for the stuck get(): a worker stops only between samples, and the loader
// leaves it to finish while a new set of workers carries on. (Once, the error waited for every
// worker to stop, so a get() that never returned hid it forever.) The stuck sample takes 4 s; the
// errors must come well before it returns.
TEST_CASE("DataLoader: an error or a timeout does not wait for a stuck worker", "[data][loader]") {
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  auto ds = std::make_shared<ProbeDataset>(16);
  ds->slow_at = 9;
  ds->slow_ms = 4000;
  SECTION("a timeout") {
    DataLoaderOptions o = opts(2, 2);
    o.timeout = 0.1;
    DataLoader loader(ds, o);
    for (int k = 0; k < 4; ++k) CHECK(loader.next().has_value());
    const auto t0 = Clock::now();
    CHECK_THROWS_WITH(loader.next(), Catch::Contains("batch 4 of epoch 0 was not ready after the timeout"));
    CHECK(seconds_since(t0) < 2.0);
    CHECK(loader.live_workers() == 0);  // the stuck worker's set is retired, not running
    loader.set_position({0, 5});        // past the stuck batch, new workers read the rest
    CHECK(drain(loader).size() == 3);
  }
  SECTION("a failing sample while another worker is stuck") {
    ds->fail_at = 6;  // batch 3, read while sample 9 (batch 4) is stuck
    DataLoader loader(ds, opts(2, 2));
    for (int k = 0; k < 3; ++k) CHECK(loader.next().has_value());
    const auto t0 = Clock::now();
    CHECK_THROWS_AS(loader.next(), IOError);
    CHECK(seconds_since(t0) < 2.0);
  }
}

TEST_CASE("DataLoader: break, destruction mid-epoch and exceptions in the loop join the workers",
          "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(200);
  ds->jitter = true;
  SECTION("break leaves the position; the next loop continues") {
    DataLoader loader(ds, opts(8, 3));
    int n = 0;
    for (Example& b : loader) {
      (void)b;
      if (++n == 2) break;
    }
    CHECK(loader.position().batch == 2);
    CHECK(drain(loader).size() == 23);
    CHECK(loader.live_workers() == 0);  // not persistent: joined at the epoch's end
  }
  SECTION("persistent workers stay between epochs") {
    DataLoaderOptions o = opts(8, 3);
    o.persistent_workers = true;
    DataLoader loader(ds, o);
    drain(loader);
    CHECK(loader.live_workers() == 3);
    CHECK(drain(loader).size() == 25);
  }
  SECTION("destroyed mid-epoch with batches in flight") {
    for (int rep = 0; rep < 20; ++rep) {
      DataLoaderOptions o = opts(4, 4);
      o.prefetch_factor = 4;
      DataLoader loader(ds, o);
      (void)loader.next();
    }
    SUCCEED("twenty loaders destroyed mid-epoch without a hang");
    CHECK(ds->calls.load() > 0);
  }
  SECTION("an exception in the training loop") {
    auto run = [&] {
      DataLoader loader(ds, opts(8, 2));
      for (Example& b : loader) {
        if (b.target.to_vector<int64_t>()[0] >= 40) throw std::runtime_error("the step failed");
      }
    };
    CHECK_THROWS_WITH(run(), "the step failed");
  }
}

// While the caller works on a batch, workers * prefetch_factor batches after it are read (as
// PyTorch's DataLoader keeps them): with batches of one sample, the samples read settle at the
// batches handed out plus that window, and no further.
TEST_CASE("DataLoader: workers * prefetch_factor batches in flight while the caller works", "[data][loader]") {
  const auto [workers, prefetch] = GENERATE(table<int64_t, int64_t>({{1, 1}, {2, 2}, {3, 1}}));
  INFO(workers << " workers, prefetch_factor " << prefetch);
  auto ds = std::make_shared<ProbeDataset>(40);
  DataLoaderOptions o = opts(1, workers);
  o.prefetch_factor = prefetch;
  DataLoader loader(ds, o);
  const int64_t window = workers * prefetch;
  for (int64_t taken = 1; taken <= 3; ++taken) {
    (void)loader.next();
    const int64_t want = taken + window;
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ds->calls.load() < want && std::chrono::steady_clock::now() < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // room for a read past the window to show
    CHECK(ds->calls.load() == want);
  }
}

TEST_CASE("DataLoader: collate, samplers and options", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(10);
  SECTION("a custom collate sees the samples in order") {
    DataLoaderOptions o = opts(3, 2);
    o.collate = [](std::vector<Example>& samples, bool pin) {
      CHECK_FALSE(pin);
      std::vector<int64_t> ids;
      for (auto& s : samples) ids.push_back(s.target.item<int64_t>());
      return Example{tensor(ids, {static_cast<int64_t>(ids.size())}, TensorOptions(DType::Int64)), Tensor()};
    };
    DataLoader loader(ds, o);
    std::vector<int64_t> seen;
    for (Example& b : loader) {
      CHECK_FALSE(b.target.defined());
      for (int64_t v : b.data.to_vector<int64_t>()) seen.push_back(v);
    }
    CHECK(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  }
  SECTION("a distributed sampler's share") {
    DataLoaderOptions o = opts(2, 1);
    o.sampler = std::make_shared<DistributedSampler>(10, 3, 1, /*shuffle=*/false);
    DataLoader loader(ds, o);
    auto b = drain(loader);
    CHECK(first_indices(b) == std::vector<int64_t>{1, 4, 7, 0});  // padded from the start
  }
  SECTION("default_collate refuses mismatched samples, naming them") {
    std::vector<Example> s{{zeros({2, 3}), Tensor()}, {zeros({3, 2}), Tensor()}};
    CHECK_THROWS_WITH(default_collate(s, false),
                      Catch::Contains("data of sample 1 is [3, 2] but that of sample 0 is [2, 3]"));
    std::vector<Example> d{{zeros({2}), Tensor()}, {zeros({2}, TensorOptions(DType::Int64)), Tensor()}};
    CHECK_THROWS_AS(default_collate(d, false), DTypeError);
    std::vector<Example> u{{zeros({2}), zeros({})}, {zeros({2}), Tensor()}};
    CHECK_THROWS_WITH(default_collate(u, false), Catch::Contains("target of sample 0 is defined"));
    std::vector<Example> none;
    CHECK_THROWS_AS(default_collate(none, false), Error);
    // Non-contiguous samples are stacked by value.
    Tensor base = arange(0, 6, 1, TensorOptions(DType::Float32)).view({2, 3});
    std::vector<Example> t{{base.transpose(0, 1), Tensor()}, {base.transpose(0, 1), Tensor()}};
    Example out = default_collate(t, false);
    CHECK(out.data.sizes() == Shape{2, 3, 2});
    CHECK(out.data.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5, 0, 3, 1, 4, 2, 5});
    // Samples of one dense layout keep it: [C, H, W] views of HWC images make a channels-last batch,
    // copied block by block; samples whose layouts differ are stacked contiguous.
    Tensor hwc = arange(0, 24, 1, TensorOptions(DType::Float32)).view({2, 4, 3});  // H 2, W 4, C 3
    Tensor chw = hwc.permute({2, 0, 1});
    std::vector<Example> images{{chw, Tensor()}, {chw * 2.0, Tensor()}};  // chw * 2.0 keeps chw's layout
    Example batch = default_collate(images, false);
    CHECK(batch.data.sizes() == Shape{2, 3, 2, 4});
    CHECK(batch.data.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(batch.data.to_vector<float>() == stack({chw, chw * 2.0}).contiguous().to_vector<float>());
    std::vector<Example> mixed{{chw, Tensor()}, {chw.contiguous(), Tensor()}};
    Example m = default_collate(mixed, false);
    CHECK(m.data.is_contiguous());
    CHECK(m.data.to_vector<float>() == stack({chw, chw}).contiguous().to_vector<float>());
  }
  SECTION("bad options") {
    CHECK_THROWS_WITH(DataLoader(ds, opts(0, 0)), Catch::Contains("batch_size must be at least 1, got 0"));
    CHECK_THROWS_WITH(DataLoader(ds, opts(1, -1)), Catch::Contains("num_workers"));
    DataLoaderOptions o = opts(1, 1);
    o.prefetch_factor = 0;
    CHECK_THROWS_WITH(DataLoader(ds, o), Catch::Contains("prefetch_factor"));
    // One that would overflow workers x prefetch_factor (the loader then queued nothing and waited).
    o.prefetch_factor = INT64_MAX / 2 + 1;
    CHECK_THROWS_WITH(DataLoader(ds, o), Catch::Contains("prefetch_factor must be in [1, 1048576]"));
    o.prefetch_factor = kMaxPrefetchFactor;
    CHECK_NOTHROW(DataLoader(ds, o));
    // A batch larger than the dataset: one batch, counted as one.
    DataLoader huge(ds, opts(INT64_MAX, 0));
    CHECK(huge.size() == 1);
    CHECK(drain(huge).size() == 1);
    o = opts(1, 0, true);
    o.sampler = std::make_shared<SequentialSampler>(10);
    CHECK_THROWS_WITH(DataLoader(ds, o), Catch::Contains("exclusive"));
    o = opts(1, 0);
    o.timeout = -1;
    CHECK_THROWS_WITH(DataLoader(ds, o), Catch::Contains("timeout"));
    // Past 1e9 s the wait's deadline overflowed and every wait timed out at once.
    for (const double forever : {std::numeric_limits<double>::infinity(), 1e10}) {
      o.timeout = forever;
      CHECK_THROWS_WITH(DataLoader(ds, o), Catch::Contains("timeout") && Catch::Contains("0 (wait forever)"));
    }
    CHECK_THROWS_WITH(DataLoader(nullptr, opts(1, 0)), Catch::Contains("no dataset"));
    DataLoader ok(ds, opts(3, 0));
    CHECK_THROWS_AS(ok.set_position({0, 5}), IndexError);
    CHECK_THROWS_AS(ok.set_position({-1, 0}), IndexError);
  }
}

// The device prefetcher's bookkeeping (data::detail::LookAhead), run on the CPU with a "start" that only
// counts: one batch held ahead, the position less that batch, and a failure reading ahead kept for
// the call that would have returned it. (Once, such a failure lost the batch in hand and the next
// call reported the epoch's end.)
TEST_CASE("DataLoader: reading one batch ahead loses no batch when the read ahead fails", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(12);
  ds->fail_at = 6;  // batch 3 of 6
  for (int64_t workers : {0, 2}) {
    INFO("workers " << workers);
    DataLoader loader(ds, opts(2, workers));
    data::detail::LookAhead ahead(loader);
    int started = 0, finished = 0;
    const data::detail::LookAhead::Step start = [&](Example&) { ++started; };
    const data::detail::LookAhead::Step finish = [&](Example&) { ++finished; };
    std::vector<int64_t> got;
    auto take = [&] {
      std::optional<Example> b = ahead.next(start, finish);
      if (b) got.push_back(b->target.to_vector<int64_t>()[0]);
      return b.has_value();
    };
    CHECK(ahead.position().batch == 0);
    CHECK(take());
    CHECK(ahead.position().batch == 1);  // batch 1 is held ahead; the loader is at 2
    CHECK(loader.position().batch == 2);
    CHECK(take());
    CHECK(take());  // batch 2, while reading batch 3 ahead fails
    CHECK(got == std::vector<int64_t>{0, 2, 4});
    CHECK(ahead.position().batch == 3);
    CHECK_THROWS_WITH(ahead.next(start, finish), Catch::Contains("sample 6 (batch 3 of epoch 0)"));
    CHECK(ahead.position().batch == 3);
    CHECK_THROWS_AS(ahead.next(start, finish), IOError);  // read again, failing again
    loader.set_position({0, 4});  // skipping it: batches 4 and 5, the epoch's end, the next epoch
    CHECK(take());
    CHECK(take());
    // After the epoch's last batch the end is held ahead: the position is the plain loader's there,
    // (0, 6), not the next epoch's start, so a checkpoint taken now resumes before the end.
    CHECK(ahead.position().epoch == 0);
    CHECK(ahead.position().batch == 6);
    CHECK(loader.position().epoch == 1);
    CHECK_FALSE(take());
    CHECK(ahead.position().epoch == 1);
    CHECK(ahead.position().batch == 0);
    CHECK(take());
    CHECK(got == std::vector<int64_t>{0, 2, 4, 8, 10, 0});
    CHECK(finished == 6);
    CHECK(started == finished + 1);  // the batch held ahead has started
  }
  // A failure in the start itself (a copy): the loader goes back to that batch, which is read again.
  auto plain = std::make_shared<ProbeDataset>(8);
  DataLoader loader(plain, opts(2, 0));
  data::detail::LookAhead ahead(loader);
  int calls = 0;
  const data::detail::LookAhead::Step flaky = [&](Example&) {
    if (++calls == 2) throw OutOfMemoryError("probe: no memory for the copy");
  };
  const data::detail::LookAhead::Step nothing = [](Example&) {};
  CHECK(ahead.next(flaky, nothing)->target.to_vector<int64_t>()[0] == 0);
  CHECK(ahead.position().batch == 1);
  CHECK_THROWS_AS(ahead.next(flaky, nothing), OutOfMemoryError);
  CHECK(ahead.next(flaky, nothing)->target.to_vector<int64_t>()[0] == 2);  // batch 1, not skipped
}

// set_position (or load_state) on the loader while a batch is held ahead: the held batch came from
// the old position and is dropped, so the next batch is the one the new position names (it was the
// held one, then the new position's). A held error of the old position is dropped too.
TEST_CASE("DataLoader: reading one batch ahead follows the loader's set_position", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(12);
  const data::detail::LookAhead::Step nothing = [](Example&) {};
  for (int64_t workers : {0, 2}) {
    INFO("workers " << workers);
    DataLoader loader(ds, opts(2, workers));
    data::detail::LookAhead ahead(loader);
    const auto first = [&] { return ahead.next(nothing, nothing)->target.to_vector<int64_t>()[0]; };
    CHECK(first() == 0);  // batch 0; batch 1 held ahead
    CHECK(ahead.position().batch == 1);
    loader.set_position({0, 4});
    CHECK(ahead.moved());
    CHECK(ahead.position().batch == 4);
    CHECK(first() == 8);  // batch 4, not the held batch 1
    CHECK(ahead.position().batch == 5);
    CHECK_FALSE(ahead.moved());
    // Back to where it was, through load_state (a resume): batch 1 again.
    std::map<std::string, int64_t> state = loader.state();
    state["loader_batch"] = 1;
    loader.load_state(state);
    CHECK(first() == 2);
    CHECK(first() == 4);
    // An error held for the old position is dropped with it.
    ds->fail_at = 8;      // batch 4
    CHECK(first() == 6);  // batch 3, while reading batch 4 ahead fails
    loader.set_position({0, 5});
    CHECK(first() == 10);
    ds->fail_at = -1;
  }
}

TEST_CASE("DataLoader: reading one batch ahead survives a failed first start and a failed finish", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(8);
  const data::detail::LookAhead::Step nothing = [](Example&) {};
  {  // The epoch's first read: a start that fails puts the loader back, and the batch is started again.
    DataLoader loader(ds, opts(2, 0));
    data::detail::LookAhead ahead(loader);
    int starts = 0;
    std::vector<int> started_on;  // the batch each successful start ran on
    const data::detail::LookAhead::Step flaky = [&](Example& b) {
      if (++starts == 1) throw OutOfMemoryError("probe: no memory for the copy");
      started_on.push_back(static_cast<int>(b.target.to_vector<int64_t>()[0]));
    };
    CHECK_THROWS_AS(ahead.next(flaky, nothing), OutOfMemoryError);
    CHECK(loader.position().batch == 0);  // before: 1, and the next call handed out a batch never started
    CHECK(ahead.next(flaky, nothing)->target.to_vector<int64_t>()[0] == 0);
    CHECK(started_on == std::vector<int>{0, 2});  // batch 0 started, then batch 1 read ahead
  }
  {  // A finish that fails keeps the batch: the next call hands it out, and the epoch goes on.
    DataLoader loader(ds, opts(2, 0));
    data::detail::LookAhead ahead(loader);
    int finishes = 0;
    const data::detail::LookAhead::Step flaky = [&](Example&) {
      if (++finishes == 2) throw DeviceError("probe: the event wait failed");
    };
    std::vector<int64_t> got;
    for (int call = 0; call < 6; ++call) {
      try {
        std::optional<Example> b = ahead.next(nothing, flaky);
        got.push_back(b ? b->target.to_vector<int64_t>()[0] : -1);
      } catch (const DeviceError&) {
        got.push_back(-2);
      }
    }
    CHECK(got == std::vector<int64_t>{0, -2, 2, 4, 6, -1});  // before: 0, -2, -1 (a false end), 4, 6, -1
  }
}

TEST_CASE("DataLoader: pin_memory without CUDA is ignored, and the CPU prefetcher passes batches through",
          "[data][loader]") {
  if (cuda::is_available()) return;  // tests/cuda covers the pinned path
  auto ds = std::make_shared<ProbeDataset>(9);
  DataLoaderOptions o = opts(4, 1);
  o.pin_memory = true;
  DataLoader loader(ds, o);
  CHECK_FALSE(loader.options().pin_memory);
  DevicePrefetcher prefetch(loader, Device::cpu());
  int n = 0;
  while (std::optional<Example> b = prefetch.next()) {
    CHECK(b->data.is_cpu());
    CHECK_FALSE(b->data.is_pinned());
    ++n;
    CHECK(prefetch.position().batch == n);
  }
  CHECK(n == 3);
  CHECK(prefetch.position().epoch == 1);
  CHECK_THROWS_AS(DevicePrefetcher(loader, Device::cuda(0)), DeviceError);
}
