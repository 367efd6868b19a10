// Profiler (profiler layer): records what loom did — operators with their input shapes, user
// scopes, autograd backward nodes linked to the forward operators that recorded them, collectives,
// data pipeline stages and allocator events — and turns it into a Chrome trace, tables and a
// per-step breakdown of where the time went (compute, communication, data wait, idle).
//
// Ownership: a Profile owns the Trace it collected; a Trace is a plain value (copies are deep) and
// holds no tensor (input shapes are copied). Recording: each thread appends to its own chunked
// buffer, registered once under a mutex; the hot path takes no lock. With no Profile recording, an
// operator pays one predictable branch (record_function_active()). Thread-safety: at most one
// Profile records at a time in a process (start() of a second throws ValueError). Operators may run
// on any thread while it records; start/stop/step must be called from one thread (the training
// loop's). Trace and the analysis functions are thread-compatible values.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/device.h"
#include "loom/export.h"

namespace loom::memory {
struct AllocTrace;
}  // namespace loom::memory

namespace loom::profiler {

// What an event is. The Chrome trace's "cat" of each kind is event_kind_category().
enum class EventKind : uint8_t {
  Operator,    // a dispatcher operator ("loom::addmm")
  UserScope,   // RecordFunctionGuard("name") in user code
  Backward,    // an autograd node run by the engine ("AddmmBackward")
  Collective,  // a ProcessGroup collective ("dist::allreduce"), on the thread that ran it
  DataStage,   // "data.read" / "data.decode" (loader workers) and "data.wait" (the consumer)
  Step,        // "ProfilerStep#N", emitted by Profile::step()
  Kernel,      // a device kernel (CUPTI, or another ActivitySource)
  CommWait,    // a thread blocked on communication it started ("ddp::wait_allreduce"): not compute
  Memcpy,      // a device copy (host to device, device to host, device to device)
  Memset,      // a device memset
  GpuSync,     // a host or stream waiting for device work (cudaStreamSynchronize, ...): not busy
};
constexpr int kNumEventKinds = 11;
LOOM_API const char* event_kind_category(EventKind k);  // "cpu_op", "user_annotation", ...
// Kernel, Memcpy, Memset and GpuSync: work that runs on (or waits for) a device, not a CPU thread.
inline bool is_device_kind(EventKind k) {
  return k == EventKind::Kernel || k == EventKind::Memcpy || k == EventKind::Memset ||
         k == EventKind::GpuSync;
}

struct LOOM_API Event {
  EventKind kind = EventKind::Operator;
  std::string name;
  int64_t start_ns = 0;  // relative to Trace::origin_ns
  int64_t end_ns = 0;
  uint64_t tid = 0;  // OS thread id (the Chrome trace's "tid")
  // One entry per tensor input (empty when shapes were not recorded).
  std::vector<std::vector<int64_t>> input_shapes;
  std::vector<std::string> input_dtypes;
  int64_t bytes = -1;  // collectives: bytes this rank contributes; -1: not applicable
  // Forward-backward link: an Operator that recorded an autograd node and the Backward event that
  // ran the node carry the same (autograd thread, node sequence number). fwd_thread 0: no link.
  uint64_t fwd_thread = 0;
  uint64_t sequence_nr = 0;
  // Device activities: the device index; their lane is (device, tid) with tid the stream id.
  // -1 for CPU events (their tid is an OS thread id).
  int32_t device = -1;
  // GPU correlation (Note [GPU correlation] in src/profiler/gpu_timeline.cpp): a CPU event recorded
  // while GPU activity was traced carries the id it pushed as CUPTI's external correlation id; a
  // device activity carries the id of the CPU event that launched it. 0: none.
  uint64_t correlation_id = 0;

