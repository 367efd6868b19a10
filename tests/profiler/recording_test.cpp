// Recording: operators with shapes, user scopes, backward nodes linked to forward operators,
// threads, collectives, data loader stages, allocator events, activity sources, the schedule, and
// the off path.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "loom/autograd.h"
#include "loom/data/loader.h"
#include "loom/data/shard.h"
#include "loom/distributed/process_group.h"
#include "loom/distributed/store.h"
#include "loom/error.h"
#include "loom/memory/caching_allocator.h"
#include "loom/ops.h"
#include "loom/parallel.h"
#include "loom/profiler.h"
#include "loom/record_function.h"
#include "temp_dir.h"

namespace loom::profiler {
namespace {

std::vector<const Event*> named(const Trace& t, const std::string& name) {
  std::vector<const Event*> out;
  for (const Event& e : t.events) {
    if (e.name == name) out.push_back(&e);
  }
  return out;
}

TEST(ProfilerRecording, OperatorsWithShapesAndDtypes) {
  Tensor a = ones({2, 3});
  Tensor b = ones({3}, TensorOptions(kFloat64));
  Profile p;
  p.start();
  EXPECT_TRUE(p.is_recording());
  EXPECT_TRUE(record_function_active());
  Tensor c = mul(a, a);
  Tensor d = add(b, b);
  p.stop();
  EXPECT_FALSE(record_function_active());
  auto muls = named(p.trace(), "loom::mul.Tensor");
  if (muls.empty()) muls = named(p.trace(), "loom::mul");
  ASSERT_EQ(muls.size(), 1u) << summarize(p.trace());
  const Event& m = *muls[0];
  EXPECT_EQ(m.kind, EventKind::Operator);
  EXPECT_EQ(m.input_shapes, (std::vector<std::vector<int64_t>>{{2, 3}, {2, 3}}));
  EXPECT_EQ(m.input_dtypes, (std::vector<std::string>{"float32", "float32"}));
  EXPECT_EQ(m.shapes_str(), "[[2, 3], [2, 3]]");
  EXPECT_GE(m.duration_ns(), 0);
  EXPECT_GE(m.start_ns, 0);
  bool saw_f64 = false;
  for (const Event& e : p.trace().events) {
    saw_f64 = saw_f64 || (e.name.rfind("loom::add", 0) == 0 && !e.input_dtypes.empty() &&
                          e.input_dtypes[0] == "float64");
  }
  EXPECT_TRUE(saw_f64);
  ASSERT_FALSE(p.trace().threads.empty());
  EXPECT_EQ(p.trace().threads[0].name, "main");
  EXPECT_GT(p.trace().pid, 0);
}

TEST(ProfilerRecording, NothingRecordedOutsideStartStop) {
  Tensor a = ones({4});
  Profile p;
  Tensor before = add(a, a);
  p.start();
  p.stop();
  Tensor after = add(a, a);
  EXPECT_TRUE(p.trace().events.empty());
  EXPECT_FALSE(record_function_active());
}

TEST(ProfilerRecording, ShapesCanBeLeftOut) {
  ProfileOptions o;
  o.record_shapes = false;
  Profile p(o);
  Tensor a = ones({4});
  p.start();
  Tensor b = add(a, a);
  p.stop();
  ASSERT_FALSE(p.trace().events.empty());
  for (const Event& e : p.trace().events) EXPECT_TRUE(e.input_shapes.empty());
}

TEST(ProfilerRecording, UserScopesNestOperators) {
  Tensor a = ones({16, 16});
  Profile p;
  p.start();
  {
    RecordFunctionGuard outer("outer scope");
    Tensor b = mm(a, a);
    {
      RecordFunctionGuard inner("inner scope");
      Tensor c = relu(b);
    }
  }
  p.stop();
  const auto outer = named(p.trace(), "outer scope");
  const auto inner = named(p.trace(), "inner scope");
  ASSERT_EQ(outer.size(), 1u);
  ASSERT_EQ(inner.size(), 1u);
  EXPECT_EQ(outer[0]->kind, EventKind::UserScope);
  EXPECT_LE(outer[0]->start_ns, inner[0]->start_ns);
  EXPECT_GE(outer[0]->end_ns, inner[0]->end_ns);
  for (const Event& e : p.trace().events) {
    if (e.kind == EventKind::Operator && e.name.rfind("loom::relu", 0) == 0) {
      EXPECT_GE(e.start_ns, inner[0]->start_ns);
      EXPECT_LE(e.end_ns, inner[0]->end_ns);
    }
  }
  // Self time of the outer scope excludes its children.
  for (const OpStats& s : key_averages(p.trace())) {
    if (s.name == "outer scope") {
      EXPECT_LT(s.self_ns, s.total_ns);
      EXPECT_EQ(s.calls, 1);
    }
  }
}

TEST(ProfilerRecording, BackwardNodesLinkToTheirForwardOperators) {
  Tensor x = rand({8, 8}).requires_grad_();
  Tensor w = rand({8, 8}).requires_grad_();
  Profile p;
  p.start();
  Tensor y = mm(x, w);
  Tensor loss = sum(mul(y, y));
  loss.backward();
  p.stop();
  const Trace& t = p.trace();
  std::map<std::pair<uint64_t, uint64_t>, const Event*> forward;
  for (const Event& e : t.events) {
    if (e.kind == EventKind::Operator && e.fwd_thread != 0)
      forward[{e.fwd_thread, e.sequence_nr}] = &e;
  }
  int linked = 0;
  bool mm_linked = false;
  for (const Event& e : t.events) {
    if (e.kind != EventKind::Backward || e.fwd_thread == 0) continue;
    auto it = forward.find({e.fwd_thread, e.sequence_nr});
    if (it == forward.end()) continue;
    ++linked;
    const Event& f = *it->second;
    EXPECT_LT(f.start_ns, e.start_ns) << f.name << " -> " << e.name;
    if (f.name.rfind("loom::mm", 0) == 0) {
      mm_linked = true;
      EXPECT_NE(e.name.find("Mm"), std::string::npos) << e.name;
    }
  }
  EXPECT_GE(linked, 3) << summarize(t);  // mm, mul, sum
  EXPECT_TRUE(mm_linked);
  // Operators run inside backward nodes nest in them.
  bool nested = false;
  for (const Event& b : t.events) {
    if (b.kind != EventKind::Backward) continue;
    for (const Event& e : t.events) {
      nested = nested || (e.kind == EventKind::Operator && e.tid == b.tid &&
                          e.start_ns >= b.start_ns && e.end_ns <= b.end_ns && &e != &b);
    }
  }
  EXPECT_TRUE(nested);
}

TEST(ProfilerRecording, EveryThreadHasItsOwnBuffer) {
  Profile p;
  p.start();
  std::atomic<uint64_t> ready{0};
  auto work = [&] {
    Tensor a = ones({32});
    for (int i = 0; i < 200; ++i) a = add(a, a);
    ready.fetch_add(1);
  };
  std::thread t1(work), t2(work);
  work();
  t1.join();
  t2.join();
  p.stop();
  std::set<uint64_t> tids;
  size_t adds = 0;
  for (const Event& e : p.trace().events) {
    if (e.name.rfind("loom::add", 0) == 0) {
      ++adds;
      tids.insert(e.tid);
    }
  }
  EXPECT_EQ(adds, 600u);
  EXPECT_EQ(tids.size(), 3u);
  std::set<uint64_t> named_threads;
  for (const ThreadInfo& ti : p.trace().threads) named_threads.insert(ti.tid);
  for (uint64_t tid : tids) EXPECT_TRUE(named_threads.count(tid)) << tid;
}

TEST(ProfilerRecording, OneProfileAtATime) {
  Profile a, b;
  a.start();
  EXPECT_THROW(b.start(), ValueError);
  EXPECT_THROW(a.start(), ValueError);
  a.stop();
  b.start();
  b.stop();
}

TEST(ProfilerRecording, ScheduleRecordsTheActiveSteps) {
  ProfileOptions o;
  Schedule s;
  s.wait = 1;
  s.warmup = 1;
  s.active = 2;
  s.repeat = 2;
  o.schedule = s;
  std::vector<Trace> ready;
  o.on_trace_ready = [&](const Trace& t) { ready.push_back(t); };
  Profile p(o);
  Tensor a = ones({4});
  p.start();
  for (int step = 0; step < 10; ++step) {
    {
      RecordFunctionGuard g("step body " + std::to_string(step));
      Tensor b = add(a, a);
      EXPECT_EQ(p.is_recording(), step == 2 || step == 3 || step == 6 || step == 7) << step;
    }
    p.step();
  }
  p.stop();
  ASSERT_EQ(ready.size(), 2u);
  for (size_t c = 0; c < 2; ++c) {
    std::vector<std::string> steps, bodies;
    for (const Event& e : ready[c].events) {
      if (e.kind == EventKind::Step) steps.push_back(e.name);
      if (e.name.rfind("step body", 0) == 0) bodies.push_back(e.name);
    }
    std::sort(steps.begin(), steps.end());
    std::sort(bodies.begin(), bodies.end());
    const int first = c == 0 ? 2 : 6;
    EXPECT_EQ(steps, (std::vector<std::string>{"ProfilerStep#" + std::to_string(first),
                                               "ProfilerStep#" + std::to_string(first + 1)}));
    EXPECT_EQ(bodies, (std::vector<std::string>{"step body " + std::to_string(first),
                                                "step body " + std::to_string(first + 1)}));
    // Each step's body nests in its ProfilerStep.
    for (const Event& e : ready[c].events) {
      if (e.name.rfind("step body", 0) != 0) continue;
      const auto st = named(ready[c], "ProfilerStep#" + e.name.substr(10));
      ASSERT_EQ(st.size(), 1u);
      EXPECT_GE(e.start_ns, st[0]->start_ns);
      EXPECT_LE(e.end_ns, st[0]->end_ns);
    }
  }
  EXPECT_EQ(p.trace().events.size(), ready[1].events.size());
  EXPECT_FALSE(record_function_active());
}

TEST(ProfilerRecording, ScheduleActions) {
  Schedule s = Schedule::parse("2,1,3");
  EXPECT_EQ(s.repeat, 1);
  using A = Schedule::Action;
  const std::vector<A> want = {A::None,   A::None,          A::Warmup, A::Record,
                               A::Record, A::RecordAndSave, A::None,   A::None};
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(s.action_at(static_cast<int64_t>(i)), want[i]) << i;
  Schedule forever = Schedule::parse("0,0,2,0");
  EXPECT_EQ(forever.action_at(1001), A::RecordAndSave);
  EXPECT_THROW(Schedule::parse("5,2"), ValueError);
  EXPECT_THROW(Schedule::parse("5,x,2"), ValueError);
  EXPECT_THROW(Schedule::parse("1,1,0"), ValueError);
  EXPECT_THROW(Schedule::parse("-1,1,1"), ValueError);
  try {
    Schedule::parse("a,b");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'a,b'"), std::string::npos);
  }
}

TEST(ProfilerRecording, AllocatorEvents) {
  int x = 0;
  record_memory(&x, 100, 100, 2048);  // no profile: ignored
  Profile p;
  p.start();
  record_memory(&x, 512, 512, 2048);
  record_memory(&x, 256, 768, 2048);
  record_memory(&x, -512, 256, 2048);
  p.stop();
  record_memory(&x, 100, 356, 2048);  // stopped: ignored
  const auto& m = p.trace().memory;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].delta_bytes, 512);
  EXPECT_EQ(m[1].allocated, 768);
  EXPECT_EQ(m[2].delta_bytes, -512);
  EXPECT_EQ(m[2].reserved, 2048);
  EXPECT_EQ(m[0].ptr, reinterpret_cast<uint64_t>(&x));
  for (size_t i = 1; i < m.size(); ++i) EXPECT_LE(m[i - 1].ts_ns, m[i].ts_ns);

