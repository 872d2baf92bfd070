// PNG through libpng's classic API (its simplified API reads 16-bit files as linear light and would
// gamma-encode them when reducing to 8 bits), JPEG through libjpeg-turbo; both written through the
// libraries' in-memory writers. Both libraries report errors by longjmp. So each library call runs in
// a noinline function whose frame holds only plain data (a *Job struct owned by the caller), whose
// error callbacks copy the message into that struct before jumping, and which returns false after a
// jump; the C++ caller owns the library state through a guard and throws the IOError. No exception
// crosses a C frame and no longjmp skips a destructor.
#include "data/image.h"

#include <fcntl.h>
#include <png.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which needs FILE and size_t declared
#include <cstdlib>
#include <cstring>
#include <vector>

#include <jpeglib.h>
#include <jerror.h>  // after jpeglib.h, as libjpeg documents

#include "core/atomic_file.h"
#include "core/ops/factory.h"
#include "kernels/error.h"

namespace kiln::data {
namespace {

// A progressive JPEG may hold any number of scans, each a pass over the whole image: a few KB of
// scan headers could cost minutes. libjpeg-turbo's documentation suggests a limit; real encoders
// write about ten.
constexpr int kMaxJpegScans = 1000;
// Deflate turns at most 2 bits into a 258-byte match: no zlib stream inflates more than 1032-fold.
constexpr int64_t kMaxInflateRatio = 1032;

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw IOError("decode_image: " + name + ": " + what);
}

// ---- channel conversion --------------------------------------------------------------------------

inline uint8_t luma(unsigned r, unsigned g, unsigned b) {
  return static_cast<uint8_t>((19595u * r + 38470u * g + 7471u * b + 32768u) >> 16);
}

template <int S, int D> void convert_channels_as(const uint8_t* src, uint8_t* dst, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i, src += S, dst += D) {
    const unsigned alpha = S == 2 ? src[1] : S == 4 ? src[3] : 255u;
    if constexpr (S <= 2) {
      const uint8_t g = src[0];
      if constexpr (D <= 2) {
        dst[0] = g;
      } else {
        dst[0] = dst[1] = dst[2] = g;
      }
    } else if constexpr (D <= 2) {
      dst[0] = luma(src[0], src[1], src[2]);
    } else {
      dst[0] = src[0];
      dst[1] = src[1];
      dst[2] = src[2];
    }
    if constexpr (D == 2 || D == 4) dst[D - 1] = static_cast<uint8_t>(alpha);
  }
}

template <int S> void convert_from(const uint8_t* src, uint8_t* dst, int d, size_t pixels) {
  switch (d) {
    case 1: convert_channels_as<S, 1>(src, dst, pixels); break;
    case 2: convert_channels_as<S, 2>(src, dst, pixels); break;
    case 3: convert_channels_as<S, 3>(src, dst, pixels); break;
    default: convert_channels_as<S, 4>(src, dst, pixels); break;
  }
}

// `pixels` pixels of `s` channels to `d` channels (both in 1..4), as ImageMode documents.
void convert_channels(const uint8_t* src, int s, uint8_t* dst, int d, size_t pixels) {
  switch (s) {
    case 1: convert_from<1>(src, dst, d, pixels); break;
    case 2: convert_from<2>(src, dst, d, pixels); break;
    case 3: convert_from<3>(src, dst, d, pixels); break;
    default: convert_from<4>(src, dst, d, pixels); break;
  }
}

// Refuses an image over the bound before its memory is allocated. `channels` is the larger of the
// output's and the decoder's own (a conversion holds both).
void check_image_size(const std::string& name, int64_t height, int64_t width, int64_t channels, int64_t max_bytes) {
  if (height < 1 || width < 1) {
    fail(name, "the header declares " + std::to_string(width) + " x " + std::to_string(height) + " pixels");
  }
  // height, width < 2^32 and channels <= 4: the product fits in int64.
  const int64_t bytes = height * width * channels;
  if (bytes > max_bytes) {
    fail(name, "a " + std::to_string(width) + " x " + std::to_string(height) + " image of " +
                   std::to_string(channels) + " channels is " + std::to_string(bytes) +
                   " bytes, over the limit of " + std::to_string(max_bytes));
  }
}

