// Images and image folders: PNG of every color type and bit depth round-trips exactly (the unusual
// ones written here with libpng's classic writer, since kiln writes only 8-bit files), JPEG within a
// tolerance, the modes convert as documented, every broken input is an IOError naming the file, and
// ImageFolder lists, labels, transforms and fingerprints a temporary tree the way torchvision does.
#include <catch2/catch.hpp>
#include <png.h>
#include <zlib.h>

// jpeglib.h needs size_t and FILE declared before it.
#include <cstdio>
#include <jpeglib.h>

#include <cmath>
#include <csetjmp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "data/image.h"
#include "data/image_folder.h"
#include "tests/temp_dir.h"

using namespace kiln;
using kiln::data::ImageMode;

namespace {

namespace fs = std::filesystem;

// A deterministic uint8 image [C, H, W]: smooth enough for JPEG, varied enough to catch swaps.
Tensor pattern(int64_t c, int64_t h, int64_t w, bool smooth = false) {
  std::vector<int64_t> v(static_cast<size_t>(c * h * w));
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        const int64_t value = smooth ? (40 + 60 * ch + 3 * x + 2 * y) % 256 : (ch * 71 + y * 37 + x * 13 + x * y) % 256;
        v[static_cast<size_t>((ch * h + y) * w + x)] = value;
      }
    }
  }
  return tensor(v, {c, h, w}, TensorOptions(DType::UInt8));
}

std::vector<int64_t> values(const Tensor& t) { return t.to(DType::Int64).contiguous().to_vector<int64_t>(); }

double mean_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<int64_t> x = values(a), y = values(b);
  REQUIRE(x.size() == y.size());
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += std::abs(static_cast<double>(x[i] - y[i]));
  return sum / static_cast<double>(x.size());
}

Tensor decode(const std::string& bytes, ImageMode mode = ImageMode::Unchanged) {
  return data::decode_image(bytes.data(), bytes.size(), "mem.img", mode);
}

// The message of the IOError that f throws; a test failure when it throws anything else or nothing.
template <class F> std::string io_error(F&& f) {
  try {
    f();
  } catch (const IOError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected an IOError, got: " << e.what());
  }
  FAIL("expected an IOError, nothing was thrown");
  return {};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

// ---- a PNG writer on libpng's classic API, for the files kiln does not write ----------------------

struct ClassicPng {
  uint32_t width = 0, height = 0;
  int bit_depth = 8, color_type = PNG_COLOR_TYPE_GRAY;
  bool interlaced = false;
  std::vector<png_color> palette;
  std::vector<png_byte> palette_alpha;  // tRNS of a palette image
  bool gray_transparent = false;        // tRNS of a gray image: this gray value is transparent
  png_uint_16 transparent_gray = 0;
  std::vector<std::string> rows;  // packed rows as the file stores them (16-bit samples big-endian)
};

struct ClassicWriteJob {
  png_structp png;
  png_infop info;
  const ClassicPng* spec;
  std::vector<png_bytep>* rows;
  std::string* out;
};

void classic_write(png_structp png, png_bytep data, size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}
void classic_flush(png_structp) {}

__attribute__((noinline)) bool classic_run(ClassicWriteJob* job) {
  if (setjmp(png_jmpbuf(job->png))) return false;
  const ClassicPng& s = *job->spec;
  png_set_write_fn(job->png, job->out, classic_write, classic_flush);
  png_set_IHDR(job->png, job->info, s.width, s.height, s.bit_depth, s.color_type,
               s.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) png_set_PLTE(job->png, job->info, s.palette.data(), static_cast<int>(s.palette.size()));
  if (!s.palette_alpha.empty()) {
    png_set_tRNS(job->png, job->info, s.palette_alpha.data(), static_cast<int>(s.palette_alpha.size()), nullptr);
  }
  if (s.gray_transparent) {
    png_color_16 c{};
    c.gray = s.transparent_gray;
    png_set_tRNS(job->png, job->info, nullptr, 0, &c);
  }
  png_write_info(job->png, job->info);
  png_write_image(job->png, job->rows->data());
  png_write_end(job->png, nullptr);
  return true;
}

std::string classic_png(const ClassicPng& spec) {
  std::string out;
  std::vector<std::string> rows = spec.rows;
  std::vector<png_bytep> pointers;
  for (std::string& r : rows) pointers.push_back(reinterpret_cast<png_bytep>(r.data()));
  ClassicWriteJob job{png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr), nullptr, &spec,
                      &pointers, &out};
  REQUIRE(job.png != nullptr);
  job.info = png_create_info_struct(job.png);
  const bool ok = classic_run(&job);
  png_destroy_write_struct(&job.png, &job.info);
  REQUIRE(ok);
  return out;
}

