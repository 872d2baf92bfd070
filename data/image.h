// PNG and JPEG images to and from uint8 tensors, through Debian's libpng and libjpeg-turbo.
// Non-obvious decisions: the libraries report errors by longjmp, so every library call runs inside a
// small C-like frame that holds no C++ object with a destructor, and the caller turns its return
// code into an IOError; decoders write [H, W, C] natively, so decode_image_hwc is the copy-free path
// and decode_image adds one transpose to torchvision's [C, H, W]; and the size bound is checked on
// the header's claim before any pixel memory is allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace kiln::data {

enum class ImageMode : uint8_t {
  Unchanged,  // the file's channels: 1 gray, 2 gray + alpha, 3 RGB, 4 RGBA (JPEG: 1 or 3)
  Gray,       // 1 channel; color becomes (19595 R + 38470 G + 7471 B + 2^15) >> 16, i.e. 0.299 R +
              // 0.587 G + 0.114 B rounded (PIL's "L"); alpha is dropped, not composited
  RGB,        // 3 channels; gray is replicated, alpha dropped
  RGBA,       // 4 channels; gray is replicated, an opaque alpha (255) added when the file has none
};

const char* image_mode_name(ImageMode mode);

// The channels `mode` produces for an image stored with `file_channels` channels.
int64_t image_mode_channels(ImageMode mode, int64_t file_channels);

// The largest decoded image, H * W * C bytes (2 GiB): a larger claim in a header is refused before
// anything is allocated.
inline constexpr int64_t kMaxImageBytes = int64_t{1} << 31;

// Decodes a PNG or JPEG held in memory (detected by its signature) into a contiguous uint8 CPU
// tensor [C, H, W]. PNG: 16-bit samples are scaled to 8 bits (v * 255 / 65535, rounded), palettes
// and 1/2/4-bit gray are expanded, a tRNS chunk becomes an alpha channel. JPEG: grayscale, YCbCr,
// RGB, and CMYK/YCCK (Adobe's inverted convention, converted to RGB) are read; image data that stops
// before the last block (a truncated file) is an error, not a gray-filled image, while libjpeg's
// other warnings of damaged data pass, as in PIL and torchvision. Any failure — unknown signature,
// corrupt or truncated data, an image over `max_bytes` (H * W * max(C, the file's channels)) — is an
// IOError naming `name` and, for a library error, the library's message. Thread-safe.
Tensor decode_image(const void* bytes, size_t n, const std::string& name, ImageMode mode = ImageMode::Unchanged,
                    int64_t max_bytes = kMaxImageBytes);
// The same, as [H, W, C]: what the decoders produce, so no transpose pass.
Tensor decode_image_hwc(const void* bytes, size_t n, const std::string& name, ImageMode mode = ImageMode::Unchanged,
                        int64_t max_bytes = kMaxImageBytes);

// Reads `path` and decodes it as above; a missing or unreadable file is an IOError naming the path.
Tensor read_image(const std::string& path, ImageMode mode = ImageMode::Unchanged);
Tensor read_image_hwc(const std::string& path, ImageMode mode = ImageMode::Unchanged);

// Writes a uint8 CPU tensor [C, H, W] (any strides) atomically (core/atomic_file.h). PNG: C in
// {1, 2, 3, 4} (gray, gray + alpha, RGB, RGBA), 8 bits per sample. JPEG: C in {1, 3}, 4:2:0 chroma
// subsampling below quality 90 and none from 90 up, quality in [1, 100]. Bad tensors are a
// ShapeError, DTypeError or DeviceError; a failed write an IOError naming the path.
void write_png(const std::string& path, const Tensor& image);
void write_jpeg(const std::string& path, const Tensor& image, int quality = 95);

// The same images as file bytes in memory (what write_png and write_jpeg put in the file).
std::string encode_png(const Tensor& image);
std::string encode_jpeg(const Tensor& image, int quality = 95);

}  // namespace kiln::data
