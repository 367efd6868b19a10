// Tables and analysis on hand-built traces with known answers: key_averages (self and total time,
// grouping by shapes), the step breakdown, the diff of two traces, the summary; and the errors for
// corrupt or truncated trace files.
#include <gtest/gtest.h>

#include <fstream>

#include "loom/error.h"
#include "loom/profiler.h"
#include "temp_dir.h"

namespace loom::profiler {
namespace {

Event ev(EventKind kind, const std::string& name, uint64_t tid, int64_t s, int64_t e,
         std::vector<std::vector<int64_t>> shapes = {}) {
  Event x;
  x.kind = kind;
  x.name = name;
  x.tid = tid;
  x.start_ns = s;
  x.end_ns = e;
  x.input_shapes = std::move(shapes);
  for (size_t i = 0; i < x.input_shapes.size(); ++i) x.input_dtypes.push_back("float32");
  return x;
}

// Two steps on thread 1; collectives on thread 2. Times in ns.
Trace two_steps() {
  Trace t;
  t.pid = 42;
  t.threads = {{1, "main"}, {2, "collectives"}};
  t.events = {
      ev(EventKind::Step, "ProfilerStep#7", 1, 0, 1000),
      ev(EventKind::DataStage, "data.wait", 1, 0, 200),
      ev(EventKind::Operator, "A", 1, 200, 500),
      ev(EventKind::Operator, "B", 1, 250, 300, {{2}}),
      ev(EventKind::Backward, "ABackward", 1, 600, 800),
      ev(EventKind::Collective, "dist::allreduce", 2, 100, 150),  // under data wait: neither
      ev(EventKind::Collective, "dist::allreduce", 2, 450, 700),  // 100 exposed, 150 overlapped
      ev(EventKind::Collective, "dist::allreduce", 2, 850, 900),  // 50 exposed
      ev(EventKind::Step, "ProfilerStep#8", 1, 1000, 2000),
      ev(EventKind::Operator, "C", 1, 1000, 1900),
      ev(EventKind::Operator, "B", 1, 1100, 1150, {{3}}),
  };
  EXPECT_EQ(make_nested(t), 0);
  return t;
}

const OpStats* find(const std::vector<OpStats>& v, const std::string& name,
                    const std::string& shapes = "") {
  for (const OpStats& s : v) {
    if (s.name == name && (shapes.empty() || s.input_shapes == shapes)) return &s;
  }
  return nullptr;
}

TEST(ProfilerAnalysis, KeyAveragesSelfAndTotal) {
  const auto k = key_averages(two_steps());
  const OpStats* a = find(k, "A");
  const OpStats* b = find(k, "B");
  const OpStats* c = find(k, "C");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->calls, 1);
  EXPECT_EQ(a->total_ns, 300);
  EXPECT_EQ(a->self_ns, 250);
  EXPECT_EQ(b->calls, 2);
  EXPECT_EQ(b->self_ns, 100);
  EXPECT_EQ(b->total_ns, 100);
  EXPECT_DOUBLE_EQ(b->avg_ns(), 50.0);
  EXPECT_EQ(c->self_ns, 850);
  EXPECT_EQ(find(k, "ProfilerStep#7"), nullptr);  // steps are not operators
  const OpStats* ar = find(k, "dist::allreduce");
  ASSERT_TRUE(ar);
  EXPECT_EQ(ar->calls, 3);
  EXPECT_EQ(ar->kind, EventKind::Collective);
  // Sorted by self time.
  for (size_t i = 1; i < k.size(); ++i) EXPECT_GE(k[i - 1].self_ns, k[i].self_ns);
  EXPECT_EQ(k[0].name, "C");
  const std::string table = format_table(k, 3);
  EXPECT_NE(table.find("C"), std::string::npos);
  EXPECT_NE(table.find("more"), std::string::npos);
}

TEST(ProfilerAnalysis, KeyAveragesByShapes) {
  const auto k = key_averages(two_steps(), GroupBy::NameAndShapes);
  const OpStats* b2 = find(k, "B", "[[2]]");
  const OpStats* b3 = find(k, "B", "[[3]]");
  ASSERT_TRUE(b2 && b3);
  EXPECT_EQ(b2->calls, 1);
  EXPECT_EQ(b3->calls, 1);
  EXPECT_NE(format_table(k).find("[[3]]"), std::string::npos);
}

TEST(ProfilerAnalysis, StepBreakdown) {
  const auto steps = step_breakdown(two_steps());
  ASSERT_EQ(steps.size(), 2u);
  const StepBreakdown& s = steps[0];
  EXPECT_EQ(s.step, 7);
  EXPECT_EQ(s.duration_ns, 1000);
  EXPECT_EQ(s.compute_ns, 500);
  EXPECT_EQ(s.data_wait_ns, 200);
  EXPECT_EQ(s.communication_ns, 150);
  EXPECT_EQ(s.overlapped_communication_ns, 150);
  EXPECT_EQ(s.idle_ns, 150);
  EXPECT_EQ(steps[1].step, 8);
  EXPECT_EQ(steps[1].compute_ns, 900);
  EXPECT_EQ(steps[1].idle_ns, 100);
  EXPECT_EQ(dominant_part(steps), "compute (70% of step time)");
  const std::string text = format_step_breakdown(steps);
  EXPECT_NE(text.find("#7"), std::string::npos);
  EXPECT_NE(text.find("mean"), std::string::npos);
  EXPECT_EQ(dominant_part({}), "");
}

TEST(ProfilerAnalysis, DataWaitDominates) {
  Trace t;
  t.events = {ev(EventKind::Step, "ProfilerStep#0", 1, 0, 100),
              ev(EventKind::DataStage, "data.wait", 1, 0, 90),
              ev(EventKind::DataStage, "data.decode", 1, 10, 80),
              ev(EventKind::Operator, "A", 1, 90, 100)};
  make_nested(t);
  const auto s = step_breakdown(t);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].data_wait_ns, 90);
  EXPECT_EQ(s[0].compute_ns, 10);
  EXPECT_EQ(dominant_part(s), "data wait (90% of step time)");
}

