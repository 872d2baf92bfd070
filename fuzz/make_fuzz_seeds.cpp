// Writes the seed corpora under fuzz/corpus/ (run: make_fuzz_seeds <repo>/fuzz/corpus). Valid seeds
// come from kiln's own writers, so they follow the writers as the formats evolve; near-valid seeds
// are valid ones with one field broken, which starts the fuzzer next to each of the readers' checks.
// Deterministic (fixed seed), so rerunning it changes no file unless a writer changed.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/ops/factory.h"
#include "core/ops/random.h"
#include "core/random.h"
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
