// A profile's allocator events as an allocation trace (Note [profile as alloc trace]): matching by
// address, operators from the enclosing events, step markers from ProfilerStep#N, and a real
// profile of a caching allocator replayed to the peak its own counters show.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "loom/error.h"
#include "loom/memory/alloc_trace.h"
#include "loom/ops.h"
#include "loom/profiler.h"
#include "test_errors.h"

namespace loom::profiler {
namespace {

using loom::testing::error_of;
using memory::AllocEvent;

Event ev(EventKind kind, const std::string& name, int64_t start, int64_t end, uint64_t tid = 1) {
  Event e;
  e.kind = kind;
  e.name = name;
  e.start_ns = start;
  e.end_ns = end;
  e.tid = tid;
  return e;
}

MemorySample mem(int64_t ts, uint64_t ptr, int64_t delta, int64_t stream = 0, uint64_t tid = 1) {
  MemorySample m;
  m.ts_ns = ts;
  m.ptr = ptr;
  m.delta_bytes = delta;
  m.stream = stream;
  m.tid = tid;
  return m;
}

std::string describe(const memory::AllocTrace& t, const AllocEvent& e) {
  switch (e.op) {
    case AllocEvent::Op::Alloc:
      return "a" + std::to_string(e.id) + ":" + std::to_string(e.size) + ":" +
             std::to_string(e.stream) + ":" + std::string(t.context_of(e));
    case AllocEvent::Op::Free:
      return "f" + std::to_string(e.id);
    case AllocEvent::Op::Step:
      return "s" + std::to_string(e.id);
  }
  return "?";
}

TEST(ProfileAllocTrace, MatchesByAddressNamesOperatorsAndMarksSteps) {
  Trace t;
  t.events = {ev(EventKind::Step, "ProfilerStep#0", 0, 100),
              ev(EventKind::Operator, "loom::mm", 10, 30),
              ev(EventKind::Operator, "loom::linear", 35, 60),
              ev(EventKind::Operator, "loom::add", 40, 50),
              ev(EventKind::Backward, "AddBackward", 120, 140),
              ev(EventKind::Step, "ProfilerStep#1", 100, 200),
              ev(EventKind::Operator, "loom::exp", 10, 30, /*tid=*/2)};
  t.memory = {mem(5, 0xA, 1024),        // inside no operator
              mem(15, 0xB, 2048, 3),    // loom::mm, stream 3
              mem(16, 0xD, 512, 0, 2),  // the other thread's loom::exp
              mem(45, 0xC, 512),        // loom::add, inside loom::linear
              mem(55, 0xB, -2048),      // freed
              mem(57, 0xC0FFEE, 0),     // only reserved bytes changed: no event
              mem(70, 0xE, -4096),      // allocated before the window: dropped
              mem(80, 0xB, 4096),       // the address again
              mem(85, 0xC, 1536),       // C again without a recorded free: one is put in
              mem(130, 0xA, -1024)};    // in AddBackward
  make_nested(t);
  const memory::AllocTrace out = alloc_trace_of(t, "t.json");
  std::vector<std::string> got;
  for (const AllocEvent& e : out.events) got.push_back(describe(out, e));
  const std::vector<std::string> want = {"s0",
                                         "a0:1024:0:",
                                         "a1:2048:3:loom::mm",
                                         "a2:512:0:loom::exp",
                                         "a3:512:0:loom::add",
                                         "f1",
                                         "a1:4096:0:",
                                         "f3",
                                         "a3:1536:0:",
                                         "s1",
                                         "f0",
                                         "s2"};
  EXPECT_EQ(got, want);
  EXPECT_CONTAINS(out.source, "profiler trace t.json: 10 allocator events on 2 thread(s)");
  EXPECT_CONTAINS(out.source, "1 frees of blocks allocated before the recorded window dropped");
  EXPECT_CONTAINS(out.source, "1 frees not recorded, put back");
  // A valid trace: it survives validation and replays.
  EXPECT_NO_THROW(memory::trace_from_json(memory::trace_to_json(out), "converted"));
  const memory::TraceSummary s = memory::summarize_trace(out);
  EXPECT_EQ(s.steps, 3);
  EXPECT_EQ(memory::replay_trace(out, memory::ReplayOptions{}).ooms, 0);
}

TEST(ProfileAllocTrace, ATraceWithoutAllocatorEventsSaysHowToGetThem) {
  Trace t;
  t.events = {ev(EventKind::Operator, "loom::mm", 10, 30)};
  const std::string msg = error_of<DataError>([&] { (void)alloc_trace_of(t, "p.json.gz"); });
  EXPECT_CONTAINS(msg, "[alloc trace] p.json.gz is a profiler trace without allocator events");
  EXPECT_CONTAINS(msg, "loom train --profile");
}

// A real profile: a caching allocator serves CPU tensors, the profile records its events, the
// Chrome trace goes to a gzip file and back, and its replay reaches exactly the peak of the
// allocated-bytes counter the profile recorded.
TEST(ProfileAllocTrace, AProfiledRunReplaysToThePeakItRecorded) {
  memory::SimulatedDevice device(size_t{1} << 30, /*backed=*/true);
  memory::CachingAllocator cache(device);
  memory::CachingAllocatorAdapter adapter(cache, kCPU);
  Allocator* saved = get_allocator(DeviceType::CPU);
  Trace recorded;
  {
    set_allocator(DeviceType::CPU, &adapter);
    Profile p;
    p.start();
    {
      Tensor w = rand({64, 128});
      for (int64_t b : {16, 48, 8}) {
        Tensor x = rand({b, 64});
        Tensor h = relu(matmul(x, w));
        (void)sum(mul(h, h)).item<float>();
        p.step();
      }
    }
    p.stop();
    set_allocator(DeviceType::CPU, saved);
    recorded = p.trace();
  }
  int64_t peak_counter = 0;
  for (const MemorySample& m : recorded.memory) peak_counter = std::max(peak_counter, m.allocated);
  ASSERT_GT(peak_counter, 0);
  char dir[] = "/tmp/loom_alloc_events_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/p.json.gz";
  write_chrome_trace(recorded, path);
  const memory::AllocTrace t = alloc_trace_of(read_chrome_trace(path), path);
  std::remove(path.c_str());
  rmdir(dir);
  const memory::ReplayResult r = memory::replay_trace(t, memory::ReplayOptions{});
  EXPECT_EQ(r.stats.allocated_bytes.peak, peak_counter);
  EXPECT_GE(memory::summarize_trace(t).steps, 2);
  bool named = false;
  for (const AllocEvent& e : t.events) named = named || t.context_of(e) == "loom::mm";
  EXPECT_TRUE(named);
}

}  // namespace
}  // namespace loom::profiler

