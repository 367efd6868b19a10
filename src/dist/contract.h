// The collective contract and the flight recorder (dist layer, internal).
//
// Every collective is summarised by a Fingerprint: a fixed-size, trivially copyable record that ranks
// can exchange raw. With detail debugging on, the group allgathers fingerprints before moving data
// and contract_mismatch() explains any difference. The FlightRecorder keeps the last N collectives of
// a group with their state and timestamps; it is dumped as JSON lines for `loom dist-debug`.
//
// Thread-safety: FlightRecorder is internally locked (the caller's thread schedules, the group's
// worker starts and completes). Fingerprint functions are pure.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "loom/array_ref.h"
#include "loom/dist/reduce_op.h"
#include "loom/dtype.h"
#include "loom/export.h"

namespace loom::dist {

enum class CollKind : uint8_t {
  kBroadcast = 0,
  kAllreduce,
  kReduce,
  kAllgather,
  kReduceScatter,
  kAlltoall,
  kGather,
  kScatter,
  kBarrier,
  kSend,
  kRecv,
  kSplit,
};
LOOM_API const char* coll_name(CollKind k);

struct Fingerprint {
  uint64_t group_hash = 0;
  uint64_t seq = 0;
  uint64_t count = 0;       // elements this rank contributes (or receives, where that is fixed)
  uint64_t shape_hash = 0;  // hash of the sizes (0 when the collective is shape-free)
  int32_t root = -1;
  uint8_t kind = 0;
  int8_t dtype = -1;
  int8_t reduce_op = -1;
  uint8_t ndim = 0;
  int64_t sizes[4] = {0, 0, 0, 0};  // leading sizes, for messages
};
static_assert(sizeof(Fingerprint) == 72);

LOOM_API uint64_t hash_string(const std::string& s);
LOOM_API Fingerprint make_fingerprint(const std::string& group, CollKind kind, DType dtype, IntArrayRef sizes,
                             uint64_t count, int root, int reduce_op);
// "allreduce(float32[1024], sum)" etc.
LOOM_API std::string describe(const Fingerprint& f);
// Empty when every rank's fingerprint matches rank 0's; else a message naming the sequence number,
// the groups of ranks that agree, and each field that differs.
LOOM_API std::string contract_mismatch(const std::string& group, const std::vector<Fingerprint>& all);

class LOOM_API FlightRecorder {
 public:
  enum State : uint8_t { kScheduled = 0, kStarted, kCompleted, kFailed };
  struct Entry {
    Fingerprint fp;
    State state = kScheduled;
    int64_t t_scheduled_us = 0;  // wall clock, microseconds since the epoch
    int64_t t_started_us = 0;
    int64_t t_completed_us = 0;
    std::string algo;
    std::string error;
  };

  explicit FlightRecorder(size_t capacity) : capacity_(capacity ? capacity : 1) {}
  // Returns a ticket for the later calls.
  uint64_t scheduled(const Fingerprint& fp);
  void started(uint64_t ticket, const std::string& algo = "");
  void completed(uint64_t ticket);
  void failed(uint64_t ticket, const std::string& error);
  std::vector<Entry> entries() const;
  // One JSON object per line: a header line {"group","rank","size","pid"} then the entries, oldest
  // first.
  std::string json(const std::string& group, int rank, int size) const;

 private:
  Entry* find(uint64_t ticket);
  mutable std::mutex mu_;
  size_t capacity_;
  uint64_t next_ = 0;
  std::vector<Entry> ring_;  // ring_[ticket % capacity]
};

LOOM_API const char* flight_state_name(FlightRecorder::State s);

// Reads every flight-*.json file under dir and explains, per group, which rank did not join which
// collective, which collectives disagree, and where each rank stopped. DataError on a malformed file
// (naming it and the line).
LOOM_API std::string analyze_flight_records(const std::string& dir);

}  // namespace loom::dist
