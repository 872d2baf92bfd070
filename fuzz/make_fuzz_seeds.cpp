// Writes the seed corpora under fuzz/corpus/ (run: make_fuzz_seeds <repo>/fuzz/corpus). Valid seeds
// come from kiln's own writers, so they follow the writers as the formats evolve; near-valid seeds
// are valid ones with one field broken, which starts the fuzzer next to each of the readers' checks.
// Deterministic (fixed seed), so rerunning it changes no file unless a writer changed.
#include <zlib.h>

#include <cstdint>
// jpeglib.h needs size_t and FILE declared before it.
#include <cstdio>
#include <jpeglib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/ops/factory.h"
#include "core/ops/random.h"
#include "core/random.h"
#include "data/image.h"
#include "data/token_file.h"
#include "fuzz/checkpoint_model.h"
#include "nn/amp/grad_scaler.h"
#include "nn/safetensors.h"
#include "nn/training_checkpoint.h"

namespace {

using kiln::DType;
using kiln::Tensor;
using kiln::TensorOptions;
using Bytes = std::vector<uint8_t>;
namespace fs = std::filesystem;

fs::path g_root;

Bytes read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

void write_file(const fs::path& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) throw kiln::IOError("make_fuzz_seeds: cannot write " + p.string());
}

fs::path dir(const char* target) {
  fs::path d = g_root / target;
  fs::create_directories(d);
  return d;
}

