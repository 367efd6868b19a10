// The collector: RecordFunction callbacks, per-thread buffers, allocator events and activity
// sources.
//
// Note [profiler buffers]
//   Every thread that records appends to its own ThreadBuffer: fixed-size RawEvents in chunks of
//   kChunk that never move, plus a bump arena for what varies in size (scope names, input dims and
//   dtypes). Operator names are not copied: they point into the dispatcher's operator table, whose
//   entries are never erased. A thread registers its buffer once per session, under g_mu; after
//   that an append takes no lock. Reading the buffers (harvest) happens only while nothing is
//   collected. Each buffer has a `writing` flag that its thread raises around an append and that
//   set_collecting(false) waits on: the thread stores writing = true then loads g_collecting, the
//   stopper stores g_collecting = false then loads writing, both sequentially consistent, so either
//   the thread sees the stop and drops its event, or the stopper sees the flag and waits for the
//   append to finish. Buffers are shared_ptrs held by both the session and the thread
//   (thread_local), so a thread that is still inside a callback when a session ends never touches
//   freed memory.
//   With GPU tracing on, an on_enter callback also gives each event its GPU correlation id (Note
//   [GPU correlation] in gpu_timeline.cpp); without it, nothing is registered for on_enter.
#include "profiler/collector.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/dtype.h"
#include "loom/error.h"
#include "loom/memory/caching_allocator.h"
#include "loom/parallel.h"
#include "loom/record_function.h"
#include "profiler/gpu_activity.h"

namespace loom::profiler {

namespace detail {
std::atomic<bool> g_memory_active{false};
}

namespace detail {
namespace {

constexpr size_t kChunk = 2048;           // events per chunk
constexpr size_t kArenaBlock = 64 << 10;  // bytes per arena block
constexpr size_t kMaxNameBytes = 4096;    // longer scope names are cut

struct RawEvent {
  const char* name;
  uint32_t name_len;
  EventKind kind;
  uint16_t ninputs;  // tensor inputs with dims and dtypes in the arena
  int64_t start_ns;
  int64_t end_ns;
  uint64_t fwd_thread;
  uint64_t fwd_sequence_nr;
  uint64_t correlation_id;
  int64_t bytes;
  const int64_t* dims;   // per input: ndim, then the sizes
  const int8_t* dtypes;  // per input
};

// Bump allocation in blocks that never move; clear() keeps the blocks for the next cycle.
class Arena {
 public:
  char* alloc(size_t n, size_t align) {
    used_ = (used_ + align - 1) / align * align;
    if (block_ >= blocks_.size() || used_ + n > sizes_[block_]) {
      if (block_ < blocks_.size()) ++block_;
      while (block_ < blocks_.size() && n > sizes_[block_]) ++block_;
      if (block_ >= blocks_.size()) {
        const size_t size = std::max(kArenaBlock, n);
        blocks_.push_back(std::make_unique<char[]>(size));
        sizes_.push_back(size);
        block_ = blocks_.size() - 1;
      }
      used_ = 0;
    }
    char* p = blocks_[block_].get() + used_;
    used_ += n;
    return p;
  }
  void clear() {
    block_ = 0;
    used_ = 0;
  }

 private:
  std::vector<std::unique_ptr<char[]>> blocks_;
  std::vector<size_t> sizes_;
  size_t block_ = 0;
  size_t used_ = 0;
};

struct ThreadBuffer {
  uint64_t tid = 0;
  std::string os_name;
  std::string loom_name;  // set_thread_name()'s, when the thread registered
  std::atomic<bool> writing{false};
  std::vector<std::unique_ptr<RawEvent[]>> chunks;
  size_t size = 0;
  Arena arena;
  std::vector<MemorySample> memory;  // absolute steady-clock times

