// The built-in datasets. Each get() builds its sample from immutable memory (or a read-only
// mapping), so any number of loader threads may call it at once.
#include "data/datasets.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "data/idx.h"
#include "kernels/error.h"
#include "kernels/philox.h"
#include "nn/safetensors.h"

namespace kiln::data {
namespace {

// A uniform integer in [0, range) from one Philox draw of `generator`: 64 random bits reduced
// modulo range (the bias, below range / 2^64, is far under anything a window sampler could show).
int64_t draw_below(Generator& generator, int64_t range) {
  const PhiloxState s = generator.next();
  const Philox4 r = philox_block(s.seed, s.offset, 0);
  const uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
  return static_cast<int64_t>(bits % static_cast<uint64_t>(range));
}

std::string crc_of(const void* p, size_t n) {
  return nn::tensor_checksum(from_blob(p, {static_cast<int64_t>(n)}, DType::UInt8));
}

}  // namespace

// --- Fashion-MNIST ----------------------------------------------------------------------------------

FashionMnistDataset::FashionMnistDataset(const std::string& dir, const std::string& split, int64_t limit,
                                         Transform transform)
    : transform_(std::move(transform)), split_(split) {
  FashionMnist d = read_fashion_mnist(dir, split);
  if (limit >= 0 && limit < d.images.size(0)) {
    d.images = d.images.narrow(0, 0, limit).contiguous();
    d.labels = d.labels.narrow(0, 0, limit).contiguous();
  }
  images_ = d.images;
  labels_ = d.labels;
}

Example FashionMnistDataset::get(int64_t index) const {
  check_index("FashionMnistDataset", index, size());
  Tensor image = images_.select(0, index);
  if (transform_) image = transform_(image);
  return {image, labels_.select(0, index)};
}

std::map<std::string, std::string> FashionMnistDataset::fingerprint() const {
  // The same keys and values train_cnn has always written, so older checkpoints still match.
  return {{"dataset", "Fashion-MNIST " + split_ + ", first " + std::to_string(size()) + " images"},
          {split_ + "_images_crc32", nn::tensor_checksum(images_.to(DType::Float32) / 255.0)},
          {split_ + "_labels_crc32", nn::tensor_checksum(labels_)}};
}

// --- characters -------------------------------------------------------------------------------------

CharCorpus::CharCorpus(std::string text) : text_(std::move(text)) {
  std::array<bool, 256> seen{};
  for (unsigned char c : text_) seen[c] = true;
  id_.fill(-1);
  for (int c = 0; c < 256; ++c) {
    if (seen[static_cast<size_t>(c)]) {
      id_[static_cast<size_t>(c)] = static_cast<int64_t>(chars_.size());
      chars_.push_back(static_cast<unsigned char>(c));
    }
  }
  std::vector<int64_t> ids(text_.size());
  for (size_t i = 0; i < text_.size(); ++i) ids[i] = id_[static_cast<unsigned char>(text_[i])];
  ids_ = tensor(ids, {static_cast<int64_t>(ids.size())}, TensorOptions(DType::Int64));
}

CharCorpus CharCorpus::from_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw IOError("CharCorpus: " + path + " is a folder, not a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IOError("CharCorpus: cannot read " + path);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw IOError("CharCorpus: reading " + path + " failed");
  return CharCorpus(std::move(text));
}

std::string CharCorpus::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      throw IndexError("CharCorpus::decode: id " + std::to_string(id) + " is outside the vocabulary of " +
                       std::to_string(vocab_size()) + " characters");
    }
    out.push_back(static_cast<char>(chars_[static_cast<size_t>(id)]));
  }
  return out;
}

std::map<std::string, std::string> CharCorpus::fingerprint() const {
  return {{"text", std::to_string(text_.size()) + " bytes, CRC-32 " + crc_of(text_.data(), text_.size())},
          {"vocabulary", std::to_string(chars_.size()) + " characters, CRC-32 " + crc_of(chars_.data(), chars_.size())}};
}

// --- token windows ----------------------------------------------------------------------------------

TokenWindows::TokenWindows(std::shared_ptr<const TokenFile> file, int64_t block, int64_t samples, bool random)
    : file_(std::move(file)), block_(block), random_(random) {
  if (!file_) throw Error("TokenWindows: no token file given");
  count_ = file_->size();
  init(samples);
}

