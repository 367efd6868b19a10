// SIGTERM and SIGINT for ranks blocked in a collective (Note [Stop signals]), with real processes:
// the blocked rank ends promptly by the signal, names the collective and writes its flight record;
// an application's own handler is kept and can abort the groups itself. Also the notice that
// LOOM_DIST_DEBUG=detail prints, and DistWorker.DISABLED_Run, the worker program of the `loom
// launch` tests in tests/integration/.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "distributed/multiprocess.h"
#include "loom/distributed/rendezvous.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void touch(const std::string& path) {
  std::ofstream(path) << "1";
}

// A forked child running fn with its stderr in a pipe.
struct Child {
  pid_t pid = -1;
  int err = -1;
};

Child spawn(const std::function<void()>& fn) {
  int p[2];
  if (::pipe(p) != 0) std::abort();
  Child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::close(p[0]);
    ::dup2(p[1], 2);
    int code = 0;
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child threw: %s\n", e.what());
      code = 1;
    }
    std::fflush(nullptr);
    std::_Exit(code);
  }
  ::close(p[1]);
  c.err = p[0];
  return c;
}

std::string drain(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// Waits for the child to end (status, or -1 after the timeout, when it is killed).
int wait_status(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  int status = 0;
  while (Clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(5ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

// The child is asleep (in a blocked wait) rather than running.
bool sleeping(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'S';
}

// Rank 0 blocks in allreduce #1 (rank 1 took part in #0 and then sleeps); the signal must end it
// by that signal within a couple of seconds, with the collective named and its record written.
void blocked_rank_gets(int sig) {
  const std::string dir = loom::testing::make_temp_dir();
  const std::string store = dir + "/store", flight = dir + "/flight";
  auto rank = [&](int r) {
    return [&, r] {
      ::signal(SIGINT, SIG_DFL);  // a plain program (a shell's background job would ignore SIGINT)
      ::setenv("LOOM_FLIGHT_DIR", flight.c_str(), 1);
      ProcessGroupOptions o;
      o.timeout = 60s;
      auto pg = loom::testing::make_group(r, 2, store, o);
      Tensor t = full({1024}, Scalar(1.0), TensorOptions(kFloat32));
      pg->allreduce(t);
      touch(dir + "/joined." + std::to_string(r));
      if (r == 1) {
        std::this_thread::sleep_for(60s);  // never joins #1
        return;
      }
      pg->allreduce(t);
      std::fprintf(stderr, "allreduce #1 completed\n");
    };
  };
  Child r1 = spawn(rank(1));
  Child r0 = spawn(rank(0));
  bool ready = false;
  for (int i = 0; i < 3000 && !ready; ++i) {
    ready = fs::exists(dir + "/joined.0") && sleeping(r0.pid);
    if (!ready) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(ready) << "rank 0 did not block in allreduce #1";
  std::this_thread::sleep_for(100ms);
  const auto t0 = Clock::now();
  ::kill(r0.pid, sig);
  const int status = wait_status(r0.pid, 10s);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  ::kill(r1.pid, SIGKILL);
  ::waitpid(r1.pid, nullptr, 0);
  const std::string err = drain(r0.err);
  drain(r1.err);
  const std::string name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
  ASSERT_NE(status, -1) << "rank 0 still ran 10 s after " << name << "\n" << err;
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig)
      << "status " << status << " (want death by " << name << ", exit status " << 128 + sig << ")\n"
      << err;
  EXPECT_LT(secs, 3.0) << err;
  EXPECT_CONTAINS(
      err,
      "[dist] allreduce(float32[1024], count=1024, op=sum) #1 in group 'world': rank 0: "
      "aborted by " +
          name + " (while waiting for rank 1) [flight record: " + flight +
          "/flight-world-rank0.json]; exiting by " + name);
  const std::string record = read_file(flight + "/flight-world-rank0.json");
  EXPECT_CONTAINS(record, "\"seq\":1");
  EXPECT_CONTAINS(record, "\"state\":\"failed\"");
  EXPECT_CONTAINS(record, "aborted by " + name);
  fs::remove_all(dir);
}

TEST(StopSignals, SigtermEndsARankBlockedInACollectiveWithItsFlightRecord) {
  blocked_rank_gets(SIGTERM);
}

TEST(StopSignals, SigintEndsARankBlockedInACollectiveWithItsFlightRecord) {
  blocked_rank_gets(SIGINT);
}

// An application's handler stays in charge: it calls abort_process_groups_from_signal(), the
// blocked collective throws DistError, and the application carries on (here: exits 0 after
// checking).
std::atomic<int> g_app_signal{0};
void app_handler(int sig) {
  g_app_signal = sig;
  abort_process_groups_from_signal(sig);
}

TEST(StopSignals, ApplicationHandlerIsKeptAndCanAbortTheGroups) {
  const std::string dir = loom::testing::make_temp_dir();
  const std::string store = dir + "/store";
  Child r1 = spawn([&] {
    auto pg = loom::testing::make_group(1, 2, store);
    std::this_thread::sleep_for(60s);
  });
  Child r0 = spawn([&] {
    struct sigaction sa {};
    sa.sa_handler = app_handler;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, nullptr);  // before the group: create() must keep it
    ::setenv("LOOM_FLIGHT_DIR", (dir + "/flight").c_str(), 1);
    ProcessGroupOptions o;
    o.timeout = 60s;
    auto pg = loom::testing::make_group(0, 2, store, o);
    struct sigaction cur {};
    ::sigaction(SIGTERM, nullptr, &cur);
    CHILD_CHECK(cur.sa_handler == app_handler, "the group replaced the application's handler");
    touch(dir + "/ready");
    Tensor t = full({16}, Scalar(1.0), TensorOptions(kFloat32));
    std::string e = loom::testing::error_of<DistError>([&] { pg->allreduce(t); });
    CHILD_CHECK(g_app_signal.load() == SIGTERM, "the application's handler did not run");
    CHILD_CHECK(
        e.find("allreduce(float32[16], count=16, op=sum) #0 in group 'world': rank 0: aborted by "
               "SIGTERM (while waiting for rank 1)") != std::string::npos,
        e);
    std::string again = loom::testing::error_of<DistError>([&] { pg->barrier(); });
    CHILD_CHECK(again.find("aborted by SIGTERM") != std::string::npos, again);
  });
  bool ready = false;
  for (int i = 0; i < 3000 && !ready; ++i) {
    ready = fs::exists(dir + "/ready") && sleeping(r0.pid);
    if (!ready) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(ready);
  std::this_thread::sleep_for(100ms);
  ::kill(r0.pid, SIGTERM);
  const int status = wait_status(r0.pid, 10s);
  ::kill(r1.pid, SIGKILL);
  ::waitpid(r1.pid, nullptr, 0);
  const std::string err = drain(r0.err);
  drain(r1.err);
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "status " << status << "\n"
      << err;
  fs::remove_all(dir);
}

// LOOM_DIST_DEBUG=detail says once, on rank 0, that it is on and what it costs.
TEST(DistDebug, DetailModeAnnouncesItselfAndItsCost) {
  auto res = loom::testing::run_processes(2, [&](int rank, const std::string& path) {
    ::setenv("LOOM_DIST_DEBUG", "detail", 1);
    auto pg = loom::testing::make_group(rank, 2, path);
    Tensor t = full({8}, Scalar(1.0), TensorOptions(kFloat32));
    for (int i = 0; i < 12; ++i) pg->allreduce(t);
  });
  EXPECT_ALL_RANKS_OK(res);
  EXPECT_CONTAINS(res[0].output,
                  "[dist] group 'world': contract checks are on (LOOM_DIST_DEBUG=detail): every "
                  "collective first exchanges its ");
  EXPECT_CONTAINS(res[0].output, "[dist] group 'world': the contract check costs about ");
  EXPECT_CONTAINS(res[0].output,
                  " us per collective (2 ranks, shm x1; the fastest of 10 timed repeats)");
  EXPECT_EQ(res[0].output.find("contract checks are on"),
            res[0].output.rfind("contract checks are on"));
  EXPECT_EQ(res[1].output.find("contract checks"), std::string::npos) << res[1].output;
}

// The worker of tests/integration/launch_{shm_cleanup,signal_collective}.sh, run by `loom launch`
// with --gtest_also_run_disabled_tests. LOOM_TEST_WORKER says what it does:
//   connect  after the rendezvous and rank 0's segment, rank 1 exits with 3; rank 0 waits for it
//            while creating its group
//   signal   both ranks join allreduce #0, then rank 1 sleeps and rank 0 blocks in allreduce #1
// LOOM_TEST_WORKER_DIR receives pid.<rank> and joined.<rank>; LOOM_TEST_IGNORE_TERM=1 ignores
// SIGTERM (so that only the launcher's SIGKILL ends the worker).
TEST(DistWorker, DISABLED_Run) {
  const char* mode = std::getenv("LOOM_TEST_WORKER");
  const char* dir = std::getenv("LOOM_TEST_WORKER_DIR");
  ASSERT_TRUE(mode && dir) << "LOOM_TEST_WORKER and LOOM_TEST_WORKER_DIR must be set";
  const int rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0");
  std::ofstream(std::string(dir) + "/pid." + std::to_string(rank)) << ::getpid() << "\n";
  if (const char* ign = std::getenv("LOOM_TEST_IGNORE_TERM"); ign && std::string(ign) == "1") {
    ::signal(SIGTERM, SIG_IGN);
  }
  if (std::string(mode) == "connect") {
    RendezvousInfo info = rendezvous("env://");
    if (rank == 1) {
      // Gone before its group connects, but only once rank 0 has made its segment (on a loaded
      // machine that can take longer than the launcher's grace), so that there is one to sweep.
      std::string pid0;
      std::ifstream(std::string(dir) + "/pid.0") >> pid0;
      const std::string mark = "-" + pid0 + "-";
      for (int i = 0; i < 3000 && !pid0.empty(); ++i) {
        bool made = false;
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
          const std::string name = e.path().filename().string();
          made = made || (name.rfind("loom-pg-", 0) == 0 && name.find(mark) != std::string::npos);
        }
        if (made) break;
        std::this_thread::sleep_for(10ms);
      }
      std::_Exit(3);
    }
    ProcessGroupOptions o;
    o.transport = "shm";
    auto pg = ProcessGroup::create(info.store, info.rank, info.world_size, o);
    FAIL() << "rank 0 connected without rank 1";
  }
  if (std::string(mode) == "allreduce") {
    // Sums checked exactly at sizes that cut into uneven blocks (LOOM_ALGO picks the algorithm;
    // tests/integration/emulated_hosts.sh runs it on hosts in network namespaces).
    auto pg = init_process_group("env://");
    const int world = pg->size();
    for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{262147}}) {
      Tensor t = full({n}, Scalar(rank + 1.0), TensorOptions(kFloat32));
      pg->allreduce(t);
      ASSERT_TRUE(equal(t, full({n}, Scalar(world * (world + 1) / 2.0), TensorOptions(kFloat32))))
          << n << " elements";
    }
    // LOOM_TEST_WORKER_REPEAT=K: K more 1 MiB allreduces, timed (for looking at waits).
    if (const char* rep = std::getenv("LOOM_TEST_WORKER_REPEAT")) {
      Tensor t = full({262144}, Scalar(1.0), TensorOptions(kFloat32));
      const auto t0 = std::chrono::steady_clock::now();
      const int k = std::atoi(rep);
      for (int i = 0; i < k; ++i) pg->allreduce(t);
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      std::printf("rank %d: %.0f us per 1 MiB allreduce\n", rank, us / std::max(k, 1));
    }
    std::printf("rank %d: allreduce OK; %s\n", rank, pg->describe().c_str());
    return;
  }
  ASSERT_EQ(std::string(mode), "signal");
  auto pg = init_process_group("env://");
  Tensor t = full({1024}, Scalar(1.0), TensorOptions(kFloat32));
  pg->allreduce(t);
  touch(std::string(dir) + "/joined." + std::to_string(rank));
  if (rank == 1) {
    std::this_thread::sleep_for(120s);
    return;
  }
  pg->allreduce(t);
  FAIL() << "allreduce #1 completed without rank 1";
}

}  // namespace
}  // namespace loom::dist
