// The safetensors format (8-byte little-endian header length, a JSON header, one flat data buffer),
// read and written by kiln. Non-obvious decisions: a file is written to a temporary sibling and
// renamed over the target (core/atomic_file.h), so a crash never leaves a half-written file;
// tensors that are the same view of the same storage are stored once, and the other names go into
// the metadata key "__kiln_tied__" so kiln ties them again on load (the format itself forbids
// shared tensors).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln::nn {

class Module;

// The metadata key holding {"alias": "stored name", ...} as JSON. Reserved: user metadata may not use it.
inline constexpr const char* kTiedMetadataKey = "__kiln_tied__";
// The metadata key holding {"stored name": "CRC-32 of its bytes as 8 hex digits", ...} as JSON,
// written for every tensor; a reader verifies each tensor it reads against it, so a flipped bit in
// a file is an IOError instead of a silently different model. Other safetensors readers ignore it.
// Reserved, like kTiedMetadataKey. Files without it (from other writers) load unverified.
inline constexpr const char* kChecksumMetadataKey = "__kiln_crc32__";

// Writes `tensors` (any device, any layout: copied to CPU and row-major contiguous) and string
// metadata atomically to `path`. Undefined tensors, the reserved metadata key and strings that are
// not valid UTF-8 are a kiln::Error; any failure to write is a kiln::IOError, and the previous
// file at `path`, if any, is left untouched. Logs one Info line (path, tensors, bytes).
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor onto `device`. Aliases recorded by save_safetensors come back as the same
// Tensor (one TensorImpl) under each name. Any malformed, truncated or corrupt file (a tensor whose
// bytes do not match its stored checksum; a name given twice; data ranges that overlap, leave a gap
// or stop short of the buffer's end, which the format forbids) is a kiln::IOError naming the file
// and the offending tensor or field. Logs one Info line (path, tensors, bytes).
std::map<std::string, Tensor> load_safetensors(const std::string& path, Device device = Device::cpu());

// One tensor as the header describes it. Offsets are relative to the start of the data buffer.
struct SafetensorsEntry {
  DType dtype = DType::Float32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// An opened and fully validated safetensors file: the header is parsed and every offset checked
// when it is constructed; tensors are read on demand.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Stored tensors, by name (aliases are not listed here; see aliases()).
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  // Stored names and aliases, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  // The user metadata ("__metadata__" without kiln's reserved keys).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // alias -> stored name.
  const std::map<std::string, std::string>& aliases() const { return aliases_; }
  // stored name -> CRC-32 of its bytes, verified by every read; empty for files kiln did not write.
  const std::map<std::string, uint32_t>& checksums() const { return checksums_; }
  uint64_t data_start() const { return data_start_; }  // byte offset of the data buffer in the file
  uint64_t file_size() const { return file_size_; }

  // One tensor (a stored name or an alias), read from disk onto `device`.
  Tensor load(const std::string& name, Device device = Device::cpu()) const;
  // Every stored tensor, with aliases sharing their target's Tensor.
  std::map<std::string, Tensor> load_all(Device device = Device::cpu()) const;

 private:
  Tensor read_entry(const std::string& name, const SafetensorsEntry& e, Device device) const;
  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, std::string> aliases_;
  std::map<std::string, uint32_t> checksums_;
};

namespace detail {
// save_safetensors without its log line; returns the bytes written. For save_checkpoint, which
// logs one line of its own (with the training step) instead of two.
uint64_t write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                           const std::map<std::string, std::string>& metadata);
}  // namespace detail

// The CRC-32 of a tensor's bytes in row-major order, as 8 hex digits: what kChecksumMetadataKey
// stores for it. Also a cheap fingerprint of a dataset for training checkpoints.
std::string tensor_checksum(const Tensor& t);

// The format's dtype strings ("F32", "BF16", "BOOL", ...).
const char* safetensors_dtype_name(DType dtype);

// Loads a file written from a module's state_dict into `module` (load_state_dict semantics:
// strict requires the same keys; shapes must match, and floating values convert to the module's
// floating dtypes). Tied parameters come back tied because the module's tied names share one
// tensor, which is filled from the one stored copy.
void load_into(Module& module, const std::string& path, bool strict = true);

}  // namespace kiln::nn