std::string be16(unsigned v) { return {static_cast<char>(v >> 8), static_cast<char>(v & 0xff)}; }

// ---- a JPEG writer on libjpeg directly, for progressive and CMYK files -----------------------------

struct LibjpegJob {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  std::jmp_buf jump;
  int width, height, components;
  J_COLOR_SPACE space;
  bool progressive;
  const uint8_t* pixels;  // [H, W, components]
  unsigned char* out;
  unsigned long size;
};

void libjpeg_on_error(j_common_ptr c) {
  std::longjmp(reinterpret_cast<LibjpegJob*>(c->client_data)->jump, 1);
}

__attribute__((noinline)) bool libjpeg_run(LibjpegJob* job) {
  job->cinfo.err = jpeg_std_error(&job->err);
  job->err.error_exit = libjpeg_on_error;
  if (setjmp(job->jump)) return false;
  jpeg_create_compress(&job->cinfo);
  job->cinfo.client_data = job;
  jpeg_mem_dest(&job->cinfo, &job->out, &job->size);
  job->cinfo.image_width = static_cast<JDIMENSION>(job->width);
  job->cinfo.image_height = static_cast<JDIMENSION>(job->height);
  job->cinfo.input_components = job->components;
  job->cinfo.in_color_space = job->space;
  jpeg_set_defaults(&job->cinfo);  // CMYK: written with Adobe's marker
  jpeg_set_quality(&job->cinfo, 95, TRUE);
  if (job->progressive) jpeg_simple_progression(&job->cinfo);
  jpeg_start_compress(&job->cinfo, TRUE);
  while (job->cinfo.next_scanline < job->cinfo.image_height) {
    auto* row = const_cast<JSAMPROW>(job->pixels + job->cinfo.next_scanline * job->width * job->components);
    jpeg_write_scanlines(&job->cinfo, &row, 1);
  }
  jpeg_finish_compress(&job->cinfo);
  return true;
}

std::string libjpeg_file(const std::vector<uint8_t>& hwc, int width, int height, int components, J_COLOR_SPACE space,
                         bool progressive) {
  LibjpegJob job{};
  job.width = width;
  job.height = height;
  job.components = components;
  job.space = space;
  job.progressive = progressive;
  job.pixels = hwc.data();
  const bool ok = libjpeg_run(&job);
  jpeg_destroy_compress(&job.cinfo);
  std::string out(reinterpret_cast<const char*>(job.out), ok ? job.size : 0);
  std::free(job.out);
  REQUIRE(ok);
  return out;
}

}  // namespace

TEST_CASE("PNG round-trips exactly for gray, gray + alpha, RGB and RGBA", "[data][image]") {
  test::TempDir dir;
  for (int64_t c : {1, 2, 3, 4}) {
    CAPTURE(c);
    const Tensor img = pattern(c, 5, 7);
    const std::string path = dir.file("img" + std::to_string(c) + ".png");
    data::write_png(path, img);
    const Tensor back = data::read_image(path);
    CHECK(back.dtype() == DType::UInt8);
    CHECK(back.sizes() == Shape{c, 5, 7});
    CHECK(back.is_contiguous());
    CHECK(values(back) == values(img));
    const Tensor hwc = data::read_image_hwc(path);
    CHECK(hwc.sizes() == Shape{5, 7, c});
    CHECK(values(hwc) == values(img.permute({1, 2, 0})));
  }
  // A non-contiguous tensor is written as its values.
  const Tensor wide = pattern(3, 6, 4);
  const Tensor view = wide.permute({0, 2, 1});
  CHECK(values(decode(data::encode_png(view))) == values(view));
  CHECK(dir.listing() == std::vector<std::string>{"img1.png", "img2.png", "img3.png", "img4.png"});
}

