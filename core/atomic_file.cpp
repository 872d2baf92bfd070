// Atomic file writes (core/atomic_file.h): a temporary sibling named after the writing process,
// fsynced and renamed over the target; and the clean-up of siblings whose process died.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "kernels/error.h"
#include "kernels/log.h"

namespace kiln {
namespace {

std::string errno_text() { return std::strerror(errno); }

// The naming: "<target>.tmp.<pid>.<counter>"; the pid of a name that has this form, or 0.
pid_t temp_file_owner(const std::string& name) {
  const size_t tmp = name.rfind(".tmp.");
  if (tmp == std::string::npos || tmp == 0) return 0;
  const std::string rest = name.substr(tmp + 5);  // "<pid>.<counter>"
  const size_t dot = rest.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == rest.size()) return 0;
  auto digits = [](const std::string& s) { return s.find_first_not_of("0123456789") == std::string::npos; };
  const std::string pid_text = rest.substr(0, dot);
  if (!digits(pid_text) || !digits(rest.substr(dot + 1)) || pid_text.size() > 9) return 0;
  return static_cast<pid_t>(std::stol(pid_text));
}

}  // namespace

void AtomicFile::fail(const std::string& file, const std::string& what) const {
  throw IOError(who_ + ": " + file + ": " + what);
}

AtomicFile::AtomicFile(const std::string& target, std::string who) : target_(target), who_(std::move(who)) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    path_ = target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
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
    const pid_t pid = temp_file_owner(it->path().filename().string());
    if (pid <= 0 || pid == ::getpid() || !it->is_regular_file(ec)) continue;
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
