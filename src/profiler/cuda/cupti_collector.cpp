// GPU activity through CUPTI's Activity API: CUPTI fills buffers we hand it with records of
// kernels, copies, memsets, synchronisations, runtime/driver calls and external correlations; the
// completed-buffer callback copies what the profiler needs out of them (on CUPTI's thread, under a
// mutex), and gpu_collect turns those copies into device lanes (add_gpu_activities, the pure part).
// Note [GPU correlation] and Note [GPU clock] (gpu_timeline.cpp) say how records are linked to
// operators and placed on the profiler's clock.
#include <cupti.h>

#include <cxxabi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/cuda.h"
#include "loom/device_interface.h"
#include "loom/error.h"
#include "profiler/collector.h"
#include "profiler/gpu_activity.h"

namespace loom::profiler {
namespace {

constexpr size_t kBufferBytes = 8 << 20;  // per CUPTI buffer; CUPTI asks for more as they fill
constexpr size_t kBufferAlign = 8;        // CUPTI's requirement (ACTIVITY_RECORD_ALIGNMENT)
constexpr CUpti_ExternalCorrelationKind kCorrelationKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;

// The kinds a recording enables. RUNTIME and DRIVER records are not drawn: CUPTI emits an external
// correlation record only ahead of the API record of a call it traces, so they must be on for the
// links (DRIVER for libraries such as cuBLAS that launch through the driver API).
constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
};

std::string cupti_error(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || s == nullptr)
    return "error " + std::to_string(r);
  return s;
}

#define LOOM_CUPTI_CHECK(call)                                                                     \
  do {                                                                                             \
    const CUptiResult loom_cupti_r_ = (call);                                                      \
    if (loom_cupti_r_ != CUPTI_SUCCESS) {                                                          \
      const char* loom_cupti_call_ = #call;                                                        \
      LOOM_THROW(DeviceError, "[profiler] GPU activity tracing: ",                                 \
                 std::string(loom_cupti_call_).substr(0, std::string(loom_cupti_call_).find('(')), \
                 " failed: ", cupti_error(loom_cupti_r_),                                          \
                 " (is another profiler, such as Nsight Systems, attached to this process?)");     \
    }                                                                                              \
  } while (0)

// What the buffer callbacks keep between gpu_start and gpu_collect.
struct Store {
  std::mutex mu;
  std::vector<GpuActivity> activities;                   // GUARDED_BY(mu)
  std::vector<uint32_t> sync_contexts;                   // GUARDED_BY(mu): context of each GpuSync
  std::vector<ExternalCorrelation> correlations;         // GUARDED_BY(mu)
  std::unordered_map<uint32_t, int32_t> context_device;  // GUARDED_BY(mu)
  size_t dropped = 0;                                    // GUARDED_BY(mu)
};
Store& store() {
  static auto* s = new Store();  // never destroyed: CUPTI's thread may call back at exit
  return *s;
}

std::once_flag g_init_once;
bool g_registered = false;      // written once under g_init_once
std::atomic<bool> g_on{false};  // kinds enabled
ClockSync g_clock;              // written by gpu_start / gpu_stop (the profile's thread)

std::string demangle(const char* name) {
  if (name == nullptr) return "<unnamed kernel>";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                           std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

const char* memcpy_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "Memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "Memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "Memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "Memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "Memcpy PtoP";
    default:
      return "Memcpy";
  }
}

const char* sync_name(CUpti_ActivitySynchronizationType t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      return "cudaEventSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      return "cudaStreamWaitEvent";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      return "cudaStreamSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      return "cudaDeviceSynchronize";
    default:
      return "cuda synchronization";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

// Copies one record into the store (its mutex held).
void take(Store& s, const CUpti_Activity* rec) {
  switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      GpuActivity a;
      a.kind = EventKind::Kernel;
      a.name = demangle(k->name);
      a.start = k->start;
      a.end = k->end;
      a.device = static_cast<int32_t>(k->deviceId);
      a.stream = k->streamId;
      a.correlation = k->correlationId;
      s.context_device[k->contextId] = a.device;
      s.activities.push_back(std::move(a));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      GpuActivity a;
      a.kind = EventKind::Memcpy;
      a.name = memcpy_name(m->copyKind);
      a.start = m->start;
      a.end = m->end;
      a.device = static_cast<int32_t>(m->deviceId);
      a.stream = m->streamId;
      a.correlation = m->correlationId;
      a.bytes = static_cast<int64_t>(m->bytes);
      s.context_device[m->contextId] = a.device;
      s.activities.push_back(std::move(a));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      GpuActivity a;
      a.kind = EventKind::Memset;
      a.name = "Memset";
      a.start = m->start;
      a.end = m->end;
      a.device = static_cast<int32_t>(m->deviceId);
      a.stream = m->streamId;
      a.correlation = m->correlationId;
      a.bytes = static_cast<int64_t>(m->bytes);
      s.context_device[m->contextId] = a.device;
      s.activities.push_back(std::move(a));
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto* y = reinterpret_cast<const CUpti_ActivitySynchronization2*>(rec);
      GpuActivity a;
      a.kind = EventKind::GpuSync;
      a.name = sync_name(y->type);
      a.start = y->start;
      a.end = y->end;
      a.device = -1;  // resolved from the context in gpu_collect
      // A context-wide synchronisation has no stream: drawn on the lane of stream 0.
      a.stream = y->streamId == CUPTI_SYNCHRONIZATION_INVALID_VALUE ? 0 : y->streamId;
      a.correlation = y->correlationId;
      s.sync_contexts.push_back(y->contextId);
      s.activities.push_back(std::move(a));
      break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto* x = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
      if (x->externalKind == kCorrelationKind)
        s.correlations.push_back(ExternalCorrelation{x->correlationId, x->externalId});
      break;
    }
    default:  // RUNTIME / DRIVER: only there for the correlation records
      break;
  }
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t size,
                               size_t valid) {
  Store& s = store();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) take(s, rec);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS)
      s.dropped += dropped;
  }
  std::free(buffer);
}

