// safetensors tests: round trips, tied tensors, a file written byte by byte from the spec, every
// kind of corrupt file, and atomic replacement. Failures mid-write are produced with RLIMIT_FSIZE
// (the kernel refuses writes past the limit, as on a full disk), because the tests run as root
// and a read-only directory would not stop root.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/kiln.h"
#include "kernels/error.h"
#include "nn/module.h"
#include "nn/safetensors.h"
#include "tests/temp_dir.h"
#include "tests/bitwise.h"


using namespace kiln;
using namespace kiln::nn;
namespace fs = std::filesystem;

namespace {

// A fresh directory, removed with everything in it at scope exit.
// Each test's own directory ("kiln_st_XXXXXX"), removed when it ends.
struct TempDir : kiln::test::TempDir {
  TempDir() : kiln::test::TempDir("kiln_st") {}
};

using kiln::test::bitwise_equal;

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A file from a header text and raw data: 8-byte little-endian header length, header, data.
void write_file(const std::string& path, const std::string& header, const std::string& data) {
  write_bytes(path, le64(header.size()) + header + data);
}

// The message of the kiln::IOError that loading `path` raises ("" and a failed check otherwise).
std::string load_error(const std::string& path) {
  try {
    load_safetensors(path);
  } catch (const IOError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("expected kiln::IOError, got another exception: " << e.what());
    return "";
  }
  FAIL_CHECK("expected kiln::IOError for " << path << ", but it loaded");
  return "";
}

// Loading must fail with an IOError naming the file and containing every one of `parts`.
void check_corrupt(const std::string& path, const std::vector<std::string>& parts) {
  std::string msg = load_error(path);
  INFO("message: " << msg);
  CHECK(msg.find(path) != std::string::npos);
  for (auto& p : parts) CHECK(msg.find(p) != std::string::npos);
}

}  // namespace

TEST_CASE("safetensors round-trips every dtype, 0-d and empty tensors", "[serialization]") {
  TempDir dir;
  manual_seed(7);
  std::map<std::string, Tensor> in{
      {"f32", randn({3, 5})},
      {"f16", randn({4, 3}).to(DType::Float16)},
      {"bf16", randn({2, 7}).to(DType::BFloat16)},
      {"f64", randn({5}, DType::Float64)},
      {"i32", arange(-6, 6, 1, DType::Int32).reshape({3, 4})},
      {"i64", tensor<int64_t>({INT64_MIN, -1, 0, INT64_MAX})},
      {"u8", arange(0, 256, 1, DType::UInt8)},
      {"bool", tensor<bool>({true, false, false, true, true}, {5})},
      {"scalar", scalar_tensor(3.25)},
      {"empty", zeros({0, 4})},
  };
  save_safetensors(dir.file("all.safetensors"), in);
  auto out = load_safetensors(dir.file("all.safetensors"));
  REQUIRE(out.size() == in.size());
  for (auto& [name, t] : in) {
    INFO(name);
    REQUIRE(out.count(name));
    CHECK(out[name].dtype() == t.dtype());
    CHECK(out[name].sizes() == t.sizes());
    CHECK(out[name].is_contiguous());
    CHECK(bitwise_equal(out[name], t));
  }
  CHECK(out["scalar"].dim() == 0);
  CHECK(out["scalar"].item<double>() == 3.25);

  SafetensorsFile f(dir.file("all.safetensors"));
  CHECK(f.data_start() % 8 == 0);
  CHECK(f.entries().at("bf16").dtype == DType::BFloat16);
  CHECK(f.entries().at("f64").shape == Shape{5});
  // Widest first keeps every tensor aligned to its element size within the 8-aligned buffer.
  for (auto& [name, e] : f.entries()) CHECK(e.begin % element_size(e.dtype) == 0);
  CHECK(f.load("i32").to_vector<int32_t>()[0] == -6);
}