  ProfileOptions no_mem;
  no_mem.profile_memory = false;
  Profile q(no_mem);
  q.start();
  record_memory(&x, 1, 1, 1);
  q.stop();
  EXPECT_TRUE(q.trace().memory.empty());
}

TEST(ProfilerRecording, CachingAllocatorReportsItsEvents) {
  memory::SimulatedDevice device(size_t{1} << 30);
  memory::CachingAllocator alloc(device);
  Profile p;
  p.start();
  void* a = alloc.allocate(1000);
  void* b = alloc.allocate(size_t{3} << 20);
  alloc.free(a);
  p.stop();
  alloc.free(b);
  const auto& m = p.trace().memory;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].ptr, reinterpret_cast<uint64_t>(a));
  EXPECT_EQ(m[0].delta_bytes, 1024);  // rounded to 512 bytes
  EXPECT_EQ(m[0].allocated, 1024);
  EXPECT_EQ(m[1].delta_bytes, int64_t{3} << 20);
  EXPECT_EQ(m[1].allocated, 1024 + (int64_t{3} << 20));
  EXPECT_EQ(m[2].delta_bytes, -1024);
  EXPECT_EQ(m[2].allocated, int64_t{3} << 20);
  for (const MemorySample& s : m) EXPECT_GE(s.reserved, s.allocated);
  // They become counter tracks in the Chrome trace.
  const std::string json = chrome_trace_json(p.trace());
  EXPECT_NE(json.find("\"allocated bytes\""), std::string::npos);
  EXPECT_NE(json.find("\"reserved bytes\""), std::string::npos);
}