Tensor new_hwc(int64_t height, int64_t width, int64_t channels) {
  return empty({height, width, channels}, TensorOptions(DType::UInt8));
}

// ---- PNG -------------------------------------------------------------------------------------------

struct PngJob {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  // After the header: the file's own layout and the decoded one (8-bit, expanded).
  uint32_t width = 0, height = 0;
  int file_bit_depth = 0, file_channels = 0;
  int channels = 0;
  size_t rowbytes = 0;
  char message[256] = {};
};

void png_on_error(png_structp png, png_const_charp msg) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  std::snprintf(job->message, sizeof job->message, "%s", msg != nullptr ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}  // ancillary trouble: the pixels still decode

void png_on_read(png_structp png, png_bytep out, size_t n) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (n > job->size - job->pos) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, job->data + job->pos, n);
  job->pos += n;
}

__attribute__((noinline)) bool png_run_header(PngJob* job) {
  if (setjmp(png_jmpbuf(job->png))) return false;
  png_set_read_fn(job->png, job, png_on_read);
  // Every ancillary chunk but tRNS changes nothing kiln returns: skipped unread (no text inflated,
  // no ICC profile kept).
  png_set_keep_unknown_chunks(job->png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  png_read_info(job->png, job->info);
  const int color_type = png_get_color_type(job->png, job->info);
  job->file_bit_depth = png_get_bit_depth(job->png, job->info);
  job->file_channels = png_get_channels(job->png, job->info);
  job->width = png_get_image_width(job->png, job->info);
  job->height = png_get_image_height(job->png, job->info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(job->png);
  if (color_type == PNG_COLOR_TYPE_GRAY && job->file_bit_depth < 8) png_set_expand_gray_1_2_4_to_8(job->png);
  if (png_get_valid(job->png, job->info, PNG_INFO_tRNS) != 0) png_set_tRNS_to_alpha(job->png);
  if (job->file_bit_depth == 16) png_set_scale_16(job->png);
  png_set_interlace_handling(job->png);
  png_read_update_info(job->png, job->info);
  job->channels = png_get_channels(job->png, job->info);
  job->rowbytes = png_get_rowbytes(job->png, job->info);
  return true;
}

__attribute__((noinline)) bool png_run_pixels(PngJob* job, png_bytepp rows) {
  if (setjmp(png_jmpbuf(job->png))) return false;
  png_read_image(job->png, rows);
  png_read_end(job->png, nullptr);
  return true;
}

class PngReadGuard {
 public:
  explicit PngReadGuard(PngJob& job) : job_(job) {}
  ~PngReadGuard() { png_destroy_read_struct(&job_.png, job_.info != nullptr ? &job_.info : nullptr, nullptr); }
  PngReadGuard(const PngReadGuard&) = delete;
  PngReadGuard& operator=(const PngReadGuard&) = delete;

 private:
  PngJob& job_;
};

Tensor decode_png(const uint8_t* data, size_t n, const std::string& name, ImageMode mode, int64_t max_bytes) {
  PngJob job;
  job.data = data;
  job.size = n;
  job.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, png_on_error, png_on_warning);
  if (job.png == nullptr) fail(name, "libpng could not create its reader (out of memory?)");
  PngReadGuard guard(job);
  job.info = png_create_info_struct(job.png);
  if (job.info == nullptr) fail(name, "libpng could not create its info struct (out of memory?)");
  if (!png_run_header(&job)) fail(name, std::string("corrupt PNG: ") + job.message);

  const int64_t h = job.height, w = job.width;
  // The filtered rows the zlib stream must hold, at the file's bit depth (interlacing only adds):
  // more than the whole file can inflate to means the data is not there.
  const int64_t raw_row = 1 + (w * job.file_bit_depth * job.file_channels + 7) / 8;
  if (raw_row > kMaxInflateRatio * static_cast<int64_t>(n) / h + 1) {
    fail(name, "the header declares " + std::to_string(w) + " x " + std::to_string(h) + " pixels, more than its " +
                   std::to_string(n) + " bytes can hold (truncated or corrupt)");
  }
  const size_t packed_row = static_cast<size_t>(w) * static_cast<size_t>(job.channels);
  if (job.channels < 1 || job.channels > 4 || job.rowbytes != packed_row) {
    fail(name, "unexpected decoded layout: " + std::to_string(job.channels) + " channels, " +
                   std::to_string(job.rowbytes) + " bytes per row of " + std::to_string(w) + " pixels");
  }
  const int c_out = static_cast<int>(image_mode_channels(mode, job.channels));
  check_image_size(name, h, w, std::max(c_out, job.channels), max_bytes);

  Tensor out = new_hwc(h, w, c_out);
  std::vector<uint8_t> native;
  uint8_t* dst = out.data_ptr<uint8_t>();
  if (c_out != job.channels) {
    native.resize(static_cast<size_t>(h) * job.rowbytes);
    dst = native.data();
  }
  std::vector<png_bytep> rows(static_cast<size_t>(h));
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = dst + y * job.rowbytes;
  if (!png_run_pixels(&job, rows.data())) fail(name, std::string("corrupt PNG: ") + job.message);
  if (c_out != job.channels) {
    convert_channels(native.data(), job.channels, out.data_ptr<uint8_t>(), c_out, static_cast<size_t>(h * w));
  }
  return out;
}

// ---- JPEG ------------------------------------------------------------------------------------------

struct JpegErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
  bool input_ended;  // the data ran out before an end marker (libjpeg then supplies one)
};

