// The collective contract and the flight recorder (distributed layer, internal).
//
// Every collective is summarised by a Fingerprint: a fixed-size, trivially copyable record that
// ranks can exchange raw. With detail debugging on, the group allgathers fingerprints before moving
// data and contract_mismatch() explains any difference. The FlightRecorder keeps the last N
// collectives of a group with their state and timestamps; it is dumped as JSON lines for `loom
// dist-debug`.
//
// Thread-safety: FlightRecorder may be written and read from any threads (the caller's thread
// schedules, the group's worker starts and completes, anyone dumps); its hot path takes no lock
// (Note [Flight recorder slots] in contract.cpp). Fingerprint functions are pure.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/array_ref.h"
#include "loom/distributed/reduce_op.h"
#include "loom/dtype.h"
#include "loom/export.h"

namespace loom::dist {

enum class CollKind : uint8_t {
  Broadcast = 0,
  Allreduce,
  Reduce,
  Allgather,
  ReduceScatter,
  Alltoall,
  Gather,
  Scatter,
  Barrier,
  Send,
  Recv,
  Split,
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
LOOM_API Fingerprint make_fingerprint(const std::string& group, CollKind kind, DType dtype,
                                      IntArrayRef sizes, uint64_t count, int root, int reduce_op);
// The same with the group's name already hashed (a process group hashes its name once).
LOOM_API Fingerprint make_fingerprint(uint64_t group_hash, CollKind kind, DType dtype,
                                      IntArrayRef sizes, uint64_t count, int root, int reduce_op);
// "allreduce(float32[1024], sum)" etc.
LOOM_API std::string describe(const Fingerprint& f);
// Empty when every rank's fingerprint matches rank 0's; else a message naming the sequence number,
// the groups of ranks that agree, and each field that differs.
LOOM_API std::string contract_mismatch(const std::string& group,
                                       const std::vector<Fingerprint>& all);

class LOOM_API FlightRecorder {
 public:
  using SteadyClock = std::chrono::steady_clock;
  enum State : uint8_t { Scheduled = 0, Started, Completed, Failed };
  // A snapshot of one collective, as entries() returns it.
  struct Entry {
    Fingerprint fp;
    State state = Scheduled;
    int64_t t_scheduled_us = 0;  // wall clock, microseconds since the epoch (see wall_us)
    int64_t t_started_us = 0;
    int64_t t_completed_us = 0;
    std::string algo;
    std::string backend;  // the process-group backend that ran it ("cpu"); "" until started
    std::string error;
  };

  explicit FlightRecorder(size_t capacity);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Wall-clock microseconds of a steady-clock reading: the wall clock when the recorder was made
  // plus the steady time since, so that a caller that reads the steady clock anyway (for its
  // deadline) stamps entries without a second clock read.
  int64_t wall_us(SteadyClock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() +
           wall_minus_steady_us_;
  }
  int64_t now_us() const { return wall_us(SteadyClock::now()); }

  // Returns a ticket for the later calls. `algo` and `backend` must be strings with static storage
  // (literals): they are kept as pointers.
  uint64_t scheduled(const Fingerprint& fp) { return scheduled(fp, now_us()); }
  uint64_t scheduled(const Fingerprint& fp, int64_t t_us);
  void started(uint64_t ticket, const char* algo = "") { started(ticket, now_us(), algo); }
  void started(uint64_t ticket, int64_t t_us, const char* algo = "", const char* backend = "");
  // `algo` (a literal; null keeps the one given to started()): the algorithm the backend ran,
  // recorded in the same write as the completion.
  void completed(uint64_t ticket) { completed(ticket, now_us()); }
  void completed(uint64_t ticket, int64_t t_us, const char* algo = nullptr);
  void failed(uint64_t ticket, const std::string& error);
  // The last `capacity` entries, oldest first.
  std::vector<Entry> entries() const;
  // One JSON object per line: a header line {"group","rank","size","pid"} then the entries, oldest
  // first.
  std::string json(const std::string& group, int rank, int size) const;

 private:
  struct Slot;
  // Runs write(slot) with the slot locked for writing, if it holds `ticket` (or, for scheduled(),
  // an older one).
  template <class W>
  void write_slot(uint64_t ticket, bool claim, W&& write);

  size_t capacity_;
  std::unique_ptr<Slot[]> slots_;  // slots_[ticket % capacity_]
  std::atomic<uint64_t> next_{0};
  int64_t wall_minus_steady_us_;
  mutable std::mutex errors_mu_;
  // ticket -> message; failures are rare, so the hot path never takes errors_mu_.
  std::map<uint64_t, std::string> errors_;  // GUARDED_BY(errors_mu_)
};

LOOM_API const char* flight_state_name(FlightRecorder::State s);

// Reads every flight-*.json file under dir and explains, per group, which rank did not join which
// collective, which collectives disagree, and where each rank stopped. DataError on a malformed
// file (naming it and the line).
LOOM_API std::string analyze_flight_records(const std::string& dir);

}  // namespace loom::dist