TEST_CASE("safetensors saves non-contiguous tensors in logical row-major order", "[serialization]") {
  TempDir dir;
  Tensor base = arange(0.0, 24.0, 1.0).reshape({4, 6});
  std::map<std::string, Tensor> in{
      {"transposed", base.t()},                      // strides [1, 6]
      {"sliced", base.slice(1, 1, 6, 2)},            // step 2 with an offset
      {"expanded", base.select(0, 2).expand({3, 6})},  // stride 0
      {"row", base.select(0, 3)},                     // a view with a storage offset
  };
  save_safetensors(dir.file("nc.safetensors"), in);
  auto out = load_safetensors(dir.file("nc.safetensors"));
  for (auto& [name, t] : in) {
    INFO(name);
    CHECK(out[name].sizes() == t.sizes());
    CHECK(out[name].to_vector<float>() == t.to_vector<float>());
  }
  // Four distinct views of one storage: all stored, none aliased.
  CHECK(SafetensorsFile(dir.file("nc.safetensors")).aliases().empty());
}

TEST_CASE("safetensors stores tied tensors once and ties them again on load", "[serialization]") {
  TempDir dir;
  Tensor w = randn({32, 16});
  Tensor other = randn({8});
  std::map<std::string, Tensor> in{
      {"a.weight", w},
      {"b.weight", w},           // the same TensorImpl
      {"c.weight", w.detach()},  // another TensorImpl, the same storage and view
      {"flat", w.view({512})},   // the same storage, another view: stored on its own
      {"other", other},
  };
  const std::string path = dir.file("tied.safetensors");
  save_safetensors(path, in);

  SafetensorsFile f(path);
  CHECK(f.entries().size() == 3);
  CHECK(f.entries().count("a.weight"));
  CHECK(f.entries().count("flat"));
  CHECK(f.aliases() == std::map<std::string, std::string>{{"b.weight", "a.weight"}, {"c.weight", "a.weight"}});
  CHECK(f.names() == std::vector<std::string>{"a.weight", "b.weight", "c.weight", "flat", "other"});
  CHECK(f.metadata().empty());  // the alias table is kiln's, not user metadata
  // The file holds the data of three tensors only.
  CHECK(fs::file_size(path) == f.data_start() + (512 + 512 + 8) * 4);

  // The raw header, read independently: the alias table lives in __metadata__ as JSON text.
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[static_cast<size_t>(i)])) << (8 * i);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK_FALSE(header.contains("b.weight"));
  auto table = nlohmann::json::parse(header["__metadata__"]["__kiln_tied__"].get<std::string>());
  CHECK(table["b.weight"] == "a.weight");

  auto out = load_safetensors(path);
  REQUIRE(out.size() == 5);
  CHECK(out["a.weight"].impl() == out["b.weight"].impl());
  CHECK(out["a.weight"].impl() == out["c.weight"].impl());
  CHECK(out["flat"].impl() != out["a.weight"].impl());
  CHECK(bitwise_equal(out["b.weight"], w));
  CHECK(bitwise_equal(out["flat"], w.view({512})));
  CHECK(bitwise_equal(f.load("c.weight"), w));
}

TEST_CASE("safetensors metadata round-trips and the alias key is reserved", "[serialization]") {
  TempDir dir;
  std::map<std::string, std::string> meta{{"format", "pt"}, {"note", "ünïcödé \"quoted\"\n"}, {"", "empty key"}};
  save_safetensors(dir.file("m.safetensors"), {{"x", ones({2})}}, meta);
  CHECK(SafetensorsFile(dir.file("m.safetensors")).metadata() == meta);

  CHECK_THROWS_AS(save_safetensors(dir.file("r.safetensors"), {{"x", ones({2})}}, {{"__kiln_tied__", "{}"}}), Error);
  CHECK_THROWS_AS(save_safetensors(dir.file("r.safetensors"), {{"x", ones({2})}}, {{"__kiln_crc32__", "{}"}}), Error);
  CHECK_THROWS_AS(save_safetensors(dir.file("r.safetensors"), {{"x", Tensor()}}), Error);
  CHECK_THROWS_AS(save_safetensors(dir.file("r.safetensors"), {{"x", ones({1})}}, {{"bad", "\xff\xfe"}}), Error);
  CHECK(dir.listing() == std::vector<std::string>{"m.safetensors"});

  // A file without tensors is valid too.
  save_safetensors(dir.file("none.safetensors"), {}, {{"k", "v"}});
  CHECK(load_safetensors(dir.file("none.safetensors")).empty());
}