void jpeg_on_error(j_common_ptr c) {
  auto* err = reinterpret_cast<JpegErrorManager*>(c->err);
  (*c->err->format_message)(c, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (level -1) mean damaged data that libjpeg decodes anyway. One is fatal here: entropy data
// that stops before the last block (a truncated file, or a marker inside the data), which libjpeg
// would fill with gray. The end of the file alone is not: the decoder reads ahead, so a file that
// lacks only its end marker warns too, with every pixel present. It is noted, though: a progressive
// file that ends between two scans has every block, but only the coarse scans of them
// (decode_jpeg refuses it).
void jpeg_on_message(j_common_ptr c, int level) {
  if (level != -1) return;
  c->err->num_warnings++;
  if (c->err->msg_code == JWRN_JPEG_EOF) reinterpret_cast<JpegErrorManager*>(c->err)->input_ended = true;
  if (c->err->msg_code == JWRN_HIT_MARKER) jpeg_on_error(c);
}

void jpeg_on_output(j_common_ptr) {}  // libjpeg's default prints to stderr

void jpeg_on_progress(j_common_ptr c) {
  if (!c->is_decompressor) return;
  const int scans = reinterpret_cast<j_decompress_ptr>(c)->input_scan_number;
  if (scans > kMaxJpegScans) {
    auto* err = reinterpret_cast<JpegErrorManager*>(c->err);
    std::snprintf(err->message, sizeof err->message, "more than %d progressive scans", kMaxJpegScans);
    std::longjmp(err->jump, 1);
  }
}

void init_jpeg_errors(JpegErrorManager& err) {
  jpeg_std_error(&err.pub);
  err.pub.error_exit = jpeg_on_error;
  err.pub.emit_message = jpeg_on_message;
  err.pub.output_message = jpeg_on_output;
  err.message[0] = '\0';
  err.input_ended = false;
}

struct JpegDecodeJob {
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
  jpeg_progress_mgr progress;
  const uint8_t* data;
  size_t size;
  long max_memory;
  // Set by the caller between the two phases.
  J_COLOR_SPACE out_space;
  int out_channels;  // what the caller wants per pixel
  bool cmyk;         // libjpeg outputs CMYK; converted row by row into out_channels
  bool rgb_to_gray;  // libjpeg outputs RGB; each row's luma is the gray pixel (ImageMode::Gray's formula)
  uint8_t* pixels;   // [height, width, out_channels]
  uint8_t* row_in;   // a row as libjpeg outputs it, when it is converted (CMYK, or RGB to gray)
};

__attribute__((noinline)) bool jpeg_run_header(JpegDecodeJob* job) {
  job->cinfo.err = &job->err.pub;
  if (setjmp(job->err.jump)) return false;
  jpeg_create_decompress(&job->cinfo);
  job->cinfo.mem->max_memory_to_use = job->max_memory;
  job->progress.progress_monitor = jpeg_on_progress;
  job->cinfo.progress = &job->progress;
  jpeg_mem_src(&job->cinfo, job->data, static_cast<unsigned long>(job->size));
  jpeg_read_header(&job->cinfo, TRUE);
  return true;
}

// Adobe's CMYK JPEGs store inverted inks (255 = none), which is all Photoshop writes; others plain.
void cmyk_to_rgb_row(const uint8_t* src, uint8_t* dst, int channels, size_t width, bool inverted) {
  for (size_t x = 0; x < width; ++x, src += 4, dst += channels) {
    unsigned c = src[0], m = src[1], y = src[2], k = src[3];
    if (!inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    const unsigned r = (c * k + 127) / 255, g = (m * k + 127) / 255, b = (y * k + 127) / 255;
    if (channels == 1) {
      dst[0] = luma(r, g, b);
    } else {
      dst[0] = static_cast<uint8_t>(r);
      dst[1] = static_cast<uint8_t>(g);
      dst[2] = static_cast<uint8_t>(b);
      if (channels == 4) dst[3] = 255;
    }
  }
}

__attribute__((noinline)) bool jpeg_run_pixels(JpegDecodeJob* job) {
  if (setjmp(job->err.jump)) return false;
  job->cinfo.out_color_space = job->out_space;
  jpeg_start_decompress(&job->cinfo);
  const int want = job->cmyk ? 4 : job->rgb_to_gray ? 3 : job->out_channels;
  if (job->cinfo.output_components != want) {
    std::snprintf(job->err.message, sizeof job->err.message, "libjpeg produced %d components, expected %d",
                  job->cinfo.output_components, want);
    return false;
  }
  const size_t width = job->cinfo.output_width;
  const size_t row_bytes = width * static_cast<size_t>(job->out_channels);
  while (job->cinfo.output_scanline < job->cinfo.output_height) {
    uint8_t* dst = job->pixels + job->cinfo.output_scanline * row_bytes;
    JSAMPROW row = job->cmyk || job->rgb_to_gray ? job->row_in : dst;
    if (jpeg_read_scanlines(&job->cinfo, &row, 1) != 1) {
      std::snprintf(job->err.message, sizeof job->err.message, "libjpeg returned no scanline");
      return false;
    }
    if (job->cmyk) cmyk_to_rgb_row(job->row_in, dst, job->out_channels, width, job->cinfo.saw_Adobe_marker);
    if (job->rgb_to_gray) {
      for (size_t x = 0; x < width; ++x) dst[x] = luma(row[3 * x], row[3 * x + 1], row[3 * x + 2]);
    }
  }
  jpeg_finish_decompress(&job->cinfo);
  return true;
}

class JpegDecodeGuard {
 public:
  explicit JpegDecodeGuard(JpegDecodeJob& job) : job_(job) {}
  ~JpegDecodeGuard() { jpeg_destroy_decompress(&job_.cinfo); }  // no-op when never created
  JpegDecodeGuard(const JpegDecodeGuard&) = delete;
  JpegDecodeGuard& operator=(const JpegDecodeGuard&) = delete;

 private:
  JpegDecodeJob& job_;
};

Tensor decode_jpeg(const uint8_t* data, size_t n, const std::string& name, ImageMode mode, int64_t max_bytes) {
  JpegDecodeJob job{};
  init_jpeg_errors(job.err);
  job.data = data;
  job.size = n;
  // libjpeg's own buffers (a progressive file's coefficients: 2 bytes a sample) stay near the image's
  // (at most 1 TiB: a max_bytes of INT64_MAX must not overflow the sum).
  constexpr int64_t kMaxJpegMemory = int64_t{1} << 40;
  job.max_memory =
      static_cast<long>(max_bytes >= kMaxJpegMemory / 4 ? kMaxJpegMemory : 4 * max_bytes + (int64_t{64} << 20));
  JpegDecodeGuard guard(job);
  if (!jpeg_run_header(&job)) fail(name, std::string("corrupt JPEG: ") + job.err.message);
  // Several scans (progressive): one that ends early has the first scans' coarse image only.
  const bool multi_scan = jpeg_has_multiple_scans(&job.cinfo) != 0;

  const int components = job.cinfo.num_components;
  int file_channels = 0;
  switch (job.cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: file_channels = components == 1 ? 1 : 0; break;
    case JCS_YCbCr:
    case JCS_RGB: file_channels = components == 3 ? 3 : 0; break;
    case JCS_CMYK:
    case JCS_YCCK:
      file_channels = components == 4 ? 3 : 0;
      job.cmyk = true;
      break;
    default: break;
  }
  if (file_channels == 0) {
    fail(name, "unsupported JPEG color space " + std::to_string(static_cast<int>(job.cinfo.jpeg_color_space)) +
                   " with " + std::to_string(components) + " components");
  }
  job.out_channels = static_cast<int>(image_mode_channels(mode, file_channels));
  // A color image read as gray: RGB, then each pixel's luma, as from a PNG. libjpeg's own gray output
  // is the file's Y plane, which differs from the luma of the decoded RGB (by up to 12 levels in an
  // image whose color is subsampled), so one image's gray pixels would depend on its format.
  job.rgb_to_gray = !job.cmyk && file_channels == 3 && job.out_channels == 1;
  job.out_space = job.cmyk                ? JCS_CMYK
                  : job.rgb_to_gray       ? JCS_RGB
                  : job.out_channels == 1 ? JCS_GRAYSCALE
                  : job.out_channels == 3 ? JCS_RGB
                                          : JCS_EXT_RGBA;
  const int64_t h = job.cinfo.image_height, w = job.cinfo.image_width;
  check_image_size(name, h, w, std::max(job.out_channels, components), max_bytes);

  Tensor out = new_hwc(h, w, job.out_channels);
  std::vector<uint8_t> row_in(job.cmyk ? static_cast<size_t>(w) * 4 : job.rgb_to_gray ? static_cast<size_t>(w) * 3 : 0);
  job.pixels = out.data_ptr<uint8_t>();
  job.row_in = row_in.data();
  if (!jpeg_run_pixels(&job)) fail(name, std::string("corrupt JPEG: ") + job.err.message);
  if (multi_scan && job.err.input_ended) {
    fail(name, "truncated JPEG: the progressive file ends before its end marker, so its last scans may be "
               "missing (only their coarse image would load)");
  }
  return out;
}

// ---- encoding --------------------------------------------------------------------------------------

// A [C, H, W] uint8 CPU tensor as HWC bytes, after the writer's checks.
std::vector<uint8_t> hwc_bytes(const Tensor& image, const char* who, std::initializer_list<int64_t> channels,
                               int64_t max_side) {
  if (!image.defined()) throw Error(std::string(who) + ": the image tensor is undefined");
  if (!image.is_cpu()) {
    throw DeviceError(std::string(who) + ": the image must be a CPU tensor, got " + image.device().str());
  }
  if (image.dtype() != DType::UInt8) {
    throw DTypeError(std::string(who) + ": the image must be uint8, got " + dtype_name(image.dtype()));
  }
  if (image.dim() != 3 || std::find(channels.begin(), channels.end(), image.size(0)) == channels.end() ||
      image.size(1) < 1 || image.size(2) < 1 || image.size(1) > max_side || image.size(2) > max_side) {
    std::string allowed;
    for (int64_t c : channels) allowed += (allowed.empty() ? "" : ", ") + std::to_string(c);
    throw ShapeError(std::string(who) + ": the image must be [C, H, W] with C in {" + allowed + "} and H, W in [1, " +
                     std::to_string(max_side) + "], got " + shape_str(image.sizes()));
  }
  const Tensor src = image.contiguous();
  const int64_t c = src.size(0), hw = src.size(1) * src.size(2);
  std::vector<uint8_t> out(static_cast<size_t>(c * hw));
  const uint8_t* p = src.data_ptr<uint8_t>();
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t i = 0; i < hw; ++i) out[static_cast<size_t>(i * c + ch)] = p[ch * hw + i];
  }
  return out;
}

struct JpegEncodeJob {
  jpeg_compress_struct cinfo;
  JpegErrorManager err;
  const uint8_t* pixels;
  int width, height, channels, quality;
  unsigned char* out;
  unsigned long out_size;
};

__attribute__((noinline)) bool jpeg_run_encode(JpegEncodeJob* job) {
  job->cinfo.err = &job->err.pub;
  if (setjmp(job->err.jump)) return false;
  jpeg_create_compress(&job->cinfo);
  jpeg_mem_dest(&job->cinfo, &job->out, &job->out_size);
  job->cinfo.image_width = static_cast<JDIMENSION>(job->width);
  job->cinfo.image_height = static_cast<JDIMENSION>(job->height);
  job->cinfo.input_components = job->channels;
  job->cinfo.in_color_space = job->channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&job->cinfo);
  jpeg_set_quality(&job->cinfo, job->quality, TRUE);
  if (job->quality >= 90) {
    for (int i = 0; i < job->cinfo.num_components; ++i) {
      job->cinfo.comp_info[i].h_samp_factor = 1;
      job->cinfo.comp_info[i].v_samp_factor = 1;
    }
  }
  jpeg_start_compress(&job->cinfo, TRUE);
  const size_t row_bytes = static_cast<size_t>(job->width) * static_cast<size_t>(job->channels);
  while (job->cinfo.next_scanline < job->cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(job->pixels + job->cinfo.next_scanline * row_bytes);
    jpeg_write_scanlines(&job->cinfo, &row, 1);
  }
  jpeg_finish_compress(&job->cinfo);
  return true;
}