// Reserved bytes that change without an allocation or a free (empty_cache returning segments or
// unmapping pages) reach the trace as samples of 0 bytes.
TEST(ProfilerRecording, ReservedChangesAloneAreSampled) {
  for (const char* policy : {"default", "expandable"}) {
    memory::SimulatedDevice device(size_t{1} << 30);
    memory::CachingAllocator alloc(device, memory::AllocatorConfig::policy(policy));
    void* a = alloc.allocate(size_t{3} << 20);
    alloc.free(a);  // cached
    Profile p;
    p.start();
    alloc.empty_cache();
    p.stop();
    const auto& m = p.trace().memory;
    ASSERT_FALSE(m.empty()) << policy;
    for (const MemorySample& s : m) EXPECT_EQ(s.delta_bytes, 0) << policy;
    EXPECT_EQ(m.back().reserved, 0) << policy;
    EXPECT_EQ(m.back().allocated, 0) << policy;
  }
}

TEST(ProfilerRecording, CollectivesWithBytes) {
  auto store = std::make_shared<dist::HashStore>();
  auto pg = dist::ProcessGroup::create(store, 0, 1);
  Tensor t = ones({1000});
  Profile p;
  p.start();
  pg->allreduce(t);
  pg->barrier();
  p.stop();
  const auto ar = named(p.trace(), "dist::allreduce");
  ASSERT_EQ(ar.size(), 1u) << summarize(p.trace());
  EXPECT_EQ(ar[0]->kind, EventKind::Collective);
  EXPECT_EQ(ar[0]->bytes, 4000);
  const auto bar = named(p.trace(), "dist::barrier");
  ASSERT_EQ(bar.size(), 1u);
  EXPECT_EQ(bar[0]->bytes, -1);
}