TEST_CASE("safetensors reads a file written byte by byte from the spec", "[serialization]") {
  TempDir dir;
  // Header without padding or alignment, keys in no particular order, and a "__metadata__".
  std::string header =
      R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("__metadata__":{"format":"pt"},)"
      R"("h":{"shape":[1,2],"dtype":"F16","data_offsets":[16,20]},)"
      R"("i":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
      R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[20,22]},)"
      R"("m":{"dtype":"BOOL","shape":[3],"data_offsets":[22,25]},)"
      R"("z":{"dtype":"I32","shape":[0],"data_offsets":[25,25]}})";
  std::string data;
  data += std::string("\x00\x00\xc0\x3f", 4);   // 1.5f
  data += std::string("\x00\x00\x00\xc0", 4);   // -2.0f
  data += std::string("\xf9\xff\xff\xff\xff\xff\xff\xff", 8);  // int64 -7
  data += std::string("\x00\x3c", 2);           // half 1.0
  data += std::string("\x00\xc0", 2);           // half -2.0
  data += std::string("\xc0\x3f", 2);           // bfloat16 1.5
  data += std::string("\x01\x00\x01", 3);       // true false true
  const std::string path = dir.file("spec.safetensors");
  write_file(path, header, data);

  auto out = load_safetensors(path);
  CHECK(out["w"].to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  CHECK(out["i"].dim() == 0);
  CHECK(out["i"].item<int64_t>() == -7);
  CHECK(out["h"].sizes() == Shape{1, 2});
  CHECK(out["h"].to(DType::Float32).to_vector<float>() == std::vector<float>{1.0f, -2.0f});
  CHECK(out["b"].to(DType::Float32).to_vector<float>() == std::vector<float>{1.5f});
  CHECK(out["m"].to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(out["z"].numel() == 0);
  CHECK(SafetensorsFile(path).metadata() == std::map<std::string, std::string>{{"format", "pt"}});

  // And kiln's own output, read back by hand the same way: length, padded header, raw data.
  save_safetensors(dir.file("k.safetensors"), {{"v", tensor<float>({1.5f, -2.0f})}});
  std::string bytes = read_bytes(dir.file("k.safetensors"));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[static_cast<size_t>(i)])) << (8 * i);
  CHECK((8 + n) % 8 == 0);
  CHECK(bytes[8] == '{');
  auto h = nlohmann::json::parse(bytes.substr(8, n));  // the padding is JSON whitespace
  CHECK(h["v"]["dtype"] == "F32");
  CHECK(h["v"]["shape"] == nlohmann::json::array({2}));
  CHECK(h["v"]["data_offsets"] == nlohmann::json::array({0, 8}));
  CHECK(bytes.substr(8 + n) == data.substr(0, 8));
}

