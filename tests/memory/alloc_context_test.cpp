// Allocation contexts and step markers (Note [allocation context]): which operator allocated each
// block, through the dispatcher's hook, into recorded traces, replays, snapshots and their peak.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/error.h"
#include "loom/memory/alloc_context.h"
#include "loom/memory/alloc_trace.h"
#include "loom/memory/snapshot_json.h"
#include "loom/nn.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "test_errors.h"
#include "training_trace.h"

namespace loom::memory {
namespace {

using loom::testing::error_of;

// An allocator that remembers the context of each allocation.
class ContextProbe final : public Allocator {
 public:
  explicit ContextProbe(Allocator& inner) : inner_(inner) {}
  DataPtr allocate(size_t n) override {
    const char* c = current_alloc_context();
    seen.push_back(c ? c : "(none)");
    return inner_.allocate(n);
  }
  std::vector<std::string> seen;

 private:
  Allocator& inner_;
};

struct Installed {
  Allocator* saved = get_allocator(DeviceType::CPU);
  explicit Installed(Allocator* a) { set_allocator(DeviceType::CPU, a); }
  ~Installed() { set_allocator(DeviceType::CPU, saved); }
};

TEST(AllocContext, AGuardSetsTheContextForAScopeAndRestoresIt) {
  EXPECT_EQ(current_alloc_context(), nullptr);
  {
    AllocContextGuard outer("outer");
    EXPECT_STREQ(current_alloc_context(), "outer");
    {
      AllocContextGuard inner("inner");
      EXPECT_STREQ(current_alloc_context(), "inner");
    }
    EXPECT_STREQ(current_alloc_context(), "outer");
  }
  EXPECT_EQ(current_alloc_context(), nullptr);
}

TEST(AllocContext, OperatorsNameTheirAllocationsOnlyWhileARequestLives) {
  Tensor a = ones({4}), b = ones({4});
  ContextProbe probe(*get_allocator(DeviceType::CPU));
  {
    Installed use(&probe);
    (void)add(a, b);  // nobody asked: the eager path sets nothing
    EXPECT_FALSE(alloc_contexts_wanted());
    {
      AllocContextRequest want;
      EXPECT_TRUE(alloc_contexts_wanted());
      (void)add(a, b);
      (void)matmul(a.view({2, 2}), b.view({2, 2}));
    }
    (void)mul(a, b);
  }
  ASSERT_GE(probe.seen.size(), 4u);
  EXPECT_EQ(probe.seen.front(), "(none)");
  EXPECT_EQ(probe.seen[1], "loom::add");
  bool saw_mm = false;
  for (const std::string& s : probe.seen) saw_mm = saw_mm || s == "loom::mm" || s == "loom::matmul";
  EXPECT_TRUE(saw_mm);
  EXPECT_EQ(probe.seen.back(), "(none)");
  EXPECT_EQ(current_alloc_context(), nullptr);  // nothing left behind
}

// A trace of a small training loop: every allocation inside an operator names it, and each
// optimizer step leaves a marker.
AllocTrace record_two_sgd_steps() {
  RecordingAllocator rec(*get_allocator(DeviceType::CPU), "two steps");
  {
    Installed use(&rec);
    nn::Linear lin(8, 4);
    optim::SGD opt(lin.parameters(), optim::SGDOptions{0.1});
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      Tensor loss = sum(lin.forward(ones({3, 8})));
      loss.backward();
      opt.step();
    }
  }
  return rec.trace();
}

TEST(RecordingAllocator, NamesTheOperatorOfEachAllocationAndMarksOptimizerSteps) {
  const int64_t before = steps_marked();
  const AllocTrace t = record_two_sgd_steps();
  std::vector<int64_t> markers;
  int64_t named = 0, allocs = 0;
  bool saw_addmm = false;
  for (const AllocEvent& e : t.events) {
    if (e.op == AllocEvent::Op::Step) markers.push_back(e.id);
    if (e.op != AllocEvent::Op::Alloc) continue;
    ++allocs;
    const std::string_view op = t.context_of(e);
    if (!op.empty()) ++named;
    saw_addmm = saw_addmm || op == "loom::addmm" || op == "loom::linear";
  }
  EXPECT_EQ(markers, (std::vector<int64_t>{1, 2}));  // numbered for this recording
  EXPECT_EQ(steps_marked(), before + 2);
  EXPECT_TRUE(saw_addmm);
  EXPECT_GT(named, allocs / 2);  // almost everything runs inside an operator
  // The last event is the second step's marker or later: the loop ended with a step.
  const TraceSummary s = summarize_trace(t);
  EXPECT_EQ(s.steps, 2);
  EXPECT_GE(s.peak_live_step, 0);
  // Contexts survive the file format.
  const AllocTrace back = trace_from_json(trace_to_json(t), "doc");
  EXPECT_EQ(back.contexts, t.contexts);
  ASSERT_EQ(back.events.size(), t.events.size());
  for (size_t i = 0; i < t.events.size(); ++i) {
    EXPECT_EQ(back.events[i].op, t.events[i].op);
    EXPECT_EQ(back.events[i].context, t.events[i].context);
    EXPECT_EQ(back.events[i].id, t.events[i].id);
  }
}

TEST(AllocTrace, VersionOneFilesAreStillRead) {
  const Json doc = Json::parse(
      R"({"format": "loom-alloc-trace", "version": 1, "events": [["a", 0, 10, 0], ["f", 0]]})",
      "v1");
  const AllocTrace t = trace_from_json(doc, "v1");
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[0].context, -1);
  EXPECT_TRUE(t.contexts.empty());
}

