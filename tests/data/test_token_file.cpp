// Token files: nanoGPT's headerless uint16 files and llm.c's (versions 1 and 2) read back exactly,
// random windows whose targets are the inputs shifted by one, and every malformed header or length
// refused with the file and the numbers.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "data/token_file.h"
#include "tests/temp_dir.h"

using namespace kiln;
using kiln::data::TokenFile;

namespace {

template <typename T> void append(std::string& bytes, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  bytes.append(b, sizeof(T));
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

std::string nanogpt(const std::vector<uint16_t>& tokens) {
  std::string b;
  for (uint16_t t : tokens) append(b, t);
  return b;
}

// llm.c's layout: 256 int32 (magic, version, count, zeros), then the tokens.
std::string llmc(int32_t version, const std::vector<uint32_t>& tokens, int32_t declared = -1,
                 int32_t magic = 20240520) {
  std::string b;
  append(b, magic);
  append(b, version);
  append(b, declared >= 0 ? declared : static_cast<int32_t>(tokens.size()));
  for (int i = 3; i < 256; ++i) append(b, int32_t{0});
  for (uint32_t t : tokens) {
    if (version == 2) {
      append(b, t);
    } else {
      append(b, static_cast<uint16_t>(t));
    }
  }
  return b;
}

}  // namespace

TEST_CASE("TokenFile reads nanoGPT's and llm.c's files exactly", "[data][tokens]") {
  test::TempDir dir;
  std::vector<uint16_t> toks;
  for (int i = 0; i < 300; ++i) toks.push_back(static_cast<uint16_t>((i * 7919) % 65536));
  toks.push_back(65535);  // the largest id survives (unsigned)
  write(dir.file("train.bin"), nanogpt(toks));
  TokenFile nano(dir.file("train.bin"));
  CHECK(nano.format() == TokenFile::Format::NanoGPT);
  CHECK(nano.size() == 301);
  CHECK(nano.token_bytes() == 2);
  for (int64_t i = 0; i < nano.size(); ++i) CHECK(nano.token(i) == toks[static_cast<size_t>(i)]);
  CHECK(nano.slice(298, 3).to_vector<int64_t>() == std::vector<int64_t>{toks[298], toks[299], 65535});
  CHECK(nano.slice(301, 0).numel() == 0);

  std::vector<uint32_t> wide = {0, 1, 128000, 4000000000u, 7};
  write(dir.file("v1.bin"), llmc(1, {5, 6, 50256}));
  write(dir.file("v2.bin"), llmc(2, wide));
  TokenFile v1(dir.file("v1.bin")), v2(dir.file("v2.bin"));
  CHECK(v1.format() == TokenFile::Format::LlmC);
  CHECK(v1.size() == 3);
  CHECK(v1.slice(0, 3).to_vector<int64_t>() == std::vector<int64_t>{5, 6, 50256});
  CHECK(v2.token_bytes() == 4);
  CHECK(v2.size() == 5);
  CHECK(v2.token(3) == 4000000000LL);
  // Read as headerless on purpose, an llm.c file is 512 + 3 uint16 tokens (its header included).
  TokenFile raw(dir.file("v1.bin"), TokenFile::Format::NanoGPT);
  CHECK(raw.size() == 512 + 3);

  write(dir.file("empty.bin"), "");
  TokenFile empty(dir.file("empty.bin"));
  CHECK(empty.size() == 0);
}

TEST_CASE("TokenFile::random_batch: windows from the generator, targets shifted by one", "[data][tokens]") {
  test::TempDir dir;
  std::vector<uint16_t> toks(1000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint16_t>(i);  // token = position
  write(dir.file("seq.bin"), nanogpt(toks));
  TokenFile f(dir.file("seq.bin"));
  Generator g(42);
  auto [x, y] = f.random_batch(8, 16, g);
  CHECK(x.sizes() == Shape{8, 16});
  CHECK(y.sizes() == Shape{8, 16});
  CHECK(x.dtype() == DType::Int64);
  const auto xv = x.to_vector<int64_t>(), yv = y.to_vector<int64_t>();
  for (size_t b = 0; b < 8; ++b) {
    const int64_t start = xv[b * 16];
    CHECK(start >= 0);
    CHECK(start + 16 < 1000);  // the window's last target is still in the file
    for (size_t t = 0; t < 16; ++t) {
      CHECK(xv[b * 16 + t] == start + static_cast<int64_t>(t));
      CHECK(yv[b * 16 + t] == start + static_cast<int64_t>(t) + 1);
    }
  }
  // The generator decides: the same state gives the same windows, the next draw other ones.
  Generator again(42);
  CHECK(f.random_batch(8, 16, again).first.to_vector<int64_t>() == xv);
  CHECK(f.random_batch(8, 16, g).first.to_vector<int64_t>() != xv);
  // A window may end on the last token.
  auto [x1, y1] = f.random_batch(4, 999, g);
  CHECK(x1.to_vector<int64_t>()[0] == 0);
  CHECK(y1.to_vector<int64_t>()[998] == 999);
}

TEST_CASE("TokenFile refuses malformed files and bad requests, naming the numbers", "[data][tokens]") {
  test::TempDir dir;
  CHECK_THROWS_WITH(TokenFile(dir.file("missing.bin")), Catch::Contains("cannot open") &&
                                                             Catch::Contains("missing.bin"));
  CHECK_THROWS_WITH(TokenFile(dir.path.string()), Catch::Contains("not a regular file"));
  write(dir.file("odd.bin"), std::string(7, '\1'));
  CHECK_THROWS_WITH(TokenFile(dir.file("odd.bin")), Catch::Contains("7 bytes") && Catch::Contains("2-byte"));
  write(dir.file("short.bin"), llmc(1, {}).substr(0, 100));
  CHECK_THROWS_WITH(TokenFile(dir.file("short.bin")), Catch::Contains("100 bytes") && Catch::Contains("header"));
  write(dir.file("version.bin"), llmc(3, {1, 2}));
  CHECK_THROWS_WITH(TokenFile(dir.file("version.bin")), Catch::Contains("version 3"));
  write(dir.file("count.bin"), llmc(1, {1, 2, 3}, 5));
  CHECK_THROWS_WITH(TokenFile(dir.file("count.bin")), Catch::Contains("declares 5 tokens") &&
                                                           Catch::Contains("6 bytes"));
  std::string negative = llmc(1, {1});
  const int32_t minus_seven = -7;
  std::memcpy(negative.data() + 8, &minus_seven, 4);
  write(dir.file("negative.bin"), negative);
  CHECK_THROWS_WITH(TokenFile(dir.file("negative.bin")), Catch::Contains("declares -7 tokens"));
  write(dir.file("magic.bin"), llmc(1, {1, 2}, -1, 1234));
  CHECK_THROWS_WITH(TokenFile(dir.file("magic.bin"), TokenFile::Format::LlmC), Catch::Contains("magic 1234"));

  write(dir.file("ok.bin"), nanogpt({1, 2, 3, 4}));
  TokenFile f(dir.file("ok.bin"));
  CHECK_THROWS_AS(f.token(4), IndexError);
  CHECK_THROWS_AS(f.token(-1), IndexError);
  CHECK_THROWS_AS(f.slice(2, 3), IndexError);
  CHECK_THROWS_AS(f.slice(0, INT64_MAX), IndexError);
  Generator g(1);
  CHECK_THROWS_WITH(f.random_batch(2, 4, g), Catch::Contains("4 tokens") && Catch::Contains("block + 1 = 5"));
  CHECK_THROWS_WITH(f.random_batch(0, 2, g), Catch::Contains("batch 0"));
  CHECK_THROWS_WITH(f.random_batch(INT64_MAX, 2, g), Catch::Contains("random_batch"));
  Generator cuda_gen(1, Device::cuda(0));
  CHECK_THROWS_AS(f.random_batch(1, 2, cuda_gen), DeviceError);
}