// A safetensors file from a header text and a data buffer, for the seeds kiln's writer would refuse.
Bytes raw_safetensors(const std::string& header, const Bytes& data) {
  Bytes b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void safetensors_seeds() {
  const fs::path d = dir("safetensors");
  kiln::nn::save_safetensors((d / "empty.safetensors").string(), {});
  kiln::nn::save_safetensors((d / "f32_matrix.safetensors").string(), {{"weight", kiln::randn({2, 3})}},
                             {{"format", "pt"}});
  // Every dtype kiln reads, a 0-d scalar and a tensor with a zero-size dimension.
  std::map<std::string, Tensor> dtypes{
      {"f32", kiln::randn({3})},
      {"f16", kiln::randn({2, 2}).to(DType::Float16)},
      {"bf16", kiln::randn({2}).to(DType::BFloat16)},
      {"f64", kiln::randn({2}).to(DType::Float64)},
      {"i32", kiln::arange(0, 3, 1, TensorOptions(DType::Int32))},
      {"i64", kiln::full({}, int64_t{-7}, TensorOptions(DType::Int64))},
      {"u8", kiln::arange(250, 256, 1, TensorOptions(DType::UInt8))},
      {"bool", kiln::tensor<bool>({true, false, true})},
      {"empty", kiln::zeros({0, 3})},
  };
  kiln::nn::save_safetensors((d / "all_dtypes.safetensors").string(), dtypes);
  // Two names for one tensor: stored once, the other name in the tied table.
  Tensor shared = kiln::randn({2, 2});
  kiln::nn::save_safetensors((d / "tied.safetensors").string(),
                             {{"embed", shared}, {"head", shared}, {"b", kiln::ones({2})}});

  // Near-valid: each breaks one rule of the format.
  Bytes valid = read_file(d / "f32_matrix.safetensors");
  Bytes truncated(valid.begin(), valid.end() - 3);
  write_file(d / "truncated_data.safetensors", truncated);
  Bytes long_header = valid;
  long_header[0] = static_cast<uint8_t>(long_header[0] + 64);  // the header length runs past the file
  write_file(d / "header_past_end.safetensors", long_header);
  const Bytes eight(8, 0);
  write_file(d / "overlap.safetensors",
             raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                             eight));
  write_file(d / "bad_bool.safetensors",
             raw_safetensors(R"({"m":{"dtype":"BOOL","shape":[2,2],"data_offsets":[0,4]}})", {1, 0, 2, 1}));
  write_file(d / "bad_tied.safetensors",
             raw_safetensors(R"({"__metadata__":{"__kiln_tied__":"{\"x\":\"missing\"}"},)"
                             R"("y":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})",
                             {1, 0, 0, 0}));
  write_file(d / "size_mismatch.safetensors",
             raw_safetensors(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", eight));
}

// A checkpoint's tensors and metadata, to be written back with one thing changed.
struct Parts {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

Parts read_parts(const fs::path& p) {
  kiln::nn::SafetensorsFile f(p.string());
  return {f.load_all(), f.metadata()};
}

void checkpoint_seeds() {
  const fs::path d = dir("checkpoint");
  auto model = kiln::fuzz::make_checkpoint_model();
  auto opt = kiln::fuzz::make_checkpoint_optimizer(*model);
  kiln::nn::TrainingState state;
  state.step = 41;
  state.data_position = {{"epoch", 1}, {"batch", 7}};
  state.data_fingerprint = {{"dataset", "fuzz-seeds"}, {"examples", "1000"}};
  kiln::nn::save_checkpoint((d / "no_optimizer.safetensors").string(), *model, nullptr, state);
  // One step first, so that the optimizer has its per-parameter state.
  Tensor loss = (*model)(kiln::randn({2, 3})).sum();
  loss.backward();
  opt->step();
  state.step = 42;
  const fs::path full = d / "with_optimizer.safetensors";
  kiln::nn::save_checkpoint(full.string(), *model, opt.get(), state);

  // Near-valid: one field of the full checkpoint broken at a time.
  auto variant = [&](const char* name, auto&& change) {
    Parts p = read_parts(full);
    change(p);
    kiln::nn::save_safetensors((d / name).string(), p.tensors, p.metadata);
  };
  variant("next_version.safetensors", [](Parts& p) {
    p.metadata["kiln.checkpoint_version"] = std::to_string(kiln::nn::kCheckpointVersion + 1);
  });
  variant("bad_rng.safetensors", [](Parts& p) { p.metadata["kiln.rng"] = R"({"cuda:3":{"seed":"1","offset":"x"}})"; });
  variant("bad_position.safetensors", [](Parts& p) { p.metadata["kiln.data_position"] = R"({"epoch":1.5})"; });
  variant("negative_lr.safetensors", [](Parts& p) { p.tensors["optim.group.0.lr"].fill_(-1.0); });
  variant("exp_avg_shape.safetensors", [](Parts& p) { p.tensors["optim.state.0.exp_avg"] = kiln::zeros({3, 4}); });
  variant("extra_group.safetensors", [](Parts& p) {
    p.tensors["optim.group.1.lr"] = kiln::full({}, 0.1, TensorOptions(DType::Float64));
  });
  variant("missing_bias.safetensors", [](Parts& p) { p.tensors.erase("model.0.bias"); });
  variant("stray_tensor.safetensors", [](Parts& p) { p.tensors["extra"] = kiln::ones({1}); });

  // With a loss scaler's state (--amp fp16 runs), and near-valid scaler states.
  kiln::nn::amp::GradScaler scaler;
  Tensor scaled = scaler.scale((*model)(kiln::randn({2, 3})).sum());
  scaled.backward();
  scaler.step(*opt);
  scaler.update();
  state.step = 43;
  const fs::path with_scaler = d / "with_scaler.safetensors";
  kiln::nn::save_checkpoint(with_scaler.string(), *model, opt.get(), state, &scaler);
  auto scaler_variant = [&](const char* name, auto&& change) {
    Parts p = read_parts(with_scaler);
    change(p);
    kiln::nn::save_safetensors((d / name).string(), p.tensors, p.metadata);
  };
  scaler_variant("scaler_negative_scale.safetensors", [](Parts& p) { p.tensors["scaler.scale"].fill_(-1.0); });
  scaler_variant("scaler_tracker_dtype.safetensors", [](Parts& p) {
    p.tensors["scaler.growth_tracker"] = kiln::zeros({}, TensorOptions(DType::Int64));
  });
  scaler_variant("scaler_missing_interval.safetensors", [](Parts& p) { p.tensors.erase("scaler.growth_interval"); });
}

// idx: magic (0, 0, 0x08, ndims), big-endian sizes, data. kiln has no idx writer (datasets come as files).
Bytes idx(const std::vector<uint32_t>& dims, uint8_t type = 0x08) {
  Bytes b{0, 0, type, static_cast<uint8_t>(dims.size())};
  size_t n = 1;
  for (uint32_t s : dims) {
    for (int i = 3; i >= 0; --i) b.push_back(static_cast<uint8_t>(s >> (8 * i)));
    n *= s;
  }
  for (size_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(i * 37 + 11));
  return b;
}

Bytes gzip(const Bytes& in) {
  z_stream zs{};
  deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  Bytes out(deflateBound(&zs, static_cast<uLong>(in.size())));
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

void idx_seeds() {
  const fs::path d = dir("idx");
  const Bytes labels = idx({10}), images = idx({2, 3, 3});
  write_file(d / "labels-idx1-ubyte", labels);
  write_file(d / "images-idx3-ubyte", images);
  write_file(d / "images-idx3-ubyte.gz", gzip(images));
  write_file(d / "four_dims-idx4-ubyte", idx({1, 2, 1, 3}));
  // Near-valid.
  write_file(d / "truncated-idx3-ubyte", Bytes(images.begin(), images.end() - 1));
  Bytes trailing = labels;
  trailing.push_back(0);
  write_file(d / "trailing-idx1-ubyte", trailing);
  write_file(d / "float_type-idx1-ubyte", idx({2}, 0x0D));
  write_file(d / "zero_dim-idx2-ubyte", idx({0, 4}));
  const Bytes gz = gzip(images);
  write_file(d / "truncated_stream-idx3-ubyte.gz", Bytes(gz.begin(), gz.end() - 6));
  Bytes bad_crc = gz;
  bad_crc[bad_crc.size() - 6] ^= 0xff;  // the CRC32 in the gzip trailer
  write_file(d / "bad_crc-idx3-ubyte.gz", bad_crc);
}

// ---- images ------------------------------------------------------------------------------------

void put_be32(Bytes& b, uint32_t v) {
  for (int i = 3; i >= 0; --i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A PNG chunk: length, type, data, then the CRC-32 of type and data.
void png_chunk(Bytes& out, const char* type, const Bytes& body) {
  put_be32(out, static_cast<uint32_t>(body.size()));
  Bytes typed(type, type + 4);
  typed.insert(typed.end(), body.begin(), body.end());
  out.insert(out.end(), typed.begin(), typed.end());
  put_be32(out, static_cast<uint32_t>(crc32(0L, typed.data(), static_cast<uInt>(typed.size()))));
}

// A PNG built by hand, for the color types and bit depths kiln's writer (8-bit only) never makes.
// `rows` are the image's rows as stored (packed samples, no filter byte); `interlaced` (8-bit samples
// only) reorders them into Adam7's seven passes.
Bytes png_file(uint32_t w, uint32_t h, uint8_t depth, uint8_t color_type, const std::vector<Bytes>& rows,
               const Bytes& plte = {}, const Bytes& trns = {}, bool interlaced = false) {
  Bytes out{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes ihdr;
  put_be32(ihdr, w);
  put_be32(ihdr, h);
  ihdr.insert(ihdr.end(), {depth, color_type, 0, 0, static_cast<uint8_t>(interlaced ? 1 : 0)});
  png_chunk(out, "IHDR", ihdr);
  if (!plte.empty()) png_chunk(out, "PLTE", plte);
  if (!trns.empty()) png_chunk(out, "tRNS", trns);
  Bytes raw;
  if (!interlaced) {
    for (const Bytes& r : rows) {
      raw.push_back(0);
      raw.insert(raw.end(), r.begin(), r.end());
    }
  } else {
    const size_t bpp = rows[0].size() / w;
    static constexpr uint32_t kPasses[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                               {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
    for (const auto& p : kPasses) {
      if (p[0] >= w) continue;
      for (uint32_t y = p[1]; y < h; y += p[3]) {
        raw.push_back(0);
        for (uint32_t x = p[0]; x < w; x += p[2]) {
          raw.insert(raw.end(), rows[y].begin() + x * bpp, rows[y].begin() + (x + 1) * bpp);
        }
      }
    }
  }
  uLongf n = compressBound(static_cast<uLong>(raw.size()));
  Bytes z(n);
  compress2(z.data(), &n, raw.data(), static_cast<uLong>(raw.size()), 9);
  z.resize(n);
  png_chunk(out, "IDAT", z);
  png_chunk(out, "IEND", {});
  return out;
}

Tensor pattern_image(int64_t c, int64_t h, int64_t w) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < c * h * w; ++i) v.push_back((i * 37 + (i / w) * 11) % 256);
  return kiln::tensor(v, {c, h, w}, TensorOptions(DType::UInt8));
}

Bytes pattern_row(size_t bytes, uint32_t seed) {
  Bytes r(bytes);
  for (size_t i = 0; i < bytes; ++i) r[i] = static_cast<uint8_t>(i * 29 + seed * 53 + 7);
  return r;
}

std::vector<Bytes> pattern_rows(uint32_t h, size_t row_bytes) {
  std::vector<Bytes> rows;
  for (uint32_t y = 0; y < h; ++y) rows.push_back(pattern_row(row_bytes, y));
  return rows;
}

// A JPEG through libjpeg directly, for what kiln's writer does not make: progressive scans, CMYK
// (with Adobe's marker, as Photoshop writes it) and restart markers. libjpeg's default error handler
// exits, which is acceptable in this tool: its inputs are fixed.
Bytes libjpeg_file(int w, int h, int components, J_COLOR_SPACE space, bool progressive, int restart_rows) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &out, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = components;
  c.in_color_space = space;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 80, TRUE);
  if (progressive) jpeg_simple_progression(&c);
  c.restart_in_rows = restart_rows;
  jpeg_start_compress(&c, TRUE);
  const Bytes pixels = pattern_row(static_cast<size_t>(w * h * components), 3);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels.data() + c.next_scanline * static_cast<size_t>(w * components));
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  Bytes b(out, out + size);
  std::free(out);
  return b;
}

void image_seeds() {
  const fs::path d = dir("image");
  // kiln's writers: 8-bit PNG of each channel count, JPEG gray and color, 4:4:4 and 4:2:0.
  kiln::data::write_png((d / "gray.png").string(), pattern_image(1, 3, 5));
  kiln::data::write_png((d / "gray_alpha.png").string(), pattern_image(2, 2, 3));
  kiln::data::write_png((d / "rgb.png").string(), pattern_image(3, 4, 3));
  kiln::data::write_png((d / "rgba.png").string(), pattern_image(4, 2, 2));
  kiln::data::write_jpeg((d / "gray.jpg").string(), pattern_image(1, 8, 8), 90);
  kiln::data::write_jpeg((d / "rgb444.jpg").string(), pattern_image(3, 9, 13), 95);
  kiln::data::write_jpeg((d / "rgb420.jpg").string(), pattern_image(3, 16, 16), 50);
  // By hand: 16-bit, low-bit gray, palettes with and without transparency, tRNS gray, interlacing.
  write_file(d / "rgb16.png", png_file(2, 2, 16, 2, pattern_rows(2, 12)));
  write_file(d / "gray_alpha16.png", png_file(3, 1, 16, 4, pattern_rows(1, 12)));
  write_file(d / "gray1.png", png_file(9, 2, 1, 0, pattern_rows(2, 2)));
  write_file(d / "gray2_trns.png", png_file(5, 2, 2, 0, pattern_rows(2, 2), {}, {0, 1}));
  write_file(d / "gray8_trns.png", png_file(3, 2, 8, 0, {{7, 9, 7}, {1, 7, 2}}, {}, {0, 7}));
  write_file(d / "palette4_trns.png",
             png_file(5, 2, 4, 3, {{0x01, 0x20, 0x10}, {0x22, 0x11, 0x00}}, {10, 20, 30, 200, 100, 0, 1, 2, 3},
                      {255, 128}));
  write_file(d / "palette8.png", png_file(3, 1, 8, 3, {{0, 1, 0}}, {9, 8, 7, 6, 5, 4}));
  write_file(d / "interlaced_rgb.png", png_file(9, 9, 8, 2, pattern_rows(9, 27), {}, {}, true));
  // libjpeg directly: progressive color and gray, CMYK, restart markers.
  write_file(d / "progressive.jpg", libjpeg_file(16, 16, 3, JCS_RGB, true, 0));
  write_file(d / "progressive_gray.jpg", libjpeg_file(9, 7, 1, JCS_GRAYSCALE, true, 0));
  write_file(d / "cmyk.jpg", libjpeg_file(8, 8, 4, JCS_CMYK, false, 0));
  write_file(d / "restarts.jpg", libjpeg_file(16, 32, 3, JCS_RGB, false, 1));

  // Near-valid: cut short, a broken CRC, a header claiming more than the file holds, flipped scan bytes.
  const Bytes png = read_file(d / "rgb.png");
  write_file(d / "truncated.png", Bytes(png.begin(), png.begin() + static_cast<long>(png.size() / 2)));
  Bytes bad_crc = png;
  bad_crc[29] ^= 0xff;  // IHDR's CRC
  write_file(d / "bad_crc.png", bad_crc);
  write_file(d / "huge_claim.png", png_file(1u << 19, 1u << 19, 8, 6, {pattern_row(64, 1)}));
  const Bytes jpg = read_file(d / "rgb420.jpg");
  write_file(d / "truncated.jpg", Bytes(jpg.begin(), jpg.end() - 30));  // inside the scan data
  Bytes flipped = jpg;
  for (size_t i = flipped.size() - 40; i < flipped.size() - 2; i += 5) flipped[i] ^= 0x5a;
  write_file(d / "corrupt_scan.jpg", flipped);
}

// ---- token files -------------------------------------------------------------------------------

void put_le(Bytes& b, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// llm.c's layout: 256 int32 (magic, version, count, zeros), then `count` tokens of the version's width.
Bytes llmc(int32_t version, uint32_t tokens, int32_t declared, int32_t magic = kiln::data::kLlmCMagic) {
  Bytes b;
  put_le(b, static_cast<uint32_t>(magic), 4);
  put_le(b, static_cast<uint32_t>(version), 4);
  put_le(b, static_cast<uint32_t>(declared), 4);
  b.resize(1024, 0);
  for (uint32_t t = 0; t < tokens; ++t) put_le(b, t * 2654435761u >> (version == 2 ? 0 : 16), version == 2 ? 4 : 2);
  return b;
}

void token_file_seeds() {
  const fs::path d = dir("token_file");
  Bytes nanogpt;
  for (uint32_t t = 0; t < 40; ++t) put_le(nanogpt, (t * 7919) % 50257, 2);
  write_file(d / "nanogpt.bin", nanogpt);
  write_file(d / "llmc_v1.bin", llmc(1, 24, 24));
  write_file(d / "llmc_v2.bin", llmc(2, 24, 24));
  // Near-valid.
  Bytes odd = nanogpt;
  odd.push_back(1);
  write_file(d / "odd_length.bin", odd);
  write_file(d / "llmc_count_mismatch.bin", llmc(1, 24, 25));
  write_file(d / "llmc_negative_count.bin", llmc(2, 4, -4));
  write_file(d / "llmc_version3.bin", llmc(3, 8, 8));
  Bytes short_header = llmc(1, 0, 0);
  short_header.resize(512);
  write_file(d / "llmc_short_header.bin", short_header);
  Bytes v2_odd = llmc(2, 3, 3);
  v2_odd.resize(v2_odd.size() - 2);
  write_file(d / "llmc_v2_half_token.bin", v2_odd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds <corpus directory, e.g. fuzz/corpus>\n");
    return 2;
  }
  g_root = argv[1];
  kiln::manual_seed(1234);
  try {
    safetensors_seeds();
    checkpoint_seeds();
    idx_seeds();
    image_seeds();
    token_file_seeds();
    for (const auto& entry : fs::recursive_directory_iterator(g_root)) {
      if (entry.is_regular_file()) {
        std::printf("%6ju bytes  %s\n", static_cast<uintmax_t>(entry.file_size()),
                    entry.path().lexically_relative(g_root).c_str());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