  RawEvent& push() {
    if (size == chunks.size() * kChunk) chunks.push_back(std::make_unique<RawEvent[]>(kChunk));
    RawEvent& e = chunks[size / kChunk][size % kChunk];
    ++size;
    return e;
  }
  const RawEvent& at(size_t i) const { return chunks[i / kChunk][i % kChunk]; }
  void clear() {
    size = 0;
    arena.clear();
    memory.clear();
  }
  const char* copy_name(std::string_view s) {
    const size_t n = std::min(s.size(), kMaxNameBytes);
    char* p = arena.alloc(n, 1);
    if (n) std::memcpy(p, s.data(), n);
    return p;
  }
};

struct Session {
  uint64_t id = 0;
  CollectorOptions options;
  int64_t origin_ns = 0;
  uint64_t main_tid = 0;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;  // GUARDED_BY(g_mu)
};

std::mutex g_mu;
Session g_session;                      // GUARDED_BY(g_mu), except the fields read below
std::atomic<uint64_t> g_session_id{0};  // 0: none
std::atomic<bool> g_collecting{false};
std::atomic<bool> g_record_shapes{true};
std::atomic<bool> g_gpu_collecting{false};    // GPU tracing started for the collecting cycle
std::atomic<uint64_t> g_next_correlation{1};  // process-wide, so ids never repeat across sessions
bool g_gpu_cycle = false;                     // GUARDED_BY(g_mu): this cycle traced the GPU
uint64_t g_callbacks = 0;                     // RecordFunction handle; 0: not listening
uint64_t g_next_session = 1;

// The hot side (trivial, initial-exec TLS: no __tls_get_addr per event) and the owning side.
struct ThreadSlot {
  uint64_t session;
  ThreadBuffer* buffer;  // owned by t_owner (and the session)
  bool exited;           // t_owner is gone (thread exit): record nothing more
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadSlot t_slot;
struct ThreadOwner {
  std::shared_ptr<ThreadBuffer> buffer;
  ~ThreadOwner() { t_slot = ThreadSlot{0, nullptr, true}; }
};
thread_local ThreadOwner t_owner;

uint64_t os_tid() {
  return static_cast<uint64_t>(::syscall(SYS_gettid));
}

LOOM_NOINLINE ThreadBuffer* register_thread() {
  if (t_slot.exited) return nullptr;
  auto b = std::make_shared<ThreadBuffer>();
  b->tid = os_tid();
  b->loom_name = thread_name_of(b->tid);
  char name[32] = "";
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) == 0) b->os_name = name;
  std::lock_guard<std::mutex> lock(g_mu);
  const uint64_t session = g_session_id.load(std::memory_order_relaxed);
  if (session != 0) g_session.buffers.push_back(b);
  t_owner.buffer = std::move(b);
  t_slot = ThreadSlot{session, t_owner.buffer.get(), false};
  return t_slot.buffer;
}

inline ThreadBuffer* this_thread_buffer() {
  const ThreadSlot& s = t_slot;
  if (LOOM_UNLIKELY(s.session != g_session_id.load(std::memory_order_acquire) ||
                    s.buffer == nullptr)) {
    return register_thread();
  }
  return s.buffer;
}

EventKind kind_of(OpEvent::Kind k) {
  switch (k) {
    case OpEvent::Kind::Operator:
      return EventKind::Operator;
    case OpEvent::Kind::UserScope:
      return EventKind::UserScope;
    case OpEvent::Kind::Backward:
      return EventKind::Backward;
    case OpEvent::Kind::Collective:
      return EventKind::Collective;
    case OpEvent::Kind::DataStage:
      return EventKind::DataStage;
    case OpEvent::Kind::CommWait:
      return EventKind::CommWait;
  }
  return EventKind::UserScope;
}

void append(ThreadBuffer& b, const OpEvent& ev) {
  RawEvent& r = b.push();
  r.kind = kind_of(ev.kind);
  if (ev.kind == OpEvent::Kind::Operator) {
    r.name = ev.name.data();  // the operator table's string: lives as long as the process
    r.name_len = static_cast<uint32_t>(ev.name.size());
  } else {
    r.name = b.copy_name(ev.name);
    r.name_len = static_cast<uint32_t>(std::min(ev.name.size(), kMaxNameBytes));
  }
  r.start_ns = ev.start_ns;
  r.end_ns = ev.end_ns;
  // AccumulateGrad nodes run first and have no forward operator (sequence number UINT64_MAX).
  const bool linked = ev.fwd_thread != 0 && ev.fwd_sequence_nr <= static_cast<uint64_t>(INT64_MAX);
  r.fwd_thread = linked ? ev.fwd_thread : 0;
  r.fwd_sequence_nr = linked ? ev.fwd_sequence_nr : 0;
  r.bytes = ev.bytes;
  r.correlation_id = ev.correlation_id;
  r.ninputs = 0;
  r.dims = nullptr;
  r.dtypes = nullptr;
  const size_t n = std::min<size_t>(ev.input_shapes.size(), UINT16_MAX);
  if (n != 0 && g_record_shapes.load(std::memory_order_relaxed)) {
    size_t words = n;
    for (size_t i = 0; i < n; ++i) words += ev.input_shapes[i].size();
    auto* d = reinterpret_cast<int64_t*>(b.arena.alloc(words * sizeof(int64_t), alignof(int64_t)));
    r.dims = d;
    for (size_t i = 0; i < n; ++i) {
      const DimVector& s = ev.input_shapes[i];
      *d++ = static_cast<int64_t>(s.size());
      if (!s.empty()) std::memcpy(d, s.data(), s.size() * sizeof(int64_t));
      d += s.size();
    }
    auto* t = reinterpret_cast<int8_t*>(b.arena.alloc(n, 1));
    for (size_t i = 0; i < n; ++i) {
      t[i] = i < ev.input_dtypes.size() ? static_cast<int8_t>(ev.input_dtypes[i]) : int8_t{-1};
    }
    r.dtypes = t;
    r.ninputs = static_cast<uint16_t>(n);
  }
}

// Registered only for sessions that trace the GPU.
void on_enter(OpEvent& ev) {
  if (!g_gpu_collecting.load(std::memory_order_relaxed)) return;
  ev.correlation_id = g_next_correlation.fetch_add(1, std::memory_order_relaxed);
  gpu_push_correlation(ev.correlation_id);
}

void on_exit(OpEvent& ev) {
  if (ev.correlation_id != 0) gpu_pop_correlation();
  ThreadBuffer* b = this_thread_buffer();
  if (LOOM_UNLIKELY(b == nullptr)) return;
  b->writing.store(true, std::memory_order_seq_cst);
  if (g_collecting.load(std::memory_order_seq_cst)) append(*b, ev);
  b->writing.store(false, std::memory_order_release);
}

std::mutex g_sources_mu;
std::vector<std::shared_ptr<ActivitySource>>& sources() {  // GUARDED_BY(g_sources_mu)
  static auto* s = new std::vector<std::shared_ptr<ActivitySource>>();
  return *s;
}
bool g_sources_running = false;  // GUARDED_BY(g_sources_mu)

// A thread's name: the one it gave itself with set_thread_name() (now, or when it first recorded:
// loader workers may have exited), else "main" for the thread that started the profile, else its OS
// name, else one guessed from what it recorded.
std::string thread_name(const ThreadBuffer& b, uint64_t main_tid,
                        const std::vector<Event>& events) {
  if (std::string live = thread_name_of(b.tid); !live.empty()) return live;
  if (!b.loom_name.empty()) return b.loom_name;
  if (b.tid == main_tid) return "main";
  char self[32] = "";
  pthread_getname_np(pthread_self(), self, sizeof(self));
  if (!b.os_name.empty() && b.os_name != self) return b.os_name;
  int counts[kNumEventKinds] = {};
  for (const Event& e : events) {
    if (e.tid == b.tid) ++counts[static_cast<int>(e.kind)];
  }
  if (counts[static_cast<int>(EventKind::DataStage)] > 0 &&
      counts[static_cast<int>(EventKind::Operator)] == 0) {
    return "data loader worker";
  }
  if (counts[static_cast<int>(EventKind::Collective)] > 0 &&
      counts[static_cast<int>(EventKind::Operator)] == 0) {
    return "collectives";
  }
  return "thread " + std::to_string(b.tid);
}

// The caching allocator's observer (memory::set_allocator_observer), set while memory is recorded.
void observe_allocator(const memory::AllocatorEvent& e) {
  record_memory_slow(e.ptr, e.delta_bytes, e.total_allocated, e.total_reserved, e.stream, e.device);
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void begin_session(const CollectorOptions& options, int64_t origin_ns) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_session = Session{};
  g_gpu_cycle = false;
  g_session.id = g_next_session++;
  g_session.options = options;
  g_session.origin_ns = origin_ns;
  g_session.main_tid = os_tid();
  g_record_shapes.store(options.record_shapes, std::memory_order_relaxed);
  g_session_id.store(g_session.id, std::memory_order_release);
}

void end_session() {
  set_listening(false);
  set_collecting(false);
  std::lock_guard<std::mutex> lock(g_mu);
  g_session_id.store(0, std::memory_order_release);
  g_session.buffers.clear();
}

void set_listening(bool on) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (on && g_callbacks == 0) {
    RecordFunctionCallbacks cb;
    cb.on_exit = on_exit;
    if (g_session.options.gpu) cb.on_enter = on_enter;
    cb.needs_inputs = g_session.options.record_shapes;
    cb.needs_scalar_args = false;
    g_callbacks = add_record_callbacks(std::move(cb));
  } else if (!on && g_callbacks != 0) {
    remove_record_callbacks(g_callbacks);
    g_callbacks = 0;
  }
}

void set_collecting(bool on) {
  if (on) {
    bool gpu = false;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      gpu = g_session.options.gpu && !g_gpu_cycle;
    }
    if (gpu) {
      gpu_start();  // throws before anything else is turned on
      std::lock_guard<std::mutex> lock(g_mu);
      g_gpu_cycle = true;
      g_gpu_collecting.store(true, std::memory_order_release);
    }
    {
      std::lock_guard<std::mutex> lock(g_sources_mu);
      if (!g_sources_running) {
        for (auto& s : sources()) s->start();
        g_sources_running = true;
      }
    }
    std::lock_guard<std::mutex> lock(g_mu);
    g_memory_active.store(g_session.options.profile_memory, std::memory_order_relaxed);
    // The caching allocator reports through the memory layer's observer seam.
    memory::set_allocator_observer(g_session.options.profile_memory ? &observe_allocator : nullptr);
    g_collecting.store(true, std::memory_order_seq_cst);
    return;
  }
  memory::set_allocator_observer(nullptr);
  g_memory_active.store(false, std::memory_order_relaxed);
  g_collecting.store(false, std::memory_order_seq_cst);
  g_gpu_collecting.store(false, std::memory_order_release);
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& b : g_session.buffers) {
    while (b->writing.load(std::memory_order_seq_cst)) std::this_thread::yield();
  }
  if (g_gpu_cycle) gpu_stop();
}

