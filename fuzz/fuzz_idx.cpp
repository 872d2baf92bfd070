// libFuzzer target for the idx reader (data/idx.h). Each input is read twice: as the file's bytes
// (which zlib decompresses when they happen to be gzip, so mutated .gz seeds reach the inflate path
// with broken streams) and gzip-compressed by the harness (so the header checks are fuzzed behind
// a valid stream too). Both reads must agree: the compression of a file must not change its meaning.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "data/idx.h"
#include "fuzz/fuzz_common.h"

namespace {

using kiln::Tensor;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_idx: FINDING: %s\n", what.c_str());
  std::abort();
}

std::vector<uint8_t> gzip(const uint8_t* data, size_t size) {
  z_stream zs{};
  // windowBits 15 + 16: a gzip wrapper, what a .gz file on disk has.
  if (deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) finding("deflateInit2");
  std::vector<uint8_t> out(deflateBound(&zs, static_cast<uLong>(size)));
  zs.next_in = const_cast<Bytef*>(data);
  zs.avail_in = static_cast<uInt>(size);
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) finding("deflate did not finish");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// The tensor read_idx returns for a file, or an undefined Tensor when it refused the file. Also
// checks what the header promises: uint8, 1 to 4 positive dims.
Tensor read(const std::string& path) {
  Tensor t;
  kiln::fuzz::expect_kiln_errors_only("fuzz_idx", [&] { t = kiln::data::read_idx(path); });
  if (t.defined()) {
    if (t.dtype() != kiln::DType::UInt8 || t.dim() < 1 || t.dim() > 4) finding("read_idx returned a bad tensor");
    for (int64_t d = 0; d < t.dim(); ++d)
      if (t.size(d) <= 0) finding("read_idx returned an empty dimension");
  }
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::init_quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::MemFile raw_file("fuzz_idx_raw");
  static kiln::fuzz::MemFile gz_file("fuzz_idx_gz");
  Tensor raw = read(raw_file.write(data, size));
  const std::vector<uint8_t> compressed = gzip(data, size);
  Tensor gz = read(gz_file.write(compressed.data(), compressed.size()));

  // Input that is itself gzip is decompressed in the raw read but not in the compressed one.
  const bool input_is_gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (input_is_gzip) return 0;
  if (raw.defined() != gz.defined()) finding("the plain and the gzip-compressed file are not both accepted");
  if (raw.defined()) {
    if (raw.sizes() != gz.sizes()) finding("the plain and the gzip-compressed file have different shapes");
    if (std::memcmp(raw.data_ptr(), gz.data_ptr(), static_cast<size_t>(raw.numel())) != 0) {
      finding("the plain and the gzip-compressed file have different data");
    }
    if (raw.numel() + 4 + 4 * raw.dim() != static_cast<int64_t>(size)) finding("accepted a file of the wrong length");
  }
  return 0;
}
