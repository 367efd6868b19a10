// Allocation traces: the file format and its errors, RecordingAllocator on a real loom computation,
// and replays checked against the live bytes computed here from the event list.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "loom/error.h"
#include "loom/io.h"
#include "loom/memory/alloc_trace.h"
#include "loom/ops.h"
#include "test_errors.h"
#include "training_trace.h"

namespace loom::memory {
namespace {

namespace fs = std::filesystem;
using loom::testing::error_of;

struct TempDir {
  std::string path;
  TempDir() {
    char buf[] = "/tmp/loom_alloc_trace_XXXXXX";
    path = mkdtemp(buf);
  }
  ~TempDir() { fs::remove_all(path); }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

AllocEvent a(int64_t id, int64_t size, StreamId stream = 0) {
  return {AllocEvent::Op::Alloc, id, size, stream};
}
AllocEvent f(int64_t id) {
  return {AllocEvent::Op::Free, id, 0, 0};
}

bool same_events(const AllocTrace& x, const AllocTrace& y) {
  if (x.events.size() != y.events.size()) return false;
  for (size_t i = 0; i < x.events.size(); ++i) {
    const AllocEvent &p = x.events[i], &q = y.events[i];
    if (p.op != q.op || p.id != q.id || p.size != q.size || p.stream != q.stream) return false;
  }
  return true;
}

// The reference: peak of live requested bytes (and of sizes rounded to 512), straight from events.
struct LivePeak {
  int64_t bytes = 0;
  int64_t rounded = 0;
};
LivePeak live_peak(const AllocTrace& t) {
  std::map<int64_t, int64_t> live;
  int64_t bytes = 0, rounded = 0;
  LivePeak peak;
  for (const AllocEvent& e : t.events) {
    if (e.op == AllocEvent::Op::Step) continue;
    if (e.op == AllocEvent::Op::Alloc) {
      live[e.id] = e.size;
      bytes += e.size;
      rounded += (e.size + 511) / 512 * 512;
    } else {
      bytes -= live.at(e.id);
      rounded -= (live.at(e.id) + 511) / 512 * 512;
      live.erase(e.id);
    }
    peak.bytes = std::max(peak.bytes, bytes);
    peak.rounded = std::max(peak.rounded, rounded);
  }
  return peak;
}

// Installs a RecordingAllocator over the CPU allocator for the scope.
struct Recording {
  Allocator* saved = get_allocator(DeviceType::CPU);
  RecordingAllocator rec{*saved, "test"};
  Recording() { set_allocator(DeviceType::CPU, &rec); }
  ~Recording() { set_allocator(DeviceType::CPU, saved); }
};

TEST(AllocTrace, WriteReadRoundTripKeepsEveryEventAndTheSource) {
  TempDir d;
  AllocTrace t;
  t.source = "round \"trip\"\nwith \xc3\xa9";
  t.events = {a(0, 100), a(1, 0), a(2, 3 << 20, 2), f(1), f(0), a(0, 512, 1), f(2), a(1, 7)};
  const std::string path = d.path + "/t.json";
  write_trace(path, t);
  AllocTrace back = read_trace(path);
  EXPECT_EQ(back.source, t.source);
  EXPECT_TRUE(same_events(back, t));
  EXPECT_TRUE(same_events(trace_from_json(trace_to_json(t), "doc"), t));
  // The written file is the documented JSON.
  Json doc = Json::parse(io::read_file(path), path);
  EXPECT_EQ(doc.at("format").as_string(), "loom-alloc-trace");
  EXPECT_EQ(doc.at("version").as_int(), 2);
  EXPECT_EQ(doc.at("events").at(size_t{2}), Json::array({"a", 2, 3 << 20, 2}));
  EXPECT_EQ(doc.at("events").at(size_t{3}), Json::array({"f", 1}));
  // An empty trace too.
  write_trace(path, AllocTrace{});
  EXPECT_TRUE(read_trace(path).events.empty());
}

TEST(AllocTrace, EveryCorruptFileIsADataErrorNamingTheFileAndWhere) {
  TempDir d;
  const std::string path = d.path + "/bad.json";
  auto error_for = [&](const std::string& text) {
    write_text(path, text);
    return error_of<DataError>([&] { read_trace(path); });
  };
  auto doc = [](const std::string& events,
                const std::string& head = R"("format": "loom-alloc-trace", "version": 1)") {
    return "{" + head + ", \"events\": [" + events + "]}";
  };
  struct Case {
    std::string text;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {doc(R"(["a", 0, 10, 0], ["f", 7])"), "event 1: free of id 7 which was never allocated"},
      {doc(R"(["a", 0, 10, 0], ["f", 0], ["f", 0])"),
       "event 2: free of id 0 which was already freed at event 1"},
      {doc(R"(["a", 0, -5, 0])"), "event 0: negative size -5"},
      {doc(R"(["a", -1, 5, 0])"), "event 0: negative id -1"},
      {doc(R"(["a", 0, 5, -2])"), "event 0: negative stream -2"},
      {doc(R"(["a", 0, 5.5, 0])"), "event 0: size must be an integer but got number 5.5"},
      {doc(R"(["a", 0, "5", 0])"), "event 0: size must be an integer but got string"},
      {doc(R"(["a", 0, 5, 0], ["a", 0, 5, 0])"),
       "event 1: alloc of id 0 which is still live (allocated at event 0)"},
      {doc(R"(["a", 0, 5])"), "event 0: an alloc has 4 or 5 fields"},
      {doc(R"(["a", 0, 5, 0, 2])",
           R"("format": "loom-alloc-trace", "version": 2, "contexts": ["x"])"),
       "event 0: context 2 is not an index into \"contexts\" (1 names)"},
      {doc(R"(["s", 1, 2])"), "event 0: a step marker has 2 fields"},
      {doc(R"(["s", -1])"), "event 0: negative steps -1"},
      {doc("", R"("format": "loom-alloc-trace", "version": 2, "contexts": [3])"),
       "contexts[0] must be a string"},
      {doc(R"(["f", 0, 0])"), "event 0: a free has 2 fields"},
      {doc(R"(["m", 0, 5, 0])"), "event 0: unknown op \"m\" (expected \"a\", \"f\" or \"s\")"},
      {doc(R"({"op": "a"})"),
       "event 0: expected [\"a\", id, bytes, stream(, context)], [\"f\", id] or [\"s\", steps]"},
      {doc("", R"("format": "loom-memory-snapshot", "version": 1)"),
       "not a loom allocation trace (format \"loom-memory-snapshot\""},
      {doc("", R"("version": 1)"), "not a loom allocation trace (format missing"},
      {doc("", R"("format": "loom-alloc-trace", "version": 3)"),
       "unsupported version 3 (this loom reads versions 1 to 2)"},
      {doc("", R"("format": "loom-alloc-trace", "version": "1")"), "unsupported version \"1\""},
      {R"({"format": "loom-alloc-trace", "version": 1})",
       "\"events\" must be an array but got nothing"},
      {R"({"format": "loom-alloc-trace", "version": 1, "source": 3, "events": []})",
       "\"source\" must be a string"},
      {"[1, 2]", "expected a JSON object but got array"},
      {"", "(file of 0 bytes, empty)"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_for(c.text);
    EXPECT_EQ(msg.rfind("[alloc trace] ", 0), 0u) << msg;
    EXPECT_CONTAINS(msg, path);
    EXPECT_CONTAINS(msg, c.expected);
  }
  // Truncated: the byte offset where the text stops.
  AllocTrace t;
  for (int i = 0; i < 50; ++i) t.events.push_back(a(i, 1000 + i));
  write_trace(path, t);
  const std::string whole = io::read_file(path);
  const size_t cut = whole.rfind("],", whole.size() / 2) + 2;  // between two events
  const std::string msg = error_for(whole.substr(0, cut));
  EXPECT_CONTAINS(msg, "[alloc trace] " + path + ": unexpected end of input");
  EXPECT_CONTAINS(msg, "at byte offset " + std::to_string(cut));
  // A file that is not there.
  EXPECT_CONTAINS(error_of<DataError>([&] { read_trace(d.path + "/missing.json"); }),
                  d.path + "/missing.json");
}

TEST(AllocTrace, SummaryMatchesTheLivePeakComputedFromEvents) {
  AllocTrace t;
  t.events = {a(0, 100), a(1, 1000), f(0), a(0, 600), a(2, 0), f(1), f(2), a(1, 10)};
  const TraceSummary s = summarize_trace(t);
  const LivePeak ref = live_peak(t);
  EXPECT_EQ(s.allocs, 5);
  EXPECT_EQ(s.frees, 3);
  EXPECT_EQ(s.peak_live_bytes, ref.bytes);
  EXPECT_EQ(s.peak_live_bytes, 1600);
  EXPECT_EQ(s.peak_live_rounded_bytes, ref.rounded);
  EXPECT_EQ(s.peak_live_rounded_bytes, 1024 + 1024);
  EXPECT_EQ(s.peak_live_blocks, 3);
  EXPECT_EQ(s.live_bytes_at_end, 610);
  EXPECT_EQ(s.min_size, 10);
  EXPECT_EQ(s.max_size, 1000);
  EXPECT_EQ(s.distinct_sizes, 4);
}

TEST(RecordingAllocator, LogsEveryAllocationAndFreeOfALoomComputation) {
  AllocTrace t;
  {
    Recording r;
    {
      Tensor x = ones({64, 64});
      Tensor y = matmul(x, x);
      Tensor z = add(y, 1.0);
      EXPECT_EQ(to_vector<float>(z)[4095], 65.0f);  // recorded memory is real memory
      Tensor empty = zeros({0, 3});
    }
    t = r.rec.trace();
  }
  EXPECT_EQ(t.source, "test");
  ASSERT_FALSE(t.events.empty());
  const TraceSummary s = summarize_trace(t);
  EXPECT_GE(s.allocs, 3);
  EXPECT_EQ(s.allocs, s.frees);  // every tensor is gone
  EXPECT_EQ(s.live_bytes_at_end, 0);
  EXPECT_GE(s.peak_live_bytes, 3 * 64 * 64 * 4);
  std::multiset<int64_t> sizes;
  for (const AllocEvent& e : t.events) {
    if (e.op == AllocEvent::Op::Alloc) sizes.insert(e.size);
  }
  EXPECT_GE(sizes.count(64 * 64 * 4), 3u);
  EXPECT_GE(sizes.count(0), 1u);
  // A valid trace with small ids: ids are reused once freed.
  EXPECT_NO_THROW(trace_from_json(trace_to_json(t), "recorded"));
  for (const AllocEvent& e : t.events) EXPECT_LT(e.id, s.peak_live_blocks);
}

TEST(RecordingAllocator, FreesAfterUninstallAreStillLogged) {
  Allocator* saved = get_allocator(DeviceType::CPU);
  RecordingAllocator rec(*saved);
  Tensor kept;
  set_allocator(DeviceType::CPU, &rec);
  kept = full({10}, 2.0);
  set_allocator(DeviceType::CPU, saved);
  EXPECT_EQ(rec.trace().events.size(), 1u);
  kept = Tensor();
  const AllocTrace t = rec.trace();
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[1].op, AllocEvent::Op::Free);
  EXPECT_EQ(t.events[1].id, t.events[0].id);
}

TEST(RecordingAllocator, ConcurrentAllocationsAndFreesGiveAValidTrace) {
  RecordingAllocator rec(*get_allocator(DeviceType::CPU));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&rec, t] {
      std::vector<DataPtr> held;
      for (int i = 0; i < 500; ++i) {
        held.push_back(rec.allocate(static_cast<size_t>(64 * (t + 1) + i)));
        if (i % 3 == 2) held.erase(held.begin());  // frees interleave with other threads' work
      }
    });
  }
  for (auto& th : threads) th.join();
  const AllocTrace t = rec.trace();
  EXPECT_NO_THROW(trace_from_json(trace_to_json(t), "concurrent"));
  const TraceSummary s = summarize_trace(t);
  EXPECT_EQ(s.allocs, 2000);
  EXPECT_EQ(s.frees, 2000);
  EXPECT_EQ(s.live_bytes_at_end, 0);
}