  int64_t duration_ns() const { return end_ns - start_ns; }
  // "[[128, 784], [512, 784]]" (also valid JSON).
  std::string shapes_str() const;
};

// One allocator event: after it, `allocated` and `reserved` bytes are held in total.
struct MemorySample {
  int64_t ts_ns = 0;  // relative to Trace::origin_ns
  uint64_t tid = 0;
  uint64_t ptr = 0;
  int64_t delta_bytes = 0;  // > 0 allocation, < 0 free, 0 only reserved bytes changed
  int64_t allocated = 0;
  int64_t reserved = 0;
  int64_t stream = 0;    // the allocator's stream (0: the default stream)
  Device device = kCPU;  // the allocator's device: one pair of counter tracks per device
};

struct ThreadInfo {
  uint64_t tid = 0;
  std::string name;
};

struct Trace {
  int64_t pid = 0;
  int64_t origin_ns = 0;  // steady-clock time of t = 0
  std::string process_name = "loom";
  // Sorted by (device, tid, start, longest first) and strictly nested per lane: a CPU thread
  // (device -1) or a device stream (see make_nested).
  std::vector<Event> events;
  std::vector<MemorySample> memory;  // sorted by time
  std::vector<ThreadInfo> threads;
  bool empty() const { return events.empty() && memory.empty(); }
};

// Sorts a trace's events and clamps each one within the event that encloses its start on the same
// lane (thread or device stream), so that every lane's events nest strictly (what trace viewers
// assume); drops events left with a negative duration. Returns how many events were changed.
LOOM_API int64_t make_nested(Trace& trace);

// ---- recording ----

// When to record, advanced by Profile::step(): skip `skip_first` steps, then cycles of `wait` steps
// not recorded, `warmup` steps with the recording machinery on but events dropped (so that its
// start-up cost stays out of the trace), `active` steps recorded; after `repeat` cycles (0:
// forever) nothing more. At the end of each cycle the trace is handed to
// ProfileOptions::on_trace_ready.
struct LOOM_API Schedule {
  int64_t wait = 0;
  int64_t warmup = 0;
  int64_t active = 1;
  int64_t repeat = 1;
  int64_t skip_first = 0;
  enum class Action : uint8_t { None, Warmup, Record, RecordAndSave };
  Action action_at(int64_t step) const;
  // "WAIT,WARMUP,ACTIVE[,REPEAT]" (e.g. "5,2,10"); ValueError naming the text otherwise.
  static Schedule parse(const std::string& text);
  std::string describe() const;
};

struct ProfileOptions {
  bool record_shapes = true;   // copy input shapes and dtypes of operators
  bool profile_memory = true;  // take allocator events (record_memory)
  // Trace GPU activity through CUPTI (kernels, copies, memsets, synchronisations), each linked to
  // the operator that launched it. start() throws NotImplementedError saying why when this build
  // has no CUPTI or no CUDA device is visible (see gpu_tracing_unavailable_reason()).
  bool gpu = false;
  std::optional<Schedule> schedule;  // none: record everything from start() to stop()
  // Called on the thread of step()/stop() with each finished cycle's trace.
  std::function<void(const Trace&)> on_trace_ready;
};

class LOOM_API Profile {
 public:
  explicit Profile(ProfileOptions options = {});
  ~Profile();  // stops (never throws)
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  void start();
  // Ends recording; the trace of a cycle that was still recording becomes trace().
  void stop();
  // Marks the end of a training step: records "ProfilerStep#N" over the step when it was recorded,
  // and advances the schedule.
  void step();

  int64_t step_num() const { return step_num_; }
  bool is_recording() const;
  // The last finished cycle (everything between start() and stop() without a schedule).
  const Trace& trace() const { return trace_; }