TEST_CASE("PNG's 16-bit, palette, low-bit gray, tRNS and interlaced files decode to 8 bits", "[data][image]") {
  SECTION("16-bit RGB is scaled to 8 bits") {
    ClassicPng s;
    s.width = 3;
    s.height = 2;
    s.bit_depth = 16;
    s.color_type = PNG_COLOR_TYPE_RGB;
    std::vector<int64_t> want;
    for (unsigned y = 0; y < 2; ++y) {
      std::string row;
      for (unsigned i = 0; i < 9; ++i) {
        const unsigned v = (y * 9 + i) * 28 % 256;
        row += be16(v * 257 + (i % 2 == 0 ? 100 : 0));  // within half a step of v * 257
        want.push_back(v);
      }
      s.rows.push_back(row);
    }
    const std::string file = classic_png(s);
    CHECK(values(data::decode_image_hwc(file.data(), file.size(), "16.png")) == want);
  }
  SECTION("a 4-bit palette with transparency becomes RGBA") {
    ClassicPng s;
    s.width = 5;
    s.height = 1;
    s.bit_depth = 4;
    s.color_type = PNG_COLOR_TYPE_PALETTE;
    s.palette = {{10, 20, 30}, {200, 100, 0}, {1, 2, 3}};
    s.palette_alpha = {255, 128};  // entry 2 has none: opaque
    s.rows = {std::string{0x01, 0x20, 0x10}};  // indices 0 1 2 0 1 (and a pad nibble)
    const Tensor t = decode(classic_png(s));
    REQUIRE(t.sizes() == Shape{4, 1, 5});
    CHECK(values(t.permute({1, 2, 0})) == std::vector<int64_t>{10, 20,  30, 255, 200, 100, 0, 128, 1,  2,
                                                               3,  255, 10, 20,  30,  255, 200, 100, 0, 128});
    // Without tRNS a palette is RGB.
    s.palette_alpha.clear();
    CHECK(decode(classic_png(s)).size(0) == 3);
  }
  SECTION("1-bit gray expands to 0 and 255; a tRNS gray becomes gray + alpha") {
    ClassicPng s;
    s.width = 10;
    s.height = 1;
    s.bit_depth = 1;
    s.rows = {std::string{static_cast<char>(0xA5), static_cast<char>(0xC0)}};  // 1010 0101 11
    CHECK(values(decode(classic_png(s))) == std::vector<int64_t>{255, 0, 255, 0, 0, 255, 0, 255, 255, 255});
    s.bit_depth = 8;
    s.width = 3;
    s.rows = {std::string{7, 9, 7}};
    s.gray_transparent = true;
    s.transparent_gray = 7;
    CHECK(values(decode(classic_png(s)).permute({1, 2, 0})) == std::vector<int64_t>{7, 0, 9, 255, 7, 0});
  }
  SECTION("Adam7 interlacing") {
    ClassicPng s;
    s.width = 11;
    s.height = 9;
    s.color_type = PNG_COLOR_TYPE_RGB;
    s.interlaced = true;
    const Tensor img = pattern(3, 9, 11);
    const std::vector<int64_t> hwc = values(img.permute({1, 2, 0}));
    for (size_t y = 0; y < 9; ++y) {
      std::string row;
      for (size_t i = 0; i < 33; ++i) row += static_cast<char>(hwc[y * 33 + i]);
      s.rows.push_back(row);
    }
    CHECK(values(decode(classic_png(s))) == values(img));
  }
}