// A trace whose peak and owners are known by construction: A holds 1 MiB from the start; B takes
// 3 MiB during step 1 (after one step ended), which is the peak (4 MiB); both are freed later and
// A allocates 512 bytes at the end.
AllocTrace known_trace() {
  AllocTrace t;
  t.contexts = {"op::A", "op::B"};
  t.events = {
      {AllocEvent::Op::Alloc, 0, 1 << 20, 0, 0},  // 0
      {AllocEvent::Op::Step, 1, 0, 0, -1},        // 1
      {AllocEvent::Op::Alloc, 1, 3 << 20, 0, 1},  // 2: the peak
      {AllocEvent::Op::Free, 0, 0, 0, -1},        // 3
      {AllocEvent::Op::Step, 2, 0, 0, -1},        // 4
      {AllocEvent::Op::Free, 1, 0, 0, -1},        // 5
      {AllocEvent::Op::Alloc, 2, 512, 0, 0},      // 6
  };
  return t;
}

TEST(TraceReplay, SnapshotsNameOperatorsAndKeepTheSegmentsAtThePeak) {
  const AllocTrace t = known_trace();
  const TraceSummary s = summarize_trace(t);
  EXPECT_EQ(s.peak_live_bytes, 4 << 20);
  EXPECT_EQ(s.peak_live_event, 2);
  EXPECT_EQ(s.peak_live_step, 1);
  ReplayOptions o;
  o.contexts = true;
  o.keep_snapshot = true;
  o.peak_snapshot = true;
  const ReplayResult r = replay_trace(t, o);
  EXPECT_EQ(r.peak_event, 2);
  EXPECT_EQ(r.peak_step, 1);
  // At the end only A's 512 bytes are live.
  const std::vector<OpUsage> end = usage_by_op(r.snapshot.segments);
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0].op, "op::A");
  EXPECT_EQ(end[0].requested, 512);
  EXPECT_EQ(end[0].blocks, 1);
  // At the peak both are, B first (larger).
  ASSERT_TRUE(r.snapshot.peak.has_value());
  const SnapshotPeak& peak = *r.snapshot.peak;
  EXPECT_EQ(peak.step, 1);
  EXPECT_EQ(peak.trace_event, 2);
  EXPECT_EQ(peak.allocated, r.stats.allocated_bytes.peak);
  EXPECT_EQ(peak.allocated, 4 << 20);
  const std::vector<OpUsage> at_peak = usage_by_op(peak.segments);
  ASSERT_EQ(at_peak.size(), 2u);
  EXPECT_EQ(at_peak[0].op, "op::B");
  EXPECT_EQ(at_peak[0].bytes, 3 << 20);
  EXPECT_EQ(at_peak[1].op, "op::A");
  EXPECT_EQ(at_peak[1].bytes, 1 << 20);
  // The history has the step markers, in order, and the operators of its events.
  std::vector<size_t> steps;
  std::vector<std::string> alloc_ops;
  for (const TraceEvent& e : r.snapshot.history) {
    if (e.kind == TraceEvent::Kind::Step) steps.push_back(e.size);
    if (e.kind == TraceEvent::Kind::Alloc) alloc_ops.push_back(e.op);
  }
  EXPECT_EQ(steps, (std::vector<size_t>{1, 2}));
  EXPECT_EQ(alloc_ops, (std::vector<std::string>{"op::A", "op::B", "op::A"}));
  // Without peak_snapshot there is none, and without contexts no op either.
  o.peak_snapshot = false;
  o.contexts = false;
  const ReplayResult plain = replay_trace(t, o);
  EXPECT_FALSE(plain.snapshot.peak.has_value());
  EXPECT_EQ(usage_by_op(plain.snapshot.segments).at(0).op, "");
}

TEST(MemorySnapshot, OperatorsStepsAndThePeakSurviveJson) {
  ReplayOptions o;
  o.contexts = true;
  o.keep_snapshot = true;
  o.peak_snapshot = true;
  const Snapshot s = replay_trace(known_trace(), o).snapshot;
  const Snapshot back = snapshot_from_json(Json::parse(to_json(s).dump(), "doc"), "doc");
  ASSERT_TRUE(back.peak.has_value());
  EXPECT_EQ(back.peak->step, s.peak->step);
  EXPECT_EQ(back.peak->allocated, s.peak->allocated);
  EXPECT_EQ(back.peak->reserved, s.peak->reserved);
  ASSERT_EQ(back.peak->segments.size(), s.peak->segments.size());
  EXPECT_EQ(usage_by_op(back.peak->segments).at(0).op, "op::B");
  ASSERT_EQ(back.history.size(), s.history.size());
  for (size_t i = 0; i < s.history.size(); ++i) {
    EXPECT_EQ(back.history[i].kind, s.history[i].kind);
    EXPECT_EQ(back.history[i].op, s.history[i].op);
    EXPECT_EQ(back.history[i].size, s.history[i].size);
  }
  EXPECT_EQ(usage_by_op(back.segments).at(0).op, "op::A");
}

TEST(TrainingTrace, TheBuiltInWorkloadNamesOperatorsAndSteps) {
  TrainingTraceOptions o;
  o.steps = 2;
  o.hidden = 64;
  const AllocTrace t = record_training_trace(o);
  const TraceSummary s = summarize_trace(t);
  EXPECT_EQ(s.steps, 2);
  EXPECT_FALSE(t.contexts.empty());
}

}  // namespace
}  // namespace loom::memory