TEST_CASE("safetensors rejects every kind of corrupt file with kiln::IOError", "[serialization]") {
  TempDir dir;
  int counter = 0;
  auto path_for = [&] { return dir.file("bad" + std::to_string(counter++) + ".safetensors"); };
  // One valid 2-element float tensor entry, for variations.
  const std::string ok_data(8, '\x01');
  auto one = [&](const std::string& entry, const std::string& data) {
    std::string p = path_for();
    write_file(p, R"({"t":)" + entry + "}", data);
    return p;
  };

  SECTION("short files and bad header lengths") {
    std::string p = path_for();
    write_bytes(p, "");
    check_corrupt(p, {"too short"});
    write_bytes(p, std::string("\x05\x00\x00", 3));
    check_corrupt(p, {"too short"});
    write_bytes(p, le64(100) + "{}");
    check_corrupt(p, {"header length 100", "past the end"});
    write_bytes(p, le64(200'000'000) + "{}");
    check_corrupt(p, {"exceeds the limit"});
    write_bytes(p, le64(UINT64_MAX) + "{}");
    check_corrupt(p, {"exceeds the limit"});
    write_bytes(p, le64(0));
    check_corrupt(p, {"JSON object"});
  }
  SECTION("invalid JSON") {
    std::string p = path_for();
    write_file(p, R"({"t": {"dtype": "F32", )", "");
    check_corrupt(p, {"not valid JSON"});
    write_file(p, R"([1, 2])", "");
    check_corrupt(p, {"JSON object"});
    write_file(p, "{\"t\": \"\xff\xfe\"}", "");  // not UTF-8
    check_corrupt(p, {"not valid JSON"});
    // Nested far deeper than any header: refused before the parser sees it.
    write_file(p, R"({"t":)" + std::string(5000, '[') + std::string(5000, ']') + "}", "");
    check_corrupt(p, {"nests deeper"});
  }
  SECTION("missing or invalid fields") {
    check_corrupt(one(R"(5)", ok_data), {"'t'", "not an object"});
    check_corrupt(one(R"({"shape":[2],"data_offsets":[0,8]})", ok_data), {"'t'", "dtype"});
    check_corrupt(one(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})", ok_data), {"'t'", "dtype"});
    check_corrupt(one(R"({"dtype":"F32","data_offsets":[0,8]})", ok_data), {"'t'", "shape"});
    check_corrupt(one(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})", ok_data), {"'t'", "shape"});
    check_corrupt(one(R"({"dtype":"F32","shape":[2]})", ok_data), {"'t'", "data_offsets"});
    check_corrupt(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4,8]})", ok_data), {"'t'", "data_offsets"});
    check_corrupt(one(R"({"dtype":"F32","shape":[2],"data_offsets":["0","8"]})", ok_data), {"'t'", "data_offsets"});
    check_corrupt(one(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})", ok_data), {"'t'", "data_offsets"});
    check_corrupt(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8.0]})", ok_data), {"'t'", "data_offsets"});
    std::string p = path_for();
    write_file(p, R"({"__metadata__":["x"]})", "");
    check_corrupt(p, {"__metadata__"});
    write_file(p, R"({"__metadata__":{"k":1}})", "");
    check_corrupt(p, {"'k'", "not a string"});
  }
  SECTION("unknown dtype") {
    check_corrupt(one(R"({"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]})", ok_data), {"'t'", "F8_E4M3"});
    check_corrupt(one(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})", ok_data), {"'t'", "unknown dtype"});
  }
  SECTION("bad shapes") {
    check_corrupt(one(R"({"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]})", ok_data), {"'t'", "shape entry 0"});
    check_corrupt(one(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})", ok_data), {"'t'", "shape entry 0"});
    check_corrupt(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", ok_data), {"'t'", "needs 12"});
    check_corrupt(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,8]})", ok_data), {"'t'", "needs 4"});
    check_corrupt(one(R"({"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,8]})",
                      ok_data),
                  {"'t'", "too large"});
    // Zero elements, but the other sizes would overflow kiln's strides.
    check_corrupt(one(R"({"dtype":"F32","shape":[0,4611686018427387904,4611686018427387904],"data_offsets":[0,0]})",
                      ok_data),
                  {"'t'", "too large"});
  }
  SECTION("offsets out of range, reversed or overlapping") {
    check_corrupt(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})", ok_data), {"'t'", "past the data"});
    check_corrupt(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})", ok_data), {"'t'", "past the data"});
    check_corrupt(one(R"({"dtype":"F32","shape":[0],"data_offsets":[9,9]})", ok_data), {"'t'", "past the data"});
    check_corrupt(one(R"({"dtype":"F32","shape":[2],"data_offsets":[18446744073709551615,8]})", ok_data),
                  {"'t'", "begin > end"});
    check_corrupt(one(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})", ok_data), {"'t'", "begin > end"});
    std::string p = path_for();
    write_file(p,
               R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               std::string(12, '\0'));
    check_corrupt(p, {"'a'", "'b'", "overlapping"});
    // The ranges must tile the buffer from byte 0 to its end: no gap, nothing before, nothing after
    // (bytes no tensor claims could carry anything), as the format requires.
    write_file(p,
               R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
               std::string(24, '\0'));
    check_corrupt(p, {"bytes 8 to 16", "belong to no tensor", "'b'"});
    check_corrupt(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})", std::string(16, '\0')),
                  {"bytes 0 to 8", "belong to no tensor"});
    check_corrupt(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", ok_data + "trailing"),
                  {"has 16 bytes", "end at byte 8"});
    // A name given twice: the parser would keep one entry and silently drop the other.
    write_file(p,
               R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
               std::string(16, '\0'));
    check_corrupt(p, {"names 'a' twice"});
    write_file(p, R"({"__metadata__":{"k":"1","k":"2"}})", "");
    check_corrupt(p, {"names 'k' twice"});
    // Empty tensors sit anywhere along the chain, including its end.
    write_file(p,
               R"({"e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
               R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
               ok_data);
    CHECK(SafetensorsFile(p).contains("e"));
    // Truncated after the header was written: the last tensor runs past the end.
    save_safetensors(p, {{"x", ones({64})}, {"y", ones({64})}});
    std::string bytes = read_bytes(p);
    write_bytes(p, bytes.substr(0, bytes.size() - 10));
    check_corrupt(p, {"past the data"});
  }
  SECTION("bad tied-tensor tables and bool bytes") {
    std::string p = path_for();
    const std::string t = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    write_file(p, "{" + t + R"(,"__metadata__":{"__kiln_tied__":"{\"u\":\"missing\"}"}})", ok_data);
    check_corrupt(p, {"'u'", "missing"});
    write_file(p, "{" + t + R"(,"__metadata__":{"__kiln_tied__":"{\"t\":\"t\"}"}})", ok_data);
    check_corrupt(p, {"'t'", "collides"});
    write_file(p, "{" + t + R"(,"__metadata__":{"__kiln_tied__":"not json"}})", ok_data);
    check_corrupt(p, {"__kiln_tied__"});
    write_file(p, R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2));
    check_corrupt(p, {"'m'", "not 0 or 1"});
  }
  SECTION("bad checksum tables and data that does not match its checksum") {
    std::string p = path_for();
    const std::string t = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    auto with_sums = [&](const std::string& table, const std::string& data) {
      write_file(p, "{" + t + R"(,"__metadata__":{"__kiln_crc32__":")" + table + R"("}})", data);
    };
    with_sums(R"({\"u\":\"00000000\"})", ok_data);
    check_corrupt(p, {"__kiln_crc32__", "'u'", "not a stored tensor"});
    with_sums(R"({\"t\":\"0000000\"})", ok_data);
    check_corrupt(p, {"'t'", "not 8 lowercase hex digits"});
    with_sums(R"({\"t\":\"ABCDEF01\"})", ok_data);
    check_corrupt(p, {"'t'", "not 8 lowercase hex digits"});
    with_sums(R"({\"t\":7})", ok_data);
    check_corrupt(p, {"'t'", "not 8 lowercase hex digits"});
    with_sums("[]", ok_data);
    check_corrupt(p, {"__kiln_crc32__", "not a JSON object"});
    // A file kiln wrote, with one bit of the last tensor byte flipped.
    const std::string good = dir.file("good.safetensors");
    save_safetensors(good, {{"t", tensor<float>({1.0f, 2.0f})}});
    std::string bytes = read_bytes(good);
    bytes[bytes.size() - 1] ^= 0x01;
    write_bytes(p, bytes);
    check_corrupt(p, {"tensor 't'", "does not match its checksum", "the file is corrupt"});
    CHECK_NOTHROW(SafetensorsFile(p));  // the header is intact: the damage shows when the tensor is read
  }
  SECTION("not a file") {
    check_corrupt(dir.file("does_not_exist.safetensors"), {"cannot open"});
    fs::create_directory(dir.file("a_dir"));
    check_corrupt(dir.file("a_dir"), {"not a regular file"});
  }
}