TEST(ProfilerRecording, ThreadsAreShownByTheNamesTheyGaveThemselves) {
  Profile p;
  p.start();
  std::atomic<bool> named{false}, stopped{false};
  std::thread t([&] {
    Tensor a = ones({4});
    a = add(a, a);  // recorded before the thread names itself: the name still applies
    set_thread_name("training");
    a = add(a, a);
    named = true;
    while (!stopped) std::this_thread::yield();  // alive when the trace is harvested
  });
  while (!named) std::this_thread::yield();
  p.stop();
  stopped = true;
  t.join();
  std::set<std::string> labels;
  for (const OpStats& s : key_averages(p.trace())) {
    if (s.name.rfind("loom::add", 0) == 0) labels.insert(s.thread);
  }
  EXPECT_EQ(labels, (std::set<std::string>{"training"}));
}

TEST(ProfilerRecording, DataLoaderStages) {
  loom::testing::TempDir tmp{"loom-prof-data"};
  {
    data::Schema schema;
    schema.columns.push_back(data::Column{"id", data::ColumnType::Int, DType::Int64, {}});
    data::ShardWriter w(tmp.path(), schema, data::ShardWriterOptions{});
    for (int64_t i = 0; i < 64; ++i) w.add({data::Value::of_int(i)});
    w.finish();
  }
  auto ds = std::make_shared<data::ShardReader>(tmp.path());
  for (int workers : {0, 1}) {
    data::LoaderOptions o;
    o.batch_size = 16;
    o.workers = workers;
    Profile p;
    p.start();
    {
      data::Loader loader(ds, o);  // starts epoch 0
      int batches = 0;
      while (auto b = loader.next()) ++batches;
      EXPECT_EQ(batches, 4);
    }
    p.stop();
    const Trace& t = p.trace();
    const auto waits = named(t, "data.wait");
    const auto reads = named(t, "data.read");
    const auto decodes = named(t, "data.decode");
    EXPECT_EQ(waits.size(), 4u) << workers;
    EXPECT_EQ(reads.size(), 4u) << workers;
    EXPECT_EQ(decodes.size(), 4u) << workers;
    ASSERT_FALSE(waits.empty());
    ASSERT_FALSE(reads.empty());
    EXPECT_EQ(waits[0]->kind, EventKind::DataStage);
    if (workers == 0) {
      EXPECT_EQ(reads[0]->tid, waits[0]->tid);  // built inline, inside data.wait
    } else {
      EXPECT_NE(reads[0]->tid, waits[0]->tid);
      // The worker named itself (and had exited before the trace was harvested).
      EXPECT_EQ(thread_label(t, reads[0]->tid), "loader worker 0");
      EXPECT_EQ(thread_label(t, waits[0]->tid), "main");
      for (const OpStats& s : key_averages(t)) {
        if (s.name == "data.read" || s.name == "data.decode") {
          EXPECT_EQ(s.thread, "loader worker 0") << s.name;
        } else if (s.name == "data.wait") {
          EXPECT_EQ(s.thread, "main");
        }
      }
    }
  }
}