TokenWindows::TokenWindows(Tensor tokens, int64_t block, int64_t samples, bool random)
    : block_(block), random_(random) {
  if (!tokens.defined() || tokens.dim() != 1 || tokens.dtype() != DType::Int64 || !tokens.is_cpu()) {
    throw Error("TokenWindows: tokens must be a 1-d int64 CPU tensor, got " +
                (tokens.defined() ? shape_str(tokens.sizes()) + " " + dtype_name(tokens.dtype()) + " on " +
                                        tokens.device().str()
                                  : std::string("an undefined tensor")));
  }
  tokens_ = tokens.contiguous();
  count_ = tokens_.size(0);
  init(samples);
}

void TokenWindows::init(int64_t samples) {
  if (block_ < 1) throw Error("TokenWindows: block must be positive, got " + std::to_string(block_));
  if (count_ < block_ + 1) {
    throw Error("TokenWindows: " + std::to_string(count_) + " tokens are too few for one window of block + 1 = " +
                std::to_string(block_ + 1));
  }
  if (random_) {
    if (samples < 1) throw Error("TokenWindows: random windows need samples >= 1, got " + std::to_string(samples));
    size_ = samples;
  } else {
    const int64_t whole = (count_ - 1) / block_;
    size_ = samples < 0 ? whole : std::min(samples, whole);
  }
}

Example TokenWindows::get(int64_t index) const {
  check_index("TokenWindows", index, size_);
  const int64_t start = random_ ? draw_below(sample_generator(), count_ - block_) : index * block_;
  Tensor window = empty({block_ + 1}, TensorOptions(DType::Int64));
  auto* w = static_cast<int64_t*>(window.data_ptr());
  if (file_) {
    for (int64_t t = 0; t <= block_; ++t) w[t] = file_->token(start + t);
  } else {
    std::memcpy(w, static_cast<const int64_t*>(tokens_.data_ptr()) + start,
                static_cast<size_t>(block_ + 1) * sizeof(int64_t));
  }
  if (vocab_size_ > 0) {
    for (int64_t t = 0; t <= block_; ++t) {
      if (w[t] < 0 || w[t] >= vocab_size_) {
        throw IndexError("TokenWindows: token " + std::to_string(w[t]) + " at position " + std::to_string(start + t) +
                         (file_ ? " of " + file_->path() : std::string(" of the token ids")) +
                         " is outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
      }
    }
  }
  return {window.narrow(0, 0, block_), window.narrow(0, 1, block_)};
}

void TokenWindows::check_below(int64_t vocab_size) {
  if (vocab_size < 1) throw Error("TokenWindows::check_below: vocabulary size " + std::to_string(vocab_size) + " < 1");
  vocab_size_ = vocab_size;
}

// --- synthetic images -------------------------------------------------------------------------------

SyntheticImages::SyntheticImages(int64_t n, int64_t channels, int64_t height, int64_t width, int64_t classes,
                                 uint64_t seed, bool hwc, Transform transform)
    : n_(n), c_(channels), h_(height), w_(width), classes_(classes), seed_(seed), hwc_(hwc),
      transform_(std::move(transform)) {
  if (n < 0 || channels < 1 || height < 1 || width < 1 || classes < 1 || channels > 4 || height > 65536 ||
      width > 65536) {
    throw Error("SyntheticImages: need n >= 0, 1 to 4 channels, sizes in [1, 65536] and classes >= 1; got n " +
                std::to_string(n) + ", " + std::to_string(channels) + "x" + std::to_string(height) + "x" +
                std::to_string(width) + ", " + std::to_string(classes) + " classes");
  }
}

Example SyntheticImages::get(int64_t index) const {
  check_index("SyntheticImages", index, n_);
  Tensor image = empty(hwc_ ? Shape{h_, w_, c_} : Shape{c_, h_, w_}, TensorOptions(DType::UInt8));
  auto* p = static_cast<unsigned char*>(image.data_ptr());
  const int64_t bytes = c_ * h_ * w_;
  for (int64_t k = 0; k * 16 < bytes; ++k) {
    const Philox4 r = philox_block(seed_, static_cast<uint64_t>(index), static_cast<uint64_t>(k));
    unsigned char block[16];
    std::memcpy(block, r.v, sizeof block);
    std::memcpy(p + k * 16, block, static_cast<size_t>(std::min<int64_t>(16, bytes - k * 16)));
  }
  const Philox4 label = philox_block(seed_ ^ 0x1abe1ull, static_cast<uint64_t>(index), 0);
  Tensor target = scalar_tensor(static_cast<int64_t>(label.v[0] % static_cast<uint64_t>(classes_)),
                                TensorOptions(DType::Int64));
  if (transform_) image = transform_(image);
  return {image, target};
}

}  // namespace kiln::data
