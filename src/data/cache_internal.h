// The derived-data cache's helpers (data layer; internal): a lock file that serialises processes
// deriving the same data, and whether a dataset directory was packed from a given source.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "loom/data/shard.h"
#include "loom/error.h"

namespace loom::data {

// Whether `dir` holds a dataset whose index records `identity` as its source.
inline bool packed_from(const std::string& dir, const std::string& identity) {
  if (!std::filesystem::exists(dir + "/index.json")) return false;
  try {
    ShardReader r(dir);
    return r.index().at("source").as_string() == identity;
  } catch (const Error&) {
    return false;  // damaged or from an older format: pack again
  }
}

// An exclusive flock on `path` (created if missing) for the object's lifetime.
class FileLock {
 public:
  explicit FileLock(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0)
      LOOM_THROW(DataError, "[data.cache] cannot create the lock file ", path, ": ",
                 std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR)
        LOOM_THROW(DataError, "[data.cache] cannot lock ", path, ": ", std::strerror(errno));
    }
  }
  ~FileLock() { ::close(fd_); }  // closing releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace loom::data
