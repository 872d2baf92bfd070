// TokenFile: POSIX mmap of the whole file, read-only. Token ids are little-endian on disk (both
// writers are numpy on little-endian machines); kiln builds only for little-endian hosts, so a
// token is a memcpy of its bytes.
#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/ops/factory.h"
#include "core/ops/random.h"
#include "kernels/error.h"

namespace kiln::data {
namespace {

constexpr size_t kLlmCHeaderBytes = 256 * sizeof(int32_t);

int32_t read_i32(const unsigned char* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

TokenFile::TokenFile(const std::string& path, Format format) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IOError("TokenFile: cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IOError("TokenFile: " + path + " is not a regular file");
  }
  map_bytes_ = static_cast<size_t>(st.st_size);
  if (map_bytes_ > 0) {
    void* m = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw IOError("TokenFile: cannot map " + path + " (" + std::to_string(map_bytes_) + " bytes): " +
                    std::strerror(err));
    }
    map_ = static_cast<const unsigned char*>(m);
  }
  ::close(fd);  // the mapping keeps the file's pages reachable

  try {
    const bool has_magic = map_bytes_ >= sizeof(int32_t) && read_i32(map_) == kLlmCMagic;
    format_ = format == Format::Auto ? (has_magic ? Format::LlmC : Format::NanoGPT) : format;
    size_t header = 0;
    if (format_ == Format::LlmC) {
      if (map_bytes_ < kLlmCHeaderBytes) {
        throw IOError("TokenFile: " + path + " has " + std::to_string(map_bytes_) +
                      " bytes, shorter than llm.c's 1024-byte header");
      }
      const int32_t magic = read_i32(map_), version = read_i32(map_ + 4), declared = read_i32(map_ + 8);
      if (magic != kLlmCMagic) {
        throw IOError("TokenFile: " + path + " has magic " + std::to_string(magic) + ", not llm.c's " +
                      std::to_string(kLlmCMagic));
      }
      if (version != 1 && version != 2) {
        throw IOError("TokenFile: " + path + " is llm.c token file version " + std::to_string(version) +
                      "; kiln reads version 1 (uint16 tokens) and 2 (uint32 tokens)");
      }
      width_ = version == 1 ? 2 : 4;
      header = kLlmCHeaderBytes;
      const size_t body = map_bytes_ - header;
      if (declared < 0 || body != static_cast<size_t>(declared) * static_cast<size_t>(width_)) {
        throw IOError("TokenFile: " + path + "'s header declares " + std::to_string(declared) + " tokens of " +
                      std::to_string(width_) + " bytes, but " + std::to_string(body) + " bytes follow it");
      }
    } else {
      width_ = 2;
    }
    const size_t body = map_bytes_ - header;
    if (body % static_cast<size_t>(width_) != 0) {
      throw IOError("TokenFile: " + path + " has " + std::to_string(body) + " bytes of tokens, not a whole number of " +
                    std::to_string(width_) + "-byte tokens");
    }
    tokens_ = map_ == nullptr ? nullptr : map_ + header;
    count_ = static_cast<int64_t>(body / static_cast<size_t>(width_));
  } catch (...) {
    if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
    throw;
  }
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

int64_t TokenFile::token(int64_t i) const {
  if (i < 0 || i >= count_) {
    throw IndexError("TokenFile::token: index " + std::to_string(i) + " is outside [0, " + std::to_string(count_) +
                     ") of " + path_);
  }
  const unsigned char* p = tokens_ + static_cast<size_t>(i) * static_cast<size_t>(width_);
  if (width_ == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

Tensor TokenFile::slice(int64_t start, int64_t len) const {
  if (start < 0 || len < 0 || start > count_ || len > count_ - start) {
    throw IndexError("TokenFile::slice: tokens [" + std::to_string(start) + ", " + std::to_string(start) + " + " +
                     std::to_string(len) + ") are outside the " + std::to_string(count_) + " tokens of " + path_);
  }
  std::vector<int64_t> v(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) v[static_cast<size_t>(i)] = token(start + i);
  return tensor(v, {len}, TensorOptions(DType::Int64));
}

std::pair<Tensor, Tensor> TokenFile::random_batch(int64_t batch, int64_t block, Generator& generator) const {
  if (batch < 1 || block < 1) {
    throw Error("TokenFile::random_batch: batch and block must be positive, got batch " + std::to_string(batch) +
                " and block " + std::to_string(block));
  }
  if (block >= count_) {
    throw Error("TokenFile::random_batch: " + path_ + " has " + std::to_string(count_) +
                " tokens, too few for one window of block + 1 = " + std::to_string(block + 1));
  }
  if (!generator.device().is_cpu()) {
    throw DeviceError("TokenFile::random_batch: the generator belongs to " + generator.device().str() +
                      "; windows are cut on the host, from a CPU generator");
  }
  const int64_t n = checked_mul(batch, block, "TokenFile::random_batch", "batch * block");
  if (n > (int64_t{1} << 32)) {
    throw Error("TokenFile::random_batch: batch " + std::to_string(batch) + " x block " + std::to_string(block) +
                " is " + std::to_string(n) + " tokens, more than one batch of 2^32");
  }
  const Tensor starts = randint(0, count_ - block, {batch}, TensorOptions(DType::Int64), generator);
  const std::vector<int64_t> s = starts.to_vector<int64_t>();
  std::vector<int64_t> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < block; ++t) {
      const size_t k = static_cast<size_t>(b * block + t);
      x[k] = token(s[static_cast<size_t>(b)] + t);
      y[k] = token(s[static_cast<size_t>(b)] + t + 1);
    }
  }
  const TensorOptions i64(DType::Int64);
  return {tensor(x, {batch, block}, i64), tensor(y, {batch, block}, i64)};
}

}  // namespace kiln::data