TEST(TraceReplay, PeakEqualsTheRecordingsOwnPeakOfLiveBytes) {
  AllocTrace t;
  {
    Recording r;
    Tensor w = rand({128, 256});
    for (int64_t b : {7, 64, 33, 128, 5}) {
      Tensor x = rand({b, 128});
      Tensor h = relu(matmul(x, w));
      Tensor s = sum(mul(h, h));
      (void)s.item<float>();
    }
    t = r.rec.trace();
  }
  const LivePeak ref = live_peak(t);
  ASSERT_GT(ref.bytes, 0);
  for (const std::string& policy : replay_policies()) {
    ReplayOptions o;
    o.policy = policy;
    const ReplayResult res = replay_trace(t, o);
    EXPECT_EQ(res.stats.requested_bytes.peak, ref.bytes) << policy;
    EXPECT_EQ(res.ooms, 0) << policy;
    EXPECT_EQ(res.events, static_cast<int64_t>(t.events.size()));
    EXPECT_GE(res.stats.reserved_bytes.peak, res.stats.allocated_bytes.peak) << policy;
    EXPECT_GE(res.peak_ratio(), 1.0) << policy;
    EXPECT_GE(res.fragmentation_at_peak, 0.0) << policy;
    EXPECT_LE(res.fragmentation_at_peak, 1.0) << policy;
  }
  // The default policy hands out exactly the rounded sizes for these small (< 1 MiB) requests.
  const ReplayResult def = replay_trace(t, ReplayOptions{});
  EXPECT_EQ(def.stats.allocated_bytes.peak, ref.rounded);
  EXPECT_EQ(def.policy, "default");
}

