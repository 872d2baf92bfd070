// safetensors reading and writing. The header is validated completely (types, dtypes, shapes,
// every offset against the file size, overlaps) before any tensor byte is read, so a hostile or
// truncated file is a kiln::IOError and never an out-of-bounds read, and every tensor read is
// checked against the CRC-32 kiln wrote for it; writes go through core/atomic_file.h (a temporary
// sibling, fsynced, then renamed over the target).
#include "nn/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>
#include <zlib.h>

#include "core/atomic_file.h"
#include "core/ops/factory.h"
#include "kernels/error.h"
#include "kernels/log.h"
#include "nn/module.h"

namespace kiln::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; kiln copies it byte for byte");

namespace {

using json = nlohmann::json;

// The reference implementation's limit: a larger header is not a real file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A real header nests three levels ({name: {shape: [..]}}); a deeper one is rejected before parsing
// so that a crafted header cannot make the parser or the json destructor recurse without bound.
constexpr int kMaxJsonDepth = 64;
constexpr size_t kMaxRank = 64;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IOError("safetensors: " + path + ": " + what);
}

std::string errno_text() { return std::strerror(errno); }

bool dtype_from_name(const std::string& s, DType& out) {
  static const std::pair<const char*, DType> table[] = {
      {"F32", DType::Float32}, {"F16", DType::Float16}, {"BF16", DType::BFloat16}, {"F64", DType::Float64},
      {"I32", DType::Int32},   {"I64", DType::Int64},   {"U8", DType::UInt8},      {"BOOL", DType::Bool},
  };
  for (auto& [name, dt] : table) {
    if (s == name) {
      out = dt;
      return true;
    }
  }
  return false;
}

// Deepest bracket nesting of a JSON text, ignoring brackets inside strings.
int json_depth(const std::string& text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

// A non-negative JSON integer as uint64; false for anything else (negative, float, string...).
bool json_unsigned(const json& j, uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;
}

// zlib's CRC-32 (the gzip and PNG polynomial), over any length.
uint32_t crc32_of(const void* data, size_t n) {
  return static_cast<uint32_t>(::crc32_z(0L, static_cast<const Bytef*>(data), n));
}

std::string crc_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

bool parse_crc_hex(const std::string& s, uint32_t& out) {
  if (s.size() != 8) return false;
  out = 0;
  for (char c : s) {
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return false;
    out = out << 4 | static_cast<uint32_t>(v);
  }
  return true;
}

bool read_all_at(int fd, void* data, size_t n, uint64_t offset) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) return false;  // the file shrank after it was validated
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

// One of kiln's metadata fields that hold a JSON object (the tied-tensor and checksum tables), parsed
// under the same guards as the header; `where` names the field in errors.
json metadata_table(const std::string& path, const std::string& where, const std::string& text) {
  if (json_depth(text) > kMaxJsonDepth) fail(path, where + "nests too deeply");
  json table = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (table.is_discarded() || !table.is_object()) fail(path, where + "is not a JSON object");
  return table;
}

// Same storage, same view: writing both would store the same bytes twice and lose the tie.
bool same_view(const Tensor& a, const Tensor& b) {
  if (a.impl() == b.impl()) return true;
  return a.storage() && a.storage() == b.storage() && a.dtype() == b.dtype() &&
         a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() && a.strides() == b.strides();
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "F32";
    case DType::Float16: return "F16";
    case DType::BFloat16: return "BF16";
    case DType::Float64: return "F64";
    case DType::Int32: return "I32";
    case DType::Int64: return "I64";
    case DType::UInt8: return "U8";
    case DType::Bool: return "BOOL";
  }
  return "?";
}

// --- writing -------------------------------------------------------------------------------------

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const uint64_t bytes = detail::write_safetensors(path, tensors, metadata);
  KILN_LOG(Info, "save_safetensors: wrote " + std::to_string(tensors.size()) + " tensors, " + format_bytes(bytes) +
                     " to " + path);
}