TEST(ProfilerAnalysis, Summary) {
  const std::string s = summarize(two_steps(), 5);
  EXPECT_NE(s.find("Top 5 by self time"), std::string::npos) << s;
  EXPECT_NE(s.find("Step breakdown"), std::string::npos) << s;
  EXPECT_NE(s.find("Dominated by: compute"), std::string::npos) << s;
  EXPECT_NE(summarize(Trace{}).find("nothing was recorded"), std::string::npos);
}

TEST(ProfilerAnalysis, DiffSortsByAbsoluteChange) {
  Trace a, b;
  a.events = {ev(EventKind::Operator, "X", 1, 0, 100), ev(EventKind::Operator, "Y", 1, 100, 150)};
  b.events = {ev(EventKind::Operator, "X", 1, 0, 40), ev(EventKind::Operator, "Y", 1, 40, 240),
              ev(EventKind::Operator, "Z", 1, 240, 250)};
  const TraceDiff d = diff_traces(a, b);
  EXPECT_FALSE(d.per_step);
  ASSERT_EQ(d.ops.size(), 3u);
  EXPECT_EQ(d.ops[0].name, "Y");
  EXPECT_DOUBLE_EQ(d.ops[0].delta_ns(), 150);
  EXPECT_EQ(d.ops[1].name, "X");
  EXPECT_DOUBLE_EQ(d.ops[1].delta_ns(), -60);
  EXPECT_EQ(d.ops[2].name, "Z");
  EXPECT_EQ(d.ops[2].calls_a, 0);
  const std::string text = format_diff(d);
  EXPECT_NE(text.find("new"), std::string::npos) << text;
  // With steps on both sides, times are per step.
  const TraceDiff per = diff_traces(two_steps(), two_steps());
  EXPECT_TRUE(per.per_step);
  EXPECT_EQ(per.steps_a, 2);
  for (const OpDelta& o : per.ops) EXPECT_DOUBLE_EQ(o.delta_ns(), 0);
  const OpDelta* c = nullptr;
  for (const OpDelta& o : per.ops) c = o.name == "C" ? &o : c;
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->self_a_ns, 425);  // 850 over 2 steps
}

// Self time per thread: a loader worker decoding (with an operator of the same name as the training
// thread's) in parallel with the step neither adds to nor dilutes the training thread's rows.
Trace training_and_worker() {
  Trace t;
  t.threads = {
      {1, "training"}, {2, "loader worker 0"}, {3, "loader worker 0"}};  // 3: the next epoch's
  t.events = {
      ev(EventKind::Step, "ProfilerStep#0", 1, 0, 1000),
      ev(EventKind::DataStage, "data.wait", 1, 0, 100),
      ev(EventKind::Operator, "loom::add", 1, 100, 400),
      ev(EventKind::Operator, "loom::mm", 1, 400, 900),
      ev(EventKind::DataStage, "data.decode", 2, 0, 700),
      ev(EventKind::Operator, "loom::add", 2, 100, 600),
      ev(EventKind::DataStage, "data.decode", 3, 700, 950),
      ev(EventKind::Operator, "loom::add", 3, 750, 850),
  };
  EXPECT_EQ(make_nested(t), 0);
  return t;
}

