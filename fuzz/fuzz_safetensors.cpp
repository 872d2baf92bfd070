// libFuzzer target for the safetensors reader (nn/safetensors.h): the input is a whole file. Every
// accepted file must also load completely, agree with its own header, and survive a write and a
// second read unchanged; a reader that accepts what the writer cannot reproduce is a finding too.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "fuzz/fuzz_common.h"
#include "nn/safetensors.h"

namespace {

using kiln::Tensor;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_safetensors: FINDING: %s\n", what.c_str());
  std::abort();
}

// The round trip needs a real directory: the writer creates a sibling temporary file and renames it.
// One per process, in memory where /dev/shm exists, removed at exit.
std::string g_scratch_dir;

void remove_scratch_dir() {
  std::error_code ec;
  if (!g_scratch_dir.empty()) std::filesystem::remove_all(g_scratch_dir, ec);
}

void make_scratch_dir() {
  for (const char* base : {"/dev/shm", "/tmp"}) {
    std::string templ = std::string(base) + "/kiln-fuzz-safetensors-XXXXXX";
    if (::mkdtemp(templ.data())) {
      g_scratch_dir = templ;
      std::atexit(remove_scratch_dir);
      return;
    }
  }
  finding("cannot create a scratch directory");
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  const size_t n = static_cast<size_t>(ca.numel()) * ca.element_size();
  return n == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), n) == 0;
}

// What a successful open promises: every listed name loads, with the header's dtype and shape,
// and aliases are the very tensor of their target.
std::map<std::string, Tensor> check_loaded(const kiln::nn::SafetensorsFile& file) {
  std::map<std::string, Tensor> all = file.load_all();
  if (all.size() != file.names().size()) finding("load_all returned a different number of tensors than names()");
  for (const auto& [name, e] : file.entries()) {
    const Tensor& t = all.at(name);
    if (t.dtype() != e.dtype || t.sizes() != e.shape) finding("tensor '" + name + "' differs from its header entry");
    if (!same_bytes(t, file.load(name))) finding("load('" + name + "') differs from load_all");
  }
  for (const auto& [alias, target] : file.aliases()) {
    if (all.at(alias).impl() != all.at(target).impl()) finding("alias '" + alias + "' is not tied to '" + target + "'");
  }
  return all;
}

void round_trip(const kiln::nn::SafetensorsFile& file, const std::map<std::string, Tensor>& all) {
  const std::string path = g_scratch_dir + "/round_trip.safetensors";
  try {
    kiln::nn::save_safetensors(path, all, file.metadata());
    kiln::nn::SafetensorsFile again(path);
    std::map<std::string, Tensor> back = again.load_all();
    if (again.metadata() != file.metadata()) finding("metadata changed in a round trip");
    if (again.aliases().size() != file.aliases().size()) finding("aliases changed in a round trip");
    if (back.size() != all.size()) finding("the number of tensors changed in a round trip");
    for (const auto& [name, t] : all) {
      auto it = back.find(name);
      if (it == back.end() || !same_bytes(t, it->second)) finding("tensor '" + name + "' changed in a round trip");
    }
  } catch (const kiln::Error& e) {
    // Here an error is no refusal of junk: kiln failed to write, or to read back, a file it accepted.
    finding(std::string("round trip of an accepted file failed: ") + e.what());
  }
  ::unlink(path.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::init_quiet_logging();
  make_scratch_dir();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::MemFile input("fuzz_safetensors");
  const std::string& path = input.write(data, size);
  kiln::fuzz::expect_kiln_errors_only("fuzz_safetensors", [&] {
    kiln::nn::SafetensorsFile file(path);
    // The accessors must hold up on any accepted file, including names that are not listed.
    if (file.file_size() != size || file.data_start() > size) finding("file_size or data_start is wrong");
    for (const std::string& name : file.names()) {
      if (!file.contains(name)) finding("names() lists '" + name + "' but contains() denies it");
    }
    std::map<std::string, Tensor> all = check_loaded(file);
    round_trip(file, all);
  });
  return 0;
}