uint64_t detail::write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  for (const char* reserved : {kTiedMetadataKey, kChecksumMetadataKey}) {
    if (metadata.count(reserved)) {
      throw Error(std::string("save_safetensors: ") + path + ": metadata key \"" + reserved +
                  "\" is reserved for kiln's own use");
    }
  }
  if (tensors.count("__metadata__")) {
    throw Error("save_safetensors: " + path + ": \"__metadata__\" cannot be a tensor name");
  }

  // Names in map order; a tensor that is the same view as an earlier one becomes an alias of it.
  std::vector<std::pair<std::string, Tensor>> stored;
  std::map<std::string, std::string> aliases;
  for (const auto& entry : tensors) {
    const std::string& name = entry.first;
    const Tensor& t = entry.second;  // a plain reference: lambdas may capture it (C++20 bindings need clang 16)
    if (!t.defined()) throw Error("save_safetensors: " + path + ": tensor " + quoted(name) + " is undefined");
    auto it = std::find_if(stored.begin(), stored.end(), [&](const auto& s) { return same_view(s.second, t); });
    if (it != stored.end()) aliases[name] = it->first;
    else stored.emplace_back(name, t);
  }
  // Widest elements first: the data buffer starts 8-byte aligned and has no holes (the format
  // forbids them), so this order keeps every tensor aligned to its element size.
  std::stable_sort(stored.begin(), stored.end(),
                   [](const auto& a, const auto& b) { return a.second.element_size() > b.second.element_size(); });

  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : stored) {
    uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
                    {"shape", t.sizes()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  // The header, with every stored tensor's CRC-32 in kiln's checksum table. The data is written
  // first, after room for the header, because the checksums are only known once each tensor is on
  // the host; the table's values are always 8 hex digits, so the header's length is known up front.
  std::map<std::string, std::string> checksums;
  for (const auto& s : stored) checksums[s.first] = crc_hex(0);
  auto header_text = [&] {
    json meta = json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    if (!aliases.empty()) meta[kTiedMetadataKey] = json(aliases).dump();
    meta[kChecksumMetadataKey] = json(checksums).dump();
    header["__metadata__"] = meta;
    std::string text;
    try {
      text = header.dump();
    } catch (const json::exception& e) {
      // dump() refuses strings that are not valid UTF-8, which the format requires.
      throw Error("save_safetensors: " + path + ": a tensor name or metadata string is not valid UTF-8 (" +
                  e.what() + ")");
    }
    // Spaces after the JSON (allowed by the format) so that the data starts at a multiple of 8.
    text.append((8 - text.size() % 8) % 8, ' ');
    return text;
  };
  const uint64_t n = header_text().size();

  AtomicFile tmp(path, "safetensors");
  {
    NoGradGuard no_grad;
    // One tensor at a time on the host, so a model on the GPU is never staged whole.
    uint64_t at = 8 + n;
    for (const auto& [name, t] : stored) {
      Tensor c = t.detach().contiguous();
      if (!c.is_cpu()) c = c.to(Device::cpu()).contiguous();
      const size_t nbytes = static_cast<size_t>(c.numel()) * c.element_size();
      checksums[name] = crc_hex(crc32_of(c.data_ptr(), nbytes));
      tmp.write_at(c.data_ptr(), nbytes, at);
      at += nbytes;
    }
  }
  const std::string text = header_text();
  if (text.size() != n) throw Error("save_safetensors: " + path + ": internal error: the header changed length");
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(n >> (8 * i));
  tmp.write_at(len_bytes, 8, 0);
  tmp.write_at(text.data(), text.size(), 8);
  tmp.commit();
  return 8 + n + offset;
}

std::string tensor_checksum(const Tensor& t) {
  if (!t.defined()) throw Error("tensor_checksum: called on an undefined tensor");
  NoGradGuard no_grad;
  Tensor c = t.detach().contiguous();
  if (!c.is_cpu()) c = c.to(Device::cpu()).contiguous();
  return crc_hex(crc32_of(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size()));
}

// --- reading -------------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(path, "cannot open: " + errno_text());
  // The destructor does not run for a throwing constructor: close the file ourselves.
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(path, "cannot stat: " + errno_text());
    if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
    file_size_ = static_cast<uint64_t>(st.st_size);
    if (file_size_ < 8) {
      fail(path, "file is " + std::to_string(file_size_) + " bytes, too short for the 8-byte header length");
    }
    unsigned char len_bytes[8];
    if (!read_all_at(fd_, len_bytes, 8, 0)) fail(path, "cannot read the header length");
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len_bytes[i]) << (8 * i);
    if (n > kMaxHeaderBytes) {
      fail(path, "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) +
                     " bytes");
    }
    if (n > file_size_ - 8) {
      fail(path, "header length " + std::to_string(n) + " runs past the end of the file (" +
                     std::to_string(file_size_) + " bytes)");
    }
    std::string text(static_cast<size_t>(n), '\0');
    if (n > 0 && !read_all_at(fd_, text.data(), text.size(), 8)) fail(path, "cannot read the header");
    data_start_ = 8 + n;
    const uint64_t data_size = file_size_ - data_start_;
    if (text.empty() || text[0] != '{') fail(path, "header is not a JSON object (it must start with '{')");
    if (json_depth(text) > kMaxJsonDepth) fail(path, "header JSON nests deeper than any safetensors header");

    // A name given twice would leave one of the two entries unread (the parser keeps the last): the
    // keys of each object are collected as they are parsed, and a repeat refused.
    std::vector<std::set<std::string>> keys;  // one set per object being parsed
    std::optional<std::string> repeated;
    const json::parser_callback_t check_keys = [&](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) keys.emplace_back();
      if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
      if (event == json::parse_event_t::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
          !repeated) {
        repeated = parsed.get<std::string>();
      }
      return true;
    };
    json header = json::parse(text, check_keys, /*allow_exceptions=*/false);
    if (header.is_discarded()) fail(path, "header is not valid JSON");
    if (repeated) fail(path, "header names " + quoted(std::as_const(*repeated)) + " twice");
    if (!header.is_object()) fail(path, "header is not a JSON object");

    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        if (!value.is_object()) fail(path, "field \"__metadata__\" is not an object");
        for (const auto& [k, v] : value.items()) {
          if (!v.is_string()) fail(path, "metadata field " + quoted(k) + " is not a string");
          metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      const std::string where = "tensor " + quoted(name) + ": ";
      if (!value.is_object()) fail(path, where + "entry is not an object");

      SafetensorsEntry e;
      auto dt = value.find("dtype");
      if (dt == value.end() || !dt->is_string()) fail(path, where + "missing or non-string field \"dtype\"");
      if (!dtype_from_name(dt->get<std::string>(), e.dtype)) {
        fail(path, where + "unknown dtype \"" + dt->get<std::string>() + "\"");
      }

      auto sh = value.find("shape");
      if (sh == value.end() || !sh->is_array()) fail(path, where + "missing or non-array field \"shape\"");
      if (sh->size() > kMaxRank) fail(path, where + "shape has " + std::to_string(sh->size()) + " dimensions");
      // Overflow-checked: the product of the sizes (with zeros counted as one, because kiln's
      // strides are such products) and the byte size must both fit in int64.
      uint64_t numel = 1, stride_product = 1;
      bool overflow = false;
      for (size_t i = 0; i < sh->size(); ++i) {
        uint64_t d = 0;
        if (!json_unsigned((*sh)[i], d)) {
          fail(path, where + "shape entry " + std::to_string(i) + " is " + (*sh)[i].dump() +
                         ", not a non-negative integer");
        }
        if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
        else if (__builtin_mul_overflow(numel, d, &numel)) overflow = true;
        if (d > 0 && __builtin_mul_overflow(stride_product, d, &stride_product)) overflow = true;
        e.shape.push_back(static_cast<int64_t>(d));
      }
      uint64_t nbytes = 0;
      if (overflow || __builtin_mul_overflow(numel, element_size(e.dtype), &nbytes) ||
          stride_product > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(path, where + "shape " + sh->dump() + " is too large");
      }

      auto off = value.find("data_offsets");
      if (off == value.end() || !off->is_array() || off->size() != 2) {
        fail(path, where + "missing field \"data_offsets\" or it is not [begin, end]");
      }
      if (!json_unsigned((*off)[0], e.begin) || !json_unsigned((*off)[1], e.end)) {
        fail(path, where + "data_offsets " + off->dump() + " are not non-negative integers");
      }
      if (e.begin > e.end) fail(path, where + "data_offsets " + off->dump() + " have begin > end");
      if (e.end > data_size) {
        fail(path, where + "data_offsets " + off->dump() + " run past the data buffer (" +
                       std::to_string(data_size) + " bytes)");
      }
      if (e.end - e.begin != nbytes) {
        fail(path, where + "data_offsets " + off->dump() + " span " + std::to_string(e.end - e.begin) +
                       " bytes, but " + safetensors_dtype_name(e.dtype) + " " + sh->dump() + " needs " +
                       std::to_string(nbytes));
      }
      entries_.emplace(name, std::move(e));
    }

    // The format's rule: the tensors' ranges, in order, tile the data buffer from byte 0 to its end,
    // with no overlap, no gap and nothing after (bytes no tensor claims could carry anything).
    std::vector<std::pair<const std::string*, const SafetensorsEntry*>> ranges;
    for (const auto& [name, e] : entries_) ranges.emplace_back(&name, &e);
    std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) {
      return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
    });
    uint64_t reached = 0;  // the end of the ranges so far
    for (size_t i = 0; i < ranges.size(); ++i) {
      const SafetensorsEntry& e = *ranges[i].second;
      if (e.begin < reached) {
        fail(path, "tensors " + quoted(*ranges[i - 1].first) + " and " + quoted(*ranges[i].first) +
                       " have overlapping data ranges");
      }
      if (e.begin > reached) {
        fail(path, "bytes " + std::to_string(reached) + " to " + std::to_string(e.begin) +
                       " of the data buffer belong to no tensor (before " + quoted(*ranges[i].first) + ")");
      }
      reached = e.end;
    }
    if (reached != data_size) {
      fail(path, "the data buffer has " + std::to_string(data_size) + " bytes, but its tensors end at byte " +
                     std::to_string(reached));
    }

    auto tied = metadata_.find(kTiedMetadataKey);
    if (tied != metadata_.end()) {
      const std::string where = std::string("metadata field \"") + kTiedMetadataKey + "\": ";
      const json table = metadata_table(path, where, tied->second);  // named: items() refers into it
      for (const auto& [alias, target] : table.items()) {
        if (!target.is_string()) fail(path, where + "alias " + quoted(alias) + " does not map to a name");
        const std::string t = target.get<std::string>();
        if (!entries_.count(t)) fail(path, where + "alias " + quoted(alias) + " refers to missing tensor " + quoted(t));
        if (entries_.count(alias) || alias == "__metadata__") {
          fail(path, where + "alias " + quoted(alias) + " collides with a stored tensor");
        }
        aliases_[alias] = t;
      }
      metadata_.erase(tied);
    }

    auto sums = metadata_.find(kChecksumMetadataKey);
    if (sums != metadata_.end()) {
      const std::string where = std::string("metadata field \"") + kChecksumMetadataKey + "\": ";
      const json table = metadata_table(path, where, sums->second);
      for (const auto& [name, value] : table.items()) {
        uint32_t crc = 0;
        if (!entries_.count(name)) fail(path, where + "names " + quoted(name) + ", which is not a stored tensor");
        if (!value.is_string() || !parse_crc_hex(value.get<std::string>(), crc)) {
          fail(path, where + "the checksum of " + quoted(name) + " is not 8 lowercase hex digits");
        }
        checksums_[name] = crc;
      }
      metadata_.erase(sums);
    }
  } catch (const json::exception& e) {
    ::close(fd_);
    fd_ = -1;
    fail(path, std::string("malformed header: ") + e.what());
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [n, e] : entries_) out.push_back(n);
  for (const auto& [a, t] : aliases_) out.push_back(a);
  std::sort(out.begin(), out.end());
  return out;
}

