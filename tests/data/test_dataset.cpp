// The datasets: per-sample generators, TensorDataset and TransformDataset, Fashion-MNIST as stored,
// the character corpus, token windows (random and sequential, over tensors and token files) and
// synthetic images.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "data/dataset.h"
#include "data/datasets.h"
#include "data/idx.h"
#include "tests/temp_dir.h"

using namespace kiln;
using namespace kiln::data;

TEST_CASE("sample_generator: seeded per sample inside a scope, the default generator outside", "[data][dataset]") {
  Generator& outside = sample_generator();
  CHECK(outside == default_generator(Device::cpu()));
  uint64_t a = 0, b = 0, c = 0;
  {
    SampleGeneratorScope s(1, 2, 3);
    a = sample_generator().state().seed;
    CHECK(sample_generator().state().offset == 0);
    const Tensor first = rand({4}, {}, sample_generator());
    const PhiloxState outer = sample_generator().state();
    {
      SampleGeneratorScope inner(1, 2, 4);
      b = sample_generator().state().seed;
      CHECK(sample_generator().state().offset == 0);
      rand({4}, {}, sample_generator());
    }
    // The inner scope put the outer sample's state back (it left its own reseeded and advanced), so
    // the outer sample's next draw is the one it would have made without the inner scope.
    CHECK(sample_generator().state().seed == outer.seed);
    CHECK(sample_generator().state().offset == outer.offset);
    const Tensor second = rand({4}, {}, sample_generator());
    Generator alone(sample_seed(1, 2, 3));
    rand({4}, {}, alone);
    CHECK(second.to_vector<float>() == rand({4}, {}, alone).to_vector<float>());
    CHECK(first.to_vector<float>() != second.to_vector<float>());
  }
  {
    SampleGeneratorScope s(1, 3, 3);
    c = sample_generator().state().seed;
  }
  CHECK(a == sample_seed(1, 2, 3));
  CHECK(a != b);
  CHECK(a != c);
  CHECK(sample_generator() == default_generator(Device::cpu()));
  // Neighbouring keys give unrelated seeds (no two of 1,000 collide).
  std::set<uint64_t> seeds;
  for (int64_t e = 0; e < 10; ++e)
    for (int64_t i = 0; i < 100; ++i) seeds.insert(sample_seed(0, e, i));
  CHECK(seeds.size() == 1000);
}

TEST_CASE("TensorDataset and TransformDataset", "[data][dataset]") {
  Tensor x = arange(0, 12, 1, TensorOptions(DType::Float32)).view({4, 3});
  Tensor y = arange(0, 4, 1, TensorOptions(DType::Int64));
  auto ds = std::make_shared<TensorDataset>(x, y);
  CHECK(ds->size() == 4);
  Example e = ds->get(2);
  CHECK(e.data.to_vector<float>() == std::vector<float>{6, 7, 8});
  CHECK(e.target.item<int64_t>() == 2);
  CHECK_THROWS_WITH(ds->get(4), Catch::Contains("index 4 is out of range for a dataset of 4 samples"));
  CHECK_THROWS_AS(ds->get(-1), IndexError);
  CHECK_THROWS_AS(TensorDataset(x, arange(0, 3, 1, TensorOptions(DType::Int64))), ShapeError);
  CHECK_THROWS_AS(TensorDataset(Tensor(), y), Error);

  TransformDataset doubled(ds, [](const Tensor& t) { return t * 2.0; });
  CHECK(doubled.get(1).data.to_vector<float>() == std::vector<float>{6, 8, 10});
  CHECK(doubled.get(1).target.item<int64_t>() == 1);
  CHECK_THROWS_AS(TransformDataset(nullptr, [](const Tensor& t) { return t; }), Error);
  CHECK_THROWS_AS(TransformDataset(ds, Transform()), Error);
}

TEST_CASE("FashionMnistDataset serves the stored bytes", "[data][dataset]") {
  if (!std::filesystem::exists(std::string(kFashionMnistDefaultDir) + "/t10k-images-idx3-ubyte.gz")) {
    FAIL("Fashion-MNIST is not installed (tools/setup.sh installs dataset-fashion-mnist)");
  }
  FashionMnistDataset ds(kFashionMnistDefaultDir, "t10k", 100);
  CHECK(ds.size() == 100);
  Example e = ds.get(7);
  CHECK(e.data.dtype() == DType::UInt8);
  CHECK(e.data.sizes() == Shape{1, 28, 28});
  FashionMnist ref = load_fashion_mnist(kFashionMnistDefaultDir, "t10k");
  const Tensor expect = ref.images.select(0, 7);
  CHECK(max(abs(e.data.to(DType::Float32) / 255.0 - expect)).item<float>() == 0.0f);
  CHECK(e.target.item<int64_t>() == ref.labels[7].item<int64_t>());
  CHECK(ds.fingerprint().at("dataset") == "Fashion-MNIST t10k, first 100 images");
  FashionMnistDataset scaled(kFashionMnistDefaultDir, "t10k", 5, [](const Tensor& t) { return t.to(DType::Float32); });
  CHECK(scaled.get(0).data.dtype() == DType::Float32);
  CHECK_THROWS_AS(FashionMnistDataset("/nonexistent", "train"), IOError);
}

TEST_CASE("CharCorpus: vocabulary, ids, decode and fingerprint", "[data][dataset]") {
  CharCorpus c("hello, world");
  CHECK(c.vocab_size() == 9);  // " ,dehlorw"
  CHECK(c.id(' ') == 0);
  CHECK(c.id('z') == -1);
  const std::vector<int64_t> ids = c.ids().to_vector<int64_t>();
  CHECK(c.decode(ids) == "hello, world");
  CHECK_THROWS_AS(c.decode({9}), IndexError);
  CHECK(c.fingerprint().at("text").rfind("12 bytes, CRC-32 ", 0) == 0);
  CHECK(CharCorpus("hello, worle").fingerprint() != c.fingerprint());
  CHECK_THROWS_AS(CharCorpus::from_file("/nonexistent/text.txt"), IOError);
}

