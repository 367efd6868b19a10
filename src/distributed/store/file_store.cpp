// FileStore: a key-value store in one file that several processes open.
//
// Note [FileStore log]
// The file is an append-only log:
//
//   "LOOMFS1\n"                       8-byte header, written by whoever finds the file empty
//   record*                           u8 kind ('S' set, 'D' delete), u32 key length, u32 value
//   length
//                                     (0 for 'D'), key bytes, value bytes; lengths little-endian
//
// Every operation takes flock(LOCK_EX) on the file, replays the records appended since this process
// last looked (each FileStore keeps its map and the offset it has applied), then appends its own
// record with one write(). A process mutex serialises threads, since flock locks belong to the open
// file description that the threads share. After fork() the child reopens the file, so parent and
// child hold separate descriptions and exclude each other. Waits poll with short sleeps. A record
// that does not parse (a writer died mid-write, or the file is not a store) is a DataError naming
// the file and the record's offset; the log is never rewritten.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "distributed/store/store_detail.h"
#include "loom/distributed/store.h"
#include "loom/error.h"

namespace loom::dist {
namespace {

constexpr char kMagic[] = "LOOMFS1\n";
constexpr size_t kMagicBytes = 8;
constexpr size_t kRecordHeader = 9;  // kind + two u32 lengths

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string errno_text(int err) {
  return std::strerror(err);
}

// Holds flock(LOCK_EX) for its lifetime.
class FileLock {
 public:
  FileLock(int fd, const std::string& path) : fd_(fd) {
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        LOOM_THROW(DistError, "[store] FileStore cannot lock '", path, "': ", errno_text(errno));
      }
    }
  }
  ~FileLock() { ::flock(fd_, LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

void write_all(int fd, const std::string& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      LOOM_THROW(DistError, "[store] FileStore cannot write '", path, "': ", errno_text(errno));
    }
    done += static_cast<size_t>(n);
  }
}

[[noreturn]] void corrupt(const std::string& path, uint64_t offset, const std::string& why) {
  LOOM_THROW(DataError, "[store] FileStore '", path, "' is corrupt at offset ", offset, ": ", why);
}

}  // namespace

struct FileStore::State {
  explicit State(const std::string& p) : path(p) {}
  ~State() {
    if (fd >= 0) ::close(fd);
  }

  const std::string& path;
  std::mutex mu;
  int fd = -1;          // GUARDED_BY(mu)
  pid_t pid = 0;        // process that opened fd
  uint64_t offset = 0;  // bytes of the log applied to map
  std::unordered_map<std::string, std::string> map;

