// The Chrome trace: its structure checked by parsing it back with loom::Json (every complete event
// has ts/dur/pid/tid, events nest per thread, flows pair up, counters move forward in time, threads
// are named), gzip output, reading traces back, and the repair of overlapping events.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "loom/autograd.h"
#include "loom/json.h"
#include "loom/nn.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "loom/profiler.h"
#include "loom/record_function.h"
#include "temp_dir.h"

namespace loom::profiler {
namespace {

int64_t ns_of(const Json& us) {
  return std::llround(us.as_double() * 1000.0);
}

// A few training steps of a small MLP, with a worker thread, allocator events and a user scope.
Trace training_trace() {
  Generator gen(0);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(20, 16, true, &gen));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(16, 4, true, &gen));
  optim::SGDOptions so;
  so.lr = 0.1;
  so.momentum = 0.9;
  optim::SGD opt(model->parameters(), so);
  Tensor x = rand({8, 20}, {}, gen);
  Tensor y = randint(0, 4, {8}, DType::Int64, gen);
  Profile p;
  p.start();
  int64_t allocated = 0;
  for (int step = 0; step < 3; ++step) {
    std::thread side([] {
      RecordFunctionGuard g("side work");
      Tensor a = ones({64});
      for (int i = 0; i < 5; ++i) a = mul(a, a);
    });
    {
      RecordFunctionGuard g("forward");
      opt.zero_grad();
      Tensor loss = cross_entropy(model->forward(x), y);
      allocated += 4096;
      record_memory(reinterpret_cast<void*>(0x1000 + step), 4096, allocated, 1 << 20);
      loss.backward();
    }
    opt.step();
    side.join();
    p.step();
  }
  p.stop();
  return p.trace();
}

struct Parsed {
  std::vector<const Json*> complete, flows_s, flows_f, counters, meta, instants;
};

Parsed classify(const Json& doc) {
  Parsed p;
  for (const Json& e : doc.at("traceEvents").as_array()) {
    const std::string& ph = e.at("ph").as_string();
    if (ph == "X") p.complete.push_back(&e);
    if (ph == "s") p.flows_s.push_back(&e);
    if (ph == "f") p.flows_f.push_back(&e);
    if (ph == "C") p.counters.push_back(&e);
    if (ph == "M") p.meta.push_back(&e);
    if (ph == "i") p.instants.push_back(&e);
  }
  return p;
}

// The checks a trace viewer relies on.
void validate(const Json& doc, bool expect_flows, bool expect_memory) {
  Parsed p = classify(doc);
  ASSERT_FALSE(p.complete.empty());
  // Every complete event has name, ts, dur, pid, tid; durations are not negative.
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> by_tid;
  for (const Json* e : p.complete) {
    for (const char* key : {"name", "ts", "dur", "pid", "tid", "cat"}) {
      ASSERT_TRUE(e->contains(key)) << key << " missing in " << e->dump();
    }
    ASSERT_TRUE(e->at("ts").is_number());
    ASSERT_TRUE(e->at("dur").is_number());
    ASSERT_GE(e->at("dur").as_double(), 0.0) << e->dump();
    const int64_t ts = ns_of(e->at("ts"));
    by_tid[e->at("tid").as_int()].push_back({ts, ts + ns_of(e->at("dur"))});
  }
  // Strict nesting per thread: an event that starts inside another ends inside it.
  for (auto& [tid, v] : by_tid) {
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<int64_t> open;
    for (auto& [s, e] : v) {
      while (!open.empty() && open.back() <= s) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(e, open.back()) << "tid " << tid << " event [" << s << ", " << e << ")";
      }
      open.push_back(e);
    }
  }
  // Flows: each id has one start and one finish, the finish binds to its enclosing slice, and
  // both ends sit inside a complete event of their thread.
  std::map<int64_t, int> starts, finishes;
  auto inside_some_event = [&](const Json* f) {
    const int64_t ts = ns_of(f->at("ts"));
    for (auto& [s, e] : by_tid[f->at("tid").as_int()]) {
      if (s <= ts && ts <= e) return true;
    }
    return false;
  };
  for (const Json* f : p.flows_s) {
    ++starts[f->at("id").as_int()];
    EXPECT_TRUE(inside_some_event(f)) << f->dump();
  }
  for (const Json* f : p.flows_f) {
    ++finishes[f->at("id").as_int()];
    EXPECT_EQ(f->at("bp").as_string(), "e");
    EXPECT_TRUE(inside_some_event(f)) << f->dump();
  }
  EXPECT_EQ(starts.size(), finishes.size());
  for (auto& [id, n] : starts) {
    EXPECT_EQ(n, 1) << id;
    EXPECT_EQ(finishes[id], 1) << id;
  }
  if (expect_flows) {
    EXPECT_FALSE(starts.empty());
  }
  // Each flow's start comes before its finish.
  std::map<int64_t, int64_t> start_ts;
  for (const Json* f : p.flows_s) start_ts[f->at("id").as_int()] = ns_of(f->at("ts"));
  for (const Json* f : p.flows_f) EXPECT_LE(start_ts[f->at("id").as_int()], ns_of(f->at("ts")));
  // Counters: per track, timestamps never go back.
  std::map<std::string, int64_t> last;
  for (const Json* c : p.counters) {
    const std::string& name = c->at("name").as_string();
    const int64_t ts = ns_of(c->at("ts"));
    if (last.count(name)) {
      EXPECT_GE(ts, last[name]) << name;
    }
    last[name] = ts;
    EXPECT_TRUE(c->at("args").at("bytes").is_int());
  }
  if (expect_memory) {
    EXPECT_TRUE(last.count("allocated bytes"));
    EXPECT_TRUE(last.count("reserved bytes"));
    EXPECT_FALSE(p.instants.empty());
  }
  // Metadata: the process and every thread with events are named.
  std::set<int64_t> named;
  bool process = false;
  for (const Json* m : p.meta) {
    if (m->at("name").as_string() == "thread_name") named.insert(m->at("tid").as_int());
    if (m->at("name").as_string() == "process_name") process = true;
    EXPECT_TRUE(m->at("args").contains("name") || m->at("args").contains("sort_index"));
  }
  EXPECT_TRUE(process);
  for (auto& [tid, v] : by_tid) EXPECT_TRUE(named.count(tid)) << "thread " << tid << " has no name";
}

