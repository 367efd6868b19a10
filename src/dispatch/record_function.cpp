#include "loom/record_function.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>

#include "loom/memory/alloc_context.h"
#include "loom/schema.h"

namespace loom {

namespace detail {
std::atomic<int> g_record_callbacks{0};

// Input vectors of finished events, kept per thread so that a recorded call does not allocate.
struct SpareInputs {
  std::vector<DimVector> shapes;
  std::vector<DType> dtypes;
};
}  // namespace detail

namespace {

struct Registered {
  uint64_t handle;
  RecordFunctionCallbacks cb;
};

// Copy-on-write list: callbacks can be added or removed while other threads are inside operators.
// Each thread keeps its own snapshot and refreshes it (under a short lock) only when the version
// changed, so a recorded call takes no lock.
std::mutex g_mu;
std::shared_ptr<const std::vector<Registered>>& callbacks() {  // GUARDED_BY(g_mu)
  static auto* p = new std::shared_ptr<const std::vector<Registered>>(
      std::make_shared<std::vector<Registered>>());
  return *p;
}
uint64_t g_next_handle = 1;  // GUARDED_BY(g_mu)
std::atomic<uint64_t> g_version{1};

using detail::SpareInputs;
constexpr int kMaxSpares = 16;

// What a recorded call touches, in one trivially constructed thread-local with the initial-exec
// TLS model (libloom is linked, not dlopen()ed late), so that reaching it costs no __tls_get_addr.
struct ThreadState {
  uint64_t version;                     // of the callback list `list` is
  const std::vector<Registered>* list;  // kept alive by t_owner.list
  uint64_t sequence_nr;
  int depth;
  int nspares;
  bool exited;                      // t_owner is gone (thread exit): keep away from it
  OpEvent* current_op;              // the innermost recorded operator (record_autograd_node)
  SpareInputs* spares[kMaxSpares];  // owned by t_owner
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadState t_state;

// The owning side, touched only when the callback list changes or a spare is first made.
struct ThreadOwner {
  std::shared_ptr<const std::vector<Registered>> list;
  std::vector<std::unique_ptr<SpareInputs>> spares;
  ~ThreadOwner() {
    t_state.version = 0;
    t_state.nspares = 0;
    t_state.exited = true;
  }
};
thread_local ThreadOwner t_owner;

LOOM_NOINLINE void refresh_snapshot(ThreadState& s) {
  if (s.exited) {  // an operator run by another thread-local's destructor: record nothing
    static const std::vector<Registered> kNone;
    s.list = &kNone;
    return;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  t_owner.list = callbacks();
  s.list = t_owner.list.get();
  s.version = g_version.load(std::memory_order_relaxed);
}

const std::vector<Registered>& snapshot() {
  ThreadState& s = t_state;
  if (LOOM_UNLIKELY(s.version != g_version.load(std::memory_order_acquire))) refresh_snapshot(s);
  return *s.list;
}

LOOM_NOINLINE SpareInputs* new_spare() {
  t_owner.spares.push_back(std::make_unique<SpareInputs>());
  return t_owner.spares.back().get();
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

uint64_t add_record_callbacks(RecordFunctionCallbacks cb) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto next = std::make_shared<std::vector<Registered>>(*callbacks());
  uint64_t h = g_next_handle++;
  next->push_back(Registered{h, std::move(cb)});
  callbacks() = next;
  g_version.fetch_add(1, std::memory_order_release);
  detail::g_record_callbacks.store(static_cast<int>(next->size()), std::memory_order_relaxed);
  return h;
}

void remove_record_callbacks(uint64_t handle) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto next = std::make_shared<std::vector<Registered>>();
  for (const auto& r : *callbacks()) {
    if (r.handle != handle) next->push_back(r);
  }
  callbacks() = next;
  g_version.fetch_add(1, std::memory_order_release);
  detail::g_record_callbacks.store(static_cast<int>(next->size()), std::memory_order_relaxed);
}

void RecordFunctionGuard::begin_operator(const std::string& name, const FunctionSchema& schema) {
  event_.kind = OpEvent::Kind::Operator;
  event_.schema = &schema;
  event_.name = name;
  bool scalars = false;
  for (const auto& r : snapshot()) {
    needs_inputs_ = needs_inputs_ || r.cb.needs_inputs;
    scalars = scalars || (r.cb.needs_inputs && r.cb.needs_scalar_args);
  }
  event_.record_scalars = scalars;
  if (needs_inputs_) {
    ThreadState& st = t_state;
    SpareInputs* sp = st.nspares > 0 ? st.spares[--st.nspares] : nullptr;
    if (sp != nullptr) {
      event_.input_shapes.swap(sp->shapes);
      event_.input_dtypes.swap(sp->dtypes);
      spare_ = sp;
    } else if (!st.exited && t_owner.spares.size() < 4 * kMaxSpares) {
      spare_ = new_spare();
    }
  }
}

RecordFunctionGuard::RecordFunctionGuard(std::string_view scope_name) {
  if (!record_function_active()) return;
  event_.kind = OpEvent::Kind::UserScope;
  name_storage_ = std::string(scope_name);
  event_.name = name_storage_;
  enter();
}

RecordFunctionGuard::RecordFunctionGuard(OpEvent::Kind kind, std::string name, int64_t bytes,
                                         uint64_t fwd_thread, uint64_t fwd_sequence_nr) {
  if (!record_function_active()) return;
  event_.kind = kind;
  name_storage_ = std::move(name);
  event_.name = name_storage_;
  event_.bytes = bytes;
  event_.fwd_thread = fwd_thread;
  event_.fwd_sequence_nr = fwd_sequence_nr;
  enter();
}

void RecordFunctionGuard::enter() {
  active_ = true;
  // Allocations made while this runs are this operator's (Note [allocation context]). The name
  // is NUL-terminated: it views the operator entry's std::string or name_storage_.
  saved_alloc_context_ = memory::detail::tls_alloc_context;
  memory::detail::tls_alloc_context = event_.name.data();
  ThreadState& st = t_state;
  event_.sequence_nr = st.sequence_nr++;
  event_.depth = st.depth++;
  if (event_.kind == OpEvent::Kind::Operator) {
    parent_op_ = st.current_op;
    st.current_op = &event_;
  }
  const auto& cbs = snapshot();
  event_.start_ns = now_ns();
  for (const auto& r : cbs) {
    if (r.cb.on_enter) r.cb.on_enter(event_);
  }
}

RecordFunctionGuard::~RecordFunctionGuard() {
  if (!active_) return;
  memory::detail::tls_alloc_context = saved_alloc_context_;
  event_.end_ns = now_ns();
  ThreadState& st = t_state;
  --st.depth;
  if (event_.kind == OpEvent::Kind::Operator) st.current_op = parent_op_;
  for (const auto& r : snapshot()) {
    if (r.cb.on_exit) r.cb.on_exit(event_);
  }
  if (spare_ != nullptr && st.nspares < kMaxSpares) {
    // Hand the (grown) vectors back for the next recorded call on this thread.
    event_.input_shapes.clear();
    event_.input_dtypes.clear();
    spare_->shapes.swap(event_.input_shapes);
    spare_->dtypes.swap(event_.input_dtypes);
    st.spares[st.nspares++] = spare_;
  }
}

namespace {
// Note [allocation context]: while a recording wants allocation contexts, a callback that does
// nothing keeps operators on the recorded path, whose guard sets the context.
void on_alloc_contexts(bool wanted) {
  static uint64_t handle = 0;  // guarded by the memory layer's lock around listener calls
  if (wanted && handle == 0) {
    RecordFunctionCallbacks cb;
    cb.needs_inputs = false;
    cb.needs_scalar_args = false;
    handle = add_record_callbacks(std::move(cb));
  } else if (!wanted && handle != 0) {
    remove_record_callbacks(handle);
    handle = 0;
  }
}
[[maybe_unused]] const bool kListening = [] {
  memory::set_alloc_context_listener(&on_alloc_contexts);
  return true;
}();
}  // namespace

namespace detail {

void record_autograd_node(uint64_t thread_id, uint64_t sequence_nr) {
  OpEvent* ev = t_state.current_op;
  if (ev == nullptr || ev->fwd_thread != 0) return;
  ev->fwd_thread = thread_id;
  ev->fwd_sequence_nr = sequence_nr;
}

void record_input(OpEvent& ev, const Tensor& t) {
  if (!t.defined()) return;
  ev.input_shapes.emplace_back(t.sizes());
  ev.input_dtypes.push_back(t.dtype());
}
void record_input(OpEvent& ev, const std::optional<Tensor>& t) {
  if (t) record_input(ev, *t);
}
void record_input(OpEvent& ev, TensorList l) {
  for (const Tensor& t : l) record_input(ev, t);
}
void record_input(OpEvent& ev, const Scalar& s) {
  if (!ev.record_scalars) return;
  std::ostringstream os;
  os << s;
  ev.scalar_args.push_back(os.str());
}
void record_input(OpEvent& ev, IntArrayRef v) {
  if (!ev.record_scalars) return;
  std::ostringstream os;
  os << v;
  ev.scalar_args.push_back(os.str());
}
void record_input(OpEvent& ev, int64_t v) {
  if (ev.record_scalars) ev.scalar_args.push_back(std::to_string(v));
}
void record_input(OpEvent& ev, double v) {
  if (!ev.record_scalars) return;
  std::ostringstream os;
  os << v;
  ev.scalar_args.push_back(os.str());
}
void record_input(OpEvent& ev, bool v) {
  if (ev.record_scalars) ev.scalar_args.push_back(v ? "True" : "False");
}

}  // namespace detail
}  // namespace loom