class FakeKernels final : public ActivitySource {
 public:
  std::string name() const override { return "fake"; }
  void start() override { ++starts; }
  void stop() override { ++stops; }
  void collect(Trace& t) override {
    if (!enabled) return;
    Event e;
    e.kind = EventKind::Kernel;
    e.name = "fake_kernel";
    e.tid = 7;
    e.start_ns = origin + 10;
    e.end_ns = origin + 20;
    t.events.push_back(e);
    t.threads.push_back(ThreadInfo{7, "stream 7"});
  }
  int starts = 0, stops = 0;
  int64_t origin = 0;
  bool enabled = true;  // sources stay registered: later tests turn it off
};

TEST(ProfilerRecording, ActivitySourcesAddTheirEvents) {
  auto src = std::make_shared<FakeKernels>();
  register_activity_source(src);
  Profile p;
  p.start();
  p.stop();
  EXPECT_EQ(src->starts, 1);
  EXPECT_EQ(src->stops, 1);
  const auto k = named(p.trace(), "fake_kernel");
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0]->kind, EventKind::Kernel);
  EXPECT_EQ(k[0]->duration_ns(), 10);
  // Kernels are not operators: key_averages leaves them out.
  for (const OpStats& s : key_averages(p.trace())) EXPECT_NE(s.name, "fake_kernel");
  src->enabled = false;
}

}  // namespace
}  // namespace loom::profiler
