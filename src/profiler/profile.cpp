// Profile: the schedule's state machine over the collector; Schedule; trace helpers.
#include <algorithm>
#include <atomic>
#include <sstream>

#include "loom/error.h"
#include "loom/profiler.h"
#include "profiler/collector.h"

namespace loom::profiler {

const char* event_kind_category(EventKind k) {
  switch (k) {
    case EventKind::Operator:
      return "cpu_op";
    case EventKind::UserScope:
      return "user_annotation";
    case EventKind::Backward:
      return "autograd";
    case EventKind::Collective:
      return "collective";
    case EventKind::DataStage:
      return "data";
    case EventKind::Step:
      return "step";
    case EventKind::Kernel:
      return "kernel";
    case EventKind::CommWait:
      return "comm_wait";
    case EventKind::Memcpy:
      return "gpu_memcpy";
    case EventKind::Memset:
      return "gpu_memset";
    case EventKind::GpuSync:
      return "cuda_sync";
  }
  return "unknown";
}

std::string Event::shapes_str() const {
  std::string s = "[";
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    s += i ? ", [" : "[";
    for (size_t k = 0; k < input_shapes[i].size(); ++k) {
      if (k) s += ", ";
      s += std::to_string(input_shapes[i][k]);
    }
    s += "]";
  }
  return s + "]";
}

