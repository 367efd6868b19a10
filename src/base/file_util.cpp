// POSIX file helpers: atomic replacement of a file and positional reads. See file_util.h.
#include "base/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "loom/error.h"
#include "loom/file.h"

namespace loom::io::detail {
namespace {

std::string directory_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Unique per process and call, so that threads writing the same path never share a temporary.
std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(temp_name(path_)) {
  LOOM_CHECK(!path_.empty(), "[io] cannot write a file with an empty path");
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    int err = errno;
    LOOM_THROW(DataError, "[io] cannot write ", path_, ": creating the temporary file ", tmp_,
               " failed: ", std::strerror(err));
  }
  // Note [Orphaned temporaries]: the writer holds a lock on its temporary until it is renamed or
  // removed. The kernel drops the lock when the process dies, however it dies, so a temporary that
  // nobody locks was left by a writer that is gone (remove_orphan_temp_files).
  struct flock lk {};
  lk.l_type = F_WRLCK;
  lk.l_whence = SEEK_SET;
  ::fcntl(fd_, F_OFD_SETLK,
          &lk);  // best effort: a file system without locks falls back to pid checks
  // Replacing a file should not change who may read it.
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::fchmod(fd_, st.st_mode & 07777);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const char* action, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  committed_ = true;  // nothing left for the destructor to clean
  LOOM_THROW(DataError, "[io] cannot write ", path_, ": ", action, " failed: ", std::strerror(err),
             " (the previous file, if any, is unchanged)");
}

void AtomicFile::write(const void* data, size_t nbytes) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    ssize_t n = ::write(fd_, p, nbytes);
    if (n < 0) {
      int err = errno;
      if (err == EINTR) continue;
      fail(("writing " + tmp_).c_str(), err);
    }
    p += n;
    nbytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) {
    int err = errno;
    fail(("fsync of " + tmp_).c_str(), err);
  }
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    int err = errno;
    fail(("closing " + tmp_).c_str(), err);
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    fail(("renaming " + tmp_ + " over it").c_str(), err);
  }
  committed_ = true;
  // The rename is durable only once the directory entry is on disk.
  std::string dir = directory_of(path_);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    int err = errno;
    LOOM_THROW(DataError, "[io] wrote ", path_, " but could not open its directory ", dir,
               " to fsync it: ", std::strerror(err));
  }
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  // Some file systems cannot fsync a directory; there is nothing more to do on those.
  if (rc != 0 && err != EINVAL && err != ENOTSUP) {
    LOOM_THROW(DataError, "[io] wrote ", path_, " but fsync of its directory ", dir,
               " failed: ", std::strerror(err));
  }
}

InputFile::InputFile(const std::string& path, const char* component)
    : path_(path), component_(component) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    int err = errno;
    LOOM_THROW(DataError, "[", component_, "] cannot open ", path_, ": ", std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    LOOM_THROW(DataError, "[", component_, "] cannot stat ", path_, ": ", std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd_);
    LOOM_THROW(DataError, "[", component_, "] cannot read ", path_, ": it is a directory");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

size_t InputFile::read_at(uint64_t offset, void* data, size_t nbytes) const {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < nbytes) {
    ssize_t n = ::pread(fd_, p + done, nbytes - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      int err = errno;
      if (err == EINTR) continue;
      LOOM_THROW(DataError, "[", component_, "] cannot read ", path_, " at byte offset ",
                 offset + done, ": ", std::strerror(err));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace loom::io::detail

namespace loom::io {

namespace {

// "<name>.tmp.<pid>.<counter>" -> pid, or -1 when `file` is not a temporary of AtomicFile.
long temp_owner(const std::string& file) {
  const size_t tag = file.rfind(".tmp.");
  if (tag == std::string::npos || tag == 0) return -1;
  const std::string rest = file.substr(tag + 5);
  const size_t dot = rest.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == rest.size()) return -1;
  long pid = 0;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (i == dot) continue;
    if (rest[i] < '0' || rest[i] > '9') return -1;
    if (i < dot) pid = pid * 10 + (rest[i] - '0');
    if (pid > (1L << 30)) return -1;
  }
  return pid;
}

bool process_alive(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

OrphanSweep remove_orphan_temp_files(const std::string& dir, double min_age_seconds) {
  OrphanSweep out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;  // nothing there yet
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  const time_t now = ::time(nullptr);
  for (const std::string& name : names) {
    const long pid = temp_owner(name);
    if (pid < 0) continue;
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat st {};
    bool orphan = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (orphan) {
      // A live writer holds its lock from creation to rename (Note [Orphaned temporaries]); a
      // temporary nobody locks is orphaned once its pid is gone, or, when that pid now belongs to
      // another process, once it is older than the moment between a writer's open and its lock.
      struct flock lk {};
      lk.l_type = F_RDLCK;
      lk.l_whence = SEEK_SET;
      const bool locked =
          ::fcntl(fd, F_OFD_GETLK, &lk) == 0 ? lk.l_type != F_UNLCK : process_alive(pid);
      const double age = difftime(now, st.st_mtime);
      orphan = !locked && (!process_alive(pid) || age >= min_age_seconds);
    }
    ::close(fd);
    if (orphan && ::unlink(path.c_str()) == 0) {
      out.files.push_back(name);
      out.bytes += static_cast<uint64_t>(st.st_size);
    }
  }
  return out;
}

void atomic_write_file(const std::string& path, std::string_view bytes) {
  detail::AtomicFile file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

std::string read_file(const std::string& path) {
  detail::InputFile file(path, "io");
  std::string bytes(file.size(), '\0');
  bytes.resize(file.read_at(0, bytes.data(), bytes.size()));
  return bytes;
}

}  // namespace loom::io
