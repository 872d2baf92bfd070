// kiln's built-in datasets: Fashion-MNIST as stored (uint8), a character-level text corpus, random
// windows of a token sequence (a memory-mapped token file or the corpus), and synthetic images for
// benchmarks. Non-obvious decision: random windows draw their offsets from sample_generator(), so
// a window is a pure function of (loader seed, epoch, sample index) and a loader over them resumes
// exactly from its position alone, whatever the number of workers.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/token_file.h"

namespace kiln::data {

// Fashion-MNIST's split ("train" or "t10k"), the first `limit` images when limit >= 0: sample i is
// (uint8 [1, 28, 28] in [0, 255], int64 label). With a transform, the transform's output instead
// (a transforms::Compose normalizes and converts).
class FashionMnistDataset final : public Dataset {
 public:
  FashionMnistDataset(const std::string& dir, const std::string& split, int64_t limit = -1,
                      Transform transform = {});
  int64_t size() const override { return images_.size(0); }
  Example get(int64_t index) const override;
  // CRC-32s of the images and labels: what a checkpoint's position refers to.
  std::map<std::string, std::string> fingerprint() const override;
  const Tensor& images() const { return images_; }  // uint8 [N, 1, 28, 28]
  const Tensor& labels() const { return labels_; }  // int64 [N]

 private:
  Tensor images_, labels_;
  Transform transform_;
  std::string split_;
};

// A text as character ids: the vocabulary is the sorted distinct bytes of the text (train_gpt's).
class CharCorpus {
 public:
  explicit CharCorpus(std::string text);
  // Reads `path`; an IOError naming it when it cannot be read.
  static CharCorpus from_file(const std::string& path);

  const std::string& text() const { return text_; }
  int64_t vocab_size() const { return static_cast<int64_t>(chars_.size()); }
  const std::vector<unsigned char>& chars() const { return chars_; }
  // The id of byte c, or -1 when the text does not contain it.
  int64_t id(unsigned char c) const { return id_[c]; }
  // The whole text as ids: int64 [text bytes] on the CPU.
  const Tensor& ids() const { return ids_; }
  // Ids to text; an IndexError for an id outside the vocabulary.
  std::string decode(const std::vector<int64_t>& ids) const;
  // The text's size and CRC-32 and the vocabulary's, for checkpoints.
  std::map<std::string, std::string> fingerprint() const;

 private:
  std::string text_;
  std::vector<unsigned char> chars_;
  std::array<int64_t, 256> id_{};
  Tensor ids_;
};

// Windows of block + 1 consecutive tokens of a sequence: sample i is (data int64 [block], target
// int64 [block]), the target shifted by one token. With `random`, the window's start is drawn
// uniformly from sample_generator() (nanoGPT's get_batch, made reproducible) and size() is
// `samples` (an epoch's worth, as the caller chooses); otherwise window i starts at i * block and
// size() is the number of whole windows (samples < 0) or min(samples, that).
class TokenWindows final : public Dataset {
 public:
  // Over a memory-mapped token file.
  TokenWindows(std::shared_ptr<const TokenFile> file, int64_t block, int64_t samples, bool random = true);
  // Over int64 token ids on the CPU (a CharCorpus's ids(), or a part of them).
  TokenWindows(Tensor tokens, int64_t block, int64_t samples, bool random = true);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  int64_t tokens() const { return count_; }
  int64_t block() const { return block_; }
  // From now on get() checks every token of a window against the vocabulary: an id at or above
  // `vocab_size` is an IndexError naming it and its position (a token file made with another
  // tokenizer), rather than an embedding lookup out of range.
  void check_below(int64_t vocab_size);

 private:
  void init(int64_t samples);
  std::shared_ptr<const TokenFile> file_;
  Tensor tokens_;
  int64_t count_ = 0, block_ = 0, size_ = 0;
  int64_t vocab_size_ = 0;  // 0: unchecked
  bool random_ = true;
};

// `n` random uint8 images [channels, height, width] (or [height, width, channels] with hwc) with
// labels in [0, classes): sample i is a pure function of (seed, i), generated on every get(), so a
// benchmark measures the loader and transforms rather than a disk.
class SyntheticImages final : public Dataset {
 public:
  SyntheticImages(int64_t n, int64_t channels, int64_t height, int64_t width, int64_t classes = 10,
                  uint64_t seed = 0, bool hwc = false, Transform transform = {});
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override;

 private:
  int64_t n_, c_, h_, w_, classes_;
  uint64_t seed_;
  bool hwc_;
  Transform transform_;
};

}  // namespace kiln::data