  void open_file() {
    if (fd >= 0 && pid == ::getpid()) return;
    if (fd >= 0) ::close(fd);  // inherited through fork(): take our own open file description
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      LOOM_THROW(DistError, "[store] FileStore cannot open '", path, "': ", errno_text(errno));
    }
    pid = ::getpid();
  }

  // Applies the records appended since `offset`. Caller holds the flock.
  void replay() {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      LOOM_THROW(DistError, "[store] FileStore cannot stat '", path, "': ", errno_text(errno));
    }
    const auto size = static_cast<uint64_t>(st.st_size);
    if (size < offset) {  // truncated by someone: start over
      map.clear();
      offset = 0;
    }
    if (size == 0) {
      write_all(fd, std::string(kMagic, kMagicBytes), path);
      offset = kMagicBytes;
      return;
    }
    if (size == offset) return;
    std::string buf(size - offset, '\0');
    size_t got = 0;
    while (got < buf.size()) {
      ssize_t n = ::pread(fd, buf.data() + got, buf.size() - got, static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        LOOM_THROW(DistError, "[store] FileStore cannot read '", path, "' at offset ", offset + got,
                   ": ", n < 0 ? errno_text(errno) : std::string("unexpected end of file"));
      }
      got += static_cast<size_t>(n);
    }
    size_t pos = 0;
    if (offset == 0) {
      if (buf.size() < kMagicBytes || std::memcmp(buf.data(), kMagic, kMagicBytes) != 0) {
        corrupt(path, 0, "not a FileStore log (bad header)");
      }
      pos = kMagicBytes;
    }
    while (pos < buf.size()) {
      const uint64_t at = offset + pos;
      const size_t left = buf.size() - pos;
      if (left < kRecordHeader) {
        corrupt(path, at, "truncated record header (" + std::to_string(left) + " of 9 bytes)");
      }
      const char kind = buf[pos];
      const uint32_t klen = get_u32(&buf[pos + 1]);
      const uint32_t vlen = get_u32(&buf[pos + 5]);
      if (kind != 'S' && kind != 'D') {
        corrupt(path, at,
                "unknown record kind " + std::to_string(static_cast<unsigned char>(kind)));
      }
      if (kind == 'D' && vlen != 0) corrupt(path, at, "delete record with a value");
      if (static_cast<uint64_t>(klen) + vlen > left - kRecordHeader) {
        corrupt(path, at,
                "record of " + std::to_string(klen) + "+" + std::to_string(vlen) +
                    " bytes runs past the end of the file (" +
                    std::to_string(left - kRecordHeader) + " bytes left)");
      }
      std::string key(&buf[pos + kRecordHeader], klen);
      if (kind == 'S') {
        map[std::move(key)] = std::string(&buf[pos + kRecordHeader + klen], vlen);
      } else {
        map.erase(key);
      }
      pos += kRecordHeader + klen + vlen;
    }
    offset = size;
  }

  // Appends a record and applies it. Caller holds the flock and has replayed.
  void append(char kind, const std::string& key, const std::string& value) {
    LOOM_CHECK(key.size() < UINT32_MAX && value.size() < UINT32_MAX, "[store] FileStore '", path,
               "': key or value of '", detail::printable(key), "' is too large");
    std::string rec;
    rec.reserve(kRecordHeader + key.size() + value.size());
    rec.push_back(kind);
    put_u32(rec, static_cast<uint32_t>(key.size()));
    put_u32(rec, static_cast<uint32_t>(value.size()));
    rec += key;
    rec += value;
    write_all(fd, rec, path);
    offset += rec.size();
    if (kind == 'S') {
      map[key] = value;
    } else {
      map.erase(key);
    }
  }

  // Runs f() with the file locked and replayed.
  template <class F>
  auto with_log(F&& f) {
    std::lock_guard<std::mutex> lock(mu);
    open_file();
    FileLock flock_guard(fd, path);
    replay();
    return f();
  }

  // Polls `ready` (under the lock) until it returns true or the timeout passes.
  template <class F>
  bool poll_until(Duration timeout, F&& ready) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + timeout;
    auto sleep = std::chrono::microseconds(500);
    for (;;) {
      if (with_log(ready)) return true;
      const auto now = Clock::now();
      if (now >= deadline) return false;
      std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - now));
      sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
    }
  }
};

FileStore::FileStore(std::string path)
    : path_(std::move(path)), state_(std::make_unique<State>(path_)) {
  LOOM_CHECK(!path_.empty(), "[store] FileStore needs a file path");
  state_->with_log([] { return 0; });  // creates the file, checks its header
}

FileStore::~FileStore() = default;

void FileStore::set(const std::string& key, const std::string& value) {
  state_->with_log([&] {
    state_->append('S', key, value);
    return 0;
  });
}

std::string FileStore::get(const std::string& key) {
  std::string value;
  const bool found = state_->poll_until(timeout_, [&] {
    auto it = state_->map.find(key);
    if (it == state_->map.end()) return false;
    value = it->second;
    return true;
  });
  if (!found) detail::throw_wait_timeout("get", {key}, {key}, timeout_, "file " + path_);
  return value;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  return state_->with_log([&] {
    auto it = state_->map.find(key);
    const int64_t v =
        (it == state_->map.end() ? 0 : detail::parse_counter(key, it->second)) + delta;
    state_->append('S', key, std::to_string(v));
    return v;
  });
}

std::string FileStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  return state_->with_log([&]() -> std::string {
    auto it = state_->map.find(key);
    if (it == state_->map.end() ? expected.empty() : it->second == expected) {
      state_->append('S', key, desired);
      return desired;
    }
    return it == state_->map.end() ? expected : it->second;
  });
}

void FileStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::vector<std::string> missing;
  const bool ok = state_->poll_until(timeout, [&] {
    missing.clear();
    for (const auto& k : keys) {
      if (!state_->map.count(k)) missing.push_back(k);
    }
    return missing.empty();
  });
  if (!ok) detail::throw_wait_timeout("wait", keys, missing, timeout, "file " + path_);
}

bool FileStore::check(const std::vector<std::string>& keys) {
  return state_->with_log([&] {
    for (const auto& k : keys) {
      if (!state_->map.count(k)) return false;
    }
    return true;
  });
}

bool FileStore::delete_key(const std::string& key) {
  return state_->with_log([&] {
    if (!state_->map.count(key)) return false;
    state_->append('D', key, "");
    return true;
  });
}

int64_t FileStore::num_keys() {
  return state_->with_log([&] { return static_cast<int64_t>(state_->map.size()); });
}

}  // namespace loom::dist
