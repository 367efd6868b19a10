#include "loom/record_function.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>

#include "loom/schema.h"

namespace loom {

namespace detail {
std::atomic<int> g_record_callbacks{0};
}

namespace {

struct Registered {
  uint64_t handle;
  RecordFunctionCallbacks cb;
};

// Copy-on-write list: readers take a snapshot under a short lock, so callbacks can be added or
// removed while other threads are inside operators.
std::mutex g_mu;
std::shared_ptr<const std::vector<Registered>>& callbacks() {  // GUARDED_BY(g_mu)
  static auto* p = new std::shared_ptr<const std::vector<Registered>>(
      std::make_shared<std::vector<Registered>>());
  return *p;
}
uint64_t g_next_handle = 1;  // GUARDED_BY(g_mu)

std::shared_ptr<const std::vector<Registered>> snapshot() {
  std::lock_guard<std::mutex> lock(g_mu);
  return callbacks();
}

thread_local uint64_t t_sequence_nr = 0;
thread_local int t_depth = 0;

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
  detail::g_record_callbacks.store(static_cast<int>(next->size()), std::memory_order_relaxed);
}

void RecordFunctionGuard::begin_operator(const std::string& name, const FunctionSchema& schema) {
  event_.kind = OpEvent::Kind::Operator;
  event_.schema = &schema;
  event_.name = name;
  auto cbs = snapshot();
  for (const auto& r : *cbs) needs_inputs_ = needs_inputs_ || r.cb.needs_inputs;
}

RecordFunctionGuard::RecordFunctionGuard(std::string_view scope_name) {
  if (!record_function_active()) return;
  event_.kind = OpEvent::Kind::UserScope;
  name_storage_ = std::string(scope_name);
  event_.name = name_storage_;
  enter();
}

void RecordFunctionGuard::enter() {
  active_ = true;
  event_.sequence_nr = t_sequence_nr++;
  event_.depth = t_depth++;
  event_.start_ns = now_ns();
  auto cbs = snapshot();
  for (const auto& r : *cbs) {
    if (r.cb.on_enter) r.cb.on_enter(event_);
  }
}

RecordFunctionGuard::~RecordFunctionGuard() {
  if (!active_) return;
  --t_depth;
  event_.end_ns = now_ns();
  auto cbs = snapshot();
  for (const auto& r : *cbs) {
    if (r.cb.on_exit) r.cb.on_exit(event_);
  }
}

namespace detail {

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
  std::ostringstream os;
  os << s;
  ev.scalar_args.push_back(os.str());
}
void record_input(OpEvent& ev, IntArrayRef v) {
  std::ostringstream os;
  os << v;
  ev.scalar_args.push_back(os.str());
}
void record_input(OpEvent& ev, int64_t v) { ev.scalar_args.push_back(std::to_string(v)); }
void record_input(OpEvent& ev, double v) {
  std::ostringstream os;
  os << v;
  ev.scalar_args.push_back(os.str());
}
void record_input(OpEvent& ev, bool v) { ev.scalar_args.push_back(v ? "True" : "False"); }

}  // namespace detail
}  // namespace loom
