// The flight recorder and `loom dist-debug`'s analysis: a ring of the last N collectives; records
// dumped by ranks that timed out name the rank that never joined; malformed records are DataErrors.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "distributed/group/contract.h"
#include "distributed/multiprocess.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

TEST(FlightRecorder, KeepsTheLastEntriesWithStates) {
  FlightRecorder fr(3);
  for (int i = 0; i < 5; ++i) {
    Fingerprint f = make_fingerprint("g", CollKind::Allreduce, kFloat32, {4}, 4, -1, 0);
    f.seq = static_cast<uint64_t>(i);
    uint64_t t = fr.scheduled(f);
    if (i < 4) fr.started(t, "ring");
    if (i < 3) fr.completed(t);
  }
  auto e = fr.entries();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].fp.seq, 2u);
  EXPECT_EQ(e[0].state, FlightRecorder::Completed);
  EXPECT_EQ(e[1].state, FlightRecorder::Started);
  EXPECT_EQ(e[2].state, FlightRecorder::Scheduled);
  std::string j = fr.json("g", 1, 2);
  EXPECT_CONTAINS(j, "\"rank\":1");
  EXPECT_CONTAINS(j, "\"desc\":\"allreduce(float32[4], count=4, op=sum)\"");
}

// The hot path writes slots without a lock (Note [Flight recorder slots]): a reader running beside
// a scheduling thread and a worker, with the ring wrapping around many times, must only ever see
// whole entries, and updates of an overwritten entry must not touch its successor.
TEST(FlightRecorder, EntriesStayWholeUnderConcurrentWritesAndWraparound) {
  FlightRecorder fr(4);
  constexpr uint64_t kN = 100000;
  std::atomic<uint64_t> scheduled{0};
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0}, reads{0};
  std::thread worker([&] {
    for (uint64_t t = 0; t < kN; ++t) {
      while (scheduled.load(std::memory_order_acquire) <= t) std::this_thread::yield();
      fr.started(t, static_cast<int64_t>(3 * t + 1), "ring");
      fr.completed(t, static_cast<int64_t>(3 * t + 2));
    }
  });
  std::thread reader([&] {
    while (!stop.load()) {
      for (const FlightRecorder::Entry& e : fr.entries()) {
        const uint64_t s = e.fp.seq;
        const int64_t t = static_cast<int64_t>(3 * s);
        bool ok = e.fp.count == s * 7 && e.t_scheduled_us == t;
        ok = ok && (e.state >= FlightRecorder::Started ? e.t_started_us == t + 1 && e.algo == "ring"
                                                       : e.t_started_us == 0 && e.algo.empty());
        ok = ok && (e.state == FlightRecorder::Completed ? e.t_completed_us == t + 2
                                                         : e.t_completed_us == 0);
        if (!ok) torn.fetch_add(1);
      }
      reads.fetch_add(1);
    }
  });
  for (uint64_t t = 0; t < kN; ++t) {
    Fingerprint f = make_fingerprint("g", CollKind::Allreduce, kFloat32, {4}, t * 7, -1, 0);
    f.seq = t;
    EXPECT_EQ(fr.scheduled(f, static_cast<int64_t>(3 * t)), t);
    scheduled.store(t + 1, std::memory_order_release);
  }
  worker.join();
  stop = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0) << "of " << reads.load() << " reads";
  auto e = fr.entries();
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e.back().fp.seq, kN - 1);
  EXPECT_EQ(e.back().state, FlightRecorder::Completed);

  FlightRecorder one(2);
  uint64_t t = one.scheduled(e[0].fp);
  one.failed(t, "rank 1 has exited");
  EXPECT_EQ(one.entries().at(0).state, FlightRecorder::Failed);
  EXPECT_EQ(one.entries().at(0).error, "rank 1 has exited");
  EXPECT_CONTAINS(one.json("g", 0, 2), "\"error\":\"rank 1 has exited\"");
}

TEST(FlightRecorder, ContractMismatchNamesFields) {
  Fingerprint a = make_fingerprint("world", CollKind::Allreduce, kFloat32, {8}, 8, -1, 0);
  Fingerprint b = make_fingerprint("world", CollKind::Allreduce, kFloat64, {8}, 8, -1, 3);
  a.seq = b.seq = 4;
  EXPECT_EQ(contract_mismatch("world", {a, a}), "");
  std::string m = contract_mismatch("world", {a, a, b});
  EXPECT_CONTAINS(m, "sequence number 4");
  EXPECT_CONTAINS(m, "ranks 0,1 called allreduce(float32[8]");
  EXPECT_CONTAINS(m, "dtype (ranks 0,1: float32, rank 2: float64)");
  EXPECT_CONTAINS(m, "reduce op (ranks 0,1: sum, rank 2: max)");
}

TEST(DistDebug, NamesTheRankThatDidNotJoin) {
  std::string dir = loom::testing::make_temp_dir();
  auto res = loom::testing::run_processes(
      3,
      [&](int rank, const std::string& path) {
        setenv("LOOM_FLIGHT_DIR", dir.c_str(), 1);
        ProcessGroupOptions o;
        o.timeout = std::chrono::milliseconds(1500);
        auto pg = loom::testing::make_group(rank, 3, path, o);
        Tensor t = full({32}, Scalar(1.0), TensorOptions(kFloat32));
        pg->allreduce(t);
        pg->broadcast(t, 0);
        if (rank == 1) {  // hangs outside loom before the third collective
          std::this_thread::sleep_for(std::chrono::seconds(4));
          return;
        }
        try {
          pg->allreduce(t);
        } catch (const DistError&) {
        }
      },
      30);
  for (auto& r : res) EXPECT_EQ(r.exit_code, 0) << r.output;
  std::string report = analyze_flight_records(dir);
  EXPECT_CONTAINS(report, "group 'world' (3 ranks, records from 2)");
  EXPECT_CONTAINS(
      report,
      "rank 1 did not join allreduce(float32[32], count=32, op=sum) #2; ranks 0,2 waited in it");
  EXPECT_CONTAINS(report, "rank 1 wrote no record");
  EXPECT_CONTAINS(
      report, "rank 0: last allreduce(float32[32], count=32, op=sum) #2 failed on the cpu backend");
  // A corrupt record is a DataError naming the file and line.
  std::ofstream(dir + "/flight-world-rank1.json")
      << "{\"group\":\"world\",\"rank\":1,\"size\":3}\n{not json\n";
  std::string err = loom::testing::error_of<DataError>([&] { analyze_flight_records(dir); });
  EXPECT_CONTAINS(err, "flight-world-rank1.json line 2");
  EXPECT_CONTAINS(
      loom::testing::error_of<DataError>([&] { analyze_flight_records(dir + "/nope"); }),
      "cannot open directory");
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace loom::dist