void record_step(std::string_view name, int64_t start_ns, int64_t end_ns) {
  ThreadBuffer* b = this_thread_buffer();
  if (b == nullptr) return;
  b->writing.store(true, std::memory_order_seq_cst);
  if (g_collecting.load(std::memory_order_seq_cst)) {
    RawEvent& r = b->push();
    r = RawEvent{};
    r.kind = EventKind::Step;
    r.name = b->copy_name(name);
    r.name_len = static_cast<uint32_t>(std::min(name.size(), kMaxNameBytes));
    r.start_ns = start_ns;
    r.end_ns = end_ns;
    r.bytes = -1;
  }
  b->writing.store(false, std::memory_order_release);
}

void record_memory_slow(const void* ptr, int64_t delta_bytes, int64_t total_allocated,
                        int64_t total_reserved, int64_t stream, Device device) {
  ThreadBuffer* b = this_thread_buffer();
  if (b == nullptr) return;
  b->writing.store(true, std::memory_order_seq_cst);
  if (g_collecting.load(std::memory_order_seq_cst)) {
    MemorySample m;
    m.ts_ns = now_ns();
    m.tid = b->tid;
    m.ptr = reinterpret_cast<uint64_t>(ptr);
    m.delta_bytes = delta_bytes;
    m.allocated = total_allocated;
    m.reserved = total_reserved;
    m.stream = stream;
    m.device = device;
    b->memory.push_back(m);
  }
  b->writing.store(false, std::memory_order_release);
}

