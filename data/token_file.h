// Token files for language-model training, memory-mapped: nanoGPT's prepare.py output (a flat
// array of little-endian uint16 token ids, no header) and llm.c's (a header of 256 int32 — magic
// 20240520, version, token count — then the tokens: uint16 for version 1, uint32 for version 2).
// Non-obvious decision: the file is mapped, never read whole, so a corpus of billions of tokens
// costs only the pages a batch touches, and every header field is checked against the file's
// length before a token is read.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/random.h"
#include "core/tensor.h"

namespace kiln::data {

class TokenFile {
 public:
  enum class Format : uint8_t {
    Auto,     // llm.c when the file starts with its magic, nanoGPT otherwise
    NanoGPT,  // uint16 tokens, no header
    LlmC,     // 256 int32 header, then uint16 (version 1) or uint32 (version 2) tokens
  };

  // Maps `path`. A missing or unreadable file, a length that is not a whole number of tokens, a bad
  // llm.c magic or version, or a header count that disagrees with the length is an IOError naming
  // the file and the numbers.
  explicit TokenFile(const std::string& path, Format format = Format::Auto);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  Format format() const { return format_; }
  int64_t size() const { return count_; }        // tokens
  int64_t token_bytes() const { return width_; }  // 2 or 4

  // Token i, for i in [0, size()); an IndexError otherwise.
  int64_t token(int64_t i) const;
  // Tokens [start, start + len) as an int64 CPU tensor [len]; an IndexError when out of range.
  Tensor slice(int64_t start, int64_t len) const;
  // `batch` windows of block + 1 tokens at offsets drawn from `generator` (a CPU generator):
  // inputs int64 [batch, block] and targets (the same windows shifted by one) int64 [batch, block],
  // on the CPU. A kiln::Error when the file has no block + 1 tokens or batch/block are not positive.
  std::pair<Tensor, Tensor> random_batch(int64_t batch, int64_t block, Generator& generator) const;

 private:
  std::string path_;
  Format format_ = Format::NanoGPT;
  const unsigned char* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  int64_t count_ = 0;
  int64_t width_ = 2;
};

// The first int32 of an llm.c token file.
inline constexpr int32_t kLlmCMagic = 20240520;

}  // namespace kiln::data
