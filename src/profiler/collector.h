// Internal to the profiler layer: the process-wide collector behind Profile (see
// Note [profiler buffers] in collector.cpp). Called by Profile from one thread at a time.
#pragma once

#include <cstdint>
#include <string_view>

#include "loom/profiler.h"

namespace loom::profiler::detail {

int64_t now_ns();  // the steady clock RecordFunction uses

struct CollectorOptions {
  bool record_shapes = true;
  bool profile_memory = true;
  bool gpu = false;  // GPU activity through CUPTI (gpu_activity.h)
};

// A new session: fresh per-thread buffers; the calling thread is named "main".
void begin_session(const CollectorOptions& options, int64_t origin_ns);
void end_session();
// Whether the RecordFunction callbacks are registered (warmup and recording).
void set_listening(bool on);
// Whether events are kept. Turning it off waits until no thread is inside an append, so that the
// buffers can be read afterwards without locks. Turning it on starts the activity sources and, for
// a session with gpu, GPU activity tracing (which may throw; then nothing was turned on).
void set_collecting(bool on);
// Appends "ProfilerStep#N" on the calling thread (while collecting).
void record_step(std::string_view name, int64_t start_ns, int64_t end_ns);
// Moves what was collected into a trace (stopping and collecting the activity sources) and empties
// the buffers. Only while not collecting.
Trace harvest();

}  // namespace loom::profiler::detail