TEST_CASE("JPEG round-trips within a tolerance, in color and gray", "[data][image]") {
  test::TempDir dir;
  const Tensor rgb = pattern(3, 24, 40, /*smooth=*/true);
  data::write_jpeg(dir.file("rgb.jpg"), rgb, 95);
  const Tensor back = data::read_image(dir.file("rgb.jpg"));
  REQUIRE(back.sizes() == Shape{3, 24, 40});
  CHECK(mean_abs_diff(back, rgb) < 1.5);
  // Lower quality, chroma subsampled: still close, and smaller.
  const std::string q50 = data::encode_jpeg(rgb, 50);
  CHECK(q50.size() < data::encode_jpeg(rgb, 95).size());
  CHECK(mean_abs_diff(decode(q50), rgb) < 10.0);

  const Tensor gray = pattern(1, 17, 9, true);
  const std::string g = data::encode_jpeg(gray, 95);
  CHECK(decode(g).sizes() == Shape{1, 17, 9});
  CHECK(mean_abs_diff(decode(g), gray) < 1.5);
  // A gray JPEG read as RGB replicates; a color one read as gray is its luma.
  const Tensor g3 = decode(g, ImageMode::RGB);
  CHECK(values(g3.select(0, 0)) == values(decode(g).select(0, 0)));
  CHECK(values(g3.select(0, 2)) == values(g3.select(0, 1)));
  const Tensor g4 = decode(g, ImageMode::RGBA);
  CHECK(values(g4.select(0, 1)) == values(g3.select(0, 0)));
  CHECK(values(g4.select(0, 3)) == std::vector<int64_t>(17 * 9, 255));
  const Tensor y = decode(data::encode_jpeg(rgb, 95), ImageMode::Gray);
  REQUIRE(y.sizes() == Shape{1, 24, 40});
  const std::vector<int64_t> px = values(rgb), yv = values(y);
  double err = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    const double want = 0.299 * px[i] + 0.587 * px[i + yv.size()] + 0.114 * px[i + 2 * yv.size()];
    err += std::abs(want - static_cast<double>(yv[i]));
  }
  CHECK(err / static_cast<double>(yv.size()) < 1.5);
  // Exactly the luma of the same file decoded as RGB, ImageMode::Gray's formula as for a PNG (it was
  // libjpeg's Y plane, which the subsampled color of random pixels moves by up to 12 levels).
  manual_seed(8);
  const Tensor noise = (rand({3, 32, 32}) * 255.0).to(DType::UInt8);
  const std::string n75 = data::encode_jpeg(noise, 75);
  const std::vector<int64_t> c = values(decode(n75, ImageMode::RGB)), l = values(decode(n75, ImageMode::Gray));
  REQUIRE(l.size() == 32 * 32);
  int64_t off = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    const int64_t want = (19595 * c[i] + 38470 * c[i + l.size()] + 7471 * c[i + 2 * l.size()] + 32768) >> 16;
    off += want != l[i];
  }
  CHECK(off == 0);
  const Tensor rgba = decode(data::encode_jpeg(rgb, 95), ImageMode::RGBA);
  REQUIRE(rgba.sizes() == Shape{4, 24, 40});
  CHECK(values(rgba.narrow(0, 0, 3)) == values(back));
  CHECK(values(rgba.select(0, 3)) == std::vector<int64_t>(24 * 40, 255));
}