bool SafetensorsFile::contains(const std::string& name) const { return entries_.count(name) || aliases_.count(name); }

Tensor SafetensorsFile::read_entry(const std::string& name, const SafetensorsEntry& e, Device device) const {
  Tensor t = empty(e.shape, TensorOptions(e.dtype));
  const uint64_t nbytes = e.end - e.begin;
  if (nbytes > 0 && !read_all_at(fd_, t.data_ptr(), static_cast<size_t>(nbytes), data_start_ + e.begin)) {
    fail(path_, "tensor " + quoted(name) + ": cannot read its data (was the file truncated?)");
  }
  auto sum = checksums_.find(name);
  if (sum != checksums_.end()) {
    const uint32_t crc = crc32_of(t.data_ptr(), static_cast<size_t>(nbytes));
    if (crc != sum->second) {
      fail(path_, "tensor " + quoted(name) + ": its data does not match its checksum (stored CRC-32 " +
                      crc_hex(sum->second) + ", the bytes give " + crc_hex(crc) + "): the file is corrupt");
    }
  }
  if (e.dtype == DType::Bool) {
    // Any byte other than 0 or 1 is not a C++ bool; reading it would be undefined behaviour.
    const auto* p = static_cast<const unsigned char*>(t.data_ptr());
    for (uint64_t i = 0; i < nbytes; ++i) {
      if (p[i] > 1) fail(path_, "tensor " + quoted(name) + ": BOOL element " + std::to_string(i) + " is not 0 or 1");
    }
  }
  return device.is_cpu() ? t : t.to(device);
}