TEST(TraceReplay, OutOfMemoryIsCountedAndTheReplayGoesOn) {
  AllocTrace t;
  t.events = {a(0, 3 << 20), a(1, 3 << 20), a(2, 3 << 20), f(1), f(0), a(0, 1000)};
  ReplayOptions o;
  o.capacity = size_t{8} << 20;
  const ReplayResult r = replay_trace(t, o);
  EXPECT_GT(r.ooms, 0);
  EXPECT_LE(r.stats.reserved_bytes.peak, static_cast<int64_t>(o.capacity));
  // With room, none.
  o.capacity = size_t{1} << 30;
  EXPECT_EQ(replay_trace(t, o).ooms, 0);
}

TEST(TraceReplay, SnapshotNamesTheTraceEventOfEachBlock) {
  AllocTrace t;
  t.events = {a(0, 1000), a(1, 5000, 1), f(0)};
  ReplayOptions o;
  o.contexts = true;
  o.keep_snapshot = true;
  const ReplayResult r = replay_trace(t, o);
  std::vector<std::string> contexts;
  for (const auto& seg : r.snapshot.segments) {
    for (const auto& b : seg.blocks) {
      if (b.allocated) contexts.push_back(b.context);
    }
  }
  ASSERT_EQ(contexts.size(), 1u);
  EXPECT_EQ(contexts[0], "trace event 1 (id 1, 5000 bytes)");
  EXPECT_FALSE(r.snapshot.history.empty());
}