TEST_CASE("Progressive and CMYK JPEGs decode", "[data][image]") {
  const Tensor rgb = pattern(3, 24, 40, /*smooth=*/true);
  const std::vector<int64_t> v = values(rgb.permute({1, 2, 0}));
  const std::vector<uint8_t> hwc(v.begin(), v.end());
  const std::string progressive = libjpeg_file(hwc, 40, 24, 3, JCS_RGB, true);
  const Tensor p = decode(progressive);
  REQUIRE(p.sizes() == Shape{3, 24, 40});
  CHECK(mean_abs_diff(p, rgb) < 5.0);  // 4:2:0 chroma, libjpeg's default
  CHECK_THAT(io_error([&] { data::decode_image(progressive.data(), progressive.size() / 2, "p.jpg"); }),
             Catch::Contains("p.jpg"));
  // Cut just before each later scan (a start-of-scan marker, FF DA): every block is there, in its
  // coarse scans only, and libjpeg would give that blurred image without an error.
  int cuts = 0;
  const std::string sos = "\xff\xda";
  for (size_t at = progressive.find(sos, 2); at != std::string::npos; at = progressive.find(sos, at + 2)) {
    if (cuts++ == 0) continue;  // before the first scan there are no pixels at all
    INFO("cut at byte " << at << " of " << progressive.size());
    CHECK_THAT(io_error([&] { data::decode_image(progressive.data(), at, "p.jpg"); }),
               Catch::Contains("p.jpg") && Catch::Contains("ends before its end marker"));
  }
  CHECK(cuts > 3);

  // Adobe's CMYK stores inverted inks: (C, M, Y, K) = (200, 100, 50, 255) is RGB (200, 100, 50), and a
  // K of 128 halves it.
  std::vector<uint8_t> cmyk;
  for (int i = 0; i < 64; ++i) cmyk.insert(cmyk.end(), {200, 100, 50, static_cast<uint8_t>(i < 32 ? 255 : 128)});
  const std::string file = libjpeg_file(cmyk, 8, 8, 4, JCS_CMYK, false);
  const Tensor c = decode(file);
  REQUIRE(c.sizes() == Shape{3, 8, 8});
  const std::vector<int64_t> top = values(c.select(1, 0).select(1, 0)), bottom = values(c.select(1, 7).select(1, 0));
  const std::vector<int64_t> want_top{200, 100, 50}, want_bottom{100, 50, 25};
  for (size_t i = 0; i < 3; ++i) {
    CHECK(std::abs(top[i] - want_top[i]) <= 3);
    CHECK(std::abs(bottom[i] - want_bottom[i]) <= 3);
  }
  CHECK(decode(file, ImageMode::Gray).sizes() == Shape{1, 8, 8});
  CHECK(decode(file, ImageMode::RGBA).sizes() == Shape{4, 8, 8});
}

TEST_CASE("Image modes convert channels as documented", "[data][image]") {
  // Pixels (R, G, B, A): red, green, blue, a gray, transparent white.
  const Tensor rgba = tensor<int64_t>({255, 0, 0, 128, 255,     // R
                                       0, 255, 0, 128, 255,     // G
                                       0, 0, 255, 128, 255,     // B
                                       255, 255, 255, 100, 0},  // A
                                      {4, 1, 5}, TensorOptions(DType::UInt8));
  const std::string png = data::encode_png(rgba);
  CHECK(values(decode(png, ImageMode::RGB)) == values(rgba.narrow(0, 0, 3)));
  CHECK(values(decode(png, ImageMode::RGBA)) == values(rgba));
  // (19595 R + 38470 G + 7471 B + 2^15) >> 16.
  CHECK(values(decode(png, ImageMode::Gray)) == std::vector<int64_t>{76, 150, 29, 128, 255});

  const std::string rgb_png = data::encode_png(rgba.narrow(0, 0, 3));
  const Tensor opaque = decode(rgb_png, ImageMode::RGBA);
  CHECK(values(opaque.narrow(0, 0, 3)) == values(rgba.narrow(0, 0, 3)));
  CHECK(values(opaque.select(0, 3)) == std::vector<int64_t>(5, 255));

  const Tensor ga = tensor<int64_t>({3, 77, 250, 0, 128, 255}, {2, 1, 3}, TensorOptions(DType::UInt8));
  const std::string ga_png = data::encode_png(ga);
  CHECK(values(decode(ga_png, ImageMode::Gray)) == std::vector<int64_t>{3, 77, 250});
  CHECK(values(decode(ga_png, ImageMode::RGB)) == std::vector<int64_t>{3, 77, 250, 3, 77, 250, 3, 77, 250});
  CHECK(values(decode(ga_png, ImageMode::RGBA)) ==
        std::vector<int64_t>{3, 77, 250, 3, 77, 250, 3, 77, 250, 0, 128, 255});
  const std::string gray_png = data::encode_png(ga.narrow(0, 0, 1));
  CHECK(values(decode(gray_png, ImageMode::RGB)) == std::vector<int64_t>{3, 77, 250, 3, 77, 250, 3, 77, 250});
  CHECK(data::image_mode_channels(ImageMode::Unchanged, 2) == 2);
  CHECK(std::string(data::image_mode_name(ImageMode::RGBA)) == "RGBA");
}