Tensor SafetensorsFile::load(const std::string& name, Device device) const {
  auto a = aliases_.find(name);
  const std::string& stored = a == aliases_.end() ? name : a->second;
  auto it = entries_.find(stored);
  if (it == entries_.end()) fail(path_, "no tensor named " + quoted(name));
  return read_entry(it->first, it->second, device);
}

std::map<std::string, Tensor> SafetensorsFile::load_all(Device device) const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, e] : entries_) out.emplace(name, read_entry(name, e, device));
  for (const auto& [alias, target] : aliases_) out.emplace(alias, out.at(target));
  return out;
}

std::map<std::string, Tensor> load_safetensors(const std::string& path, Device device) {
  SafetensorsFile file(path);
  std::map<std::string, Tensor> tensors = file.load_all(device);
  KILN_LOG(Info, "load_safetensors: read " + std::to_string(tensors.size()) + " tensors, " +
                     format_bytes(file.file_size()) + " from " + path + " onto " + device.str());
  return tensors;
}

void load_into(Module& module, const std::string& path, bool strict) {
  std::map<std::string, Tensor> tensors = load_safetensors(path);
  try {
    // Tied names of the module share one tensor; load_state_dict fills it from each of its names,
    // and those are the same stored tensor, so the tie keeps a single consistent value.
    module.load_state_dict(tensors, strict);
  } catch (const IOError&) {
    throw;
  } catch (const Error& e) {
    throw Error("load_into: " + path + ": " + e.what());
  }
}

}  // namespace kiln::nn