TEST(ChromeTrace, StructureOfATrainingTrace) {
  const Trace t = training_trace();
  const Json doc = Json::parse(chrome_trace_json(t), "trace");
  validate(doc, /*expect_flows=*/true, /*expect_memory=*/true);
  Parsed p = classify(doc);
  std::set<std::string> cats;
  int steps = 0;
  for (const Json* e : p.complete) {
    cats.insert(e->at("cat").as_string());
    steps += e->at("name").as_string().rfind("ProfilerStep#", 0) == 0;
  }
  EXPECT_EQ(steps, 3);
  EXPECT_TRUE(cats.count("cpu_op"));
  EXPECT_TRUE(cats.count("autograd"));
  EXPECT_TRUE(cats.count("user_annotation"));
  // Operators carry their input shapes.
  bool dims = false;
  for (const Json* e : p.complete) {
    if (const Json* a = e->find("args"); a && a->contains("Input Dims")) {
      dims = true;
      EXPECT_TRUE(a->at("Input Dims").is_array());
      EXPECT_EQ(a->at("Input Dims").size(), a->at("Input type").size());
    }
  }
  EXPECT_TRUE(dims);
}

TEST(ChromeTrace, WrittenPlainAndGzipAndReadBack) {
  const Trace t = training_trace();
  loom::testing::TempDir dir("loom-trace");
  const std::string plain = dir / "t.json", gz = dir / "t.json.gz";
  write_chrome_trace(t, plain);
  write_chrome_trace(t, gz);
  // The .gz file is gzip (magic bytes) and smaller.
  std::ifstream in(gz, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  in.read(reinterpret_cast<char*>(magic), 2);
  EXPECT_EQ(magic[0], 0x1f);
  EXPECT_EQ(magic[1], 0x8b);
  for (const std::string& path : {plain, gz}) {
    Trace r = read_chrome_trace(path);
    ASSERT_EQ(r.events.size(), t.events.size()) << path;
    EXPECT_EQ(r.memory.size(), t.memory.size());
    EXPECT_EQ(r.threads.size(), t.threads.size());
    EXPECT_EQ(make_nested(r), 0);  // loom's traces nest as written
    for (size_t i = 0; i < t.events.size(); ++i) {
      EXPECT_EQ(r.events[i].name, t.events[i].name);
      EXPECT_EQ(r.events[i].kind, t.events[i].kind) << t.events[i].name;
      EXPECT_EQ(r.events[i].start_ns, t.events[i].start_ns);
      EXPECT_EQ(r.events[i].end_ns, t.events[i].end_ns);
      EXPECT_EQ(r.events[i].input_shapes, t.events[i].input_shapes);
      EXPECT_EQ(r.events[i].fwd_thread, t.events[i].fwd_thread);
    }
    // The same analysis either way.
    const auto ka = key_averages(t), kb = key_averages(r);
    ASSERT_EQ(ka.size(), kb.size());
    for (size_t i = 0; i < ka.size(); ++i) {
      EXPECT_EQ(ka[i].name, kb[i].name);
      EXPECT_EQ(ka[i].self_ns, kb[i].self_ns);
    }
    EXPECT_EQ(step_breakdown(r).size(), 3u);
  }
}

TEST(ChromeTrace, OverlappingEventsAreRepaired) {
  Trace t;
  t.pid = 1;
  auto ev = [](const char* name, uint64_t tid, int64_t s, int64_t e) {
    Event x;
    x.kind = EventKind::UserScope;
    x.name = name;
    x.tid = tid;
    x.start_ns = s;
    x.end_ns = e;
    return x;
  };
  t.events = {ev("parent", 1, 0, 100),  ev("straddles", 1, 50, 150),    ev("child", 1, 60, 70),
              ev("after", 1, 100, 120), ev("other thread", 2, 40, 160), ev("backwards", 1, 10, 5)};
  t.threads = {{1, "a"}, {2, "b"}};
  EXPECT_EQ(make_nested(t), 2);  // "straddles" clamped to 100, "backwards" dropped
  ASSERT_EQ(t.events.size(), 5u);
  for (const Event& e : t.events) {
    if (e.name == "straddles") {
      EXPECT_EQ(e.end_ns, 100);
    }
  }
  validate(Json::parse(chrome_trace_json(t), "repaired"), false, false);
  EXPECT_EQ(make_nested(t), 0);
}

TEST(ChromeTrace, NamesAreEscaped) {
  Trace t;
  Event e;
  e.kind = EventKind::UserScope;
  e.name = "quote \" backslash \\ newline \n tab \t";
  e.tid = 3;
  e.end_ns = 1500;
  t.events.push_back(e);
  t.threads.push_back({3, "thread \"3\""});
  const Trace r = parse_chrome_trace(chrome_trace_json(t), "escaped");
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].name, e.name);
  EXPECT_EQ(r.events[0].duration_ns(), 1500);
  EXPECT_EQ(r.threads[0].name, "thread \"3\"");
}

}  // namespace
}  // namespace loom::profiler
