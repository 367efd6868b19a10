// Allocation traces (memory layer): the sequence of allocate / free calls a workload made, as a
// small JSON file, a RecordingAllocator that captures one from a real loom workload, and a replay
// of a trace against a CachingAllocator over a SimulatedDevice (what `loom mem replay` and `loom
// bench mem` measure).
//
// Ownership: AllocTrace is a plain value. A RecordingAllocator does not own the allocator it wraps;
// both must outlive every DataPtr it handed out (their deleters log into it). All functions and
// RecordingAllocator's methods are thread-safe; AllocTrace values are not synchronised.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loom/export.h"
#include "loom/json.h"
#include "loom/memory.h"
#include "loom/memory/alloc_context.h"
#include "loom/memory/caching_allocator.h"

namespace loom::memory {

// Note [alloc trace format]
//   {"format": "loom-alloc-trace", "version": 2, "source": "...", "contexts": [...], "events":
//   [...]}, one event per line when written by write_trace. An event is ["a", id, bytes, stream]
//   or ["a", id, bytes, stream, context] (allocate `bytes`, the size asked for, on `stream`, by the
//   operator contexts[context]), ["f", id] (free the block allocated as `id`) or ["s", n] (a
//   training step ended: n steps have ended; Note [allocation context] in
//   loom/memory/alloc_context.h). Ids are small non-negative integers; an id may be used again once
//   freed. Blocks still live at the end are allowed (model parameters, optimizer state).
//   Allocations of 0 bytes are kept: they are real calls, and a caching allocator answers them with
//   no block. Version 1 (no contexts, no step markers) is still read.
struct AllocEvent {
  enum class Op : uint8_t { Alloc, Free, Step };
  Op op = Op::Alloc;
  int64_t id = 0;        // Step: the number of steps ended
  int64_t size = 0;      // Alloc: requested bytes; Free: 0
  StreamId stream = 0;   // Alloc only
  int32_t context = -1;  // Alloc: index into AllocTrace::contexts; -1: unknown
};

struct AllocTrace {
  std::string source;  // what was recorded ("loom mem record: ...", a test name)
  std::vector<AllocEvent> events;
  std::vector<std::string> contexts;  // operator names that allocation events point to
  // The operator of an allocation event, or "" when unknown.
  std::string_view context_of(const AllocEvent& e) const {
    return e.context >= 0 && static_cast<size_t>(e.context) < contexts.size()
               ? std::string_view(contexts[static_cast<size_t>(e.context)])
               : std::string_view();
  }
};

// The document of Note [alloc trace format], and back. from_json checks everything read_trace
// checks; `what` names the source (a file path) in its DataError.
LOOM_API Json trace_to_json(const AllocTrace& trace);
LOOM_API AllocTrace trace_from_json(const Json& doc, const std::string& what);

// Writes `trace` to `path` atomically (io::atomic_write_file). DataError when it cannot.
LOOM_API void write_trace(const std::string& path, const AllocTrace& trace);
// Reads and validates a trace: DataError starting with "[alloc trace]" naming the file and the byte
// offset (bad or truncated JSON) or the event index (bad event: unknown op, wrong arity, negative
// size or id, alloc of a live id, free of an unknown or already freed id, a context index outside
// "contexts"), or the unknown format or version.
LOOM_API AllocTrace read_trace(const std::string& path);

// Facts computed from the event list alone: the reference that replays are checked against.
struct TraceSummary {
  int64_t allocs = 0;
  int64_t frees = 0;
  int64_t peak_live_bytes = 0;          // max over time of the sum of live requested sizes
  int64_t peak_live_rounded_bytes = 0;  // the same with sizes rounded up to kRoundBytes
  int64_t peak_live_blocks = 0;
  int64_t live_bytes_at_end = 0;
  int64_t min_size = 0;  // over allocs of at least one byte
  int64_t max_size = 0;
  int64_t distinct_sizes = 0;
  int64_t steps = 0;             // step markers
  int64_t peak_live_step = -1;   // steps ended when live bytes first peaked; -1 without markers
  int64_t peak_live_event = -1;  // the event that reached that peak
};
// Assumes a valid trace (as read_trace / trace_from_json return).
LOOM_API TraceSummary summarize_trace(const AllocTrace& trace);

// An Allocator that forwards to `inner` and logs every allocate and every deleter call into a
// trace (stream 0), with the allocating operator (it holds an AllocContextRequest, Note [allocation
// context]) and a step marker at each mark_step(). Install it to record a loom workload:
//   RecordingAllocator rec(*get_allocator(DeviceType::CPU), "my workload");
//   set_allocator(DeviceType::CPU, &rec);  ... run ...;  set_allocator(DeviceType::CPU, &inner);
// Memory allocated before it was installed is not seen; memory it handed out is logged when freed
// even after it is uninstalled. Each allocation costs one extra small heap block (the deleter's
// context) beyond what `inner` does.
class LOOM_API RecordingAllocator final : public Allocator {
 public:
  explicit RecordingAllocator(Allocator& inner, std::string source = "RecordingAllocator");
  ~RecordingAllocator() override;
  // Each allocation is logged with its stream: allocate_on's, or the current stream of the device
  // of what `inner` handed out.
  DataPtr allocate(size_t nbytes) override;
  DataPtr allocate_on(size_t nbytes, const Stream& stream) override;
  // A copy of the events so far.
  AllocTrace trace() const;
  // Logs a step marker numbered from 1 for this recorder (mark_step() calls it on every live one).
  void log_step();

