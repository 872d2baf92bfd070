// torchvision's ImageFolder: root/<class>/**/<file>, one class per subfolder of root. Non-obvious
// decisions: the tree is listed once, at construction, and sorted bytewise as torchvision's walk
// sorts it (classes by name; in a class, folders by their path and each one's files by name), so
// sample i is the same file on every machine, every run and in PyTorch; get() only reads that
// immutable list, so loader threads share nothing mutable; and the fingerprint hashes relative
// paths and file sizes, not contents, so it costs one stat per file and survives copying the tree
// elsewhere.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/image.h"

namespace kiln::data {

struct ImageFolderOptions {
  ImageMode mode = ImageMode::RGB;
  Transform transform;  // applied to each decoded image when set
  bool hwc = false;     // images as [H, W, C] (the decoders' layout: no transpose) instead of [C, H, W]
  // File extensions that count as images, compared case-insensitively, with or without the dot;
  // empty means {".png", ".jpg", ".jpeg"}.
  std::vector<std::string> extensions;
};

class ImageFolder final : public Dataset {
 public:
  // Lists `root`. Every subfolder of root is a class (class folders may be symbolic links); its
  // images are found recursively, following directory links as torchvision's walk does; other files
  // are skipped. A missing root, a root without subfolders, a class folder without images, or a
  // link to a folder that contains the link (a cycle) is an IOError naming the folder.
  explicit ImageFolder(const std::string& root, ImageFolderOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  // The decoded image (uint8, per options.mode and options.hwc, then options.transform) and its class
  // as an int64 0-d tensor. An undecodable file is an IOError naming the file and the sample index.
  Example get(int64_t index) const override;
  // "files", "classes" and "crc32": zlib's CRC-32 over each class name and each sample's path
  // relative to root and its size in bytes.
  std::map<std::string, std::string> fingerprint() const override { return fingerprint_; }

  const std::string& root() const { return root_; }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::map<std::string, int64_t>& class_to_index() const { return class_to_index_; }
  // (path, class index) per sample, in sample order; paths are root joined with the relative path.
  const std::vector<std::pair<std::string, int64_t>>& samples() const { return samples_; }

 private:
  std::string root_;
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::map<std::string, int64_t> class_to_index_;
  std::vector<std::pair<std::string, int64_t>> samples_;
  std::map<std::string, std::string> fingerprint_;
};

}  // namespace kiln::data