const OpStats* find_on(const std::vector<OpStats>& v, const std::string& thread,
                       const std::string& name) {
  for (const OpStats& s : v) {
    if (s.thread == thread && s.name == name) return &s;
  }
  return nullptr;
}

TEST(ProfilerAnalysis, SelfTimeIsPerThread) {
  const Trace t = training_and_worker();
  const auto k = key_averages(t);
  const OpStats* add_training = find_on(k, "training", "loom::add");
  const OpStats* add_worker = find_on(k, "loader worker 0", "loom::add");
  const OpStats* decode = find_on(k, "loader worker 0", "data.decode");
  ASSERT_TRUE(add_training && add_worker && decode);
  EXPECT_EQ(add_training->calls, 1);
  EXPECT_EQ(add_training->self_ns, 300);
  EXPECT_EQ(add_worker->calls, 2);  // both worker threads of that name (two epochs)
  EXPECT_EQ(add_worker->self_ns, 600);
  EXPECT_EQ(decode->self_ns, 350);  // 700 - 500 + 250 - 100
  EXPECT_EQ(find_on(k, "training", "data.decode"), nullptr);
  EXPECT_EQ(thread_label(t, 1), "training");
  EXPECT_EQ(thread_label(t, 9), "thread 9");
  // A table of several threads has a Thread column.
  EXPECT_NE(format_table(k).find("loader worker 0"), std::string::npos);
  // The summary: one section per thread, the steps' thread first though the workers' self time is
  // larger; shares are of that thread's self time (add: 300 of the training thread's 900).
  const std::string s = summarize(t, 5);
  const size_t training = s.find("Thread \"training\" (runs the steps): 0.001 ms self time");
  const size_t worker = s.find("Thread \"loader worker 0\": 0.001 ms self time");
  ASSERT_NE(training, std::string::npos) << s;
  ASSERT_NE(worker, std::string::npos) << s;
  EXPECT_LT(training, worker);
  const size_t add_row = s.find("loom::add", training);
  ASSERT_LT(add_row, worker) << s;
  EXPECT_NE(s.substr(add_row, 120).find("33.3%"), std::string::npos) << s.substr(add_row, 120);
  // The diff matches threads by name.
  const TraceDiff d = diff_traces(t, t);
  size_t adds = 0;
  for (const OpDelta& o : d.ops) adds += o.name == "loom::add";
  EXPECT_EQ(adds, 2u);
}

// DDP's wait for gradient allreduce inside AccumulateGrad (a comm_wait range) is communication: not
// AccumulateGrad's self time, not compute.
TEST(ProfilerAnalysis, CommWaitIsCommunication) {
  Trace t;
  t.threads = {{1, "training"}, {2, "collectives"}};
  t.events = {
      ev(EventKind::Step, "ProfilerStep#0", 1, 0, 1000),
      ev(EventKind::Backward, "MmBackward", 1, 0, 300),
      ev(EventKind::Backward, "AccumulateGrad", 1, 300, 900),
      ev(EventKind::CommWait, "ddp::wait_allreduce", 1, 350, 850),
      ev(EventKind::Collective, "dist::allreduce_coalesced", 2, 200, 840),
  };
  EXPECT_EQ(make_nested(t), 0);
  const auto k = key_averages(t);
  const OpStats* acc = find_on(k, "training", "AccumulateGrad");
  const OpStats* wait = find_on(k, "training", "ddp::wait_allreduce");
  ASSERT_TRUE(acc && wait);
  EXPECT_EQ(acc->self_ns, 100);
  EXPECT_EQ(acc->total_ns, 600);
  EXPECT_EQ(wait->self_ns, 500);
  EXPECT_EQ(wait->kind, EventKind::CommWait);
  const auto steps = step_breakdown(t);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].compute_ns, 400);                   // [0, 350) and [850, 900)
  EXPECT_EQ(steps[0].communication_ns, 500);             // the wait
  EXPECT_EQ(steps[0].overlapped_communication_ns, 150);  // the allreduce under MmBackward
  EXPECT_EQ(steps[0].idle_ns, 100);
  EXPECT_EQ(dominant_part(steps), "communication (50% of step time)");
  // The category survives a Chrome trace.
  const Trace r = parse_chrome_trace(chrome_trace_json(t), "t.json");
  bool found = false;
  for (const Event& e : r.events)
    found = found || (e.name == "ddp::wait_allreduce" && e.kind == EventKind::CommWait);
  EXPECT_TRUE(found);
  EXPECT_NE(chrome_trace_json(t).find("\"comm_wait\""), std::string::npos);
}