 private:
  struct Context;
  static void deleter(void* ctx);
  void log_free(int64_t id);
  DataPtr log_alloc(DataPtr inner, size_t nbytes, StreamId stream);
  int32_t intern(const char* context);  // under mutex_

  Allocator& inner_;
  AllocContextRequest wants_contexts_;
  mutable std::mutex mutex_;
  std::string source_;                 // guarded by mutex_
  std::vector<AllocEvent> events_;     // guarded by mutex_
  std::vector<int64_t> free_ids_;      // guarded by mutex_; reused LIFO so ids stay small
  int64_t next_id_ = 0;                // guarded by mutex_
  int64_t steps_ = 0;                  // guarded by mutex_
  std::vector<std::string> contexts_;  // guarded by mutex_
  std::unordered_map<std::string, int32_t> context_ids_;  // guarded by mutex_
  int32_t last_context_id_ = -1;                          // guarded by mutex_: a one-entry cache
};

// Note [recording a process]
//   LOOM_MEM_RECORD=FILE (read when libloom loads; a "%p" in FILE becomes the process id) makes
//   the process record itself: the CPU allocator is wrapped in a RecordingAllocator from the start,
//   and the trace is written to FILE at exit and at each flush_process_recording(). That records
//   any loom program unchanged, `loom train` included (`loom mem record --train` runs it so). If
//   the program later installs another CPU allocator (set_allocator), allocations from then on are
//   not seen; the exit write says so on stderr.
// Starts recording this process into `path` (what LOOM_MEM_RECORD does); ValueError if it already
// records.
LOOM_API void start_process_recording(const std::string& path);
// Writes the trace so far (atomically replacing the file); false when the process does not record.
LOOM_API bool flush_process_recording();

// The recorded training workload of the memory tools (record_training_trace) is in
// tools/loom/training_trace.h (Note [training trace]): it uses nn and optim, above this layer.

// Replays a trace against a fresh CachingAllocator over a SimulatedDevice (not backed) of
// `capacity` bytes. An allocation that raises OutOfMemoryError is counted and its free skipped.
struct ReplayOptions {
  std::string policy = "default";      // AllocatorConfig::policy(policy); ValueError listing them
  size_t capacity = size_t{80} << 30;  // 80 GiB, an H100's
  // Measure fragmentation at the peak: a second, untimed replay calling stats() after every
  // allocation (the timed one makes no stats() calls).
  bool track_peak = true;
  // Store "trace event N (id I, B bytes)" as each allocation's context and the trace's operator as
  // its op, and the trace's step markers in the history (for snapshots).
  bool contexts = false;
  bool keep_snapshot = false;  // fill ReplayResult::snapshot with the final snapshot
  // With keep_snapshot: also the segments when allocated bytes peaked (Snapshot::peak); costs a
  // replay that finds the peak first.
  bool peak_snapshot = false;
};

struct LOOM_API ReplayResult {
  std::string policy;
  MemoryStats stats;  // at the end; its peaks are the peaks of the replay
  // 1 - largest free block / free reserved bytes, at the first event where allocated bytes reached
  // their peak (when memory is scarcest); 0 without track_peak.
  double fragmentation_at_peak = 0;
  int64_t ooms = 0;  // allocations that raised OutOfMemoryError
  int64_t events = 0;
  int64_t peak_event = -1;    // with track_peak: the event where allocated bytes first peaked
  int64_t peak_step = -1;     // and the steps ended before it (-1: no step markers)
  double seconds = 0;         // wall time of the timed replay loop
  Snapshot snapshot;          // with keep_snapshot
  double peak_ratio() const;  // peak reserved / peak allocated (1 when nothing was allocated)
  double ns_per_event() const { return events ? seconds * 1e9 / static_cast<double>(events) : 0; }
};
LOOM_API ReplayResult replay_trace(const AllocTrace& trace, const ReplayOptions& options);
// AllocatorConfig::policies(), exported for tools.
LOOM_API std::vector<std::string> replay_policies();

}  // namespace loom::memory
