// idx reading with zlib's gz interface, which reads plain files unchanged too, so one path serves
// both. Every header field is checked against the bytes actually present before use.
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "kernels/error.h"

namespace kiln::data {
namespace {

class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {
    if (!f_) throw IOError("read_idx: cannot open " + path);
  }
  ~GzFile() {
    if (f_) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads exactly n bytes or throws.
  void read(void* dst, size_t n, const char* what) {
    auto* p = static_cast<unsigned char*>(dst);
    while (n > 0) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
      int got = gzread(f_, p, chunk);
      if (got <= 0) {
        int err = 0;
        const char* msg = gzerror(f_, &err);
        throw IOError("read_idx: " + path_ + " is truncated or corrupt while reading " + what +
                      (err != Z_OK && err != Z_STREAM_END && msg ? std::string(" (") + msg + ")" : std::string()));
      }
      p += got;
      n -= static_cast<size_t>(got);
    }
  }
  // Whether the file ends here. At a gzip stream's end zlib checks its trailer (CRC-32 and length):
  // a mismatch is an error, and a stream cut short anywhere in the trailer reads as an end but leaves
  // Z_BUF_ERROR (a file short of up to 8 bytes loaded, its data unchecked). Either is an IOError.
  bool at_end() {
    unsigned char c;
    const int got = gzread(f_, &c, 1);
    if (got > 0) return false;
    int err = 0;
    const char* msg = gzerror(f_, &err);
    if (got < 0 || err == Z_BUF_ERROR) {
      throw IOError("read_idx: " + path_ + " is truncated or corrupt at the end of its data" +
                    (msg != nullptr && *msg != '\0' ? std::string(" (") + msg + ")" : std::string()));
    }
    return true;
  }

 private:
  std::string path_;
  gzFile f_;
};

}  // namespace

Tensor read_idx(const std::string& path) {
  GzFile f(path);
  unsigned char magic[4];
  f.read(magic, 4, "the magic number");
  if (magic[0] != 0 || magic[1] != 0) throw IOError("read_idx: " + path + " is not an idx file (bad magic)");
  if (magic[2] != 0x08) {
    char type[8];
    std::snprintf(type, sizeof type, "0x%02x", magic[2]);
    throw IOError("read_idx: " + path + " has element type " + type + "; only uint8 (0x08) is supported");
  }
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 4) throw IOError("read_idx: " + path + " declares " + std::to_string(ndims) + " dimensions");
  Shape shape;
  int64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    unsigned char b[4];
    f.read(b, 4, "the dimension sizes");
    int64_t s = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | int64_t{b[3]};
    if (s <= 0 || s > (int64_t{1} << 31)) throw IOError("read_idx: " + path + " declares size " + std::to_string(s));
    // Checked before multiplying: 2^34 * 2^31 would overflow int64.
    constexpr int64_t kMaxElements = int64_t{1} << 34;
    if (total > kMaxElements / s) throw IOError("read_idx: " + path + " declares an implausibly large tensor");
    total *= s;
    shape.push_back(s);
  }
  // The sizes are only a claim until the bytes are there: a 30-byte file may declare 16 GiB. So the
  // data is read in bounded chunks and the tensor allocated once it is all present (one extra copy,
  // small next to the inflate), and a short file fails having allocated about what it holds.
  std::vector<unsigned char> bytes;
  constexpr size_t kChunk = size_t{16} << 20;
  while (bytes.size() < static_cast<size_t>(total)) {
    const size_t done = bytes.size();
    const size_t n = std::min(kChunk, static_cast<size_t>(total) - done);
    // Geometric growth (never past the declared size), so a large file is not copied once per chunk.
    if (bytes.capacity() < done + n) {
      bytes.reserve(std::min(static_cast<size_t>(total), std::max(done + n, 2 * bytes.capacity())));
    }
    bytes.resize(done + n);
    f.read(bytes.data() + done, n, "the data");
  }
  if (!f.at_end()) throw IOError("read_idx: " + path + " has bytes after the declared data");
  Tensor t = empty(shape, TensorOptions(DType::UInt8));
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

FashionMnist read_fashion_mnist(const std::string& dir, const std::string& split) {
  if (split != "train" && split != "t10k") {
    throw Error("load_fashion_mnist: split must be \"train\" or \"t10k\", got \"" + split + "\"");
  }
  const std::string images = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string labels = dir + "/" + split + "-labels-idx1-ubyte.gz";
  for (const std::string& p : {images, labels}) {
    if (!std::filesystem::exists(p)) {
      throw IOError("load_fashion_mnist: " + p +
                    " not found; install the dataset with `apt-get install dataset-fashion-mnist` or pass its "
                    "directory");
    }
  }
  Tensor x = read_idx(images);
  Tensor y = read_idx(labels);
  if (x.dim() != 3 || x.size(1) != 28 || x.size(2) != 28 || y.dim() != 1 || y.size(0) != x.size(0)) {
    throw IOError("load_fashion_mnist: unexpected shapes " + shape_str(x.sizes()) + " (images) and " +
                  shape_str(y.sizes()) + " (labels) in " + dir);
  }
  return {x.reshape({x.size(0), 1, 28, 28}), y.to(DType::Int64)};
}

FashionMnist load_fashion_mnist(const std::string& dir, const std::string& split) {
  FashionMnist ds = read_fashion_mnist(dir, split);
  ds.images = ds.images.to(DType::Float32) / 255.0;
  return ds;
}

const char* fashion_mnist_class_name(int64_t label) {
  static const char* names[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return label >= 0 && label < 10 ? names[label] : "?";
}

}  // namespace kiln::data
