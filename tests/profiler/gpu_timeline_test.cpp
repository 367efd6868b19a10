// The pure part of GPU tracing on synthetic CUPTI records (no GPU needed): the clock mapping,
// device lanes linked to their operators, device time per operator in the table, GPU busy and idle
// time per step, the Chrome trace's device processes and flows (and reading them back); and the
// message a profile that asks for the GPU gets where it cannot have it.
#include <gtest/gtest.h>

#include "loom/error.h"
#include "loom/profiler.h"

namespace loom::profiler {
namespace {

Event cpu(EventKind kind, const std::string& name, int64_t s, int64_t e, uint64_t corr = 0) {
  Event x;
  x.kind = kind;
  x.name = name;
  x.tid = 1;
  x.start_ns = s;
  x.end_ns = e;
  x.correlation_id = corr;
  return x;
}

GpuActivity act(EventKind kind, const std::string& name, uint64_t s, uint64_t e, uint32_t stream,
                uint32_t corr, int32_t device = 0) {
  GpuActivity a;
  a.kind = kind;
  a.name = name;
  a.start = s;
  a.end = e;
  a.stream = stream;
  a.correlation = corr;
  a.device = device;
  return a;
}

// The GPU clock runs 1'000'000 ns ahead of the host's; the trace's origin is host time 500.
constexpr uint64_t kAhead = 1'000'000;
ClockSync offset_clock() {
  ClockSync c;
  c.gpu_start = kAhead + 500;
  c.host_start = 500;
  c.gpu_end = kAhead + 100'500;
  c.host_end = 100'500;
  return c;
}

// One step [0, 1000) of trace time: "outer" (id 1) calls "inner" (id 2); "other" (id 3) after.
// CUPTI correlation ids 10, 11 ran under inner, 12 under outer itself, 13 under other, 14 under
// no event at all.
Trace traced_step() {
  Trace t;
  t.pid = 42;
  t.origin_ns = 500;
  t.threads = {{1, "main"}};
  t.events = {
      cpu(EventKind::Step, "ProfilerStep#0", 0, 1000),
      cpu(EventKind::Operator, "outer", 100, 400, 1),
      cpu(EventKind::Operator, "inner", 150, 250, 2),
      cpu(EventKind::Operator, "other", 500, 600, 3),
  };
  make_nested(t);
  const uint64_t g = kAhead + 500;  // GPU time of trace time 0
  const std::vector<GpuActivity> acts = {
      act(EventKind::Kernel, "k_inner_a", g + 200, g + 300, 7, 10),
      act(EventKind::Memcpy, "Memcpy HtoD", g + 300, g + 350, 7, 11),
      act(EventKind::Kernel, "k_outer", g + 320, g + 420, 9, 12),  // other stream, overlaps
      act(EventKind::Memset, "Memset", g + 600, g + 700, 7, 13),
      act(EventKind::GpuSync, "cudaStreamSynchronize", g + 700, g + 900, 7, 13),  // a wait
      act(EventKind::Kernel, "k_orphan", g + 1200, g + 1300, 7, 14),              // after the step
      act(EventKind::Kernel, "k_failed", g + 50, g + 40, 7, 10),  // end < start: dropped
  };
  const std::vector<ExternalCorrelation> links = {{10, 2}, {11, 2}, {12, 1}, {13, 3}};
  EXPECT_EQ(add_gpu_activities(t, acts, links, offset_clock()), 5u);
  return t;
}

const Event* named(const Trace& t, const std::string& name) {
  for (const Event& e : t.events) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

const OpStats* stats_of(const std::vector<OpStats>& v, const std::string& name) {
  for (const OpStats& s : v) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

TEST(GpuTimeline, ClockSyncMapsOffsetAndDrift) {
  ClockSync c;
  c.gpu_start = 5000;
  c.host_start = 1000;
  c.gpu_end = 5000;  // one reading: the offset only
  c.host_end = 1000;
  EXPECT_EQ(c.to_host(5000), 1000);
  EXPECT_EQ(c.to_host(7000), 3000);
  EXPECT_EQ(c.to_host(4000), 0);  // before the first reading
  // The GPU clock ran 1% fast over the recording: its 2'020'000 ns were the host's 2'000'000.
  c.gpu_end = 5000 + 2'020'000;
  c.host_end = 1000 + 2'000'000;
  EXPECT_EQ(c.to_host(5000), 1000);
  EXPECT_EQ(c.to_host(5000 + 2'020'000), 1000 + 2'000'000);
  EXPECT_EQ(c.to_host(5000 + 1'010'000), 1000 + 1'000'000);
}

TEST(GpuTimeline, ActivitiesBecomeLanesLinkedToTheirOperators) {
  const Trace t = traced_step();
  const Event* k = named(t, "k_inner_a");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->kind, EventKind::Kernel);
  EXPECT_EQ(k->device, 0);
  EXPECT_EQ(k->tid, 7u);
  EXPECT_EQ(k->start_ns, 200);  // mapped to the host clock, relative to the origin
  EXPECT_EQ(k->end_ns, 300);
  EXPECT_EQ(k->correlation_id, 2u);  // inner's
  EXPECT_EQ(named(t, "Memcpy HtoD")->kind, EventKind::Memcpy);
  EXPECT_EQ(named(t, "k_outer")->correlation_id, 1u);
  EXPECT_EQ(named(t, "k_outer")->tid, 9u);
  EXPECT_EQ(named(t, "Memset")->kind, EventKind::Memset);
  EXPECT_EQ(named(t, "cudaStreamSynchronize")->kind, EventKind::GpuSync);
  EXPECT_EQ(named(t, "k_orphan")->correlation_id, 0u);
  EXPECT_EQ(named(t, "k_failed"), nullptr);
  // CPU lanes first, then (device, stream) lanes, each in time order.
  EXPECT_EQ(t.events.front().device, -1);
  for (size_t i = 1; i < t.events.size(); ++i) {
    const Event& a = t.events[i - 1];
    const Event& b = t.events[i];
    EXPECT_TRUE(a.device < b.device || (a.device == b.device && a.tid <= b.tid)) << i;
  }
}

TEST(GpuTimeline, OverlapsOnOneStreamAreTrimmed) {
  Trace t;
  const std::vector<GpuActivity> acts = {
      act(EventKind::Kernel, "a", 100, 200, 3, 1),
      act(EventKind::Kernel, "b", 199, 260, 3, 2),  // starts 1 ns early (clock error)
      act(EventKind::Kernel, "c", 120, 150, 4, 3),  // another stream: untouched
  };
  ClockSync c;  // identity
  EXPECT_EQ(add_gpu_activities(t, acts, {}, c), 0u);
  EXPECT_EQ(named(t, "b")->start_ns, 200);
  EXPECT_EQ(named(t, "b")->end_ns, 260);
  EXPECT_EQ(named(t, "a")->end_ns, 200);
  EXPECT_EQ(named(t, "c")->start_ns, 120);
  EXPECT_EQ(make_nested(t), 0);
}

TEST(GpuTimeline, OperatorTableCountsDeviceTime) {
  const auto k = key_averages(traced_step());
  const OpStats* outer = stats_of(k, "outer");
  const OpStats* inner = stats_of(k, "inner");
  const OpStats* other = stats_of(k, "other");
  ASSERT_TRUE(outer && inner && other);
  EXPECT_EQ(inner->self_cuda_ns, 150);  // kernel 100 + copy 50
  EXPECT_EQ(inner->cuda_total_ns, 150);
  EXPECT_EQ(outer->self_cuda_ns, 100);   // its own kernel
  EXPECT_EQ(outer->cuda_total_ns, 250);  // and inner's
  EXPECT_EQ(other->self_cuda_ns, 100);   // the memset; the synchronisation is not device work
  EXPECT_EQ(other->cuda_total_ns, 100);
  for (const OpStats& s : k) EXPECT_FALSE(is_device_kind(s.kind)) << s.name;
  const std::string table = format_table(k);
  EXPECT_NE(table.find("CUDA total"), std::string::npos) << table;
  EXPECT_NE(table.find("Self CUDA"), std::string::npos) << table;
  // Without device activities the columns stay away.
  Trace cpu_only;
  cpu_only.events = {cpu(EventKind::Operator, "x", 0, 10)};
  EXPECT_EQ(format_table(key_averages(cpu_only)).find("CUDA"), std::string::npos);
}

TEST(GpuTimeline, StepBreakdownCountsBusyAndIdle) {
  const auto steps = step_breakdown(traced_step());
  ASSERT_EQ(steps.size(), 1u);
  const StepBreakdown& b = steps[0];
  EXPECT_TRUE(b.has_gpu);
  // Union within [0, 1000): [200, 420) from the kernels and copy of two streams, [600, 700) the
  // memset; the synchronisation and the kernel after the step do not count.
  EXPECT_EQ(b.gpu_busy_ns, 320);
  EXPECT_EQ(b.gpu_idle_ns, 680);
  EXPECT_EQ(b.compute_ns, 400);  // the CPU side is unchanged by device events
  const std::string table = format_step_breakdown(steps);
  EXPECT_NE(table.find("GPU busy ms"), std::string::npos) << table;
  const std::string summary = summarize(traced_step());
  EXPECT_NE(summary.find("device activities on 2 stream(s)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("device activities by device time"), std::string::npos) << summary;
  EXPECT_NE(summary.find("k_outer"), std::string::npos) << summary;

  Trace cpu_only;
  cpu_only.events = {cpu(EventKind::Step, "ProfilerStep#0", 0, 10)};
  const auto plain = step_breakdown(cpu_only);
  EXPECT_FALSE(plain[0].has_gpu);
  EXPECT_EQ(format_step_breakdown(plain).find("GPU"), std::string::npos);
}

TEST(GpuTimeline, ChromeTraceHasDeviceLanesAndFlows) {
  const Trace t = traced_step();
  const std::string json = chrome_trace_json(t);
  const std::string gpu_pid = std::to_string(kGpuPidBase);
  EXPECT_NE(json.find("\"process_name\", \"pid\": " + gpu_pid +
                      ", \"tid\": 0, \"args\": "
                      "{\"name\": \"GPU 0\"}"),
            std::string::npos);
  EXPECT_NE(json.find("\"thread_name\", \"pid\": " + gpu_pid +
                      ", \"tid\": 7, \"args\": {\"name\": \"stream 7\"}"),
            std::string::npos);
  EXPECT_NE(json.find("\"cat\": \"kernel\", \"name\": \"k_inner_a\", \"pid\": " + gpu_pid +
                      ", \"tid\": 7"),
            std::string::npos);
  // A flow per linked activity: 5 starts in the operators and 5 ends in the activities.
  size_t flows = 0;
  for (size_t p = json.find("\"cat\": \"ac2g\""); p != std::string::npos;
       p = json.find("\"cat\": \"ac2g\"", p + 1)) {
    ++flows;
  }
  EXPECT_EQ(flows, 10u);

  const Trace back = parse_chrome_trace(json, "gpu trace");
  ASSERT_EQ(back.events.size(), t.events.size());
  const Event* k = named(back, "k_inner_a");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->device, 0);
  EXPECT_EQ(k->tid, 7u);
  EXPECT_EQ(k->correlation_id, 2u);
  EXPECT_EQ(named(back, "inner")->correlation_id, 2u);
  EXPECT_EQ(named(back, "Memset")->kind, EventKind::Memset);
  EXPECT_EQ(named(back, "cudaStreamSynchronize")->kind, EventKind::GpuSync);
  EXPECT_EQ(back.pid, 42);
  EXPECT_EQ(back.threads.size(), 1u);  // device streams are lanes, not threads
  EXPECT_EQ(stats_of(key_averages(back), "outer")->cuda_total_ns, 250);
  EXPECT_EQ(step_breakdown(back)[0].gpu_busy_ns, 320);
}

TEST(GpuTimeline, AskingForTheGpuWithoutOneSaysWhy) {
  const std::string why = gpu_tracing_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is visible (tests/cuda covers this case)";
  ProfileOptions o;
  o.gpu = true;
  Profile p(o);
  try {
    p.start();
    FAIL() << "start() traced the CPU only, in silence";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("GPU activity tracing"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(p.is_recording());
  // Nothing was left half-started: another profile records.
  Profile q;
  q.start();
  q.stop();
}

}  // namespace
}  // namespace loom::profiler