TEST_CASE("TokenWindows: random windows from the sample generator, sequential windows", "[data][dataset]") {
  Tensor tokens = arange(0, 1000, 1, TensorOptions(DType::Int64));
  TokenWindows random(tokens, 16, 50);
  CHECK(random.size() == 50);
  std::set<int64_t> starts;
  for (int64_t i = 0; i < 50; ++i) {
    SampleGeneratorScope s(3, 0, i);
    Example e = random.get(i);
    const auto x = e.data.to_vector<int64_t>(), y = e.target.to_vector<int64_t>();
    REQUIRE(x.size() == 16);
    for (size_t t = 0; t < 16; ++t) {
      CHECK(x[t] == x[0] + static_cast<int64_t>(t));
      CHECK(y[t] == x[t] + 1);
    }
    CHECK(x[0] >= 0);
    CHECK(y[15] <= 999);
    starts.insert(x[0]);
  }
  CHECK(starts.size() > 45);  // 50 draws from 984 starts rarely collide
  {
    SampleGeneratorScope s(3, 0, 5);
    const int64_t again = random.get(5).data.to_vector<int64_t>()[0];
    SampleGeneratorScope s2(3, 0, 5);
    CHECK(random.get(5).data.to_vector<int64_t>()[0] == again);
  }
  TokenWindows seq(tokens, 100, -1, /*random=*/false);
  CHECK(seq.size() == 9);  // 999 / 100 whole windows of 101 tokens sharing their ends
  CHECK(seq.get(3).data.to_vector<int64_t>()[0] == 300);
  CHECK(seq.get(8).target.to_vector<int64_t>().back() == 900);
  CHECK(TokenWindows(tokens, 100, 4, false).size() == 4);
  CHECK_THROWS_AS(TokenWindows(tokens, 1000, 1), Error);
  CHECK_THROWS_AS(TokenWindows(tokens, 0, 1), Error);
  CHECK_THROWS_AS(TokenWindows(tokens, 8, 0), Error);
  CHECK_THROWS_AS(TokenWindows(tokens.to(DType::Int32), 8, 1), Error);
  CHECK_THROWS_AS(seq.get(9), IndexError);

  // Over a nanoGPT token file, the same windows as over its tokens.
  const test::TempDir dir("kiln_token_windows");
  const std::string path = dir.file("tokens.bin");
  {
    std::ofstream f(path, std::ios::binary);
    for (uint16_t t = 0; t < 500; ++t) f.write(reinterpret_cast<const char*>(&t), 2);
  }
  TokenWindows from_file(std::make_shared<TokenFile>(path), 10, 20);
  TokenWindows from_tensor(arange(0, 500, 1, TensorOptions(DType::Int64)), 10, 20);
  for (int64_t i = 0; i < 20; ++i) {
    SampleGeneratorScope s(8, 1, i);
    const auto a = from_file.get(i).data.to_vector<int64_t>();
    SampleGeneratorScope s2(8, 1, i);
    CHECK(from_tensor.get(i).data.to_vector<int64_t>() == a);
  }

  // check_below: the tokens are 0..499; sequential window 49 holds 490..500, its target 500 is gone
  // (499 is the last), so window 45 (450..460) is the one to test against a vocabulary of 455.
  TokenWindows checked(std::make_shared<TokenFile>(path), 10, -1, /*random=*/false);
  checked.check_below(500);
  CHECK(checked.get(45).target.to_vector<int64_t>().back() == 460);
  checked.check_below(455);
  CHECK(checked.get(44).data.to_vector<int64_t>().front() == 440);  // 440..450: all below 455
  try {
    checked.get(45);
    FAIL("a token above the vocabulary passed");
  } catch (const IndexError& e) {
    const std::string what = e.what();
    CHECK(what.find("token 455 at position 455") != std::string::npos);
    CHECK(what.find(path) != std::string::npos);
    CHECK(what.find("[0, 455)") != std::string::npos);
  }
  CHECK_THROWS_AS(checked.check_below(0), Error);
}

TEST_CASE("SyntheticImages: deterministic uint8 images in either layout", "[data][dataset]") {
  SyntheticImages chw(10, 3, 5, 7, 4, 11);
  SyntheticImages hwc(10, 3, 5, 7, 4, 11, /*hwc=*/true);
  Example a = chw.get(3), b = chw.get(3), c = hwc.get(3);
  CHECK(a.data.sizes() == Shape{3, 5, 7});
  CHECK(c.data.sizes() == Shape{5, 7, 3});
  CHECK(a.data.dtype() == DType::UInt8);
  CHECK(a.data.to_vector<uint8_t>() == b.data.to_vector<uint8_t>());
  CHECK(a.data.to_vector<uint8_t>() != chw.get(4).data.to_vector<uint8_t>());
  CHECK(a.target.item<int64_t>() >= 0);
  CHECK(a.target.item<int64_t>() < 4);
  // Bytes spread over the whole range.
  const auto bytes = SyntheticImages(1, 1, 64, 64).get(0).data.to_vector<uint8_t>();
  double mean = 0;
  for (uint8_t v : bytes) mean += v;
  mean /= static_cast<double>(bytes.size());
  CHECK(std::abs(mean - 127.5) < 5);
  CHECK_THROWS_AS(SyntheticImages(1, 5, 2, 2), Error);
  CHECK_THROWS_AS(chw.get(10), IndexError);
}
