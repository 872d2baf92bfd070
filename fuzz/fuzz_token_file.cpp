// libFuzzer target for token files (data/token_file.h). TokenFile maps a path, so each input is the
// content of this process's in-memory file, opened as Auto, NanoGPT and LlmC. An accepted file must
// have the token count its length implies, read its first and last tokens and a slice, refuse the
// index past its end with an IndexError, and cut a random batch whose targets are its inputs shifted
// by one whenever it holds a window.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "data/token_file.h"
#include "fuzz/fuzz_common.h"

namespace {

using kiln::data::TokenFile;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_token_file: FINDING: %s\n", what.c_str());
  std::abort();
}

void check(const TokenFile& f, size_t file_bytes) {
  const int64_t n = f.size();
  const int64_t width = f.token_bytes();
  const size_t header = f.format() == TokenFile::Format::LlmC ? 1024 : 0;
  if (f.format() == TokenFile::Format::Auto) finding("the format stayed Auto");
  if ((width != 2 && width != 4) || header + static_cast<size_t>(n * width) != file_bytes) {
    finding("a token count of " + std::to_string(n) + " does not match " + std::to_string(file_bytes) + " bytes");
  }
  const int64_t limit = width == 2 ? 0xFFFF : 0xFFFFFFFFll;
  if (n > 0) {
    const int64_t first = f.token(0), last = f.token(n - 1);
    if (first < 0 || first > limit || last < 0 || last > limit) finding("a token outside its width's range");
    const int64_t len = std::min<int64_t>(n, 64);
    const kiln::Tensor s = f.slice(n - len, len);
    if (s.numel() != len || s.to_vector<int64_t>().back() != last) finding("slice disagrees with token()");
  }
  bool refused = false;
  try {
    f.token(n);
  } catch (const kiln::IndexError&) {
    refused = true;
  }
  if (!refused) finding("token(size()) was not an IndexError");
  const int64_t block = std::min<int64_t>(8, n - 1);
  if (block >= 1) {
    kiln::Generator g(static_cast<uint64_t>(n));
    const auto [x, y] = f.random_batch(3, block, g);
    if (x.sizes() != kiln::Shape{3, block} || y.sizes() != x.sizes()) finding("random_batch has wrong shapes");
    const auto xs = x.to_vector<int64_t>(), ys = y.to_vector<int64_t>();
    for (int64_t b = 0; b < 3; ++b) {
      for (int64_t t = 0; t + 1 < block; ++t) {
        if (ys[static_cast<size_t>(b * block + t)] != xs[static_cast<size_t>(b * block + t + 1)]) {
          finding("random_batch's targets are not its inputs shifted by one");
        }
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::init_quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::MemFile file("fuzz_token_file");
  const std::string& path = file.write(data, size);
  for (TokenFile::Format format : {TokenFile::Format::Auto, TokenFile::Format::NanoGPT, TokenFile::Format::LlmC}) {
    std::unique_ptr<TokenFile> f;
    kiln::fuzz::expect_kiln_errors_only("fuzz_token_file", [&] { f = std::make_unique<TokenFile>(path, format); });
    if (!f) continue;
    // An accepted file must be readable: any exception from here on is a finding.
    try {
      check(*f, size);
    } catch (const std::exception& e) {
      finding(std::string("reading an accepted file threw: ") + e.what());
    }
  }
  return 0;
}