class JpegEncodeGuard {
 public:
  explicit JpegEncodeGuard(JpegEncodeJob& job) : job_(job) {}
  ~JpegEncodeGuard() {
    jpeg_destroy_compress(&job_.cinfo);
    std::free(job_.out);  // jpeg_mem_dest's buffer is the caller's, from malloc
  }
  JpegEncodeGuard(const JpegEncodeGuard&) = delete;
  JpegEncodeGuard& operator=(const JpegEncodeGuard&) = delete;

 private:
  JpegEncodeJob& job_;
};

std::string read_whole_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IOError("read_image: cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IOError("read_image: " + path + " is not a regular file");
  }
  if (st.st_size > kMaxImageBytes) {
    ::close(fd);
    throw IOError("read_image: " + path + " is " + std::to_string(st.st_size) + " bytes, over the limit of " +
                  std::to_string(kMaxImageBytes));
  }
  std::string bytes;
  try {
    bytes.resize(static_cast<size_t>(st.st_size));
  } catch (...) {
    ::close(fd);
    throw;
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int err = errno;
      ::close(fd);
      throw IOError("read_image: cannot read " + path + (got < 0 ? std::string(": ") + std::strerror(err)
                                                              : std::string(": it shrank while being read")));
    }
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  return bytes;
}