// The temporary files name their machine: remove_stale_temp_files removes this machine's whose
// process is gone, and the older pid-only names, but not another machine's (a folder shared between
// nodes, where that pid says nothing about this machine's processes) nor a live process's.
TEST_CASE("remove_stale_temp_files removes this machine's dead saves only", "[serialization]") {
  TempDir dir;
  std::string host;
  {
    AtomicFile probe(dir.file("probe"), "test");  // not committed: removed on exit
    const std::string name = std::filesystem::path(probe.path()).filename().string();
    REQUIRE(name.rfind("probe.tmp.", 0) == 0);
    const std::string rest = name.substr(10);  // "<host>.<pid>.<n>"
    host = rest.substr(0, rest.find('.'));
    const std::string own = host + "." + std::to_string(::getpid()) + ".";  // then the process's counter
    CHECK(rest.rfind(own, 0) == 0);
    CHECK(rest.size() > own.size());
    CHECK(rest.find_first_not_of("0123456789", own.size()) == std::string::npos);
    CHECK(host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") ==
          std::string::npos);
  }
  // A pid past Linux's largest (2^22) runs nowhere; the parent process runs.
  const std::string dead = "4194305", live = std::to_string(::getppid());
  const std::string other = host == "elsewhere" ? "elsewhere-2" : "elsewhere";
  for (const std::string& name :
       {"a.tmp." + host + "." + dead + ".0", "b.tmp." + dead + ".3", "c.tmp." + other + "." + dead + ".0",
        "d.tmp." + host + "." + live + ".1", "e.tmp." + host + ".x" + dead + ".0", "f.tmp.bad.host." + dead + ".0"}) {
    std::ofstream(dir.file(name)) << "half a save";
  }
  std::vector<std::string> removed = remove_stale_temp_files(dir.path);
  for (std::string& r : removed) r = std::filesystem::path(r).filename().string();
  std::sort(removed.begin(), removed.end());
  CHECK(removed == std::vector<std::string>{"a.tmp." + host + "." + dead + ".0", "b.tmp." + dead + ".3"});
  CHECK(dir.listing() ==
        std::vector<std::string>{"c.tmp." + other + "." + dead + ".0", "d.tmp." + host + "." + live + ".1",
                                 "e.tmp." + host + ".x" + dead + ".0", "f.tmp.bad.host." + dead + ".0"});
}

