// Files written atomically: the bytes go to a temporary sibling "<target>.tmp.<host>.<pid>.<n>"
// (the machine's name with anything but letters, digits and '-' as '-'), which is fsynced and then
// renamed over the target, so a reader never sees half a file and a crash never leaves one at the
// target's name. Every file kiln writes goes through here (safetensors files and checkpoints, the
// examples' metrics rewrites, the benchmark and op-table lists), so the one clean-up below finds
// what any of them left behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// The temporary sibling of one save. Until commit() it is closed and removed on every exit path,
// so a failed save leaves neither a partial target nor a stray temporary file. Errors are a
// kiln::IOError whose message starts with `who` and names the file.
class AtomicFile {
 public:
  AtomicFile(const std::string& target, std::string who);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& path() const { return path_; }
  // Writes `n` bytes at byte `offset` of the temporary file (any order; holes are allowed).
  void write_at(const void* data, size_t n, uint64_t offset);
  // Data on disk, then the name: a crash before the rename leaves the old target intact.
  void commit();

 private:
  [[noreturn]] void fail(const std::string& file, const std::string& what) const;
  std::string target_, who_, path_;
  int fd_ = -1;
  bool committed_ = false;
};

// `bytes` as the whole new content of `path`, atomically; an IOError starting with `who` on failure.
void write_file_atomically(const std::string& path, const std::string& bytes, const std::string& who);

// Removes what saves into `dir` left behind when their process died mid-save (SIGKILL, a crash,
// power loss): the temporary siblings of this machine whose process <pid> no longer runs (and those
// of the older "<target>.tmp.<pid>.<n>" naming, which named no machine). A save under way in a live
// process, or on another machine sharing the folder, is left alone. Returns the paths removed (and
// logs each at Info); a file that cannot be removed is a kiln::IOError. Training programs call it
// at start.
std::vector<std::string> remove_stale_temp_files(const std::string& dir);

}  // namespace kiln