TEST(TraceReplay, UnknownPolicyIsAValueErrorListingThem) {
  ReplayOptions o;
  o.policy = "best-ever";
  EXPECT_CONTAINS(error_of<ValueError>([&] { replay_trace(AllocTrace{}, o); }), "no-split");
}

TEST(TrainingTrace, VariableBatchesGiveManySizesAndTheSameTraceForASeed) {
  TrainingTraceOptions o;
  o.steps = 2;
  o.seed = 3;
  const AllocTrace t1 = record_training_trace(o);
  const AllocTrace t2 = record_training_trace(o);
  EXPECT_TRUE(same_events(t1, t2));
  EXPECT_NO_THROW(trace_from_json(trace_to_json(t1), "training"));
  const TraceSummary s = summarize_trace(t1);
  EXPECT_GE(s.max_size, 1024 * 1024 * 4);  // the 1024 x 1024 weight and its Adam moments
  EXPECT_GT(s.distinct_sizes, 10);
  EXPECT_GT(s.live_bytes_at_end, 0);  // parameters and optimizer state stay live
  EXPECT_CONTAINS(t1.source, "2 steps");
  const ReplayResult r = replay_trace(t1, ReplayOptions{});
  EXPECT_EQ(r.stats.requested_bytes.peak, live_peak(t1).bytes);
  EXPECT_GE(r.stats.allocated_bytes.peak, live_peak(t1).rounded);
}

}  // namespace
}  // namespace loom::memory