// Two clock readings back to back (Note [GPU clock]): CUPTI's between two host readings, so the
// pair's error is half the gap. False when CUPTI cannot read its clock.
bool read_clocks(uint64_t& gpu, int64_t& host) {
  const int64_t before = detail::now_ns();
  uint64_t t = 0;
  const bool ok = cuptiGetTimestamp(&t) == CUPTI_SUCCESS && t != 0;
  const int64_t after = detail::now_ns();
  gpu = t;
  host = before + (after - before) / 2;
  return ok;
}

void initialise() {
  std::call_once(g_init_once, [] {
    LOOM_CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    g_registered = true;
  });
  LOOM_CHECK_AS(DeviceError, g_registered,
                "[profiler] GPU activity tracing: CUPTI refused its buffer callbacks earlier in "
                "this process");
}

}  // namespace

std::string gpu_tracing_unavailable_reason() {
  if (!cuda::is_available()) {
    return "GPU activity tracing needs a CUDA device, and none is visible (" +
           std::string(cuda::is_built() ? "no GPU, or CUDA_VISIBLE_DEVICES hides them"
                                        : "this build has no CUDA backend") +
           ")";
  }
  return "";
}

namespace detail {

void gpu_start() {
  const std::string why = gpu_tracing_unavailable_reason();
  LOOM_CHECK_AS(NotImplementedError, why.empty(), "[profiler] ", why);
  initialise();
  {
    Store& s = store();
    std::lock_guard<std::mutex> lock(s.mu);
    s.activities.clear();
    s.sync_contexts.clear();
    s.correlations.clear();
    s.dropped = 0;
  }
  size_t enabled = 0;
  try {
    for (CUpti_ActivityKind k : kKinds) {
      LOOM_CUPTI_CHECK(cuptiActivityEnable(k));
      ++enabled;
    }
  } catch (...) {
    for (size_t i = 0; i < enabled; ++i) cuptiActivityDisable(kKinds[i]);
    throw;
  }
  if (!read_clocks(g_clock.gpu_start, g_clock.host_start)) {
    for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
    LOOM_THROW(DeviceError,
               "[profiler] GPU activity tracing: cuptiGetTimestamp failed, so device "
               "times cannot be placed on the profiler's clock");
  }
  g_clock.gpu_end = g_clock.gpu_start;
  g_clock.host_end = g_clock.host_start;
  g_on.store(true, std::memory_order_release);
}

void gpu_stop() noexcept {
  if (!g_on.exchange(false, std::memory_order_acq_rel)) return;
  // Work still running has no complete record yet: wait for the current device (what a training
  // loop profiles); other devices' work must be finished by the caller.
  try {
    DeviceInterface& cuda = device_interface(DeviceType::CUDA);
    cuda.synchronize_device(cuda.current_device());
  } catch (...) {
  }
  if (!read_clocks(g_clock.gpu_end, g_clock.host_end)) {  // the start's offset alone
    g_clock.gpu_end = g_clock.gpu_start;
    g_clock.host_end = g_clock.host_start;
  }
  for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void gpu_collect(Trace& trace) {
  Store& s = store();
  std::vector<GpuActivity> activities;
  std::vector<ExternalCorrelation> correlations;
  size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    size_t sync = 0;
    for (GpuActivity& a : s.activities) {
      if (a.kind != EventKind::GpuSync) continue;
      const uint32_t context = s.sync_contexts[sync++];
      auto it = s.context_device.find(context);
      a.device = it != s.context_device.end() ? it->second : 0;
    }
    activities.swap(s.activities);
    correlations.swap(s.correlations);
    s.sync_contexts.clear();
    dropped = s.dropped;
    s.dropped = 0;
  }
  if (dropped > 0) {
    std::fprintf(stderr,
                 "[profiler] CUPTI dropped %zu GPU activity records (its buffers were full); the "
                 "GPU lanes miss them\n",
                 dropped);
  }
  add_gpu_activities(trace, activities, correlations, g_clock);
}

void gpu_push_correlation(uint64_t id) noexcept {
  cuptiActivityPushExternalCorrelationId(kCorrelationKind, id);
}

void gpu_pop_correlation() noexcept {
  uint64_t last = 0;
  cuptiActivityPopExternalCorrelationId(kCorrelationKind, &last);
}

}  // namespace detail
}  // namespace loom::profiler