TEST_CASE("safetensors writes atomically: a failed save keeps the old file and leaves no temp", "[serialization]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  Tensor old_value = arange(0.0, 4.0, 1.0);
  save_safetensors(path, {{"w", old_value}}, {{"version", "old"}});
  const std::string old_bytes = read_bytes(path);
  auto check_old_file_intact = [&] {
    CHECK(read_bytes(path) == old_bytes);
    CHECK(bitwise_equal(load_safetensors(path)["w"], old_value));
    CHECK(dir.listing() == std::vector<std::string>{"model.safetensors"});
  };

  SECTION("a write that fails midway (file size limit, as on a full disk)") {
    // SIGXFSZ would kill the process; ignored, the write returns EFBIG instead.
    auto prev_handler = ::signal(SIGXFSZ, SIG_IGN);
    rlimit prev{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &prev) == 0);
    rlimit small = prev;
    small.rlim_cur = 4096;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    bool threw_io = false;
    try {
      save_safetensors(path, {{"w", randn({64, 64})}}, {{"version", "new"}});  // 16 KiB of data
    } catch (const IOError& e) {
      threw_io = std::string(e.what()).find("write failed") != std::string::npos;
    }
    ::setrlimit(RLIMIT_FSIZE, &prev);
    ::signal(SIGXFSZ, prev_handler);
    CHECK(threw_io);
    check_old_file_intact();
  }
  SECTION("the rename fails (the target became a directory)") {
    const std::string dir_target = dir.file("sub");
    fs::create_directory(dir_target);
    write_bytes(dir.file("sub/keep"), "x");  // a non-empty directory cannot be replaced
    CHECK_THROWS_AS(save_safetensors(dir_target, {{"w", ones({4})}}), IOError);
    CHECK(fs::is_directory(dir_target));
    fs::remove_all(dir_target);
    check_old_file_intact();
  }
  SECTION("the directory does not exist") {
    CHECK_THROWS_AS(save_safetensors(dir.file("nowhere/model.safetensors"), {{"w", ones({4})}}), IOError);
    check_old_file_intact();
  }
  SECTION("a successful save replaces the file") {
    save_safetensors(path, {{"w", ones({3})}}, {{"version", "new"}});
    CHECK(SafetensorsFile(path).metadata().at("version") == "new");
    CHECK(load_safetensors(path)["w"].to_vector<float>() == std::vector<float>{1, 1, 1});
    CHECK(dir.listing() == std::vector<std::string>{"model.safetensors"});
  }
}

