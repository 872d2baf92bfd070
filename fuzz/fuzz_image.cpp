// libFuzzer target for the image decoders (data/image.h): each input is decoded unchanged as [H, W, C]
// and [C, H, W], and in one converting mode picked by its last byte, under a 16 MiB bound so that an
// accepted image and the decoders' own buffers stay inside libFuzzer's 256 MiB allocation limit. An
// accepted image must be uint8 with the mode's channels, the two layouts must hold the same pixels,
// and a converting mode must agree with the unchanged decode on the image's size.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "data/image.h"
#include "fuzz/fuzz_common.h"

namespace {

using kiln::Tensor;
using kiln::data::ImageMode;

constexpr int64_t kFuzzMaxImageBytes = int64_t{16} << 20;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_image: FINDING: %s\n", what.c_str());
  std::abort();
}

Tensor decode(const uint8_t* data, size_t size, ImageMode mode, bool hwc) {
  Tensor t;
  kiln::fuzz::expect_kiln_errors_only("fuzz_image", [&] {
    t = hwc ? kiln::data::decode_image_hwc(data, size, "fuzz-input", mode, kFuzzMaxImageBytes)
            : kiln::data::decode_image(data, size, "fuzz-input", mode, kFuzzMaxImageBytes);
  });
  if (!t.defined()) return t;
  if (t.dtype() != kiln::DType::UInt8 || t.dim() != 3 || !t.is_contiguous()) finding("a malformed image tensor");
  const int64_t c = t.size(hwc ? 2 : 0);
  const int64_t want = kiln::data::image_mode_channels(mode, c);
  if (c < 1 || c > 4 || c != want) finding("an image of " + std::to_string(c) + " channels in mode " +
                                           kiln::data::image_mode_name(mode));
  if (t.numel() > kFuzzMaxImageBytes) finding("an image over the bound");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::init_quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tensor hwc = decode(data, size, ImageMode::Unchanged, true);
  const Tensor chw = decode(data, size, ImageMode::Unchanged, false);
  if (hwc.defined() != chw.defined()) finding("the two layouts do not agree on accepting the input");
  if (!hwc.defined() || size == 0) return 0;
  const int64_t h = hwc.size(0), w = hwc.size(1), c = hwc.size(2);
  if (chw.sizes() != kiln::Shape{c, h, w}) finding("the two layouts have different sizes");
  const auto* a = hwc.data_ptr<uint8_t>();
  const auto* b = chw.data_ptr<uint8_t>();
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t i = 0; i < h * w; ++i) {
      if (a[i * c + ch] != b[ch * h * w + i]) finding("the two layouts hold different pixels");
    }
  }
  static constexpr ImageMode kConverting[] = {ImageMode::Gray, ImageMode::RGB, ImageMode::RGBA};
  const ImageMode mode = kConverting[data[size - 1] % 3];
  const Tensor converted = decode(data, size, mode, true);
  // A bound on max(file channels, output channels) may refuse RGBA where the unchanged decode fit.
  if (converted.defined() && (converted.size(0) != h || converted.size(1) != w)) {
    finding(std::string("mode ") + kiln::data::image_mode_name(mode) + " changed the image's size");
  }
  return 0;
}