TEST_CASE("Broken image bytes are an IOError naming the file", "[data][image]") {
  test::TempDir dir;
  const std::string png = data::encode_png(pattern(3, 8, 8));
  const std::string jpg = data::encode_jpeg(pattern(3, 16, 16, true), 90);
  auto named = [](const std::string& bytes) {
    return io_error([&] { data::decode_image(bytes.data(), bytes.size(), "pic.bin"); });
  };
  CHECK_THAT(named(""), Catch::Contains("pic.bin") && Catch::Contains("empty"));
  CHECK_THAT(named("GIF89a......"), Catch::Contains("pic.bin") && Catch::Contains("not a PNG or JPEG"));
  CHECK_THAT(named(png.substr(0, png.size() / 2)), Catch::Contains("pic.bin") && Catch::Contains("truncated"));
  CHECK_THAT(named(png.substr(0, 8)), Catch::Contains("pic.bin"));
  std::string flipped = png;
  flipped[png.size() / 2] = static_cast<char>(flipped[png.size() / 2] ^ 0x55);  // inside IDAT: a CRC error
  CHECK_THAT(named(flipped), Catch::Contains("pic.bin") && Catch::Contains("corrupt PNG"));
  const std::string detailed = data::encode_jpeg(pattern(3, 64, 64), 90);  // mostly entropy-coded data
  CHECK_THAT(named(detailed.substr(0, detailed.size() * 3 / 4)),
             Catch::Contains("pic.bin") && Catch::Contains("premature end"));
  CHECK_THAT(named(jpg.substr(0, 40)), Catch::Contains("pic.bin") && Catch::Contains("corrupt JPEG"));
  // A JPEG missing only its end marker has every pixel: accepted.
  CHECK(decode(jpg.substr(0, jpg.size() - 2)).sizes() == Shape{3, 16, 16});
  // Garbage after a valid JPEG signature, in every position of a valid file: never a crash.
  for (size_t i = 3; i < jpg.size(); i += 7) {
    std::string bad = jpg;
    bad[i] = static_cast<char>(bad[i] ^ 0xA7);
    try {
      decode(bad);
    } catch (const IOError& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains("mem.img"));
    }
  }
  // Size limits: the header's claim is refused before allocation.
  CHECK_THAT(io_error([&] { data::decode_image(png.data(), png.size(), "big.png", ImageMode::RGBA, 255); }),
             Catch::Contains("big.png") && Catch::Contains("over the limit of 255"));
  CHECK_THAT(io_error([&] { data::decode_image(jpg.data(), jpg.size(), "big.jpg", ImageMode::Gray, 700); }),
             Catch::Contains("big.jpg") && Catch::Contains("over the limit of 700"));
  std::string huge = png;  // IHDR width (bytes 16..19) made 2^19, its CRC fixed: more than the file can hold
  huge[16] = 0;
  huge[17] = 0x08;
  huge[18] = huge[19] = 0;
  const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(huge.data() + 12), 17);
  for (int i = 0; i < 4; ++i) huge[29 + i] = static_cast<char>(crc >> (24 - 8 * i));
  CHECK_THAT(named(huge), Catch::Contains("pic.bin") && Catch::Contains("more than its"));
  // Files: missing, a folder, and a corrupt one on disk.
  CHECK_THAT(io_error([&] { data::read_image(dir.file("missing.png")); }),
             Catch::Contains(dir.file("missing.png")) && Catch::Contains("cannot open"));
  CHECK_THAT(io_error([&] { data::read_image(dir.path.string()); }), Catch::Contains("not a regular file"));
  write_bytes(dir.file("bad.jpg"), jpg.substr(0, 100));
  CHECK_THAT(io_error([&] { data::read_image(dir.file("bad.jpg")); }), Catch::Contains(dir.file("bad.jpg")));
}

TEST_CASE("Image writers check their tensors", "[data][image]") {
  test::TempDir dir;
  CHECK_THROWS_AS(data::write_png(dir.file("f.png"), zeros({3, 2, 2})), DTypeError);
  CHECK_THROWS_AS(data::write_png(dir.file("f.png"), zeros({5, 2, 2}, DType::UInt8)), ShapeError);
  CHECK_THROWS_AS(data::write_png(dir.file("f.png"), zeros({2, 2}, DType::UInt8)), ShapeError);
  CHECK_THROWS_AS(data::write_jpeg(dir.file("f.jpg"), zeros({2, 2, 2}, DType::UInt8)), ShapeError);
  CHECK_THROWS_AS(data::write_jpeg(dir.file("f.jpg"), zeros({3, 0, 2}, DType::UInt8)), ShapeError);
  CHECK_THROWS_WITH(data::write_jpeg(dir.file("f.jpg"), zeros({3, 2, 2}, DType::UInt8), 0),
                    Catch::Contains("quality"));
  CHECK_THROWS_AS(data::write_png(dir.path.string() + "/no/such/dir/f.png", zeros({1, 2, 2}, DType::UInt8)), IOError);
  CHECK(dir.listing().empty());
}

