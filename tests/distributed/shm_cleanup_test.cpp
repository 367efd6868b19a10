// Shared-memory segments of ranks killed while their group connects (Note [Orphaned segments]): a
// real process creates its segment and is SIGKILLed before its peer attaches; the sweep, and group
// creation, remove the leftover; segments of live owners and names the sweep does not own stay.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "distributed/multiprocess.h"
#include "distributed/transport/shm_segments.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The segment names (in /dev/shm) of process `pid`.
std::vector<std::string> segments_of(int pid) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    unsigned long long ns = 0, start = 0;
    int p = 0;
    if (std::sscanf(name.c_str(), "loom-pg-%llu-%d-%llu-", &ns, &p, &start) == 3 && p == pid) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

// A child that becomes rank 0 of a 2-rank group whose rank 1 never comes: it creates its segment
// and waits for its peer in the store. Returns its pid once the segment exists.
pid_t start_waiting_rank(const std::string& store_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    try {
      ProcessGroupOptions o;
      o.transport = "shm";
      o.timeout = 60s;
      loom::testing::make_group(0, 2, store_path, o);
    } catch (...) {
    }
    std::_Exit(1);
  }
  return pid;
}

bool wait_for_segment(int pid, std::vector<std::string>* names) {
  for (int i = 0; i < 2000; ++i) {
    *names = segments_of(pid);
    if (!names->empty()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

TEST(ShmSegments, SegmentOfARankKilledWhileConnectingIsSwept) {
  const std::string dir = loom::testing::make_temp_dir();
  const pid_t pid = start_waiting_rank(dir + "/store");
  std::vector<std::string> names;
  ASSERT_TRUE(wait_for_segment(pid, &names)) << "rank 0 created no segment";
  ASSERT_EQ(names.size(), 1u);

  // Alive: its segment is never touched.
  SegmentSweep sweep = remove_orphan_segments();
  for (const auto& r : sweep.removed) EXPECT_NE(r.pid, pid) << r.path;
  EXPECT_TRUE(fs::exists(names[0]));

  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ASSERT_TRUE(fs::exists(names[0])) << "the killed rank's segment should be left behind";
  sweep = remove_orphan_segments();
  bool found = false;
  for (const auto& r : sweep.removed) found = found || (r.path == names[0] && r.pid == pid);
  EXPECT_TRUE(found) << describe(sweep);
  EXPECT_FALSE(fs::exists(names[0]));
  EXPECT_CONTAINS(describe(sweep), "shared-memory segment(s) left by dead processes: ");
  EXPECT_CONTAINS(describe(sweep), names[0] + " (pid " + std::to_string(pid) + ")");
  fs::remove_all(dir);
}

// Group creation sweeps: the next group on this host removes the leftover and says so.
TEST(ShmSegments, GroupCreationRemovesSegmentsOfDeadRanks) {
  const std::string dir = loom::testing::make_temp_dir();
  const pid_t pid = start_waiting_rank(dir + "/store");
  std::vector<std::string> names;
  ASSERT_TRUE(wait_for_segment(pid, &names)) << "rank 0 created no segment";
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ASSERT_TRUE(fs::exists(names[0]));

  auto res = loom::testing::run_processes(2, [&](int rank, const std::string& path) {
    ProcessGroupOptions o;
    o.transport = "shm";
    auto pg = loom::testing::make_group(rank, 2, path, o);
    pg->barrier();
  });
  EXPECT_ALL_RANKS_OK(res);
  EXPECT_FALSE(fs::exists(names[0]));
  // Another test running at the same time may have swept it first; otherwise a rank says so.
  const std::string out = res[0].output + res[1].output;
  if (out.find("removed") != std::string::npos) {
    EXPECT_CONTAINS(out, "shared-memory segment(s) left by dead processes:");
  }
  fs::remove_all(dir);
}

// Owners are told apart by pid and start time: a reused pid (this process with another start
// time) is dead, this process with its own start time is alive; names of another pid namespace,
// other files and malformed names stay.
TEST(ShmSegments, SweepKeepsWhatItCannotProveOrphaned) {
  const std::string mine = shm_segment_name(3, 0xabc);  // "/loom-pg-<ns>-<pid>-<start>-3-abc"
  unsigned long long ns = 0, start = 0;
  int pid = 0;
  ASSERT_EQ(std::sscanf(mine.c_str(), "/loom-pg-%llu-%d-%llu-", &ns, &pid, &start), 3) << mine;
  EXPECT_EQ(pid, ::getpid());
  EXPECT_GT(start, 0u);
  // A process that has exited (and been reaped).
  pid_t gone = ::fork();
  if (gone == 0) std::_Exit(0);
  ::waitpid(gone, nullptr, 0);

  auto name = [&](unsigned long long n, int p, unsigned long long s, const char* tail) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "/loom-pg-%llu-%d-%llu-%s", n, p, s, tail);
    return std::string(buf);
  };
  const std::string tag = std::to_string(::getpid());  // unique per test process
  const std::vector<std::pair<std::string, bool>> cases = {
      {mine, false},                                  // live owner
      {name(ns, pid, start + 1, "0-1"), true},        // pid reused
      {name(ns, gone, start, "1-2"), true},           // exited
      {name(ns + 1, gone, start, "2-3"), false},      // another pid namespace
      {"/loom-pg-" + tag + "-not-a-segment", false},  // malformed
      {"/loom-" + tag + "-0-ff", false},              // not a process-group segment
  };
  for (const auto& [n, _] : cases) {
    int fd = ::shm_open(n.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << n;
    ::close(fd);
  }
  const SegmentSweep sweep = remove_orphan_segments();
  for (const auto& [n, removed] : cases) {
    EXPECT_EQ(!fs::exists("/dev/shm" + n), removed) << n << "\n" << describe(sweep);
    ::shm_unlink(n.c_str());
  }
  EXPECT_TRUE(sweep.errors.empty()) << describe(sweep);
}

}  // namespace
}  // namespace loom::dist
