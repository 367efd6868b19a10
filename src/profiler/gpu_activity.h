// Internal to the profiler layer: GPU activity collection through CUPTI's Activity API
// (src/profiler/cuda/cupti_collector.cpp; cuda/cupti_stub.cpp in a build without CUPTI). The pure
// part that turns its records into device lanes is add_gpu_activities (gpu_timeline.cpp).
// gpu_start / gpu_stop / gpu_collect are called by the collector from the thread that starts and
// stops recordings; push / pop from any thread that records an event while GPU tracing is on.
#pragma once

#include <cstdint>

#include "loom/profiler.h"

namespace loom::profiler::detail {

// Initialises CUPTI on the first call (never at library load), empties what an earlier recording
// left, enables the activity kinds and reads the clocks (Note [GPU clock]). Throws when GPU
// activity cannot be traced (gpu_tracing_unavailable_reason(), or CUPTI refusing).
void gpu_start();
// Synchronises the current CUDA device, flushes CUPTI's buffers (cuptiActivityFlushAll), disables
// the activity kinds and reads the clocks again. Never throws (it runs in Profile's destructor).
void gpu_stop() noexcept;
// Appends what was recorded between gpu_start and gpu_stop to `trace` as device events linked to
// its CPU events (add_gpu_activities), and forgets it.
void gpu_collect(Trace& trace);
// The external correlation id of the event now starting / ending on this thread (Note [GPU
// correlation]); errors are ignored (a hot path of every recorded call).
void gpu_push_correlation(uint64_t id) noexcept;
void gpu_pop_correlation() noexcept;

}  // namespace loom::profiler::detail