namespace {

// Two parameters (one registered under two names: a tied pair) and a buffer.
class TiedNet : public Module {
 public:
  explicit TiedNet(int64_t n) {
    emb_ = register_parameter("emb", randn({n, 3}));
    register_parameter("head", emb_);  // tied: the same tensor under a second name
    bias_ = register_parameter("bias", zeros({n}));
    register_buffer("count", zeros({1}, DType::Int64));
  }
  std::string type_name() const override { return "TiedNet"; }
  Tensor emb_, bias_;
};

}  // namespace

TEST_CASE("load_into restores a module and keeps tied parameters tied", "[serialization]") {
  TempDir dir;
  auto a = std::make_shared<TiedNet>(5);
  a->bias_.detach().fill_(0.5);
  const std::string path = dir.file("m.safetensors");
  save_safetensors(path, a->state_dict());
  CHECK(SafetensorsFile(path).aliases() == std::map<std::string, std::string>{{"head", "emb"}});

  auto b = std::make_shared<TiedNet>(5);
  const TensorImpl* emb_impl = b->emb_.impl();
  load_into(*b, path);
  auto sd = b->state_dict();
  CHECK(sd["emb"].impl() == emb_impl);  // loaded in place
  CHECK(sd["head"].impl() == emb_impl);  // still tied
  CHECK(bitwise_equal(sd["emb"], a->emb_));
  CHECK(bitwise_equal(sd["bias"], a->bias_));

  auto c = std::make_shared<TiedNet>(6);
  CHECK_THROWS_WITH(load_into(*c, path), Catch::Contains("emb") && Catch::Contains(path));
}

TEST_CASE("safetensors: every truncation and random header damage is an IOError or a clean load", "[serialization]") {
  TempDir dir;
  const std::string path = dir.file("v.safetensors");
  save_safetensors(path, {{"a", randn({3, 2})}, {"b", arange(0, 5, 1, DType::Int32)}, {"c", ones({2}).to(DType::Bool)}},
                   {{"k", "v"}});
  const std::string good = read_bytes(path);
  const std::string bad = dir.file("damaged.safetensors");
  for (size_t len = 0; len < good.size(); ++len) {
    write_bytes(bad, good.substr(0, len));
    INFO("truncated to " << len << " bytes");
    CHECK_THROWS_AS(load_safetensors(bad), IOError);
  }
  // Damage inside the header: digits, brackets, quotes and arbitrary bytes at random places.
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(good[static_cast<size_t>(i)])) << (8 * i);
  std::mt19937 rng(12345);
  const std::string alphabet = "0123456789-[]{}\",:eE. \x00\xff";
  int rejected = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::string damaged = good;
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % (8 + n);
      damaged[pos] = rng() % 4 == 0 ? static_cast<char>(rng() & 0xFF) : alphabet[rng() % alphabet.size()];
    }
    write_bytes(bad, damaged);
    try {
      auto out = load_safetensors(bad);
      for (auto& [name, t] : out) (void)t.numel();
    } catch (const IOError&) {
      ++rejected;
    } catch (const std::exception& e) {
      FAIL("trial " << trial << ": not an IOError: " << e.what());
    }
  }
  CHECK(rejected > 1000);
}