namespace loom::profiler {
namespace {

// A device's allocator events get their own counter tracks and keep their device through the
// Chrome trace (the CUDA caching allocator reports cuda:N; the CPU's stay unnamed).
TEST(ProfileMemoryTracks, EachDeviceHasItsOwnCountersAndRoundTrips) {
  Trace t;
  MemorySample cpu;
  cpu.ts_ns = 10;
  cpu.ptr = 64;
  cpu.delta_bytes = 512;
  cpu.allocated = cpu.reserved = 512;
  MemorySample gpu = cpu;
  gpu.ts_ns = 20;
  gpu.ptr = 4096;
  gpu.allocated = 1 << 20;
  gpu.reserved = 2 << 20;
  gpu.device = Device(DeviceType::CUDA, 0);
  t.memory = {cpu, gpu};
  const std::string json = chrome_trace_json(t);
  EXPECT_NE(json.find("\"allocated bytes (cuda:0)\""), std::string::npos);
  EXPECT_NE(json.find("\"allocated bytes\""), std::string::npos);
  const Trace back = parse_chrome_trace(json, "test");
  ASSERT_EQ(back.memory.size(), 2u);
  EXPECT_EQ(back.memory[0].device, kCPU);
  EXPECT_EQ(back.memory[1].device, Device(DeviceType::CUDA, 0));
  EXPECT_EQ(back.memory[1].reserved, 2 << 20);
}

}  // namespace
}  // namespace loom::profiler