TEST_CASE("ImageFolder lists classes and images as torchvision does", "[data][image]") {
  test::TempDir dir;
  const fs::path root = dir.path / "root";
  for (const char* d : {"dog", "ant", "cat/sub", "cat/deeper/more"}) fs::create_directories(root / d);
  data::write_png((root / "cat/b.png").string(), pattern(3, 4, 6));
  data::write_jpeg((root / "cat/sub/a.JPG").string(), pattern(3, 8, 8, true));
  data::write_png((root / "cat/deeper/more/c.Png").string(), pattern(1, 4, 6));
  write_bytes((root / "cat/notes.txt").string(), "not an image");
  data::write_png((root / "dog/z.png").string(), pattern(4, 2, 3));
  data::write_jpeg((root / "dog/y.jpeg").string(), pattern(1, 8, 8, true));
  data::write_png((root / "ant/only.png").string(), pattern(2, 3, 3));
  write_bytes((root / "README").string(), "a file at the root is not a class");

  data::ImageFolder ds(root.string());
  CHECK(ds.classes() == std::vector<std::string>{"ant", "cat", "dog"});
  CHECK(ds.class_to_index().at("dog") == 2);
  REQUIRE(ds.size() == 6);
  std::vector<std::string> rel;
  std::vector<int64_t> targets;
  for (const auto& [path, target] : ds.samples()) {
    rel.push_back(fs::path(path).lexically_relative(root).generic_string());
    targets.push_back(target);
  }
  CHECK(rel == std::vector<std::string>{"ant/only.png", "cat/b.png", "cat/deeper/more/c.Png", "cat/sub/a.JPG",
                                        "dog/y.jpeg", "dog/z.png"});
  CHECK(targets == std::vector<int64_t>{0, 1, 1, 1, 2, 2});
  for (int64_t i = 0; i < ds.size(); ++i) {
    const data::Example e = ds.get(i);
    CHECK(e.data.dim() == 3);
    CHECK(e.data.size(0) == 3);  // mode RGB by default, whatever the file holds
    CHECK(e.target.dim() == 0);
    CHECK(e.target.dtype() == DType::Int64);
    CHECK(e.target.item<int64_t>() == targets[static_cast<size_t>(i)]);
  }
  CHECK(values(ds.get(1).data) == values(pattern(3, 4, 6)));
  CHECK_THROWS_AS(ds.get(6), IndexError);

  data::ImageFolderOptions hwc;
  hwc.hwc = true;
  hwc.mode = ImageMode::Gray;
  hwc.transform = [](const Tensor& t) { return t.to(DType::Float32) / 255.0; };
  hwc.extensions = {"PNG"};
  data::ImageFolder gray(root.string(), hwc);
  CHECK(gray.size() == 4);  // the JPEGs are skipped
  const data::Example g = gray.get(1);
  CHECK(g.data.sizes() == Shape{4, 6, 1});
  CHECK(g.data.dtype() == DType::Float32);

  // The fingerprint follows the listing and the file sizes.
  const auto before = ds.fingerprint();
  CHECK(before.at("files") == "6");
  CHECK(before.at("classes") == "3");
  CHECK(data::ImageFolder(root.string()).fingerprint() == before);
  data::write_png((root / "cat/b.png").string(), pattern(3, 5, 6));
  CHECK(data::ImageFolder(root.string()).fingerprint().at("crc32") != before.at("crc32"));
  fs::rename(root / "dog/z.png", root / "dog/x.png");
  CHECK(data::ImageFolder(root.string()).fingerprint().at("crc32") != before.at("crc32"));

  // A file that broke after the listing: an IOError naming it and the sample.
  write_bytes((root / "cat/b.png").string(), "\x89PNG\r\n\x1a\n garbage");
  CHECK_THAT(io_error([&] { ds.get(1); }), Catch::Contains("sample 1") && Catch::Contains("cat/b.png"));
}

