// A profile's allocator events as an allocation trace (profiler.h: alloc_trace_of).
//
// Note [profile as alloc trace]
//   A Chrome trace from loom's profiler holds one "[memory]" instant per allocator event: the
//   address, the bytes (> 0 allocated, < 0 freed, 0 when only reserved bytes changed), the stream
//   and the thread. Allocations and frees are matched by address: an allocation gets a fresh id
//   (ids are reused once freed, as RecordingAllocator does); a free of an address allocated before
//   the recorded window began is dropped (the replay never saw that block); a second allocation at
//   an address still live means its free was not recorded, so a free is put in first. Sizes are the
//   allocator's block sizes (requests rounded up), which replay to the same blocks. Each allocation
//   is named by the innermost operator, backward node or scope enclosing it on its thread, and each
//   ProfilerStep#N event puts a step marker "N steps ended" where it begins and "N + 1" where it
//   ends, so the replay's timeline can be drawn in steps.
#include <algorithm>
#include <map>
#include <string_view>
#include <unordered_map>

#include "loom/error.h"
#include "loom/memory/alloc_trace.h"
#include "loom/profiler.h"

namespace loom::profiler {
namespace {

struct Boundary {
  int64_t ns;
  int64_t steps;
};

// The step boundaries of the trace's ProfilerStep#N events, in time order.
std::vector<Boundary> step_boundaries(const Trace& t) {
  std::vector<Boundary> out;
  constexpr std::string_view kPrefix = "ProfilerStep#";
  for (const Event& e : t.events) {
    if (e.kind != EventKind::Step || e.name.rfind(kPrefix, 0) != 0) continue;
    int64_t n = 0;
    bool ok = e.name.size() > kPrefix.size();
    for (size_t i = kPrefix.size(); ok && i < e.name.size(); ++i) {
      ok = e.name[i] >= '0' && e.name[i] <= '9' && n < (int64_t{1} << 55);
      n = n * 10 + (e.name[i] - '0');
    }
    if (!ok) continue;
    out.push_back({e.start_ns, n});
    out.push_back({e.end_ns, n + 1});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Boundary& a, const Boundary& b) { return a.ns < b.ns; });
  return out;
}

// For each memory sample, the innermost event enclosing it on its thread (nullptr: none). Events
// are sorted by (tid, start, longest first) and nest strictly (make_nested), so one sweep per
// thread with a stack of open events finds them.
std::vector<const Event*> enclosing_events(const Trace& t) {
  std::map<uint64_t, std::vector<size_t>> samples_of;  // tid -> sample indices, in time order
  for (size_t i = 0; i < t.memory.size(); ++i) samples_of[t.memory[i].tid].push_back(i);
  std::map<uint64_t, std::vector<const Event*>> events_of;
  for (const Event& e : t.events) {
    if (e.kind == EventKind::Step || is_device_kind(e.kind) || e.device >= 0) continue;
    events_of[e.tid].push_back(&e);
  }
  std::vector<const Event*> out(t.memory.size(), nullptr);
  for (auto& [tid, samples] : samples_of) {
    std::vector<const Event*>& evs = events_of[tid];
    std::stable_sort(evs.begin(), evs.end(), [](const Event* a, const Event* b) {
      return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns > b->end_ns;
    });
    std::vector<const Event*> open;
    size_t next = 0;
    for (size_t i : samples) {
      const int64_t ts = t.memory[i].ts_ns;
      while (next < evs.size() && evs[next]->start_ns <= ts) {
        while (!open.empty() && open.back()->end_ns < evs[next]->start_ns) open.pop_back();
        open.push_back(evs[next++]);
      }
      while (!open.empty() && open.back()->end_ns < ts) open.pop_back();
      if (!open.empty()) out[i] = open.back();
    }
  }
  return out;
}

}  // namespace

memory::AllocTrace alloc_trace_of(const Trace& t, const std::string& what) {
  using memory::AllocEvent;
  if (t.memory.empty()) {
    LOOM_THROW(DataError, "[alloc trace] ", what,
               " is a profiler trace without allocator events (no \"[memory]\" instants): record "
               "one with `loom train --profile FILE.json.gz` (CPU tensors then come from the "
               "caching allocator) or a profiler::Profile with profile_memory over a caching "
               "allocator; or record an allocation trace with `loom mem record --train`");
  }
  const std::vector<const Event*> around = enclosing_events(t);
  const std::vector<Boundary> boundaries = step_boundaries(t);
  memory::AllocTrace out;
  std::unordered_map<std::string, int32_t> context_ids;
  std::unordered_map<uint64_t, int64_t> live;  // address -> id
  std::vector<int64_t> free_ids;
  int64_t next_id = 0, dropped_frees = 0, missing_frees = 0, last_steps = -1;
  size_t next_boundary = 0;
  std::map<uint64_t, bool> threads;
  auto emit_boundaries_until = [&](int64_t ns) {
    for (; next_boundary < boundaries.size() && boundaries[next_boundary].ns <= ns;
         ++next_boundary) {
      if (boundaries[next_boundary].steps == last_steps) continue;
      last_steps = boundaries[next_boundary].steps;
      out.events.push_back(AllocEvent{AllocEvent::Op::Step, last_steps, 0, 0, -1});
    }
  };
  auto free_id = [&](int64_t id) {
    out.events.push_back(AllocEvent{AllocEvent::Op::Free, id, 0, 0, -1});
    free_ids.push_back(id);
  };
  for (size_t i = 0; i < t.memory.size(); ++i) {
    const MemorySample& m = t.memory[i];
    if (m.delta_bytes == 0) continue;  // only reserved bytes changed
    emit_boundaries_until(m.ts_ns);
    threads[m.tid] = true;
    auto it = live.find(m.ptr);
    if (m.delta_bytes < 0) {
      if (it == live.end()) {
        ++dropped_frees;
        continue;
      }
      free_id(it->second);
      live.erase(it);
      continue;
    }
    if (it != live.end()) {
      ++missing_frees;
      free_id(it->second);
      live.erase(it);
    }
    int64_t id;
    if (free_ids.empty()) {
      id = next_id++;
    } else {
      id = free_ids.back();
      free_ids.pop_back();
    }
    live.emplace(m.ptr, id);
    int32_t context = -1;
    if (around[i] != nullptr) {
      auto [c, inserted] =
          context_ids.try_emplace(around[i]->name, static_cast<int32_t>(out.contexts.size()));
      if (inserted) out.contexts.push_back(around[i]->name);
      context = c->second;
    }
    out.events.push_back(AllocEvent{AllocEvent::Op::Alloc, id, m.delta_bytes, m.stream, context});
  }
  emit_boundaries_until(INT64_MAX);
  out.source = "profiler trace " + what + ": " + std::to_string(t.memory.size()) +
               " allocator events on " + std::to_string(threads.size()) + " thread(s)";
  if (dropped_frees > 0) {
    out.source += "; " + std::to_string(dropped_frees) +
                  " frees of blocks allocated before the recorded window dropped";
  }
  if (missing_frees > 0) {
    out.source += "; " + std::to_string(missing_frees) + " frees not recorded, put back";
  }
  return out;
}

}  // namespace loom::profiler