int64_t make_nested(Trace& trace) {
  auto& ev = trace.events;
  // One lane per CPU thread (device -1) and per device stream.
  std::stable_sort(ev.begin(), ev.end(), [](const Event& a, const Event& b) {
    if (a.device != b.device) return a.device < b.device;
    if (a.tid != b.tid) return a.tid < b.tid;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  int64_t changed = 0;
  std::vector<int64_t> open_ends;  // ends of the enclosing events of the current thread
  std::vector<Event> out;
  out.reserve(ev.size());
  uint64_t tid = 0;
  int32_t device = -1;
  for (size_t i = 0; i < ev.size(); ++i) {
    Event& e = ev[i];
    if (e.end_ns < e.start_ns) {
      ++changed;
      continue;
    }
    if (out.empty() || e.tid != tid || e.device != device) {
      open_ends.clear();
      tid = e.tid;
      device = e.device;
    }
    while (!open_ends.empty() && open_ends.back() <= e.start_ns) open_ends.pop_back();
    if (!open_ends.empty() && e.end_ns > open_ends.back()) {
      e.end_ns = open_ends.back();
      ++changed;
    }
    open_ends.push_back(e.end_ns);
    out.push_back(std::move(e));
  }
  ev = std::move(out);
  return changed;
}

// ---- Schedule ----

Schedule::Action Schedule::action_at(int64_t step) const {
  if (step < skip_first) return Action::None;
  const int64_t s = step - skip_first;
  const int64_t cycle = wait + warmup + active;
  if (cycle <= 0) return Action::None;
  if (repeat > 0 && s / cycle >= repeat) return Action::None;
  const int64_t pos = s % cycle;
  if (pos < wait) return Action::None;
  if (pos < wait + warmup) return Action::Warmup;
  return pos == cycle - 1 ? Action::RecordAndSave : Action::Record;
}

Schedule Schedule::parse(const std::string& text) {
  std::vector<int64_t> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long x = std::strtoll(item.c_str(), &end, 10);
    LOOM_CHECK(!item.empty() && end && *end == '\0' && x >= 0, "[profiler] bad schedule '", text,
               "': expected WAIT,WARMUP,ACTIVE[,REPEAT] of non-negative integers (e.g. 5,2,10)");
    v.push_back(x);
  }
  LOOM_CHECK(v.size() == 3 || v.size() == 4, "[profiler] bad schedule '", text,
             "': expected WAIT,WARMUP,ACTIVE[,REPEAT] (e.g. 5,2,10)");
  Schedule s;
  s.wait = v[0];
  s.warmup = v[1];
  s.active = v[2];
  s.repeat = v.size() == 4 ? v[3] : 1;
  LOOM_CHECK(s.active >= 1, "[profiler] bad schedule '", text, "': ACTIVE must be at least 1");
  return s;
}

std::string Schedule::describe() const {
  std::ostringstream os;
  os << "wait " << wait << ", warmup " << warmup << ", active " << active << ", repeat ";
  if (repeat > 0) {
    os << repeat;
  } else {
    os << "forever";
  }
  if (skip_first > 0) os << ", skip first " << skip_first;
  return os.str();
}

// ---- Profile ----

namespace {
std::atomic<Profile*> g_active{nullptr};

bool records(Schedule::Action a) {
  return a == Schedule::Action::Record || a == Schedule::Action::RecordAndSave;
}
}  // namespace

Profile::Profile(ProfileOptions options) : opt_(std::move(options)) {
  if (opt_.schedule) {
    const Schedule& s = *opt_.schedule;
    LOOM_CHECK(s.wait >= 0 && s.warmup >= 0 && s.active >= 1 && s.repeat >= 0 && s.skip_first >= 0,
               "[profiler] bad schedule (", s.describe(), "): counts must be >= 0 and active >= 1");
  }
}

Profile::~Profile() {
  try {
    stop();
  } catch (...) {
  }
}

bool Profile::is_recording() const {
  return started_ && records(action_);
}

void Profile::start() {
  LOOM_CHECK(!started_, "[profiler] start() called on a Profile that is already started");
  Profile* expected = nullptr;
  LOOM_CHECK(g_active.compare_exchange_strong(expected, this),
             "[profiler] another Profile is already recording in this process; stop it first");
  if (opt_.gpu) {
    // Never a CPU-only trace in silence when the GPU was asked for.
    const std::string why = gpu_tracing_unavailable_reason();
    if (!why.empty()) {
      g_active.store(nullptr);
      LOOM_THROW(NotImplementedError, "[profiler] ProfileOptions::gpu: ", why);
    }
  }
  started_ = true;
  trace_ = Trace{};
  step_num_ = 0;
  step_start_ns_ = detail::now_ns();
  detail::begin_session(detail::CollectorOptions{opt_.record_shapes, opt_.profile_memory, opt_.gpu},
                        step_start_ns_);
  action_ = Schedule::Action::None;
  try {
    apply(opt_.schedule ? opt_.schedule->action_at(0) : Schedule::Action::Record);
  } catch (...) {  // CUPTI refused: leave no half-started session behind
    detail::end_session();
    action_ = Schedule::Action::None;
    started_ = false;
    g_active.store(nullptr);
    throw;
  }
}

void Profile::apply(Schedule::Action a) {
  detail::set_listening(a != Schedule::Action::None);
  if (records(a) && !records(action_)) detail::set_collecting(true);
  action_ = a;
}

void Profile::finish_cycle() {
  detail::set_collecting(false);
  action_ = Schedule::Action::None;
  trace_ = detail::harvest();
  if (opt_.on_trace_ready) opt_.on_trace_ready(trace_);
}

void Profile::step() {
  if (!started_) {
    ++step_num_;
    return;
  }
  const int64_t now = detail::now_ns();
  const Schedule::Action cur = action_;
  if (records(cur))
    detail::record_step("ProfilerStep#" + std::to_string(step_num_), step_start_ns_, now);
  ++step_num_;
  step_start_ns_ = now;
  const Schedule::Action next =
      opt_.schedule ? opt_.schedule->action_at(step_num_) : Schedule::Action::Record;
  if (cur == Schedule::Action::RecordAndSave || (records(cur) && !records(next))) finish_cycle();
  apply(next);
}

void Profile::stop() {
  if (!started_) return;
  if (records(action_)) finish_cycle();
  detail::end_session();
  action_ = Schedule::Action::None;
  started_ = false;
  g_active.store(nullptr);
}

}  // namespace loom::profiler
