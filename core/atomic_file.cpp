// Atomic file writes (core/atomic_file.h): a temporary sibling named after the writing machine and
// process, fsynced and renamed over the target; and the clean-up of siblings whose process died.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kernels/error.h"
#include "kernels/log.h"

namespace kiln {
namespace {

std::string errno_text() { return std::strerror(errno); }

// The characters a machine's name keeps in a temporary file's name (no '.': the name's separator).
constexpr const char* kHostChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-";

// This machine's name as a temporary file carries it: every other character as '-', or "host"
// when the name cannot be read.
const std::string& host_token() {
  static const std::string token = [] {
    char name[256] = {};
    std::string t = ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string();
    for (size_t i = t.find_first_not_of(kHostChars); i != std::string::npos; i = t.find_first_not_of(kHostChars, i)) {
      t[i] = '-';
    }
    return t.empty() ? std::string("host") : t;
  }();
  return token;
}

// The writer of a temporary file: its machine (empty in the older "<pid>.<counter>" naming, which
// named none) and its pid, 0 for a name of neither form.
struct TempOwner {
  std::string host;
  pid_t pid = 0;
};

// The naming: "<target>.tmp.<host>.<pid>.<counter>" (before: "<target>.tmp.<pid>.<counter>").
TempOwner temp_file_owner(const std::string& name) {
  const size_t tmp = name.rfind(".tmp.");
  if (tmp == std::string::npos || tmp == 0) return {};
  std::vector<std::string> parts;  // what follows ".tmp.", split at '.'
  for (size_t from = tmp + 5;;) {
    const size_t dot = name.find('.', from);
    parts.push_back(name.substr(from, dot == std::string::npos ? std::string::npos : dot - from));
    if (dot == std::string::npos) break;
    from = dot + 1;
  }
  auto digits = [](const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
  };
  if (parts.size() < 2 || parts.size() > 3) return {};
  const std::string& pid_text = parts[parts.size() - 2];
  if (!digits(pid_text) || !digits(parts.back()) || pid_text.size() > 9) return {};
  if (parts.size() == 3 && (parts[0].empty() || parts[0].find_first_not_of(kHostChars) != std::string::npos)) {
    return {};
  }
  return {parts.size() == 3 ? parts[0] : std::string(), static_cast<pid_t>(std::stol(pid_text))};
}

}  // namespace

void AtomicFile::fail(const std::string& file, const std::string& what) const {
  throw IOError(who_ + ": " + file + ": " + what);
}

AtomicFile::AtomicFile(const std::string& target, std::string who) : target_(target), who_(std::move(who)) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    path_ =
        target + ".tmp." + host_token() + "." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    // 0666 before the umask, like any file the user creates; O_EXCL so we never reuse a name.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST) fail(target, "cannot create temporary file " + path_ + ": " + errno_text());
  }
  fail(target, "cannot find a free temporary file name next to it");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(path_.c_str());
}

void AtomicFile::write_at(const void* data, size_t n, uint64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(path_, "write failed: " + errno_text());
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail(path_, "fsync failed: " + errno_text());
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(path_, "close failed: " + errno_text());
  if (std::rename(path_.c_str(), target_.c_str()) != 0) {
    fail(target_, "cannot rename " + path_ + " over it: " + errno_text());
  }
  committed_ = true;
  // Make the rename itself durable. Best effort: some filesystems refuse fsync on directories,
  // and the new file is already complete and in place.
  auto slash = target_.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : target_.substr(0, slash));
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomically(const std::string& path, const std::string& bytes, const std::string& who) {
  AtomicFile file(path, who);
  file.write_at(bytes.data(), bytes.size(), 0);
  file.commit();
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return removed;  // no folder yet: nothing was ever saved there
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const TempOwner owner = temp_file_owner(it->path().filename().string());
    const pid_t pid = owner.pid;
    if (pid <= 0 || pid == ::getpid() || !it->is_regular_file(ec)) continue;
    // Another machine's (a folder shared between nodes): its pid says nothing about this machine's
    // processes, so its save may be under way there. Files of the older naming count as this one's.
    if (!owner.host.empty() && owner.host != host_token()) continue;
    // kill(pid, 0) delivers nothing: it only asks whether the process exists.
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    const std::string path = it->path().string();
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      throw IOError("remove_stale_temp_files: cannot remove " + path + ": " + errno_text());
    }
    KILN_LOG(Info, "remove_stale_temp_files: removed " + path + ", left by process " + std::to_string(pid) +
                       " when it died mid-save");
    removed.push_back(path);
  }
  return removed;
}

}  // namespace kiln