Tensor hwc_to_chw(const Tensor& hwc) {
  const int64_t h = hwc.size(0), w = hwc.size(1), c = hwc.size(2);
  if (c == 1) return hwc.reshape({1, h, w});
  Tensor out = empty({c, h, w}, TensorOptions(DType::UInt8));
  const uint8_t* src = hwc.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  const int64_t hw = h * w;
  for (int64_t ch = 0; ch < c; ++ch) {
    uint8_t* plane = dst + ch * hw;
    for (int64_t i = 0; i < hw; ++i) plane[i] = src[i * c + ch];
  }
  return out;
}

}  // namespace

const char* image_mode_name(ImageMode mode) {
  switch (mode) {
    case ImageMode::Unchanged: return "Unchanged";
    case ImageMode::Gray: return "Gray";
    case ImageMode::RGB: return "RGB";
    case ImageMode::RGBA: return "RGBA";
  }
  return "?";
}

int64_t image_mode_channels(ImageMode mode, int64_t file_channels) {
  switch (mode) {
    case ImageMode::Unchanged: return file_channels;
    case ImageMode::Gray: return 1;
    case ImageMode::RGB: return 3;
    case ImageMode::RGBA: return 4;
  }
  throw Error("image_mode_channels: invalid ImageMode " + std::to_string(static_cast<int>(mode)));
}

