// replay_trace: an allocation trace against a fresh CachingAllocator over a SimulatedDevice.
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/error.h"
#include "loom/memory/alloc_trace.h"

namespace loom::memory {
namespace {

// Trace ids mapped to dense slots (reused once freed), so that the replay loop indexes a vector.
std::vector<int64_t> dense_slots(const AllocTrace& trace, size_t* num_slots) {
  std::unordered_map<int64_t, int64_t> slot_of;
  std::vector<int64_t> free_slots, slots(trace.events.size());
  int64_t next = 0;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const AllocEvent& e = trace.events[i];
    if (e.op == AllocEvent::Op::Step) {
      slots[i] = -1;
      continue;
    }
    if (e.op == AllocEvent::Op::Alloc) {
      int64_t s;
      if (free_slots.empty()) {
        s = next++;
      } else {
        s = free_slots.back();
        free_slots.pop_back();
      }
      slot_of[e.id] = s;
      slots[i] = s;
    } else {
      auto it = slot_of.find(e.id);
      LOOM_CHECK_AS(DataError, it != slot_of.end(), "[mem replay] ", trace.source, ": event ", i,
                    ": free of id ", e.id, " which is not live");
      slots[i] = it->second;
      free_slots.push_back(it->second);
      slot_of.erase(it);
    }
  }
  *num_slots = static_cast<size_t>(next);
  return slots;
}

struct Pass {
  MemoryStats stats;
  Snapshot snapshot;
  double fragmentation_at_peak = 0;
  int64_t peak_event = -1;
  int64_t peak_step = -1;
  int64_t ooms = 0;
  double seconds = 0;
};

// Steps ended before the first marker: those the first marker counts, less the one it ends (as
// summarize_trace); -1 when the trace has no markers.
int64_t steps_before_first_marker(const AllocTrace& trace) {
  for (const AllocEvent& e : trace.events) {
    if (e.op == AllocEvent::Op::Step) return std::max<int64_t>(e.id - 1, 0);
  }
  return -1;
}

// One replay. track_peak: stats() after each allocation, to find the peak; snapshot_at >= 0: the
// segments after that event go into the snapshot's peak (with keep_snapshot).
Pass run_pass(const AllocTrace& trace, const std::vector<int64_t>& slots, size_t num_slots,
              const AllocatorConfig& config, const ReplayOptions& o, bool track_peak,
              int64_t snapshot_at = -1) {
  SimulatedDevice device(o.capacity, /*backed=*/false, /*auto_complete=*/true);
  Pass pass;
  std::vector<void*> ptrs(num_slots, nullptr);
  CachingAllocator alloc(device, config);
  size_t at = 0;  // the event being replayed, for contexts
  if (o.contexts) {
    alloc.set_context_provider([&trace, &at] {
      const AllocEvent& e = trace.events[at];
      return "trace event " + std::to_string(at) + " (id " + std::to_string(e.id) + ", " +
             std::to_string(e.size) + " bytes)";
    });
  }
  int64_t peak_allocated = -1;
  int64_t steps = steps_before_first_marker(trace);
  std::optional<SnapshotPeak> peak;
  const auto t0 = std::chrono::steady_clock::now();
  for (at = 0; at < trace.events.size(); ++at) {
    const AllocEvent& e = trace.events[at];
    if (e.op == AllocEvent::Op::Step) {
      steps = e.id;
      if (o.contexts) alloc.record_step(e.id);
      continue;
    }
    void*& p = ptrs[static_cast<size_t>(slots[at])];
    if (e.op == AllocEvent::Op::Alloc) {
      try {
        // The recorded operator becomes the block's op (Note [allocation context]).
        // A view of a whole std::string of trace.contexts, so NUL-terminated.
        const std::string_view op = trace.context_of(e);
        AllocContextGuard op_guard(o.contexts && !op.empty() ? op.data() : nullptr);
        // A simulated device's streams are named as the CPU's (any one device would do).
        p = alloc.allocate(static_cast<size_t>(e.size), Stream(kCPU, e.stream));
      } catch (const OutOfMemoryError&) {
        ++pass.ooms;
        p = nullptr;
      } catch (const ValueError&) {  // a request above the device's capacity: an OOM here too
        ++pass.ooms;
        p = nullptr;
      }
      if (track_peak && p != nullptr) {
        const MemoryStats st = alloc.stats();
        if (st.allocated_bytes.current > peak_allocated) {
          peak_allocated = st.allocated_bytes.current;
          pass.fragmentation_at_peak = st.fragmentation();
          pass.peak_event = static_cast<int64_t>(at);
          pass.peak_step = steps;
        }
      }
      if (static_cast<int64_t>(at) == snapshot_at && o.keep_snapshot) {
        Snapshot now = alloc.snapshot();
        peak.emplace();
        peak->step = steps;
        peak->trace_event = snapshot_at;
        peak->allocated = now.stats.allocated_bytes.current;
        peak->reserved = now.stats.reserved_bytes.current;
        peak->segments = std::move(now.segments);
      }
    } else if (p != nullptr) {
      alloc.free(p);
      p = nullptr;
    }
  }
  pass.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  pass.stats = alloc.stats();
  if (o.keep_snapshot) {
    pass.snapshot = alloc.snapshot();
    pass.snapshot.peak = std::move(peak);
  }
  alloc.set_context_provider(nullptr);
  // Blocks live at the end of the trace go back before the allocator does (it warns otherwise).
  for (void* p : ptrs) {
    if (p != nullptr) alloc.free(p);
  }
  return pass;
}

}  // namespace

double ReplayResult::peak_ratio() const {
  if (stats.allocated_bytes.peak <= 0) return 1.0;
  return static_cast<double>(stats.reserved_bytes.peak) /
         static_cast<double>(stats.allocated_bytes.peak);
}

ReplayResult replay_trace(const AllocTrace& trace, const ReplayOptions& o) {
  const AllocatorConfig config = AllocatorConfig::policy(o.policy);
  size_t num_slots = 0;
  const std::vector<int64_t> slots = dense_slots(trace, &num_slots);
  // The fragmentation and the event at the peak come from an untimed pass calling stats() after
  // every allocation; the timed pass makes no stats() calls (it takes the peak's snapshot, when
  // asked, at the event the untimed pass found).
  Pass tracked;
  const bool want_peak_snapshot = o.keep_snapshot && o.peak_snapshot;
  if (o.track_peak || want_peak_snapshot) {
    ReplayOptions untimed = o;
    untimed.keep_snapshot = false;
    untimed.contexts = false;
    tracked = run_pass(trace, slots, num_slots, config, untimed, /*track_peak=*/true);
  }
  Pass timed = run_pass(trace, slots, num_slots, config, o, /*track_peak=*/false,
                        want_peak_snapshot ? tracked.peak_event : -1);
  ReplayResult r;
  r.policy = o.policy;
  r.stats = timed.stats;
  r.ooms = timed.ooms;
  r.events = static_cast<int64_t>(trace.events.size());
  r.seconds = timed.seconds;
  r.snapshot = std::move(timed.snapshot);
  if (o.track_peak || want_peak_snapshot) {
    r.fragmentation_at_peak = tracked.fragmentation_at_peak;
    r.peak_event = tracked.peak_event;
    r.peak_step = tracked.peak_step;
  }
  return r;
}

std::vector<std::string> replay_policies() {
  return AllocatorConfig::policies();
}

}  // namespace loom::memory
