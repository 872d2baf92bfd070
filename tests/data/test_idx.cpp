// idx reading: plain and gzip files, every kind of corrupt header, and the Fashion-MNIST loader.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "data/idx.h"
#include "tests/temp_dir.h"

using namespace kiln;

namespace {

std::vector<unsigned char> idx_bytes(std::vector<uint32_t> dims, const std::vector<unsigned char>& data,
                                     unsigned char type = 0x08) {
  std::vector<unsigned char> b{0, 0, type, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims) {
    b.push_back(static_cast<unsigned char>(d >> 24));
    b.push_back(static_cast<unsigned char>(d >> 16));
    b.push_back(static_cast<unsigned char>(d >> 8));
    b.push_back(static_cast<unsigned char>(d));
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

using Bytes = std::vector<unsigned char>;

std::string write_plain(const test::TempDir& dir, const std::string& name, const Bytes& bytes) {
  const std::string p = dir.file(name);
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
  return p;
}

std::string write_gz(const test::TempDir& dir, const std::string& name, const Bytes& bytes) {
  const std::string p = dir.file(name);
  gzFile f = gzopen(p.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
  return p;
}

}  // namespace

TEST_CASE("read_idx reads plain and gzip idx files", "[data]") {
  std::vector<unsigned char> values{1, 2, 3, 4, 5, 6};
  auto bytes = idx_bytes({2, 3}, values);
  test::TempDir dir("kiln_idx");
  for (const std::string& path : {write_plain(dir, "a.idx", bytes), write_gz(dir, "a.idx.gz", bytes)}) {
    Tensor t = data::read_idx(path);
    CHECK(t.dtype() == DType::UInt8);
    CHECK(t.sizes() == Shape{2, 3});
    CHECK(t.to_vector<uint8_t>() == std::vector<uint8_t>(values.begin(), values.end()));
  }
}

TEST_CASE("read_idx rejects corrupt files with an IOError naming the file", "[data]") {
  std::vector<unsigned char> v{1, 2, 3, 4, 5, 6};
  auto truncated = idx_bytes({2, 3}, {1, 2, 3});
  auto bad_magic = idx_bytes({2, 3}, v);
  bad_magic[0] = 7;
  auto float_type = idx_bytes({2, 3}, v, 0x0D);
  auto extra = idx_bytes({2, 3}, {1, 2, 3, 4, 5, 6, 7});
  auto zero_dim = idx_bytes({0, 3}, {});
  auto huge = idx_bytes({1u << 30, 1u << 30}, {});
  test::TempDir dir("kiln_idx");
  struct Case {
    std::string name;
    std::vector<unsigned char> bytes;
    std::string mention;
  };
  for (const Case& c : {Case{"truncated.gz", truncated, "truncated"}, Case{"magic.gz", bad_magic, "magic"},
                        Case{"type.gz", float_type, "element type 0x0d;"},
                        Case{"extra.gz", extra, "after the declared"},
                        Case{"zero.gz", zero_dim, "size 0"}, Case{"huge.gz", huge, "implausibly large"},
                        Case{"header.gz", {0, 0}, "truncated"}}) {
    std::string path = write_gz(dir, c.name, c.bytes);
    INFO(c.name);
    CHECK_THROWS_AS(data::read_idx(path), IOError);
    CHECK_THROWS_WITH(data::read_idx(path), Catch::Contains(c.name) && Catch::Contains(c.mention));
  }
  CHECK_THROWS_WITH(data::read_idx("/nonexistent/file.gz"), Catch::Contains("/nonexistent/file.gz"));
}

// A gzip file ends in a trailer, the CRC-32 and length of its data, which zlib checks at the stream's
// end: a file cut anywhere in it, or one whose data no longer matches it, is refused. (A cut of up
// to 8 bytes read as a clean end and loaded, unchecked; a wrong CRC was "bytes after the data".)
TEST_CASE("read_idx checks a gzip file's trailer: cut short or not matching its data", "[data]") {
  test::TempDir dir("kiln_idx");
  const Bytes whole = [&] {
    const std::string p =
        write_gz(dir, "whole.gz", idx_bytes({4, 4}, Bytes{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
    std::ifstream f(p, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(f), {});
  }();
  REQUIRE(whole.size() > 8);
  CHECK(data::read_idx(write_plain(dir, "copy.gz", whole)).numel() == 16);
  for (size_t cut = 1; cut <= 8; ++cut) {
    INFO("cut " << cut);
    const std::string p =
        write_plain(dir, "cut" + std::to_string(cut) + ".gz", Bytes(whole.begin(), whole.end() - cut));
    CHECK_THROWS_AS(data::read_idx(p), IOError);
    CHECK_THROWS_WITH(data::read_idx(p),
                      Catch::Contains("cut" + std::to_string(cut) + ".gz") && Catch::Contains("truncated or corrupt"));
  }
  Bytes bad_crc = whole;
  bad_crc[bad_crc.size() - 8] ^= 0x5a;  // the CRC's first byte
  const std::string p = write_plain(dir, "crc.gz", bad_crc);
  CHECK_THROWS_WITH(data::read_idx(p), Catch::Contains("crc.gz") && Catch::Contains("truncated or corrupt") &&
                                           Catch::Contains("incorrect data check"));
}

TEST_CASE("load_fashion_mnist: a missing directory says how to install the dataset", "[data]") {
  CHECK_THROWS_WITH(data::load_fashion_mnist("/nonexistent", "train"),
                    Catch::Contains("apt-get install dataset-fashion-mnist"));
  CHECK_THROWS_WITH(data::load_fashion_mnist(data::kFashionMnistDefaultDir, "valid"), Catch::Contains("split"));
}

TEST_CASE("load_fashion_mnist loads the installed test split", "[data]") {
  // tools/setup.sh installs dataset-fashion-mnist, so the data is present wherever tests run.
  data::FashionMnist ds = data::load_fashion_mnist(data::kFashionMnistDefaultDir, "t10k");
  CHECK(ds.images.sizes() == Shape{10000, 1, 28, 28});
  CHECK(ds.labels.sizes() == Shape{10000});
  CHECK(min(ds.labels).item<int64_t>() == 0);
  CHECK(max(ds.labels).item<int64_t>() == 9);
  CHECK(max(ds.images).item<double>() <= 1.0);
  CHECK(min(ds.images).item<double>() >= 0.0);
  // The test split is balanced: 1000 images per class.
  Tensor counts = zeros({10}, DType::Int64);
  counts = scatter_add(counts, 0, ds.labels, ones({10000}, DType::Int64));
  CHECK(counts.to_vector<int64_t>() == std::vector<int64_t>(10, 1000));
  CHECK(std::string(data::fashion_mnist_class_name(9)) == "Ankle boot");
}