// ---- bad input ----

std::string error_of(const std::string& path) {
  try {
    read_chrome_trace(path);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no DataError";
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(ProfilerTraceFiles, CorruptOrTruncatedFilesNameTheFile) {
  loom::testing::TempDir dir("loom-trace-bad");
  const Trace t = two_steps();
  const std::string json = chrome_trace_json(t);

  const std::string missing = dir / "missing.json";
  EXPECT_NE(error_of(missing).find("cannot open " + missing), std::string::npos)
      << error_of(missing);

  const std::string truncated = dir / "truncated.json";
  write_file(truncated, json.substr(0, json.size() / 2));
  std::string e = error_of(truncated);
  EXPECT_NE(e.find(truncated), std::string::npos) << e;
  EXPECT_NE(e.find("truncated or corrupt"), std::string::npos) << e;
  EXPECT_NE(e.find("byte offset"), std::string::npos) << e;

  const std::string empty = dir / "empty.json";
  write_file(empty, "");
  EXPECT_NE(error_of(empty).find(empty), std::string::npos);

  // A gzip file cut short.
  const std::string gz = dir / "t.json.gz";
  write_chrome_trace(t, gz);
  std::string bytes;
  {
    std::ifstream in(gz, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 40u);
  const std::string cut = dir / "cut.json.gz";
  write_file(cut, bytes.substr(0, bytes.size() / 2));
  e = error_of(cut);
  EXPECT_NE(e.find(cut), std::string::npos) << e;
  // Corrupt compressed data.
  std::string garbled = bytes;
  for (size_t i = 20; i < garbled.size() - 8; i += 3)
    garbled[i] = static_cast<char>(garbled[i] ^ 0x5a);
  const std::string bad = dir / "garbled.json.gz";
  write_file(bad, garbled);
  e = error_of(bad);
  EXPECT_NE(e.find(bad), std::string::npos) << e;

  const std::string dir_path = dir.path();
  EXPECT_NE(error_of(dir_path).find("not a regular file"), std::string::npos);
}

TEST(ProfilerTraceFiles, WellFormedJsonThatIsNotATrace) {
  auto err = [](const std::string& text) {
    try {
      parse_chrome_trace(text, "x.json");
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no DataError");
  };
  EXPECT_NE(err("{\"a\": 1}").find("x.json is not a Chrome trace"), std::string::npos);
  EXPECT_NE(err("42").find("not a Chrome trace"), std::string::npos);
  EXPECT_NE(err("{\"traceEvents\": [1]}").find("event #0 is a integer"), std::string::npos)
      << err("{\"traceEvents\": [1]}");
  EXPECT_NE(err("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"op\", \"ts\": 1, \"pid\": 1, "
                "\"tid\": 1}]}")
                .find("x.json: event #0 'op' has no 'dur'"),
            std::string::npos);
  EXPECT_NE(err("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"op\", \"ts\": \"1\", \"dur\": 1, "
                "\"pid\": 1, "
                "\"tid\": 1}]}")
                .find("non-numeric 'ts'"),
            std::string::npos);
  EXPECT_NE(err("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"op\", \"ts\": 1, \"dur\": -1, "
                "\"pid\": 1, "
                "\"tid\": 1}]}")
                .find("negative duration"),
            std::string::npos);
  EXPECT_NE(err("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"op\", \"ts\": 1, \"dur\": 1, "
                "\"pid\": 1, \"tid\": 1, "
                "\"args\": {\"Input Dims\": [[1, \"a\"]]}}]}")
                .find("non-integer size"),
            std::string::npos);
  // Events of other kinds and tools are skipped, not errors.
  const Trace t = parse_chrome_trace(
      "[{\"ph\": \"B\", \"name\": \"b\", \"ts\": 1, \"pid\": 1, \"tid\": 1},"
      " {\"ph\": \"X\", \"name\": \"op\", \"cat\": \"cpu_op\", \"ts\": 1.5, \"dur\": 2.25, "
      "\"pid\": 1, \"tid\": \"main\"}]",
      "array.json");
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].start_ns, 1500);
  EXPECT_EQ(t.events[0].duration_ns(), 2250);
}

}  // namespace
}  // namespace loom::profiler