Trace harvest() {
  LOOM_INTERNAL_ASSERT(!g_collecting.load(), "profiler: harvest while collecting");
  Trace t;
  t.pid = static_cast<int64_t>(::getpid());
  {
    std::lock_guard<std::mutex> lock(g_sources_mu);
    if (g_sources_running) {
      for (auto& s : sources()) s->stop();
      g_sources_running = false;
    }
  }
  std::lock_guard<std::mutex> lock(g_mu);
  const int64_t origin = g_session.origin_ns;
  t.origin_ns = origin;
  for (const auto& bp : g_session.buffers) {
    const ThreadBuffer& b = *bp;
    for (size_t i = 0; i < b.size; ++i) {
      const RawEvent& r = b.at(i);
      Event e;
      e.kind = r.kind;
      e.name.assign(r.name, r.name_len);
      e.start_ns = r.start_ns - origin;
      e.end_ns = r.end_ns - origin;
      e.tid = b.tid;
      e.bytes = r.bytes;
      e.fwd_thread = r.fwd_thread;
      e.sequence_nr = r.fwd_sequence_nr;
      e.correlation_id = r.correlation_id;
      const int64_t* d = r.dims;
      for (uint16_t k = 0; k < r.ninputs; ++k) {
        const int64_t nd = *d++;
        e.input_shapes.emplace_back(d, d + nd);
        d += nd;
        const int8_t dt = r.dtypes[k];
        e.input_dtypes.emplace_back(dt >= 0 && dt < kNumDTypes ? dtype_name(static_cast<DType>(dt))
                                                               : "?");
      }
      t.events.push_back(std::move(e));
    }
    for (MemorySample m : b.memory) {
      m.ts_ns -= origin;
      t.memory.push_back(m);
    }
  }
  for (const auto& bp : g_session.buffers) {
    bool used = false;
    for (const Event& e : t.events) used = used || e.tid == bp->tid;
    for (const MemorySample& m : t.memory) used = used || m.tid == bp->tid;
    if (!used) continue;
    bool seen = false;
    for (const ThreadInfo& ti : t.threads) seen = seen || ti.tid == bp->tid;
    if (!seen)
      t.threads.push_back(ThreadInfo{bp->tid, thread_name(*bp, g_session.main_tid, t.events)});
  }
  // Empty the buffers; forget those whose thread has ended (only the session holds them).
  std::vector<std::shared_ptr<ThreadBuffer>> keep;
  for (auto& bp : g_session.buffers) {
    bp->clear();
    if (bp.use_count() > 1) keep.push_back(bp);
  }
  g_session.buffers = std::move(keep);
  {
    std::lock_guard<std::mutex> slock(g_sources_mu);
    for (auto& s : sources()) {
      Trace extra;
      s->collect(extra);
      for (Event& e : extra.events) {
        e.start_ns -= origin;
        e.end_ns -= origin;
        t.events.push_back(std::move(e));
      }
      for (ThreadInfo& ti : extra.threads) t.threads.push_back(std::move(ti));
    }
  }
  if (g_gpu_cycle) {
    g_gpu_cycle = false;
    gpu_collect(t);
  }
  std::stable_sort(t.memory.begin(), t.memory.end(),
                   [](const MemorySample& a, const MemorySample& b) { return a.ts_ns < b.ts_ns; });
  make_nested(t);
  return t;
}

}  // namespace detail

void register_activity_source(std::shared_ptr<ActivitySource> source) {
  LOOM_CHECK(source != nullptr, "[profiler] register_activity_source: null source");
  std::lock_guard<std::mutex> lock(detail::g_sources_mu);
  detail::sources().push_back(std::move(source));
}

}  // namespace loom::profiler