Tensor decode_image_hwc(const void* bytes, size_t n, const std::string& name, ImageMode mode, int64_t max_bytes) {
  image_mode_channels(mode, 1);  // rejects a cast-in invalid mode before any work
  if (bytes == nullptr && n > 0) {
    throw Error("decode_image: " + name + ": null data of " + std::to_string(n) + " bytes");
  }
  const auto* p = static_cast<const uint8_t*>(bytes);
  static constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n >= 8 && std::memcmp(p, kPngSignature, 8) == 0) return decode_png(p, n, name, mode, max_bytes);
  if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return decode_jpeg(p, n, name, mode, max_bytes);
  if (n == 0) fail(name, "the file is empty");
  fail(name, "not a PNG or JPEG file (unknown signature)");
}

Tensor decode_image(const void* bytes, size_t n, const std::string& name, ImageMode mode, int64_t max_bytes) {
  return hwc_to_chw(decode_image_hwc(bytes, n, name, mode, max_bytes));
}

Tensor read_image_hwc(const std::string& path, ImageMode mode) {
  const std::string bytes = read_whole_file(path);
  return decode_image_hwc(bytes.data(), bytes.size(), path, mode);
}

Tensor read_image(const std::string& path, ImageMode mode) { return hwc_to_chw(read_image_hwc(path, mode)); }

