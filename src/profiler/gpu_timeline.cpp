// The pure part of GPU tracing: CUPTI's activity records (already copied out of CUPTI's buffers)
// and the CPU events of a trace become device lanes linked to their operators. No CUPTI here, so
// the tests feed it synthetic records (tests/profiler/gpu_timeline_test.cpp).
//
// Note [GPU correlation]
//   CUPTI numbers every runtime API call (cudaLaunchKernel, cudaMemcpyAsync, ...) with a
//   correlation id, and gives the same id to the kernel or copy that call started. It does not know
//   loom's operators, so while GPU tracing is on, the collector's on_enter callback gives every
//   recorded CPU event (operator, scope, backward node) a fresh id from one process-wide counter,
//   pushes it as an external correlation id (cuptiActivityPushExternalCorrelationId, kind CUSTOM0)
//   and pops it on exit; the event keeps the id (Event::correlation_id). For each runtime call made
//   while an id was pushed, CUPTI emits an EXTERNAL_CORRELATION record (correlation id -> the
//   innermost external id), so an activity's correlation id leads to the innermost operator that
//   launched it. RUNTIME records are enabled because CUPTI emits external correlation records only
//   for the API kinds it traces. Activities launched outside any recorded event stay unlinked
//   (correlation_id 0) but are still drawn and counted as busy time.
//
// Note [GPU clock]
//   CUPTI stamps activities on its own clock (cuptiGetTimestamp), the profiler on the host's
//   steady clock. The collector reads both, back to back, when a recording starts and again when it
//   ends; an activity's time is mapped on the line through those two points, which absorbs both the
//   offset and any drift between the clocks over the recording (with one point it is the offset).
//   The error is the time between the two reads of a pair (well under a microsecond), so a kernel
//   can appear shifted by that much against the operator that launched it, never by more.
//   On a stream, activities run one after another; a mapped start that falls before the previous
//   activity's end by such an error (or by a real overlap, as programmatic dependent launch allows)
//   is moved to that end, so that every lane nests strictly as trace viewers expect.
#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "loom/profiler.h"

namespace loom::profiler {

int64_t ClockSync::to_host(uint64_t gpu_ns) const {
  const int64_t d = static_cast<int64_t>(gpu_ns) - static_cast<int64_t>(gpu_start);
  if (gpu_end <= gpu_start || host_end <= host_start) return host_start + d;
  const double rate =
      static_cast<double>(host_end - host_start) / static_cast<double>(gpu_end - gpu_start);
  return host_start + std::llround(static_cast<double>(d) * rate);
}

size_t add_gpu_activities(Trace& trace, const std::vector<GpuActivity>& activities,
                          const std::vector<ExternalCorrelation>& correlations,
                          const ClockSync& clock) {
  std::unordered_map<uint32_t, uint64_t> external;
  external.reserve(correlations.size());
  for (const ExternalCorrelation& c : correlations) external[c.correlation] = c.external_id;
  std::unordered_set<uint64_t> cpu_ids;
  for (const Event& e : trace.events) {
    if (e.device < 0 && e.correlation_id != 0) cpu_ids.insert(e.correlation_id);
  }
  // Per lane, in start order, so that overlaps can be trimmed (Note [GPU clock]).
  std::map<std::pair<int32_t, uint32_t>, std::vector<const GpuActivity*>> lanes;
  for (const GpuActivity& a : activities) {
    if (a.end < a.start) continue;
    lanes[{a.device, a.stream}].push_back(&a);
  }
  size_t linked = 0;
  for (auto& [lane, acts] : lanes) {
    std::stable_sort(acts.begin(), acts.end(), [](const GpuActivity* a, const GpuActivity* b) {
      return a->start < b->start;
    });
    int64_t lane_end = INT64_MIN;
    for (const GpuActivity* a : acts) {
      Event e;
      e.kind = is_device_kind(a->kind) ? a->kind : EventKind::Kernel;
      e.name = a->name;
      e.device = lane.first;
      e.tid = lane.second;
      e.bytes = a->bytes;
      e.start_ns = clock.to_host(a->start) - trace.origin_ns;
      e.end_ns = clock.to_host(a->end) - trace.origin_ns;
      e.start_ns = std::max(e.start_ns, lane_end);
      e.end_ns = std::max(e.end_ns, e.start_ns);
      lane_end = e.end_ns;
      if (auto it = external.find(a->correlation); it != external.end()) {
        e.correlation_id = it->second;
        linked += cpu_ids.count(it->second);
      }
      trace.events.push_back(std::move(e));
    }
  }
  make_nested(trace);
  return linked;
}

}  // namespace loom::profiler