 private:
  void apply(Schedule::Action a);
  void finish_cycle();
  ProfileOptions opt_;
  Trace trace_;
  int64_t step_num_ = 0;
  int64_t step_start_ns_ = 0;
  Schedule::Action action_ = Schedule::Action::None;
  bool started_ = false;
};

// A source of activities the profiler does not see through RecordFunction (CUPTI is built in and
// asked for with ProfileOptions::gpu; this seam is for others). Sources are started when a cycle
// starts recording and stopped when it ends; collect() then appends their events (times on the
// steady clock, like loom's) to the cycle's trace.
class LOOM_API ActivitySource {
 public:
  virtual ~ActivitySource() = default;
  virtual std::string name() const = 0;
  virtual void start() = 0;
  virtual void stop() = 0;
  virtual void collect(Trace& trace) = 0;
};
// Sources stay registered for the life of the process; thread-safe.
LOOM_API void register_activity_source(std::shared_ptr<ActivitySource> source);

// ---- GPU activity (CUPTI) ----
// Why ProfileOptions::gpu cannot be used here ("GPU activity tracing is not available in this build
// (...)", or no CUDA device is visible), or "" when it can. Initialises nothing.
LOOM_API std::string gpu_tracing_unavailable_reason();

// The pure part of GPU tracing, which the CUPTI collector feeds and the tests feed by hand.
// One activity record as CUPTI reports it: times on CUPTI's clock.
struct GpuActivity {
  EventKind kind = EventKind::Kernel;  // Kernel, Memcpy, Memset or GpuSync
  std::string name;                    // the kernel's name, "Memcpy HtoD", "cudaStreamSynchronize"
  uint64_t start = 0, end = 0;         // CUPTI timestamps (ns)
  int32_t device = 0;
  uint32_t stream = 0;
  uint32_t correlation = 0;  // CUPTI's correlation id: that of the runtime call that launched it
  int64_t bytes = -1;        // copies and memsets
};
// CUPTI's EXTERNAL_CORRELATION record: the runtime call `correlation` ran while `external_id` (an
// Event::correlation_id the profiler pushed) was the innermost one on its thread.
struct ExternalCorrelation {
  uint32_t correlation = 0;
  uint64_t external_id = 0;
};
// Two readings of CUPTI's clock (cuptiGetTimestamp) and the host's steady clock taken together, at
// the start and at the end of a recording; times in between are mapped on the line through them
// (Note [GPU clock] in src/profiler/gpu_timeline.cpp). With one reading (end == start) the offset.
struct LOOM_API ClockSync {
  uint64_t gpu_start = 0, gpu_end = 0;
  int64_t host_start = 0, host_end = 0;
  int64_t to_host(uint64_t gpu_ns) const;
};
// Appends the activities to `trace` as device events (times relative to trace.origin_ns, lanes
// (device, stream)), each carrying the correlation_id of the CPU event that launched it when CUPTI
// recorded one; activities of a failed launch (end < start) are dropped. Keeps the trace's order
// (calls make_nested). Returns how many activities were linked to an event of the trace.
LOOM_API size_t add_gpu_activities(Trace& trace, const std::vector<GpuActivity>& activities,
                                   const std::vector<ExternalCorrelation>& correlations,
                                   const ClockSync& clock);
// The Chrome trace's pid of a device's lanes (process "GPU <device>"; tid: the stream).
constexpr int64_t kGpuPidBase = int64_t{1} << 30;

// Allocator seam: an allocator calls this after each allocation (delta_bytes > 0) or free (< 0),
// and with delta_bytes == 0 when only its reserved bytes changed (a segment returned), with its
// totals afterwards. One relaxed load and branch when no profile records memory. The caching
// allocator of src/memory reports through its observer seam instead
// (memory::set_allocator_observer), which the profiler sets while it records memory: the memory
// layer does not know the profiler.
namespace detail {
extern LOOM_API std::atomic<bool> g_memory_active;
LOOM_API void record_memory_slow(const void* ptr, int64_t delta_bytes, int64_t total_allocated,
                                 int64_t total_reserved, int64_t stream, Device device = kCPU);
}  // namespace detail
inline void record_memory(const void* ptr, int64_t delta_bytes, int64_t total_allocated,
                          int64_t total_reserved, int64_t stream = 0) {
  if (LOOM_UNLIKELY(detail::g_memory_active.load(std::memory_order_relaxed))) {
    detail::record_memory_slow(ptr, delta_bytes, total_allocated, total_reserved, stream);
  }
}

// ---- allocator events as an allocation trace ----
// The allocator events of a trace as a loom-alloc-trace (loom/memory/alloc_trace.h), for `loom mem
// replay` and `loom mem snapshot` (Note [profile as alloc trace] in src/profiler/alloc_events.cpp):
// allocations and frees matched by address, each allocation named by the innermost operator or
// scope around it on its thread, step markers where ProfilerStep#N events begin and end. DataError
// naming `what` and how to get allocator events when the trace has none.
LOOM_API memory::AllocTrace alloc_trace_of(const Trace& trace, const std::string& what);

// ---- Chrome trace (chrome://tracing, ui.perfetto.dev) ----
//
// Complete events ("X", strictly nested per thread), flow arrows from each forward operator to its
// backward node ("s"/"f", bp "e") and from each operator to the device activities it launched
// (cat "ac2g"); device activities in a process per device (pid kGpuPidBase + device, named
// "GPU <device>") with a thread per stream ("stream <id>"); counters "allocated bytes" / "reserved
// bytes" ("C") and allocator instants ("[memory]"), process and thread names ("M"). Times in
// microseconds.
LOOM_API std::string chrome_trace_json(const Trace& trace);
// Writes the trace to `path`, gzip-compressed when it ends in ".gz". ValueError naming the path
// when it cannot be written.
LOOM_API void write_chrome_trace(const Trace& trace, const std::string& path);
// Reads a Chrome trace (plain or gzip) written by loom — or by another tool, as far as its events
// fit. DataError naming the file (and the offset or event) for a corrupt or truncated one.
LOOM_API Trace read_chrome_trace(const std::string& path);
LOOM_API Trace parse_chrome_trace(std::string_view json, const std::string& what);

// ---- tables and analysis ----

enum class GroupBy : uint8_t { Name, NameAndShapes };

struct OpStats {
  std::string thread;  // thread_label() of the thread it ran on
  std::string name;
  std::string input_shapes;  // GroupBy::NameAndShapes only
  EventKind kind = EventKind::Operator;
  int64_t calls = 0;
  int64_t self_ns = 0;  // duration minus the durations of its children on the same thread
  int64_t total_ns = 0;
  // Device time (kernels, copies, memsets) of the activities launched while it ran: by the call
  // itself (self) and by it or the calls nested in it (total).
  int64_t self_cuda_ns = 0;
  int64_t cuda_total_ns = 0;
  double avg_ns() const {
    return calls ? static_cast<double>(total_ns) / static_cast<double>(calls) : 0;
  }
};

// The name a table shows for a thread: its Trace::threads name ("training", "loader worker 0"; see
// set_thread_name in loom/parallel.h), else "thread <tid>".
LOOM_API std::string thread_label(const Trace& trace, uint64_t tid);

// Every event but steps and device activities, grouped per thread (threads of one name together: a
// loader's workers restart every epoch) and by name (and shapes); sorted by self time, largest
// first. Self time is per thread, so a worker's decoding never counts in the training thread's
// share.
LOOM_API std::vector<OpStats> key_averages(const Trace& trace, GroupBy by = GroupBy::Name);
// A fixed-width table of the first `rows` entries, with each one's share of their self time; with a
// Thread column when the entries come from more than one thread, and "Self CUDA" / "CUDA total"
// columns when any has device time.
LOOM_API std::string format_table(const std::vector<OpStats>& stats, size_t rows = 20);

// Where one step's wall time went (HTA's breakdown, on the CPU): compute is the time the step's
// thread spent in operators and backward nodes, outside data.wait and outside communication on that
// thread (its own collectives and CommWait ranges such as DDP's wait for gradient allreduce inside
// backward); data wait the time in data.wait; communication the time a collective ran (on any
// thread) or the step's thread waited for one, while that thread computed nothing and waited for no
// data; overlapped_communication the time collectives ran under compute; idle the rest (the loop,
// the optimizer's glue, anything not recorded). With device activities in the trace, gpu_busy is
// the time within the step when any device ran a kernel, copy or memset (the union over devices and
// streams; synchronisations are waits, not work) and gpu_idle the rest of the step.
struct StepBreakdown {
  int64_t step = 0;
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
  int64_t compute_ns = 0;
  int64_t communication_ns = 0;
  int64_t overlapped_communication_ns = 0;
  int64_t data_wait_ns = 0;
  int64_t idle_ns = 0;
  bool has_gpu = false;  // the trace has device activities
  int64_t gpu_busy_ns = 0;
  int64_t gpu_idle_ns = 0;
};
LOOM_API std::vector<StepBreakdown> step_breakdown(const Trace& trace);
LOOM_API std::string format_step_breakdown(const std::vector<StepBreakdown>& steps);
// "compute (83% of step time)" — the largest part over all steps; "" without steps.
LOOM_API std::string dominant_part(const std::vector<StepBreakdown>& steps);
// The summary `loom trace summarize` and `loom train --profile` print: per thread (the steps'
// thread first), its top `top` operators by self time; the step breakdown and what dominates.
LOOM_API std::string summarize(const Trace& trace, size_t top = 10);

// Per-(thread, name) change of self time from `a` to `b`, sorted by absolute change. Threads match
// by name (unnamed ones, "thread <tid>", all count as "other threads"). When both traces have
// steps, times are per step so that traces of different lengths compare.
struct OpDelta {
  std::string thread;
  std::string name;
  int64_t calls_a = 0, calls_b = 0;
  double self_a_ns = 0, self_b_ns = 0;  // per step when per_step
  double delta_ns() const { return self_b_ns - self_a_ns; }
};
struct TraceDiff {
  bool per_step = false;
  int64_t steps_a = 0, steps_b = 0;
  std::vector<OpDelta> ops;
};
LOOM_API TraceDiff diff_traces(const Trace& a, const Trace& b);
LOOM_API std::string format_diff(const TraceDiff& d, size_t rows = 20);

}  // namespace loom::profiler
