// pread and mmap read engines (see read_engine.h).
#include "data/read_engine.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "loom/error.h"

namespace loom::data {

void throw_read_error(const ShardReader& ds, const ReadOp& op, uint64_t at, int err) {
  const auto& info = ds.shards()[static_cast<size_t>(op.loc.shard)];
  LOOM_THROW(DataError, "[data.read] ", ds.shard_path(op.loc.shard), ": sample ", op.loc.local,
             " (dataset sample ", info.first + op.loc.local, "): ",
             err ? std::string("read failed: ") + std::strerror(err)
                 : std::string("unexpected end of file"),
             " at byte offset ", at, " (record at ", op.loc.offset, ", ", op.loc.bytes, " bytes)");
}

namespace {

class PreadEngine final : public ReadEngine {
 public:
  explicit PreadEngine(const ShardReader& ds) : ds_(ds) {}
  void read(ReadOp* ops, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      ReadOp& op = ops[i];
      size_t done = 0;
      while (done < op.loc.bytes) {
        const ssize_t r = ::pread(op.loc.fd, op.dst + done, op.loc.bytes - done,
                                  static_cast<off_t>(op.loc.offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) throw_read_error(ds_, op, op.loc.offset + done, r < 0 ? errno : 0);
        done += static_cast<size_t>(r);
      }
      op.out = op.dst;
    }
  }
  const char* name() const override { return "pread"; }

 private:
  const ShardReader& ds_;
};

// Maps every shard on first use, read-only and shared; the mappings live as long as the engine.
class MmapEngine final : public ReadEngine {
 public:
  explicit MmapEngine(const ShardReader& ds) : ds_(ds), maps_(ds.shards().size()) {}
  ~MmapEngine() override {
    for (auto& m : maps_) {
      if (m.base) ::munmap(m.base, m.size);
    }
  }
  void read(ReadOp* ops, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      ReadOp& op = ops[i];
      Map& m = map(op);
      if (op.loc.offset + op.loc.bytes > m.size) throw_read_error(ds_, op, m.size, 0);
      op.out = static_cast<const char*>(m.base) + op.loc.offset;
    }
  }
  bool needs_buffer() const override { return false; }
  const char* name() const override { return "mmap"; }

 private:
  struct Map {
    void* base = nullptr;
    size_t size = 0;
  };
  Map& map(const ReadOp& op) {
    Map& m = maps_[static_cast<size_t>(op.loc.shard)];
    if (m.base) return m;
    struct stat st {};
    if (::fstat(op.loc.fd, &st) != 0) throw_read_error(ds_, op, 0, errno);
    m.size = static_cast<size_t>(st.st_size);
    if (m.size == 0) throw_read_error(ds_, op, 0, 0);
    void* p = ::mmap(nullptr, m.size, PROT_READ, MAP_SHARED, op.loc.fd, 0);
    if (p == MAP_FAILED) throw_read_error(ds_, op, 0, errno);
    m.base = p;
    return m;
  }

  const ShardReader& ds_;
  std::vector<Map> maps_;
};

}  // namespace

std::unique_ptr<ReadEngine> make_read_engine(IoEngine kind, const ShardReader& ds,
                                             int uring_depth) {
  switch (kind) {
    case IoEngine::Pread:
      return std::make_unique<PreadEngine>(ds);
    case IoEngine::Mmap:
      return std::make_unique<MmapEngine>(ds);
    case IoEngine::Uring:
      return make_uring_engine(ds, uring_depth);
  }
  LOOM_THROW(ValueError, "[data.read] unknown I/O engine");
}

const char* io_engine_name(IoEngine e) {
  switch (e) {
    case IoEngine::Pread:
      return "pread";
    case IoEngine::Mmap:
      return "mmap";
    case IoEngine::Uring:
      return "io_uring";
  }
  return "?";
}

IoEngine parse_io_engine(const std::string& s) {
  if (s == "pread") return IoEngine::Pread;
  if (s == "mmap") return IoEngine::Mmap;
  if (s == "uring" || s == "io_uring") return IoEngine::Uring;
  LOOM_THROW(ValueError, "[data.loader] unknown I/O engine '", s,
             "' (expected pread, mmap or uring)");
}

bool uring_available() {
  static const bool ok = uring_probe();
  return ok;
}

}  // namespace loom::data
