// Readers for the idx format of MNIST-style datasets (optionally gzip-compressed), and the
// Fashion-MNIST dataset on top of them.
#pragma once

#include <string>

#include "core/tensor.h"

namespace kiln::data {

// Reads an idx file (.gz through zlib, or plain): magic (0, 0, type 0x08 = uint8, ndims), big-endian
// dimension sizes, then the data. Returns a uint8 tensor of those dims. Truncated files, bad magic,
// other element types or sizes that do not match the file length are an IOError naming the file;
// memory is allocated as the data arrives, so a short file that declares a huge tensor costs little.
Tensor read_idx(const std::string& path);

struct FashionMnist {
  Tensor images;  // float32 [N, 1, 28, 28] scaled to [0, 1] (load_fashion_mnist), or uint8 (read_fashion_mnist)
  Tensor labels;  // int64 [N], classes 0..9
};

inline const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

// split is "train" (60,000 images) or "t10k" (10,000). A missing file is an IOError that says how
// to install the dataset.
FashionMnist load_fashion_mnist(const std::string& dir, const std::string& split);
// The same, with the images as stored: uint8 [N, 1, 28, 28] in [0, 255] (what data/datasets.h's
// FashionMnistDataset serves, for transforms that normalize themselves).
FashionMnist read_fashion_mnist(const std::string& dir, const std::string& split);

// The ten class names, in label order.
const char* fashion_mnist_class_name(int64_t label);

}  // namespace kiln::data