// torchvision walks sorted(os.walk(class folder)) and sorts each folder's file names: folders in
// the order of their paths ("a" before "a-b" before "a/deep"), each one's files by name, so a
// folder's own files come before its subfolders'. Sorting whole relative paths would put
// a-b/y.png first ('-' sorts before '/'). Sample i is the file it is in PyTorch.
TEST_CASE("ImageFolder orders nested folders as torchvision's walk does", "[data][image]") {
  test::TempDir dir;
  const fs::path root = dir.path / "root";
  for (const char* d : {"cls/a", "cls/a-b", "cls/a/deep"}) fs::create_directories(root / d);
  for (const char* f : {"cls/z.png", "cls/a/x.png", "cls/a-b/y.png", "cls/a/deep/w.png", "cls/b.png"}) {
    data::write_png((root / f).string(), pattern(1, 2, 2));
  }
  data::ImageFolder ds(root.string());
  std::vector<std::string> rel;
  for (const auto& [path, target] : ds.samples())
    rel.push_back(fs::path(path).lexically_relative(root).generic_string());
  CHECK(rel == std::vector<std::string>{"cls/b.png", "cls/z.png", "cls/a/x.png", "cls/a-b/y.png", "cls/a/deep/w.png"});
}

// torchvision walks with followlinks=True: a linked folder inside a class is listed under the
// link's name (a dataset assembled from links to other trees); a link back up is a cycle.
TEST_CASE("ImageFolder follows directory links in a class folder and refuses a cycle", "[data][image]") {
  test::TempDir dir;
  const fs::path root = dir.path / "root", elsewhere = dir.path / "elsewhere";
  fs::create_directories(root / "cls");
  fs::create_directories(elsewhere / "sub");
  for (const char* f : {"root/cls/m.png", "elsewhere/e.png", "elsewhere/sub/s.png"}) {
    data::write_png(dir.file(f), pattern(1, 2, 2));
  }
  fs::create_directory_symlink(elsewhere, root / "cls" / "linked");
  data::ImageFolder ds(root.string());
  std::vector<std::string> rel;
  for (const auto& [path, target] : ds.samples())
    rel.push_back(fs::path(path).lexically_relative(root).generic_string());
  CHECK(rel == std::vector<std::string>{"cls/m.png", "cls/linked/e.png", "cls/linked/sub/s.png"});
  CHECK(ds.get(2).data.sizes() == Shape{3, 2, 2});

  fs::create_directory_symlink(root / "cls", elsewhere / "sub" / "up");  // cls/linked/sub/up is cls
  CHECK_THAT(io_error([&] { data::ImageFolder(root.string()); }),
             Catch::Contains("cls/linked/sub/up") && Catch::Contains("link cycle"));
}

TEST_CASE("ImageFolder refuses trees it cannot use", "[data][image]") {
  test::TempDir dir;
  CHECK_THAT(io_error([&] { data::ImageFolder(dir.file("missing")); }),
             Catch::Contains(dir.file("missing")) && Catch::Contains("does not exist"));
  write_bytes(dir.file("file"), "x");
  CHECK_THAT(io_error([&] { data::ImageFolder(dir.file("file")); }), Catch::Contains("not a folder"));
  CHECK_THAT(io_error([&] { data::ImageFolder(dir.path.string()); }), Catch::Contains("no class folders"));
  fs::create_directories(dir.path / "a");
  fs::create_directories(dir.path / "b/inner");
  data::write_png(dir.file("a/one.png"), pattern(1, 2, 2));
  write_bytes(dir.file("b/inner/text.txt"), "x");
  CHECK_THAT(io_error([&] { data::ImageFolder(dir.path.string()); }),
             Catch::Contains(dir.file("b")) && Catch::Contains("no images"));
  data::ImageFolderOptions bad;
  bad.extensions = {""};
  CHECK_THROWS_AS(data::ImageFolder(dir.path.string(), bad), Error);
}