std::string encode_png(const Tensor& image) {
  const std::vector<uint8_t> hwc = hwc_bytes(image, "encode_png", {1, 2, 3, 4}, PNG_UINT_31_MAX);
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(image.size(2));
  img.height = static_cast<png_uint_32>(image.size(1));
  static constexpr png_uint_32 kFormats[] = {PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB, PNG_FORMAT_RGBA};
  img.format = kFormats[image.size(0) - 1];
  // The worst case of libpng's own bound (stored deflate blocks), then trimmed to what was written.
  png_alloc_size_t size = PNG_IMAGE_PNG_SIZE_MAX(img);
  std::string out(size, '\0');
  if (png_image_write_to_memory(&img, out.data(), &size, 0, hwc.data(), 0, nullptr) == 0) {
    const std::string why = img.message;
    png_image_free(&img);
    throw IOError("encode_png: libpng failed: " + why);
  }
  out.resize(size);
  return out;
}

std::string encode_jpeg(const Tensor& image, int quality) {
  if (quality < 1 || quality > 100) {
    throw Error("encode_jpeg: quality must be in [1, 100], got " + std::to_string(quality));
  }
  const std::vector<uint8_t> hwc = hwc_bytes(image, "encode_jpeg", {1, 3}, JPEG_MAX_DIMENSION);
  JpegEncodeJob job{};
  init_jpeg_errors(job.err);
  job.pixels = hwc.data();
  job.channels = static_cast<int>(image.size(0));
  job.height = static_cast<int>(image.size(1));
  job.width = static_cast<int>(image.size(2));
  job.quality = quality;
  JpegEncodeGuard guard(job);
  if (!jpeg_run_encode(&job)) throw IOError(std::string("encode_jpeg: libjpeg failed: ") + job.err.message);
  return std::string(reinterpret_cast<const char*>(job.out), job.out_size);
}

void write_png(const std::string& path, const Tensor& image) {
  write_file_atomically(path, encode_png(image), "write_png");
}

void write_jpeg(const std::string& path, const Tensor& image, int quality) {
  write_file_atomically(path, encode_jpeg(image, quality), "write_jpeg");
}

}  // namespace kiln::data
