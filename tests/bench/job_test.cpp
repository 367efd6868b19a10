// Child processes of `loom bench` under a deadline (bench/job.h), with real processes: a rank that
// fails stops its peers at once, a hang ends at the deadline, SIGTERM-proof processes and a rank's
// own children are killed with the group.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "job.h"
#include "temp_dir.h"

namespace loom::bench {
namespace {

int hang() {
  for (;;) ::pause();
}

struct Collected {
  std::vector<std::pair<size_t, std::string>> out, err;
  LineFn on_out() {
    return [this](size_t p, const std::string& l) { out.emplace_back(p, l); };
  }
  LineFn on_err() {
    return [this](size_t p, const std::string& l) { err.emplace_back(p, l); };
  }
};

TEST(BenchJob, PassesLinesOnAndSucceeds) {
  Collected c;
  JobOptions o;
  o.deadline_s = 60;
  JobResult r = run_job({{"rank 0",
                          [] {
                            std::printf("hello 0\nsecond\n");
                            return 0;
                          }},
                         {"rank 1",
                          [] {
                            std::fprintf(stderr, "note 1\n");
                            return 0;
                          }}},
                        o, c.on_out(), c.on_err());
  EXPECT_TRUE(r.ok()) << r.reason();
  EXPECT_EQ(r.reason(), "");
  ASSERT_EQ(c.out.size(), 2u);
  EXPECT_EQ(c.out[0], (std::pair<size_t, std::string>{0, "hello 0"}));
  EXPECT_EQ(c.out[1], (std::pair<size_t, std::string>{0, "second"}));
  ASSERT_EQ(c.err.size(), 1u);
  EXPECT_EQ(c.err[0], (std::pair<size_t, std::string>{1, "note 1"}));
}

TEST(BenchJob, AFailedRankStopsItsPeerAtOnce) {
  Collected c;
  JobOptions o;
  o.deadline_s = 300;  // the peer must not be left to this
  JobResult r = run_job({{"rank 0", hang},
                         {"rank 1",
                          [] {
                            std::fprintf(stderr, "first words\nlast words\n");
                            return 3;
                          }}},
                        o, c.on_out(), c.on_err());
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.reason("16K"), "rank 1 exited with status 3 at 16K (last words)");
  EXPECT_LT(r.seconds, 60.0);
}

TEST(BenchJob, ASignalIsNamed) {
  Collected c;
  JobResult r = run_job({{"rank 0", hang}, {"rank 1", []() -> int { std::abort(); }}}, JobOptions{},
                        c.on_out(), c.on_err());
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.reason().rfind("rank 1 was killed by SIGABRT", 0), 0u) << r.reason();
}

// Among failures seen in one sweep the crash is named before the peer that wrote to it and got
// SIGPIPE, or that exited on the closed connection.
TEST(BenchJob, TheCrashRanksBeforeItsReactions) {
  auto ending = [](int code, int status) {
    ExitInfo e;
    e.code = code;
    e.status = status;
    return e;
  };
  const int abort_rank = ending(CLD_KILLED, SIGABRT).cause_rank();
  EXPECT_GT(abort_rank, ending(CLD_KILLED, SIGPIPE).cause_rank());
  EXPECT_GT(ending(CLD_DUMPED, SIGSEGV).cause_rank(), ending(CLD_EXITED, 1).cause_rank());
  EXPECT_EQ(ending(CLD_KILLED, SIGPIPE).cause_rank(), ending(CLD_EXITED, 1).cause_rank());
  EXPECT_EQ(abort_rank, ending(CLD_KILLED, SIGKILL).cause_rank());
}

TEST(BenchJob, AHangEndsAtTheDeadline) {
  Collected c;
  JobOptions o;
  o.deadline_s = 1;
  JobResult r = run_job({{"rank 0", hang}, {"rank 1", hang}}, o, c.on_out(), c.on_err());
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.failed, -1);  // nobody failed on their own: we stopped them
  EXPECT_EQ(r.reason("1M"), "timeout after 1 s at 1M");
  EXPECT_GE(r.seconds, 1.0);
  EXPECT_LT(r.seconds, 30.0);
}

TEST(BenchJob, SigtermProofProcessesAndGrandchildrenAreKilled) {
  testing::TempDir dir;
  const std::string pid_file = dir.path() + "/grandchild";
  Collected c;
  JobOptions o;
  o.deadline_s = 0.5;
  o.grace_s = 0.5;
  JobResult r = run_job({{"rank 0",
                          [pid_file] {
                            // A child of the rank, in the same group, that outlives it if the
                            // kill reached only the rank.
                            const pid_t g = ::fork();
                            if (g == 0) {
                              ::signal(SIGTERM, SIG_IGN);
                              hang();
                            }
                            std::ofstream(pid_file) << g << "\n";
                            return hang();
                          }},
                         {"rank 1",
                          [] {
                            ::signal(SIGTERM, SIG_IGN);
                            return hang();
                          }}},
                        o, c.on_out(), c.on_err());
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(r.seconds, 30.0);
  long g = 0;
  std::ifstream(pid_file) >> g;
  ASSERT_GT(g, 0);
  // Killed with the group; reparented and reaped by init, or a zombie for a moment at most.
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    std::ifstream stat("/proc/" + std::to_string(g) + "/stat");
    std::string pid, comm, state;
    gone = !(stat >> pid >> comm >> state) || state == "Z";
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "grandchild " << g << " survived its job";
}

TEST(BenchJob, EndGroupStopsALeaderThatIgnoresSigterm) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    adopt_child(0, parent);
    ::signal(SIGTERM, SIG_IGN);
    hang();
  }
  ASSERT_GT(pid, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const ExitInfo info = end_group(pid, 0.1, 0.3);
  EXPECT_EQ(info.describe(), "was killed by SIGKILL");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

}  // namespace
}  // namespace loom::bench
