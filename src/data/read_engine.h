// Read engines (data layer, internal): how a loader worker fetches the stored records of one batch.
//
// An engine reads a list of (file, offset, length) ops. pread issues one positioned read per op;
// mmap maps each shard once and points into the mapping (no copy at all); io_uring submits the
// whole list at once and reaps completions, so a batch costs one or two system calls however many
// samples it has. Afterwards op.out points at the op's bytes: into op.dst (pread, io_uring) or into
// memory the engine keeps valid for its lifetime (mmap).
//
// Thread-safety: one engine per worker thread; engines are not shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "loom/data/loader.h"
#include "loom/data/shard.h"

namespace loom::data {

struct ReadOp {
  SampleLocation loc;
  char* dst = nullptr;        // loc.bytes of room (engines that copy)
  const char* out = nullptr;  // set by read()
};

class ReadEngine {
 public:
  virtual ~ReadEngine() = default;
  // Reads every op or throws DataError naming the shard file, the sample and the offset (short
  // read, I/O error).
  virtual void read(ReadOp* ops, size_t n) = 0;
  // Whether read() copies into op.dst (so callers must provide it).
  virtual bool needs_buffer() const { return true; }
  virtual const char* name() const = 0;
};

std::unique_ptr<ReadEngine> make_read_engine(IoEngine kind, const ShardReader& ds, int uring_depth);
// Defined by uring_reader.cpp or uring_stub.cpp (chosen in CMake).
std::unique_ptr<ReadEngine> make_uring_engine(const ShardReader& ds, int depth);
bool uring_probe();

// DataError for a failed or short read of `op` (err: errno, or 0 for an unexpected end of file).
[[noreturn]] void throw_read_error(const ShardReader& ds, const ReadOp& op, uint64_t at, int err);

}  // namespace loom::data
